"""Each notebook's .ipynb and its jupytext .py pair hold the same cells; papermill can
parameterize it; the registry runs every notebook there is."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest

from logra import notebooks

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
