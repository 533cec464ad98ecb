"""Plot helpers that more than one notebook's figures use."""

from __future__ import annotations

from collections.abc import Iterable

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator


def rank_axis(ax: plt.Axes, ticks: Iterable[int]) -> None:
    """A log₂ x axis labelled with the plain tick values (sketch ranks, aspect ratios)."""
    ticks = sorted(ticks)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([str(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())


FEW_POINTS = 3
KL_FLOOR = 1e-8  # KL values below this (0 where a smoke policy never moved) are drawn at it
                 # on log axes


def line_with_band(ax: plt.Axes, data: pd.DataFrame, x: str, y: str, band: bool = True,
                   estimator: str = "mean", band_alpha: float = 0.15, **line: object) -> None:
    """A line of `estimator` over the rows of `data` that share an `x` (the seeds of a step)
    and, if `band`, a band from their lowest to their highest `y`: seaborn's `lineplot` with
    `errorbar=("pi", 100)`, the 0–100th percentile interval. An `x` with a single row has no
    band (seaborn draws no interval for one observation).

    `line` goes to the line (color, label, linestyle, ...). With fewer than `FEW_POINTS`
    distinct `x` (a smoke run's two steps) the points get markers, since a line through one
    point draws nothing. The axes keep their labels, which seaborn would otherwise name after
    the columns."""
    labels = ax.get_xlabel(), ax.get_ylabel()
    if data[x].nunique() < FEW_POINTS:
        line = {"marker": "o", **line}
    line = {"markeredgecolor": "auto", "markeredgewidth": plt.rcParams["lines.markeredgewidth"],
            **line}  # matplotlib's marker edges, not seaborn's white ones (an "x" is all edge)
    sns.lineplot(data=data, x=x, y=y, estimator=estimator, errorbar=("pi", 100) if band else None,
                 err_kws={"alpha": band_alpha, "linewidth": 0}, legend=False, ax=ax, **line)
    ax.set(xlabel=labels[0], ylabel=labels[1])
