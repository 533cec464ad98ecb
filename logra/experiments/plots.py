"""Plot helpers that more than one notebook's figures use."""

from __future__ import annotations

from collections.abc import Iterable

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator


def rank_axis(ax: plt.Axes, ticks: Iterable[int]) -> None:
    """A log₂ x axis labelled with the plain tick values (sketch ranks, aspect ratios)."""
    ticks = sorted(ticks)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([str(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
