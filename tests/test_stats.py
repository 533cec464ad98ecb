"""Paired per-problem tests and Holm's correction (`logra.stats`), against hand counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from logra import stats


def test_mcnemar_counts_only_the_problems_that_changed() -> None:
    """10 gained, 2 lost, 88 unchanged: p = P(|Bin(12, ½) − 6| ≥ 4) = 2·(1+12+66)/4096."""
    a = np.array([0] * 10 + [1] * 2 + [1] * 40 + [0] * 48, dtype=float)
    b = np.array([1] * 10 + [0] * 2 + [1] * 40 + [0] * 48, dtype=float)
    result = stats.mcnemar(a, b)
    assert result.p == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert (result.a, result.b, result.difference) == (0.42, 0.5, pytest.approx(0.08))
    assert stats.mcnemar(a, a).p == 1.0
    with pytest.raises(ValueError, match="0/1"):
        stats.mcnemar(a / 2, b)


def test_paired_t_removes_the_spread_between_problems() -> None:
    """Problems of very different difficulty, each raised by 0.02 ± 0.01: unpaired the
    difference is lost in the spread, paired it is far beyond its noise."""
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0, 0.9, 2000)
    after = difficulty + 0.02 + rng.normal(0, 0.01, 2000)
    result = stats.paired_t(difficulty, after)
    assert result.difference == pytest.approx(0.02, abs=1e-3)
    assert result.stderr == pytest.approx(0.01 / math.sqrt(2000), rel=0.1)
    assert result.p < 1e-50
    low, high = result.ci95
    assert low < 0.02 < high
    with pytest.raises(ValueError, match="NaN"):
        stats.paired_t([0.1, math.nan], [0.2, 0.3])
    with pytest.raises(ValueError, match="same >= 2 problems"):
        stats.paired_t([0.1, 0.2], [0.2])


def test_holm_multiplies_the_smallest_by_the_family_size_and_keeps_the_order() -> None:
    # sorted 0.01, 0.02, 0.04 -> 0.03, 0.04, 0.04 (monotone), given back in input order
    assert stats.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []
    with pytest.raises(ValueError, match="p-values"):
        stats.holm([1.5])
