"""The moments LoGRA keeps in `optimizer.state`: their layout, creation, transport and loading.

A sketched parameter W ∈ R^{m×n} (viewed shape[0] × rest) with sketches L = Pᵀ G (k×n) and
R = G Q (m×r) keeps

    exp_avg_L, exp_avg_sq_L     m_L, v_L    k×n    replicated on every rank under FSDP2
    exp_avg_R, exp_avg_sq_R     m_R, v_R    m×r    sharded by rows like W
    step                        t           the steps taken, a 0-d fp32 tensor (as AdamW's)
    epoch                       the refresh epoch of the projections the moments are in (an int)

(2·r·(m+n) fp32 numbers, + 2·oversample·n, for k = r + oversample) and, for the "subspace" and
"channel" rules, the norm-growth limiter's memory (a float, `logra.optim.limiter`). A dense
parameter keeps AdamW's `step`, `exp_avg` and `exp_avg_sq` (W's shape). Every moment is fp32
whatever the parameter's dtype; the Adam update itself is `gate.StepGate.update_moments`.

When a step starts a new refresh epoch (`logra.optim.projections`) the moments, expressed in the
old projections (P_old, Q_old), are carried into the new ones (P, Q) before the step's update:

    m_L ← Pᵀ M̂,   m_R ← M̂ Q,                M̂ = m_R (P_oldᵀ m_R)^† m_L   (Nyström, k×r core)
    v_L ← ((P∘P)ᵀ ρ) κᵀ / Σρ,   v_R ← ρ (κᵀ (Q∘Q)) / Σρ                 (V̂ = ρκᵀ/Σρ re-sketched)

with ρ (m), κ (n) the energies of the old v_R, v_L (`sketch.energies`), and M̂ never formed
(`sketch.transport_first_moment`, `sketch.transport_second_moment`).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import torch
from torch import Tensor

from logra.optim import sketch as sk
from logra.optim.distributed import RowShard, distribute_state, local

SKETCH_MOMENTS = ("exp_avg_L", "exp_avg_sq_L", "exp_avg_R", "exp_avg_sq_R")


def sketch_state(
    state: dict[str, Any], L: Tensor, R: Tensor, shard: RowShard | None, rows: int
) -> dict[str, Any]:
    """A sketched parameter's state, its moments created as zeros shaped like the sketches L
    (k×n) and R (this rank's rows of m×r; `rows` = m) on first use; its step advanced."""
    if not state:
        state["step"] = torch.zeros((), dtype=torch.float32)
        state["epoch"] = 0
        for side, sketch in (("L", L), ("R", R)):
            for name in (f"exp_avg_{side}", f"exp_avg_sq_{side}"):
                state[name] = distribute_state(torch.zeros_like(sketch), shard,
                                               sharded_rows=side == "R", rows=rows)
    state["step"] += 1
    return state


def sketch_moments(state: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(m_L, v_L, m_R, v_R): this rank's part of each sketch moment (views: writes go through)."""
    m_L, v_L, m_R, v_R = (local(state[name]) for name in SKETCH_MOMENTS)
    return m_L, v_L, m_R, v_R


def transport(
    state: dict[str, Any], P_old: Tensor, P: Tensor, Q: Tensor, rtol: float,
    reduce: sk.Reduce, rows: int,
) -> None:
    """Carry the moments from the previous epoch's projections into P (m×k, or this rank's rows
    of it and of P_old when sharded) and Q (n×r), in place; `rows` = m."""
    m_L, v_L, m_R, v_R = sketch_moments(state)
    new_m_L, new_m_R = sk.transport_first_moment(m_R, m_L, P_old, P, Q, rtol, reduce)
    new_v_L, new_v_R = sk.transport_second_moment(v_R, v_L, P, Q, reduce, rows=rows)
    for moment, new in ((m_L, new_m_L), (m_R, new_m_R), (v_L, new_v_L), (v_R, new_v_R)):
        moment.copy_(new)


def dense_state(state: dict[str, Any], param: Tensor) -> dict[str, Any]:
    """A dense parameter's state: AdamW's fp32 moments, created on first use; step advanced."""
    if not state:
        state["step"] = torch.zeros((), dtype=torch.float32)
        state["exp_avg"] = torch.zeros_like(param, dtype=torch.float32)
        state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
    state["step"] += 1
    return state


def snapshot(
    state: dict[Tensor, dict[str, Any]], params: list[Tensor]
) -> dict[Tensor, dict[str, Any] | None]:
    """A copy of the state of each of `params` (tensors cloned), None for a parameter without
    one yet: what `restore` puts back after a step that failed half way."""
    return {p: {key: value.clone() if isinstance(value, Tensor) else value
                for key, value in state[p].items()} if state.get(p) else None for p in params}


def restore(
    state: dict[Tensor, dict[str, Any]], saved: dict[Tensor, dict[str, Any] | None]
) -> None:
    """Put back the states `snapshot` copied, and drop those it found absent."""
    for p, entry in saved.items():
        if entry is None:
            state.pop(p, None)
        else:
            state[p] = entry


def restore_fp32(
    state: dict[Tensor, dict[str, Any]], param_groups: list[dict[str, Any]],
    saved: dict[str, Any],
) -> None:
    """Put a checkpoint's fp32 tensors back into `state` after `Optimizer.load_state_dict`.

    `Optimizer.load_state_dict` casts every floating state tensor to its parameter's dtype,
    which would round the fp32 moments of bf16 parameters to bf16; each saved tensor but the
    step is copied back, fp32, onto its parameter's device. `saved` is the checkpoint (its
    "state" keyed by parameter index, its "param_groups" listing the indices in order),
    `param_groups` the optimizer's.
    """
    saved_ids = chain.from_iterable(g["params"] for g in saved["param_groups"])
    current = chain.from_iterable(g["params"] for g in param_groups)
    param_of = dict(zip(saved_ids, current, strict=True))
    for saved_id, saved_state in saved["state"].items():
        p = param_of[saved_id]
        for key, value in saved_state.items():
            if isinstance(value, Tensor) and key != "step":
                state[p][key] = value.to(p.device, torch.float32, copy=True)
