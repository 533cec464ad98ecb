"""Fira's norm-growth limiter, as LoGRA's "subspace" and "channel" rules apply it.

A rule that rescales a direction S step by step can blow its norm up between two steps (a
column whose gradient was tiny gets a large gain). Fira (Chen et al. 2024) caps the growth: with
γ = NORM_GROWTH_LIMIT and ‖S_prev‖ the norm the previous step applied,

    ζ = min(1, γ ‖S_prev‖ / ‖S‖),        the step applies ζ S,        ‖S_prev‖ ← ‖ζ S‖

(ζ = 1 on a parameter's first step). The two limited directions, for G ∈ R^{m×n} and the
projection P ∈ R^{m×k} with L = Pᵀ G (`logra.optim.updates`):

    "subspace"  S = (G − P L) diag(φ)            ‖S‖² = Σ_j φ_j² (‖G[:,j]‖² − ‖L[:,j]‖²)
    "channel"   S = diag(s) G diag(c)            ‖S‖² = Σ_i (s_i ‖G[i,:]‖)²   (rows are channels)
                                                 ‖S‖² = Σ_j (c_j ‖G[:,j]‖)²   (columns are)

The first holds because P Pᵀ is an orthogonal projection; both need one pass over G for its row
or column norms, never S itself. ‖ζS‖ is remembered as a float in the parameter's optimizer state
("residual_norm", "scaled_norm"), so it travels with `state_dict()`. Each limit is one host read:
the norm together with the step's finiteness flag. A skipped step (a non-finite gradient
anywhere) or a non-finite norm leaves the memory as it was and the step unlimited.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from logra.optim.gate import StepGate

NORM_GROWTH_LIMIT = 1.01  # Fira's γ: the limited norms ("subspace", "channel") grow ≤ 1 % a step


def residual_limit(
    state: dict, grad: Tensor, L: Tensor, scale: Tensor, reduce: Callable[[Tensor], Tensor],
    gate: StepGate,
) -> float:
    """ζ of the "subspace" rule's scaled residual S = (G − P L) diag(φ).

    grad: G (m×n, or this rank's rows of it); L: the left sketch Pᵀ G (k×n, summed over the
    shards); scale: φ (n); reduce: sums a tensor over the row shards (`distributed.reducer`).
    """
    columns = torch.linalg.vector_norm(grad, dim=0, dtype=torch.float32).square_()
    columns = reduce(columns)
    squared = (columns - L.square().sum(dim=0)).clamp_min_(0) @ scale.square()
    return growth_limit(state, "residual_norm", squared, gate)


def channel_limit(
    state: dict, grad: Tensor, row_gain: Tensor, col_gain: Tensor, rows_are_channels: bool,
    reduce: Callable[[Tensor], Tensor], gate: StepGate,
) -> float:
    """ζ of the "channel" rule's scaled gradient S = diag(s) G diag(c) (APOLLO applies Fira's
    limiter there).

    grad: G (m×n, or this rank's rows); row_gain: s (m, or this rank's rows), col_gain: c (n);
    rows_are_channels: whether ‖S‖ is summed over G's rows (m ≥ n) or its columns.
    """
    if rows_are_channels:
        rows = torch.linalg.vector_norm(grad, dim=1, dtype=torch.float32)
        squared = reduce((rows * row_gain).square().sum())
    else:
        columns = reduce(torch.linalg.vector_norm(grad, dim=0, dtype=torch.float32).square())
        squared = (columns.sqrt() * col_gain).square().sum()
    return growth_limit(state, "scaled_norm", squared, gate)


def growth_limit(state: dict, key: str, squared: Tensor, gate: StepGate) -> float:
    """ζ = min(1, γ ‖S_prev‖ / ‖S‖) for a scaled direction S with ‖S‖² = `squared` (a device
    scalar), γ = NORM_GROWTH_LIMIT; ‖ζS‖ is remembered in `state[key]` (a float). Reads the norm
    and the step's finiteness flag in one host read; a skipped step or a non-finite norm leaves
    the memory as it was and returns 1.
    """
    squared, ok = torch.stack([squared, gate.ok.to(squared.dtype)]).tolist()
    norm = math.sqrt(squared) if squared >= 0 else math.nan
    if not ok or not math.isfinite(norm):
        return 1.0
    previous = state.get(key, 0.0)
    limit = 1.0
    if previous > 0 and norm > NORM_GROWTH_LIMIT * previous:
        limit = NORM_GROWTH_LIMIT * previous / norm
    state[key] = norm * limit
    return limit
