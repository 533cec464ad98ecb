"""Paired tests on held-out problems, and Holm's correction over the verdicts of a table.

Two policies evaluated on the same N problems (`logra.rl.evaluation`) give per-problem outcomes
a_i, b_i. Their difference is tested pairwise, which removes the spread between problems:

    greedy  (0/1 outcomes)    McNemar's exact test: of the n discordant problems, k = #{b_i > a_i}
                              ~ Bin(n, ½) under no difference; two-sided p = binomtest(k, n)
    sampled (shares in [0,1]) the paired t-test on d_i = b_i − a_i (N ≥ 2,000 problems: the mean
                              of d is normal to a good approximation)

`holm` adjusts the p-values of a family of m tests (Holm 1979): sorted p_(1) ≤ … ≤ p_(m),
p̃_(j) = max_{i ≤ j} min(1, (m − i + 1)·p_(i)); a verdict is significant where p̃ < α. It
controls the family-wise error rate without assuming the tests independent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import binomtest, ttest_rel

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Paired:
    """The difference b − a of two evaluations of the same problems."""

    n: int  # problems
    a: float  # mean of a
    b: float  # mean of b
    difference: float  # mean of b − a
    stderr: float  # standard error of the mean difference
    p: float  # two-sided p-value of no difference

    @property
    def ci95(self) -> tuple[float, float]:
        """The normal 95 % interval of the difference."""
        return self.difference - 1.96 * self.stderr, self.difference + 1.96 * self.stderr


def _pairs(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(f"need two 1-D evaluations of the same >= 2 problems, got shapes "
                         f"{a.shape} and {b.shape}")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("an evaluation holds NaN: compare only the problems both evaluated")
    return a, b


def _stderr(d: np.ndarray) -> float:
    return float(d.std(ddof=1) / math.sqrt(len(d)))


def mcnemar(a: Sequence[float], b: Sequence[float]) -> Paired:
    """McNemar's exact test of two 0/1 evaluations of the same problems (module docstring)."""
    a, b = _pairs(a, b)
    if not np.isin(a, (0.0, 1.0)).all() or not np.isin(b, (0.0, 1.0)).all():
        raise ValueError("McNemar's test needs 0/1 outcomes (greedy pass@1)")
    gained, lost = int(((b > a)).sum()), int(((b < a)).sum())
    p = float(binomtest(gained, gained + lost).pvalue) if gained + lost else 1.0
    d = b - a
    return Paired(len(a), float(a.mean()), float(b.mean()), float(d.mean()), _stderr(d), p)


def paired_t(a: Sequence[float], b: Sequence[float]) -> Paired:
    """The paired t-test of two evaluations of the same problems (sampled pass@1)."""
    a, b = _pairs(a, b)
    d = b - a
    p = float(ttest_rel(b, a).pvalue) if d.any() else 1.0
    return Paired(len(a), float(a.mean()), float(b.mean()), float(d.mean()), _stderr(d), p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given (module docstring)."""
    p = np.asarray(pvalues, dtype=float)
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"p-values must lie in [0, 1], got {list(pvalues)}")
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def holm_cells(table: pd.DataFrame, tests: Sequence[tuple[int, str, float]]) -> pd.DataFrame:
    """`table` with each test's Holm-adjusted p-value (over all `tests`) written into its cell:
    a test is (row position, column, raw p). Returns the table, changed in place."""
    for (row, column, _), adjusted in zip(tests, holm([p for *_, p in tests]), strict=True):
        table.loc[row, column] = adjusted
    return table
