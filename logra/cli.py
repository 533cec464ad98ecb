"""`logra-repro`: the kit's command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from logra import notebooks


def _reproduce(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        notebooks.reproduce(args.scale, only=args.only)
    except (ValueError, notebooks.NotebookFailed) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"reproduce finished in {time.perf_counter() - start:.0f} s; see figures/")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from logra.models import SCALES, prepare

    if args.scale not in SCALES:
        print(f"error: unknown scale {args.scale!r}; valid: {list(SCALES)}", file=sys.stderr)
        return 2
    try:
        built = prepare(args.scale, force=args.force, threads=args.threads)
    except ValueError as err:  # bad --threads, before anything is built
        print(f"error: {err}", file=sys.stderr)
        return 2
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
    from logra.experiments.config import ConfigError
    from logra.rl import resolve, run_dir, run_grpo

    # options may follow the experiment, among the overrides: parse them out of the remainder
    tail = argparse.ArgumentParser(prog="logra-repro run", add_help=False)
    tail.add_argument("--scale", default=args.scale)
    tail.add_argument("--quiet", action="store_true", default=args.quiet)
    options, overrides = tail.parse_known_args(args.overrides)
    try:
        config = resolve(args.experiment, options.scale, overrides)
        records = run_grpo(config, progress=not options.quiet)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
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
    parser = argparse.ArgumentParser(prog="logra-repro", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    rep = commands.add_parser(
        "reproduce", help="build the proxy policies the notebooks need (once), execute every "
        "notebook, regenerate figures/")
    rep.add_argument("--scale", default="default", help="smoke, default, or a model scale")
    rep.add_argument("--only", nargs="*", help="run only these notebooks (names without .ipynb)")
    rep.set_defaults(func=_reproduce)
    pre = commands.add_parser("prepare", help="build a proxy policy (cached) or check a hub scale")
    pre.add_argument("--scale", required=True, help="smoke, proxy-1m, proxy-4m, 1.5b, ...")
    pre.add_argument("--force", action="store_true", help="rebuild even if a current build exists")
    pre.add_argument("--threads", type=int, default=None,
                     help="torch CPU threads of the warm-up (default: the scale's own)")
    pre.set_defaults(func=_prepare)
    run = commands.add_parser("run", help="run (or resume) an experiment: GRPO with an optimizer")
    run.add_argument("experiment", help="the config, e.g. experiments/grpo.yaml")
    run.add_argument("overrides", nargs=argparse.REMAINDER, metavar="key=value",
                     help="config overrides, values parsed as YAML (lr=1e-4, run_name=null, ...)")
    run.add_argument("--scale", default="default", help="smoke, default, 1.5b, ...")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
