"""Each notebook's .ipynb and its jupytext .py pair hold the same cells; papermill can
parameterize it; the registry runs every notebook there is."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest

from logra import notebooks, paths

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
PAIRS = sorted(NOTEBOOK_DIR.glob("*.py"))


def cells(notebook) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in notebook.cells]


@pytest.mark.parametrize("script", PAIRS, ids=[p.stem for p in PAIRS])
def test_pair_is_in_sync_and_parameterized(script: Path) -> None:
    paired = script.with_suffix(".ipynb")
    assert paired.exists(), f"{paired.name} missing: jupytext --sync {script}"
    stored = nbformat.read(paired, as_version=4)
    assert cells(stored) == cells(jupytext.read(script)), f"jupytext --sync {script}"
    tagged = [c for c in stored.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "scale" in tagged[0].source and "figures_dir" in tagged[0].source


def test_every_notebook_is_registered() -> None:
    assert sorted(p.stem for p in PAIRS) == sorted(notebooks.ordered())
    assert notebooks.ordered()[-1] == notebooks.CLAIMS_NOTEBOOK


@pytest.mark.parametrize("script", PAIRS, ids=[p.stem for p in PAIRS])
def test_a_notebook_run_by_hand_writes_where_the_cli_would(script: Path) -> None:
    """Opened in JupyterLab (any working directory) and run without a `figures_dir`, a notebook
    writes where `logra-repro reproduce` would at its scale: figures/ of the project at the
    default scale, results/<scale>/figures at any other (the rule `logra.paths.figures_dir`)."""
    notebook = jupytext.read(script).cells
    tagged = next(i for i, c in enumerate(notebook) if "parameters" in c.metadata.get("tags", []))
    parameters = notebook[tagged].source
    after = [c.source for c in notebook[tagged + 1:] if c.cell_type == "code"]
    assert "figures_dir = None" in parameters
    first = after[0].splitlines()[0]
    assert first.startswith("figures_dir = figures_dir or paths.figures_dir(scale")
    namespace: dict = {}
    exec(parameters, namespace)
    for scale, results in (("default", None), ("smoke", "/tmp/somewhere")):
        namespace.update(scale=scale, results_dir=results, figures_dir=None)
        exec("from logra import paths\n" + first, namespace)
        expected = paths.figures_dir(scale, results if "results_dir" in first else None)
        assert namespace["figures_dir"] == expected
