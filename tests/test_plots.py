"""The shared plot helpers: a seed band is seaborn's line of the mean with the range of the
seeds behind it, drawn on the axes given, which keep their labels."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from logra.experiments.plots import line_with_band

FRAME = pd.DataFrame({"step": [1, 1, 1, 2, 2, 2], "seed": [0, 1, 2] * 2,
                      "kl": [1.0, 2.0, 6.0, 2.0, 2.0, 5.0]})


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    ax.set_ylabel("KL (nats)")
    yield ax
    plt.close(fig)


def test_the_line_is_the_mean_and_the_band_the_lowest_to_the_highest_seed(ax) -> None:
    line_with_band(ax, FRAME, "step", "kl", color="red", label="LoGRA")
    (line,) = ax.lines
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [3.0, 3.0]
    assert line.get_label() == "LoGRA" and line.get_color() == "red"
    (band,) = ax.collections
    corners = band.get_paths()[0].vertices
    for step, low, high in ((1, 1.0, 6.0), (2, 2.0, 5.0)):
        ys = corners[np.isclose(corners[:, 0], step), 1]
        assert ys.min() == low and ys.max() == high
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("", "KL (nats)")  # not the column names


def test_without_a_band_or_with_another_estimator(ax) -> None:
    line_with_band(ax, FRAME, "step", "kl", band=False, estimator="median", color="k",
                   marker="x")
    (line,) = ax.lines
    assert list(line.get_ydata()) == [2.0, 2.0] and not ax.collections
    assert line.get_markeredgecolor() == "k"  # an "x" is all edge: not seaborn's white one


def test_a_line_through_too_few_steps_to_see_gets_markers(ax) -> None:
    """A smoke run's single measured step draws a visible point, not an empty panel."""
    one_step = FRAME[FRAME["step"] == 2]
    line_with_band(ax, one_step, "step", "kl", color="red")
    (line,) = ax.lines
    assert line.get_marker() == "o" and list(line.get_xdata()) == [2]
    many = pd.DataFrame({"step": [1, 2, 3, 4], "seed": 0, "kl": [1.0, 2.0, 3.0, 4.0]})
    fig, other = plt.subplots()
    line_with_band(other, many, "step", "kl")
    assert other.lines[0].get_marker() in ("None", None, "")  # enough points: a plain line
    plt.close(fig)
