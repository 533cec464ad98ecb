"""Shared fixtures. The suite runs on two CPU cores; keep torch to one thread per process."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

FIGURES = Path(__file__).resolve().parents[1] / "figures"


def _figures_digest() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(FIGURES.glob("*")) if p.is_file()}


@pytest.fixture(scope="session", autouse=True)
def committed_figures_untouched():
    """No test writes into the committed figures/ (a stubbed reproduce at the default scale
    points there): the session fails at teardown naming any file that changed."""
    before = _figures_digest()
    yield
    after = _figures_digest()
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name))
    assert not changed, f"the test session changed figures/: {changed}"


def _check_figure(path: Path) -> None:
    """A drawn figure, not merely a file: a PDF document, and a PNG with axes (a dark line
    across at least a fifth of the image each way) and ink (≥ 1 % of pixels off the
    background colour, in at least three colours)."""
    import numpy as np
    from matplotlib import image

    if path.suffix == ".pdf":
        data = path.read_bytes()
        assert data.startswith(b"%PDF") and b"/Page" in data, path
        return
    pixels = image.imread(path)[..., :3]
    colours, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
    background = colours[counts.argmax()]
    ink = np.abs(pixels - background).max(axis=-1) > 0.1
    assert ink.mean() >= 0.01, f"{path.name}: {ink.mean():.2%} of the pixels are drawn"
    assert (counts > 20).sum() >= 4, f"{path.name}: fewer than three colours besides background"
    dark = pixels.max(axis=-1) < 0.35
    assert dark.mean(axis=0).max() >= 0.2 and dark.mean(axis=1).max() >= 0.2, \
        f"{path.name}: no axis line"


@pytest.fixture
def assert_figure():
    """assert_figure(path): the file at path is a drawn figure (`_check_figure`)."""
    return _check_figure


@pytest.fixture(scope="session")
def run_smoke_notebook(tmp_path_factory: pytest.TempPathFactory):
    """run_smoke_notebook(name, **parameters): execute the packaged notebook NAME at the smoke
    scale with `parameters` (papermill), its figures, tables and executed copy written to a
    fresh directory, which it returns."""
    from logra import notebooks

    def run(name: str, **parameters) -> Path:
        out = tmp_path_factory.mktemp(name)
        notebooks.execute(name, {"scale": "smoke", "figures_dir": str(out), **parameters},
                          executed_dir=out)
        return out

    return run


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results directory the smoke notebooks share in one session (the smoke proxy and the
    generated tasks are built there once), never the repository's results/."""
    path = tmp_path_factory.getbasetemp() / "grpo-smoke-results"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) for one test, the previous setting restored."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before, warn_only=warn_only)


@pytest.fixture(scope="session")
def tiny_qwen2():
    """tiny_qwen2(seed=0, vocab_size=48, **fields): the tests' one builder of a random Qwen2
    causal LM (`logra.models.random.random_qwen2`); by default 2 tied layers of width 32, MLP
    64, 4 heads of which 2 KV (~60k parameters), any config field overridable by `fields`.

    The global RNG is seeded with `seed` too, so whatever a test draws after building (LoRA's
    initialisation, ...) is the same on every run and in any test order.
    """
    from logra.models.random import random_qwen2

    def build(seed: int = 0, vocab_size: int = 48, **fields):
        torch.manual_seed(seed)
        shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     tie_word_embeddings=True)
        return random_qwen2(seed=seed, vocab_size=vocab_size, **{**shape, **fields})

    return build


@pytest.fixture
def load_script():
    """Import scripts/NAME.py (not a package) as a module."""
    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def _read_markdown(text: str) -> list[list[str]]:
    """The cells of a pipe-format Markdown table, header row first, the alignment row left
    out: each line split on the "|" that are not escaped, cells stripped and "\\|" unescaped."""
    rows = [line for line in text.strip().splitlines() if not set(line) <= set("|:- ")]
    return [[cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in rows]


@pytest.fixture
def read_markdown():
    """read_markdown(text): the rows of cells of a Markdown table (`_read_markdown`)."""
    return _read_markdown
