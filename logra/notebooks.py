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
    """Execute every notebook at `scale`; returns seconds per notebook.

    Stops at the first failure, keeping every figure and executed notebook already written.
    """
    names = ordered(only)
    check_scale(scale, names)
    seconds: dict[str, float] = {}
    for i, name in enumerate(names, 1):
        log(f"[{i}/{len(names)}] {name} (scale={scale}) ...")
        start = time.perf_counter()
        params = {"scale": scale}
        if figures_dir is not None:
            params["figures_dir"] = str(figures_dir)
        execute(name, params, executed_dir)
        seconds[name] = time.perf_counter() - start
        log(f"[{i}/{len(names)}] {name} done in {seconds[name]:.0f} s")
    return seconds
