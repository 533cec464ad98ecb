"""Figures, tables and claim rows, written atomically under figures/."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from logra.io import atomic_path, write_frame, write_text
from logra.paths import FIGURES_SCALE, figures_dir

FIGURES_DIR = figures_dir(FIGURES_SCALE)  # the committed figures/
# "undecided": the experiment ran but is no test of the claim (e.g. its mechanism never acted)
VERDICTS = ("reproduced", "not reproduced", "partly", "undecided", "needs GPU scale",
            "inconsistent as reported")
# An experiment's figure from its results frame and its typed Config: the values of its FIGURES
Plot = Callable[[pd.DataFrame, Any], plt.Figure]


@dataclass(frozen=True)
class ClaimRow:
    """One line of the claims ledger: what the report says beside what the kit measured."""

    claim: str
    reported: str
    reproduced: str
    scale: str
    verdict: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


def save_figure(fig: plt.Figure, name: str, out_dir: str | Path = FIGURES_DIR) -> list[Path]:
    """Write NAME.png (150 dpi) and NAME.pdf (vector) into out_dir; close the figure.

    The PDF carries no creation date, so the same figure gives the same bytes (a rerun that
    changes nothing leaves the committed files, and `git status`, as they were)."""
    paths = []
    for suffix, kwargs in ((".png", {"dpi": 150}),
                           (".pdf", {"metadata": {"CreationDate": None}})):
        path = Path(out_dir) / f"{name}{suffix}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=suffix[1:], bbox_inches="tight", **kwargs)
        paths.append(path)
    plt.close(fig)
    return paths


def save_table(frame: pd.DataFrame, name: str, out_dir: str | Path = FIGURES_DIR) -> list[Path]:
    """Write NAME.csv and NAME.md (a Markdown table) into out_dir."""
    out_dir = Path(out_dir)
    csv = write_frame(out_dir / f"{name}.csv", frame)
    md = write_text(out_dir / f"{name}.md", to_markdown(frame) + "\n")
    return [csv, md]


def save_claims(rows: list[ClaimRow], name: str, out_dir: str | Path = FIGURES_DIR) -> list[Path]:
    """The claim rows a notebook tested, as figures/claims_NAME.{csv,md}."""
    return save_table(claims_frame(rows), f"claims_{name}", out_dir)


def show_figure(fig: plt.Figure, name: str, out_dir: str | Path = FIGURES_DIR) -> None:
    """In a notebook: display the figure inline, then write NAME.{png,pdf} (`save_figure`)."""
    from IPython.display import display

    display(fig)
    save_figure(fig, name, out_dir)


def show_plot(
    plots: Mapping[str, Plot], name: str, frame: pd.DataFrame, cfg: Mapping[str, Any],
    out_dir: str | Path = FIGURES_DIR,
) -> None:
    """In a notebook: draw `plots[name](frame, cfg)` (an experiment's FIGURES) inline and write
    it as NAME.{png,pdf} (`show_figure`): a figure's key is its file name."""
    show_figure(plots[name](frame, cfg), name, out_dir)


def show_table(frame: pd.DataFrame, name: str | None = None,
               out_dir: str | Path = FIGURES_DIR) -> None:
    """In a notebook: write NAME.{csv,md} (`save_table`; nothing when `name` is None), then
    display it as Markdown."""
    from IPython.display import Markdown, display

    if name is not None:
        save_table(frame, name, out_dir)
    display(Markdown(to_markdown(frame)))


def show_claims(rows: list[ClaimRow], name: str, out_dir: str | Path = FIGURES_DIR) -> None:
    """In a notebook: write claims_NAME.{csv,md} (`save_claims`), then display the rows."""
    from IPython.display import Markdown, display

    save_claims(rows, name, out_dir)
    display(Markdown(to_markdown(claims_frame(rows))))


def claims_frame(rows: list[ClaimRow]) -> pd.DataFrame:
    return pd.DataFrame([asdict(r) for r in rows], columns=list(ClaimRow.__dataclass_fields__))


def to_markdown(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub Markdown table (`DataFrame.to_markdown`: tabulate's "pipe" format, no index).

    Floats are written to `digits` significant digits ("nan" for NaN), every other cell as
    `str` with "|" escaped and newlines joined, so that a cell stays one cell. tabulate's own
    number parsing is off: a string such as "0.020" stays as written, and columns are padded
    and left-aligned alike."""
    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}g}"
        return str(value).replace("|", "\\|").replace("\n", " ")

    return frame.map(cell).to_markdown(index=False, disable_numparse=True)
