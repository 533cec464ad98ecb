"""Where the kit's files live: the package, the project, results and figures.

The packaged configs and notebooks are `logra/resources/{experiments,notebooks}`: links to the
repository's `experiments/` and `notebooks/` in a checkout (an editable install), copies in a
built wheel. Results (`results/`), figures (`figures/`) and the README are the project's:
relative to the repository root in a checkout, else to the current directory (`project_root`).
`figures/` belongs to the scale `FIGURES_SCALE`; every other scale writes its figures under
`results/<scale>/figures` (`figures_dir`).

Only the standard library: every layer of the package may import this module.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
RESOURCES_DIR = PACKAGE_DIR / "resources"
FIGURES_SCALE = "default"  # the scale whose figures are the committed figures/ and README block


def checkout_root() -> Path | None:
    """The source checkout `logra` is imported from (it holds pyproject.toml), or None for an
    installed wheel."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() else None


def project_root() -> Path:
    """The base of relative result paths: the source checkout, else the current directory."""
    return checkout_root() or Path.cwd()


def project_path(path: str | os.PathLike) -> Path:
    """`path` as an absolute path: a relative one is taken under `project_root`."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else project_root() / path


def results_root(results_dir: str | os.PathLike | None = None) -> Path:
    """`results_dir` as an absolute path (relative ones under `project_root`); None: results/."""
    return project_path(results_dir if results_dir is not None else "results")


def figures_dir(scale: str, results_dir: str | os.PathLike | None = None) -> Path:
    """Where a reproduction at `scale` writes its figures and tables: `<project>/figures` for
    FIGURES_SCALE (the committed ones), `<results>/<scale>/figures` for any other scale."""
    if scale == FIGURES_SCALE:
        return project_root() / "figures"
    return results_root(results_dir) / scale / "figures"
