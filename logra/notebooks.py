"""Execute the parameterized notebooks with papermill, in dependency order.

Where a reproduction writes (`reproduce`): figures and tables into `figures_dir(scale)` (the
committed `figures/` for the default scale only, `results/<scale>/figures` otherwise), executed
notebooks into `<results>/notebooks` (default scale) or `<results>/<scale>/notebooks`, proxy
policies into `<results>/models`, runs into `<results>/runs`; the README's claims block is
rewritten by `00_claims` at the default scale only, unless asked (`rewrite_readme`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logra import config, paths
from logra.paths import FIGURES_SCALE, project_root, results_root

NOTEBOOKS_DIR = paths.RESOURCES_DIR / "notebooks"

# Notebook -> the experiment config (experiments/NAME.yaml) whose scales it accepts, in the
# order `reproduce` runs them. The claims ledger reads what the others wrote, so it runs last.
NOTEBOOKS: dict[str, str] = {
    "01_sketch_error": "sketch_error",
    "02_memory": "memory",
    "11_rl_regime": "rl_regime",
    "03_kl_trajectories": "kl_trajectories",
    "04_optimizer_comparison": "comparison",
    "09_kl_control": "kl_control",
    "10_training_quality": "training_quality",
    "05_long_horizon": "long_horizon",
    "06_rare_tokens": "rare_tokens",
    "08_communication": "communication",
    "07_optimizer_cost": "optimizer_cost",
}
CLAIMS_NOTEBOOK = "00_claims"  # collects what the others wrote: it runs at any scale


class NotebookFailed(RuntimeError):
    """A notebook raised; the message names the notebook and the failing cell."""


def ordered(only: list[str] | None = None) -> list[str]:
    """The notebooks to run, claims ledger last; `only` picks a non-empty subset of them."""
    known = [*NOTEBOOKS, CLAIMS_NOTEBOOK]
    if only is None:
        return known
    if not only:
        raise ValueError(f"no notebook named to run; valid: {known}")
    unknown = sorted(set(only) - set(known))
    if unknown:
        raise ValueError(f"unknown notebooks {unknown}; valid: {known}")
    return [name for name in known if name in only]


def notebook_scales() -> dict[str, list[str]]:
    """Each notebook (in run order, the ledger excluded) -> the scales its experiment defines."""
    return {name: config.scales_of(experiment) for name, experiment in NOTEBOOKS.items()}


def check_scale(scale: str, names: list[str]) -> None:
    """ValueError before any compute if one of `names` has no such scale; it names the
    notebooks that have it, to run with `--only`."""
    scales = notebook_scales()
    lacking = [name for name in names if name in scales and scale not in scales[name]]
    if not lacking:
        return
    having = [name for name, valid in scales.items() if scale in valid]
    if not having:
        valid = sorted({s for valid in scales.values() for s in valid})
        raise ValueError(f"unknown scale {scale!r}: no notebook has it; valid scales: {valid}")
    raise ValueError(
        f"scale {scale!r} is not a scale of {lacking}; the notebooks that have it: {having} "
        f"(run them alone: reproduce --scale {scale} --only {' '.join(having)})")


MODEL_KEYS = ("model", "models")


def required_models(scale: str, names: list[str]) -> list[str]:
    """The proxy policies the notebooks' experiment configs at `scale` need, in first-use order.

    Convention: an experiment names the policies it trains or evaluates under a `model` (a
    string) or `models` (a list) key. Values that are proxy scales of `logra.models.SCALES`
    count; hub models download in the runs themselves. A null `model` in a config with a
    `grpo_scale` key means experiments/grpo.yaml's model at that scale.
    """
    from logra.models import SCALES

    needed: list[str] = []
    for name in names:
        if name not in NOTEBOOKS:
            continue
        values = config.load_config(NOTEBOOKS[name], scale)
        for key in MODEL_KEYS:
            if key not in values:
                continue
            value = values[key]
            if value is None and "grpo_scale" in values:
                value = config.load_config("grpo", values["grpo_scale"])["model"]
            for model in value if isinstance(value, list) else [value]:
                if (isinstance(model, str) and model in SCALES and SCALES[model].is_proxy
                        and model not in needed):
                    needed.append(model)
    return needed


def prepare_models(scale: str, names: list[str], log: Callable[[str], object] = print,
                   results_dir: str | os.PathLike | None = None) -> list[str]:
    """Build (`logra.models.prepare`, with progress bars) every proxy `required_models` lists
    that is not built yet, into `<results>/models` (where the runs look for them); a current
    build is reused. Returns the proxies' names."""
    from logra.models import prepare

    results = results_root(results_dir)
    models = required_models(scale, names)
    for i, model in enumerate(models, 1):
        start = time.perf_counter()
        log(f"[prepare {i}/{len(models)}] proxy policy {model} (built once, then cached) ...")
        path = prepare(model, root=results / "models", data_dir=results / "data", progress=True)
        log(f"[prepare {i}/{len(models)}] {model} ready in {path} "
            f"({time.perf_counter() - start:.0f} s)")
    return models


# The kernel's own log at CRITICAL. ipykernel 7 warns at every start that a kernel on a local TCP
# socket is unencrypted, which says nothing about a notebook run on one's own machine; and
# jupyter_client interrupts the kernel before every shutdown (KernelManager.shutdown_kernel),
# which the kernel logs at ERROR ("KeyboardInterrupt caught in kernel.") when the SIGINT lands
# inside a message handler, as it sometimes does under load. A cell's error is papermill's to
# report, and a dead kernel nbclient's, so nothing a user needs is in that log.
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def execute(name: str, parameters: dict, executed_dir: str | os.PathLike,
            progress_bar: bool = True) -> Path:
    """Run NAME.ipynb of the packaged notebooks with `parameters` (papermill) in the project
    root (`logra.paths.project_root`), showing papermill's per-cell progress bar.

    The executed copy, with every output, is saved as executed_dir/NAME.ipynb.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    source = NOTEBOOKS_DIR / f"{name}.ipynb"
    if not source.exists():
        raise FileNotFoundError(f"no notebook {source}")
    executed_dir = Path(executed_dir)
    executed_dir.mkdir(parents=True, exist_ok=True)
    target = executed_dir / f"{name}.ipynb"
    try:
        pm.execute_notebook(
            str(source), str(target), parameters=parameters, cwd=str(project_root()),
            kernel_name="python3", progress_bar=progress_bar, log_output=False,
            extra_arguments=KERNEL_ARGUMENTS,
        )
    except PapermillExecutionError as err:
        raise NotebookFailed(
            f"notebook {name} failed in cell {err.exec_count} ({err.ename}: {err.evalue}); "
            f"the executed copy is {target}"
        ) from err
    return target


def declared_parameters(name: str) -> set[str]:
    """The names in notebook NAME's `parameters` cell."""
    import papermill as pm

    return set(pm.inspect_notebook(str(NOTEBOOKS_DIR / f"{name}.ipynb")))


SET_BY_REPRODUCE = ("scale", "figures_dir", "results_dir", "readme", "rewrite_readme",
                    "committed_claims")
"""Notebook parameters `reproduce` sets from its own arguments."""


def partly_regenerated(names: list[str], parameters: dict[str, Any]) -> list[str]:
    """The experiments (`NOTEBOOKS`' values) whose claim files a run of the notebooks `names`
    with `parameters` may leave unwritten: those of the notebooks it skips, and of those it runs
    with a parameter of their own (e.g. `studies`: some of its studies). Empty for a complete
    run."""
    return [experiment for name, experiment in NOTEBOOKS.items()
            if name not in names or set(parameters) & declared_parameters(name)]


def check_parameters(parameters: dict[str, Any], declared: dict[str, set[str]]) -> None:
    """ValueError unless every key of `parameters` is declared by one of the notebooks of
    `declared` (name -> its parameters) and is none of `SET_BY_REPRODUCE`."""
    own = sorted(set(parameters) & set(SET_BY_REPRODUCE))
    if own:
        raise ValueError(f"parameters {own} are set by reproduce's own options (--scale, "
                         "--figures-dir, --results-dir, --rewrite-readme, --check), not by a "
                         "parameter")
    for key in parameters:
        if not any(key in names for names in declared.values()):
            offered = sorted(set().union(*declared.values()) - set(SET_BY_REPRODUCE))
            raise ValueError(f"no notebook of {list(declared)} has a parameter {key!r}; "
                             f"theirs: {offered}")


def reproduce(scale: str, only: list[str] | None = None,
              figures_dir: str | os.PathLike | None = None,
              executed_dir: str | os.PathLike | None = None,
              log: Callable[[str], object] = print,
              results_dir: str | os.PathLike | None = None,
              rewrite_readme: bool | None = None,
              record_times: bool = False,
              parameters: dict[str, Any] | None = None,
              committed_claims: str | os.PathLike | None = None) -> dict[str, float]:
    """Build the proxy policies the notebooks need (`prepare_models`), then execute every
    notebook at `scale`; returns seconds per step ("prepare", then each notebook).

    `parameters`: values for the notebooks' `parameters` cells (e.g. {"studies": ["budget"]}),
    each given to every chosen notebook that declares it (`check_parameters`: one none of them
    declares, or one the options above set, is a ValueError before any compute). A run with
    them does a part of the notebooks' work, so its wall times are not recorded.

    `figures_dir` None: `logra.paths.figures_dir(scale)`; `executed_dir` None:
    `<results>/notebooks` at the default scale, `<results>/<scale>/notebooks` otherwise;
    `results_dir` None: each experiment's own (`results/` of the project). `rewrite_readme`
    None rewrites the project README's claims block at the default scale only, when the figures
    go to the committed `figures/`.
    `committed_claims`: a directory of claim files the ledger (00_claims) reads where this run
    wrote none of that name (a partial `--check`: HEAD's, `partly_regenerated`).
    Stops at the first failure, keeping every figure and executed notebook already written.
    A complete run (`only` None) also writes its wall times as TIMES/reproduce_time_SCALE; a
    partial one updates its notebooks' rows of that table if there is one (`save_wall_times`),
    and the "prepare" row where it prepared the same proxies as a complete run.
    TIMES is `figures_dir` when `record_times`, else the results directory: wall times are a
    measurement of this machine, recorded among the figures only when asked, so that a second
    reproduction (every run read back from the results store) rewrites no committed file.
    """
    names = ordered(only)
    check_scale(scale, names)
    parameters = parameters or {}
    declared = {name: declared_parameters(name) for name in names}
    check_parameters(parameters, declared)
    results = results_root(results_dir)
    figures = Path(figures_dir) if figures_dir is not None else paths.figures_dir(scale, results)
    if executed_dir is None:
        executed_dir = results / "notebooks" if scale == FIGURES_SCALE else (
            results / scale / "notebooks")
    readme = project_root() / "README.md"
    if rewrite_readme is None:
        # only a checkout's README has the claims block (an installed wheel's cwd may hold any),
        # and it shows the committed figures' ledger, not one written elsewhere (--figures-dir)
        rewrite_readme = (scale == FIGURES_SCALE and paths.checkout_root() is not None
                          and figures.resolve() == paths.figures_dir(FIGURES_SCALE).resolve())
    given = {"scale": scale, "figures_dir": str(figures),
             "readme": str(readme) if rewrite_readme else "", "rewrite_readme": rewrite_readme}
    if results_dir is not None:
        given["results_dir"] = str(results)
    if committed_claims is not None:
        given["committed_claims"] = str(committed_claims)
    start = time.perf_counter()
    models = prepare_models(scale, names, log, results)
    seconds: dict[str, float] = {"prepare": time.perf_counter() - start}
    for i, name in enumerate(names, 1):
        log(f"[{i}/{len(names)}] {name} (scale={scale}) ...")
        start = time.perf_counter()
        execute(name, {k: v for k, v in {**given, **parameters}.items() if k in declared[name]},
                executed_dir)
        seconds[name] = time.perf_counter() - start
        log(f"[{i}/{len(names)}] {name} done in {seconds[name]:.0f} s")
    log(f"figures and tables in {figures}; executed notebooks in {executed_dir}")
    if parameters:  # a part of the notebooks' work: its times are not theirs
        return seconds
    times = figures if record_times else results
    if only is None:
        save_wall_times(seconds, scale, times)
    elif (times / f"reproduce_time_{scale}.csv").exists():
        # its prepare row only where it prepared every proxy a complete run prepares
        complete = set(models) == set(required_models(scale, ordered()))
        save_wall_times({k: v for k, v in seconds.items() if k != "prepare" or complete},
                        scale, times, update=True)
    log(f"wall times in {times / f'reproduce_time_{scale}.md'}")
    return seconds


def save_wall_times(seconds: dict[str, float], scale: str, figures_dir: str | os.PathLike,
                    update: bool = False) -> None:
    """FIGURES/reproduce_time_SCALE.{csv,md}: seconds and minutes per step and in total, with
    the machine's CPU count and the date, so the reported wall time is an artifact of the run.

    `update`: replace only these steps' rows of the existing table (a partial reproduction; the
    other rows keep their own date and CPU count) and sum the total again."""
    import datetime

    import pandas as pd

    from logra.experiments import report

    frame = pd.DataFrame({"step": list(seconds), "seconds": list(seconds.values())})
    frame["cpus"] = os.cpu_count()
    frame["date"] = datetime.date.today().isoformat()
    frame["scale"] = scale
    if update:
        kept = pd.read_csv(Path(figures_dir) / f"reproduce_time_{scale}.csv")
        kept = kept[~kept["step"].isin([*seconds, "total"])]
        order = {step: i for i, step in enumerate(["prepare", *ordered()])}
        frame = pd.concat([kept.drop(columns="minutes"), frame])
        frame = frame.sort_values("step", key=lambda s: s.map(order), kind="stable")
    total = pd.DataFrame({"step": ["total"], "seconds": [frame["seconds"].sum()],
                          "cpus": [os.cpu_count()], "date": [frame["date"].max()],
                          "scale": [scale]})
    frame = pd.concat([frame, total], ignore_index=True)
    frame["minutes"] = frame["seconds"] / 60
    frame = frame[["step", "seconds", "minutes", "scale", "cpus", "date"]]
    report.save_table(frame.round({"seconds": 1, "minutes": 2}), f"reproduce_time_{scale}",
                      figures_dir)
