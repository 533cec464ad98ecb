"""`logra-repro`: the kit's command line. It prepares the proxy policies, runs one GRPO
experiment, and reproduces the notebooks (figures, tables and the claims ledger).

Exit status: 0 on success, 2 for a usage error (argparse's convention: a bad option, notebook,
scale or config), 1 when the work itself fails (a notebook raises, a dependency is missing).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import logra
from logra import notebooks

EXTRAS_HINT = "pip install 'logra[repro,notebooks]'"
CLUSTER_HINT = "pip install 'logra[cluster]'"

EXAMPLES = """\
examples:
  logra-repro reproduce --scale smoke                  every notebook in a few minutes, into
                                                       results/smoke/figures
  logra-repro reproduce --only 02_memory               one notebook at the default scale
  logra-repro reproduce --scale 1.5b --only 03_kl_trajectories   a GPU scale, its notebooks only
  logra-repro reproduce --pin avx2 --only 01_sketch_error   CPU floating point pinned (below)
  logra-repro reproduce --backend ray                  the sweeps' runs as tasks on a Ray cluster
  logra-repro reproduce --only 09_kl_control -p 'studies=[budget]'   a part of a notebook
  logra-repro prepare --scale proxy-1m                 warm up a proxy policy (cached)
  logra-repro run grpo --scale smoke optimizer=logra   one GRPO run of the packaged config
  logra-repro run my_grpo.yaml --results-dir /data/logra lr=3e-4   your keys over grpo.yaml's
"""


def notebooks_epilog() -> str:
    """The notebooks in run order with the scales each accepts (from their experiment
    configs), and where each scale writes."""
    try:
        scales = notebooks.notebook_scales()
    except ModuleNotFoundError as err:  # a torch-only install: no YAML reader
        return (f"notebooks: {', '.join(notebooks.ordered())} (their scales need the "
                f"reproduction extras: {EXTRAS_HINT}; missing {err.name})\n")
    width = max(map(len, notebooks.ordered()))
    lines = [f"  {name:<{width}}  {', '.join(valid)}" for name, valid in scales.items()]
    lines.append(f"  {notebooks.CLAIMS_NOTEBOOK:<{width}}  any (the ledger of what the others "
                 "wrote)")
    return ("notebooks, in the order reproduce runs them, and their scales:\n"
            + "\n".join(lines) + "\n\n"
            "figures/ and the README's claims block belong to --scale default; every other scale "
            "writes under\nresults/<scale>/figures (or --figures-dir).\n")


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """Report a usage error as argparse does (usage line, then the message) and return 2."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


PIN_MARK = "LOGRA_PIN"  # set in the environment of a reproduction started under --pin


def _pinned_rerun(pin: str, argv: list[str]) -> int | None:
    """Under `--pin`: run this command again in a fresh process whose environment holds the
    pin's variables (`logra.models.determinism`: they must be set before torch loads, which this
    process has done) and return its exit status; None when this process is that one."""
    from logra.models.determinism import pinned_environment

    pinned = {**pinned_environment(pin), PIN_MARK: pin}  # threads: the pin's, not the machine's
    if os.environ.get(PIN_MARK) == pin:
        unset = [key for key, value in pinned.items() if os.environ.get(key) != value]
        if unset:
            print(f"error: {PIN_MARK}={pin} but {', '.join(unset)} differ from the pin's",
                  file=sys.stderr)
            return 1
        return None
    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", "logra.cli", *argv],
                          env={**os.environ, **pinned}, check=False).returncode


def parse_parameters(pairs: list[str]) -> dict[str, object]:
    """`NAME=VALUE` strings -> {NAME: VALUE parsed as YAML}; ValueError naming a bad pair."""
    import yaml

    parameters: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--param {pair!r} is not NAME=VALUE")
        if name in parameters:
            raise ValueError(f"--param {name} given twice")
        try:
            parameters[name] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ValueError(f"--param {name}: {value!r} is not YAML ({err})") from None
    return parameters


def _reproduce(args: argparse.Namespace) -> int:
    try:
        names = notebooks.ordered(args.only)
        notebooks.check_scale(args.scale, names)
        parameters = parse_parameters(args.param)
        notebooks.check_parameters(
            parameters, {name: notebooks.declared_parameters(name) for name in names})
    except ValueError as err:
        return usage_error(args.parser, str(err))
    if args.pin is not None:
        code = _pinned_rerun(args.pin, args.argv)
        if code is not None:
            return code
        print(f"CPU floating point pinned ({args.pin}): "
              + ", ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")))
    if args.check and args.scale != "default":
        return usage_error(args.parser, "--check compares with the committed figures/, which "
                                        "only --scale default regenerates")
    figures_dir, rewrite_readme, committed_claims = args.figures_dir, args.rewrite_readme, None
    if args.check:  # regenerate beside the committed figures, never over them
        from logra.paths import results_root

        if figures_dir is None:  # our scratch: an earlier check's tables would be compared too
            figures_dir = results_root(args.results_dir) / "check" / "figures"
            shutil.rmtree(figures_dir, ignore_errors=True)
        rewrite_readme = False
        partly = notebooks.partly_regenerated(names, parameters)
        if notebooks.CLAIMS_NOTEBOOK in names and partly:
            try:  # the ledger takes HEAD's claim files for what this check does not regenerate
                committed_claims = _committed_claims(args.results_dir, partly)
            except (ValueError, FileNotFoundError) as err:  # no git, or not a checkout
                print(f"error: --check needs git HEAD's figures: {err}", file=sys.stderr)
                return 2
    if args.backend is not None and not _use_backend(args.backend):
        return 1
    start = time.perf_counter()
    try:
        notebooks.reproduce(args.scale, only=args.only, figures_dir=figures_dir,
                            results_dir=args.results_dir, rewrite_readme=rewrite_readme,
                            record_times=args.record_times, parameters=parameters,
                            committed_claims=committed_claims)
    except (notebooks.NotebookFailed, ValueError) as err:  # a notebook, a config, a build
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"reproduce finished in {time.perf_counter() - start:.0f} s")
    if args.check:  # the regenerated figures against git HEAD's, within figures/tolerances.yaml
        from logra import check

        return check.main([str(figures_dir)])
    return 0


def _committed_claims(results_dir: str | None, experiments: list[str]) -> Path:
    """git HEAD's claim files of `experiments` (figures/claims_EXPERIMENT[_STUDY].csv),
    extracted to RESULTS/check/committed/figures (emptied first); every other file removed."""
    from logra import check
    from logra.paths import results_root

    target = results_root(results_dir) / "check" / "committed"
    shutil.rmtree(target, ignore_errors=True)
    figures = check.committed_figures("HEAD", target)
    for path in figures.glob("*.csv"):
        source = path.stem.removeprefix("claims_")
        if source == path.stem or not any(source == experiment or source.startswith(
                f"{experiment}_") for experiment in experiments):
            path.unlink()
    return figures


def _use_backend(backend: str) -> bool:
    """Set LOGRA_BACKEND, which the notebooks' kernels inherit, to `backend`
    (`logra.experiments.jobs`); False, with the message, when Ray is not installed for it."""
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        print(f"error: --backend ray needs Ray: {CLUSTER_HINT}", file=sys.stderr)
        return False
    os.environ["LOGRA_BACKEND"] = backend
    return True


def _prepare(args: argparse.Namespace) -> int:
    from logra.models import SCALES, prepare
    from logra.paths import results_root

    if args.scale not in SCALES:
        return usage_error(args.parser, f"unknown scale {args.scale!r}; valid: {list(SCALES)}")
    results = results_root(args.results_dir)
    try:
        built = prepare(args.scale, root=results / "models", data_dir=results / "data",
                        force=args.force, threads=args.threads)
    except ValueError as err:  # bad --threads, before anything is built
        return usage_error(args.parser, str(err))
    if not SCALES[args.scale].is_proxy:
        print(f"{args.scale}: hub model {built}, nothing to build")
        return 0
    summary = json.loads((Path(built) / "warmup.json").read_text())
    accuracy = ", ".join(f"{k} {v:.3f}" for k, v in summary["test_accuracy"].items())
    print(
        f"{args.scale}: {summary['parameters']:,} parameters, {summary['warmup_steps']} warm-up "
        f"steps in {summary['warmup_seconds']:.0f} s; greedy test accuracy {accuracy}; in {built}"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from logra.config import ConfigError
    from logra.paths import results_root
    from logra.rl.config import resolve, run_dir  # torch only: a bad config fails in seconds

    # options may follow the experiment, among the overrides: parse them out of the remainder
    tail = argparse.ArgumentParser(prog="logra-repro run", add_help=False)
    tail.add_argument("--scale", default=args.scale)
    tail.add_argument("--quiet", action="store_true", default=args.quiet)
    tail.add_argument("--results-dir", default=args.results_dir)
    options, overrides = tail.parse_known_args(args.overrides)
    given = {} if options.results_dir is None else {"results_dir": options.results_dir}
    try:
        config = resolve(args.experiment, options.scale, overrides, **given)
    except ConfigError as err:
        return usage_error(args.parser, str(err))
    results = results_root(config.results_dir)  # not the current directory's results/
    config = config.replace(results_dir=str(results),
                            data_dir=config.data_dir or str(results / "data"))
    from logra.rl import run_grpo  # transformers, datasets: after the config is known good

    records = run_grpo(config, progress=not options.quiet)
    if _rank() != 0:  # under torchrun every rank returns the records; one reports them
        return 0
    final = records.dropna(subset=["eval_accuracy"]).iloc[-1]
    print(f"{len(records) - 1} steps; greedy accuracy {final['eval_accuracy']:.3f} at step "
          f"{int(final['step'])}; records in {run_dir(config)}")
    return 0


def _rank() -> int:
    """This process's rank in the default process group (0 outside torchrun)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    epilog = notebooks_epilog()
    parser = argparse.ArgumentParser(prog="logra-repro", description=__doc__,
                                     epilog=EXAMPLES + "\n" + epilog, formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {logra.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    results_help = ("where runs, proxy policies and executed notebooks go (default: results/ of "
                    "the repository checkout, else of the current directory)")

    rep = commands.add_parser(
        "reproduce", help="build the proxy policies the notebooks need (once), execute the "
        "notebooks, regenerate their figures and tables", epilog=epilog, formatter_class=formatter)
    rep.add_argument("--scale", default="default",
                     help="smoke, default, or a scale the chosen notebooks define (below)")
    rep.add_argument("--only", nargs="+", choices=notebooks.ordered(), metavar="NOTEBOOK",
                     help="run only these notebooks (names without .ipynb; at least one)")
    rep.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                     help="a value for the chosen notebooks' parameters cells, parsed as YAML, "
                          "given to each notebook that declares NAME (repeatable; e.g. "
                          "-p 'studies=[budget]' with --only 09_kl_control)")
    rep.add_argument("--results-dir", type=Path, help=results_help)
    rep.add_argument("--figures-dir", type=Path,
                     help="where figures and tables go (default: figures/ at --scale default, "
                          "else results/<scale>/figures)")
    rep.add_argument("--rewrite-readme", action=argparse.BooleanOptionalAction, default=None,
                     help="rewrite the README's claims block with this run's ledger (default: "
                          "only at --scale default)")
    rep.add_argument("--record-times", action="store_true",
                     help="write the wall times (reproduce_time_SCALE) among the figures rather "
                          "than under the results directory: how the committed table was made")
    rep.add_argument("--check", action="store_true",
                     help="regenerate into RESULTS/check/figures (emptied first; or "
                          "--figures-dir), never over figures/, then compare those tables with "
                          "git HEAD's figures/ within figures/tolerances.yaml (python -m "
                          "logra.check); exit 1 when one moved outside its tolerance")
    rep.add_argument("--pin", choices=["avx2", "strict"],
                     help="pin torch's CPU floating point (instruction set, MKL path, threads) so "
                          "that runs repeat bit for bit across thread counts and, by MKL's "
                          "reproducibility contract, Intel CPUs: avx2 for any x86 CPU since "
                          "~2015 (make reproduce's default on x86), strict for older ones, about "
                          "2x slower; every committed figure but notebook 07's wall times was "
                          "made under avx2 (docs/reproducibility.md)")
    rep.add_argument("--backend", choices=["local", "ray"],
                     help="where the notebooks' sweeps run their jobs: local (processes on this "
                          "machine, the default) or ray (one task per run on the Ray cluster at "
                          "RAY_ADDRESS, else a local one; " + CLUSTER_HINT + "; "
                          "docs/distributed.md); default: $LOGRA_BACKEND, else local")
    rep.set_defaults(func=_reproduce, parser=rep)

    pre = commands.add_parser("prepare", help="build a proxy policy (cached) or check a hub scale")
    pre.add_argument("--scale", required=True, help="smoke, proxy-1m, proxy-4m, 1.5b, ...")
    pre.add_argument("--force", action="store_true", help="rebuild even if a current build exists")
    pre.add_argument("--threads", type=int, default=None,
                     help="torch CPU threads of the warm-up (default: the scale's own)")
    pre.add_argument("--results-dir", type=Path,
                     help="the proxy goes into RESULTS_DIR/models (default: results/ of the "
                          "repository checkout, else of the current directory)")
    pre.set_defaults(func=_prepare, parser=pre)

    run = commands.add_parser("run", help="run (or resume) an experiment: GRPO with an optimizer")
    run.add_argument("experiment", help="the packaged config's name (grpo) or a config file of "
                     "the keys you change, laid over experiments/grpo.yaml (docs/usage.md)")
    run.add_argument("overrides", nargs=argparse.REMAINDER, metavar="key=value",
                     help="config overrides, values parsed as YAML (lr=1e-4, run_name=null, ...)")
    run.add_argument("--scale", default="default", help="smoke, default, 1.5b, ...")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--results-dir", help="overrides the config's results_dir; a relative one "
                     "is under the repository checkout, else the current directory")
    run.set_defaults(func=_run, parser=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except ModuleNotFoundError as err:
        if err.name is None or err.name.split(".")[0] == "logra":
            raise  # the kit's own import is broken: not a missing extra
        print(f"error: {err}; this command needs the reproduction extras: {EXTRAS_HINT}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
