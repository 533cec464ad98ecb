"""Execute the parameterized notebooks with papermill, in dependency order."""

from __future__ import annotations

import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = REPO / "notebooks"
EXECUTED_DIR = REPO / "results" / "notebooks"

# Notebook -> the experiment config (experiments/NAME.yaml) whose scales it accepts, in the
# order `reproduce` runs them. The claims ledger reads what the others wrote, so it runs last.
NOTEBOOKS: dict[str, str] = {
    "01_sketch_error": "sketch_error",
    "02_memory": "memory",
    "03_kl_trajectories": "kl_trajectories",
    "04_optimizer_comparison": "comparison",
    "09_kl_control": "kl_control",
    "10_training_quality": "training_quality",
    "05_long_horizon": "long_horizon",
    "06_rare_tokens": "rare_tokens",
    "08_communication": "communication",
    "07_optimizer_cost": "optimizer_cost",
}
CLAIMS_NOTEBOOK = "00_claims"


class NotebookFailed(RuntimeError):
    """A notebook raised; the message names the notebook and the failing cell."""


def ordered(only: list[str] | None = None) -> list[str]:
    """The notebooks to run, claims ledger last; `only` picks a subset of known names."""
    known = [*NOTEBOOKS, CLAIMS_NOTEBOOK]
    if not only:
        return known
    unknown = sorted(set(only) - set(known))
    if unknown:
        raise ValueError(f"unknown notebooks {unknown}; valid: {known}")
    return [name for name in known if name in only]


def check_scale(scale: str, names: list[str]) -> None:
    """ValueError before any compute if a notebook's experiment has no such scale."""
    from logra.experiments.config import ConfigError, load_config

    for name in names:
        if name in NOTEBOOKS:
            try:
                load_config(NOTEBOOKS[name], scale)
            except ConfigError as err:
                raise ValueError(f"notebook {name}: {err}") from None


MODEL_KEYS = ("model", "models")


def required_models(scale: str, names: list[str]) -> list[str]:
    """The proxy policies the notebooks' experiment configs at `scale` need, in first-use order.

    Convention: an experiment names the policies it trains or evaluates under a `model` (a
    string) or `models` (a list) key. Values that are proxy scales of `logra.models.SCALES`
    count; hub models download in the runs themselves. A null `model` in a config with a
    `grpo_scale` key means experiments/grpo.yaml's model at that scale.
    """
    from logra.experiments.config import load_config
    from logra.models import SCALES

    needed: list[str] = []
    for name in names:
        if name not in NOTEBOOKS:
            continue
        config = load_config(NOTEBOOKS[name], scale)
        for key in MODEL_KEYS:
            if key not in config:
                continue
            value = config[key]
            if value is None and "grpo_scale" in config:
                value = load_config("grpo", config["grpo_scale"])["model"]
            for model in value if isinstance(value, list) else [value]:
                if (isinstance(model, str) and model in SCALES and SCALES[model].is_proxy
                        and model not in needed):
                    needed.append(model)
    return needed


def prepare_models(scale: str, names: list[str], log=print) -> list[str]:
    """Build (`logra.models.prepare`, with progress bars) every proxy `required_models` lists
    that is not built yet; a current build is reused. Returns the proxies' names."""
    from logra.models import prepare
    from logra.models.build import MODELS_DIR

    models = required_models(scale, names)
    for i, model in enumerate(models, 1):
        start = time.perf_counter()
        log(f"[prepare {i}/{len(models)}] proxy policy {model} (built once, then cached) ...")
        path = prepare(model, root=MODELS_DIR, progress=True)
        log(f"[prepare {i}/{len(models)}] {model} ready in {path} "
            f"({time.perf_counter() - start:.0f} s)")
    return models


def execute(
    name: str,
    parameters: dict,
    executed_dir: Path = EXECUTED_DIR,
) -> Path:
    """Run notebooks/NAME.ipynb with `parameters` (papermill), cwd = the repository root.

    The executed copy, with every output, is saved as executed_dir/NAME.ipynb.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    source = NOTEBOOKS_DIR / f"{name}.ipynb"
    if not source.exists():
        raise FileNotFoundError(f"no notebook {source}")
    executed_dir.mkdir(parents=True, exist_ok=True)
    target = executed_dir / f"{name}.ipynb"
    try:
        pm.execute_notebook(
            str(source), str(target), parameters=parameters, cwd=str(REPO),
            kernel_name="python3", progress_bar=False, log_output=False,
        )
    except PapermillExecutionError as err:
        raise NotebookFailed(
            f"notebook {name} failed in cell {err.exec_count} ({err.ename}: {err.evalue}); "
            f"the executed copy is {target}"
        ) from err
    return target


def reproduce(scale: str, only: list[str] | None = None, figures_dir: Path | None = None,
              executed_dir: Path = EXECUTED_DIR, log=print) -> dict[str, float]:
    """Build the proxy policies the notebooks need (`prepare_models`), then execute every
    notebook at `scale`; returns seconds per step ("prepare", then each notebook).

    Stops at the first failure, keeping every figure and executed notebook already written.
    A complete run (`only` None) also writes its wall times as figures/reproduce_time_SCALE.
    """
    names = ordered(only)
    check_scale(scale, names)
    start = time.perf_counter()
    prepare_models(scale, names, log)
    seconds: dict[str, float] = {"prepare": time.perf_counter() - start}
    for i, name in enumerate(names, 1):
        log(f"[{i}/{len(names)}] {name} (scale={scale}) ...")
        start = time.perf_counter()
        params = {"scale": scale}
        if figures_dir is not None:
            params["figures_dir"] = str(figures_dir)
        execute(name, params, executed_dir)
        seconds[name] = time.perf_counter() - start
        log(f"[{i}/{len(names)}] {name} done in {seconds[name]:.0f} s")
    if only is None:
        save_wall_times(seconds, scale, figures_dir)
    return seconds


def save_wall_times(seconds: dict[str, float], scale: str, figures_dir: Path | None = None) -> None:
    """figures/reproduce_time_SCALE.{csv,md}: seconds and minutes per step and in total, with
    the machine's CPU count and the date, so the reported wall time is an artifact of the run."""
    import datetime
    import os

    import pandas as pd

    from logra.experiments import report

    frame = pd.DataFrame({"step": [*seconds, "total"],
                          "seconds": [*seconds.values(), sum(seconds.values())]})
    frame["minutes"] = frame["seconds"] / 60
    frame["scale"] = scale
    frame["cpus"] = os.cpu_count()
    frame["date"] = datetime.date.today().isoformat()
    report.save_table(frame.round({"seconds": 1, "minutes": 2}), f"reproduce_time_{scale}",
                      figures_dir if figures_dir is not None else report.FIGURES_DIR)
