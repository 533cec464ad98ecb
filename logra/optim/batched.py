"""The batched ("foreach") path: many small parameters in a handful of kernel calls.

On a model of many small matrices the per-parameter loop spends its time in Python, not in
arithmetic. Here same-shaped sketched matrices are stacked, B at a time, and sketched with one
`bmm` per side; their updates are evaluated on the stack; dense parameters go through
`torch._foreach_*` as in `torch.optim.AdamW(foreach=True)`. The stacked gradient copy is the
one matrix-sized temporary per parameter in flight: it is overwritten by Δ in place.

The projections P, Q are shared by the stack. The rules are those of `logra.optim.updates` with
a leading batch dimension (the gain rule's factors come from `logra.optim.gain`, which takes
every sketched matrix of a step together):

    Gain:     Δ_b = −lr · (s_b ⊙ G_b ⊙ c_b + λ W_b)
    Nyström:  Δ_b = −lr · ((m̂_R)_b (C_b^† (m̂_L)_b) / (√(ρ_b κ_bᵀ/Σρ_b) + ε) + λ W_b)
    Dense:    Δ   = −lr · (m̂ / (√v̂ + ε) + λ W)                    (per tensor, foreach)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from logra.optim.gate import StepGate
from logra.optim.packing import FlatMoments
from logra.optim.sketch import Reduce, energies, identity
from logra.optim.updates import as_matrix


def stacked_sketch(grads: list[Tensor], P: Tensor, Q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(G, L, R): the stacked fp32 gradients (B×m×n), Pᵀ G (B×k×n) and G Q (B×m×r).

    P (m×k) and Q (n×r) are shared by the stack (projections depend on the shape only).
    """
    G = torch.stack([as_matrix(g).float() for g in grads])
    return G, torch.matmul(P.T, G), torch.matmul(G, Q)


@dataclass(kw_only=True)
class StackedUpdate:
    """Δ of B same-shaped matrices, held in the stacked gradient copy (B×m×n, fp32)."""

    params: list[Tensor]
    delta: Tensor  # B×m×n
    row_weight: Tensor  # ρ/Σρ, B×m
    col_weight: Tensor  # κ, B×n

    @classmethod
    def nystrom(
        cls, params: list[Tensor], G: Tensor, L: Tensor, R: Tensor, P: Tensor,
        exp_avg_L: list[Tensor], exp_avg_sq_L: list[Tensor], exp_avg_R: list[Tensor],
        exp_avg_sq_R: list[Tensor], step: int, rows: int, group: dict, gate: StepGate,
        reduce: Reduce = identity,
    ) -> StackedUpdate:
        """Update the sketch moments in place with the stack's sketches L (B×k×n) and R (B×m×r)
        (gated: `logra.optim.gate`) and form the Nyström rule's Δ over G (B×m×n). exp_avg_L,
        exp_avg_sq_L: one k×n tensor per matrix; exp_avg_R, exp_avg_sq_R: one m×r tensor per
        matrix (m: this rank's rows when sharded, `rows` in all); P (m×k): the stack's left
        projection (this rank's rows). (The gain rule's stacks: `gain_update`.)"""
        beta1, beta2 = group["betas"]
        if group["maximize"]:
            L, R = L.neg_(), R.neg_()
        gate.update_gated([*exp_avg_L, *exp_avg_R], [*exp_avg_sq_L, *exp_avg_sq_R],
                          [*gate.values(L).unbind(0), *gate.values(R).unbind(0)], beta1, beta2)
        bias1, bias2 = 1 - beta1**step, 1 - beta2**step
        m_L, m_R = torch.stack(exp_avg_L).div_(bias1), torch.stack(exp_avg_R).div_(bias1)
        v_L, v_R = torch.stack(exp_avg_sq_L).div_(bias2), torch.stack(exp_avg_sq_R).div_(bias2)
        rho, kappa = energies(v_R, v_L, rows=rows)
        return nystrom_update(params, G, m_R, m_L, P, group["rtol"], rho, kappa, group["eps"],
                              float(group["lr"]), group["weight_decay"], reduce)

    def predicted_fisher(self) -> Tensor:
        """Σ_b Σ_ij (ρ_b)_i (κ_b)_j (Δ_b)_ij² / Σρ_b, as Σ_b ((ρ_b/Σρ_b)ᵀ Δ_b²) κ_b: a row vector
        times each matrix (on one CPU thread 3-5× faster than the matrix times a column)."""
        weighted = torch.bmm(self.row_weight[:, None, :], self.delta.square())  # B×1×n
        return (weighted[:, 0, :] * self.col_weight).sum()

    def store_delta(self) -> None:
        for p, d in zip(self.params, self.delta.unbind(0), strict=True):
            as_matrix(p.grad).copy_(d)

    def apply(self, gamma: float, gate: StepGate | None = None) -> None:
        """W ← W + γΔ; with a `gate`, nothing on a skipped step (Δ may hold NaN then) and no
        NaN or ∞ of Δ (`StepGate.mask_`)."""
        if gate is not None:
            gate.mask_(self.delta)
        weights, deltas = [as_matrix(p) for p in self.params], list(self.delta.unbind(0))
        if all(p.dtype == torch.float32 for p in self.params):
            torch._foreach_add_(weights, deltas, alpha=gamma)
        else:  # Δ rounded to the parameters' dtype first, as the loop path does
            for w, d in zip(weights, deltas, strict=True):
                w.add_(d.to(w.dtype), alpha=gamma)


def gain_update(
    params: list[Tensor], G: Tensor, row_factor: Tensor, col_gain: Tensor, row_weight: Tensor,
    kappa: Tensor, lr: float, weight_decay: float,
) -> StackedUpdate:
    """The gain rule on a stack, Δ written over G (B×m×n): row_factor −lr·√s (B×m, +lr·√s
    under maximize), col_gain √c (B×n), row_weight ρ/Σρ (B×m), kappa κ (B×n), from
    `logra.optim.gain.family_factors`."""
    delta = G.mul_(row_factor[:, :, None]).mul_(col_gain[:, None, :])
    _add_weight_decay(delta, params, lr, weight_decay)
    return StackedUpdate(params=params, delta=delta, row_weight=row_weight, col_weight=kappa)


def nystrom_update(
    params: list[Tensor], G: Tensor, left: Tensor, m_L: Tensor, P: Tensor, rtol: float,
    rho: Tensor, kappa: Tensor, eps: float, lr: float, weight_decay: float,
    reduce: Reduce = identity,
) -> StackedUpdate:
    """The Nyström rule on a stack, Δ written over G: left = m̂_R, m_L = m̂_L (B×k×n)."""
    right = torch.linalg.pinv(reduce(torch.matmul(P.T, left)), rtol=rtol) @ m_L  # B×r×n
    row_weight = _normalized(rho, reduce)
    denom = (row_weight.sqrt()[:, :, None] * kappa.sqrt()[:, None, :]).add_(eps)
    delta = torch.bmm(left, right, out=G).div_(denom).mul_(-lr)
    _add_weight_decay(delta, params, lr, weight_decay)
    return StackedUpdate(params=params, delta=delta, row_weight=row_weight, col_weight=kappa)


def _normalized(rho: Tensor, reduce: Reduce) -> Tensor:
    return rho / reduce(rho.sum(dim=1, keepdim=True)).clamp_min(1e-30)


def _add_weight_decay(delta: Tensor, params: list[Tensor], lr: float, weight_decay: float):
    """Δ_b −= lr·λ·W_b, read from the parameters in place (no stacked copy of the weights)."""
    if weight_decay != 0:
        torch._foreach_add_(list(delta.unbind(0)), [as_matrix(p) for p in params],
                            alpha=-lr * weight_decay)


@dataclass(kw_only=True)
class ForeachDenseUpdate:
    """AdamW's update of several tensors with the same step count, on their moments packed in
    two flat buffers (`logra.optim.packing.FlatMoments`): one kernel per operation."""

    params: list[Tensor]
    grads: list[Tensor]  # the gradient buffers (they receive Δ for the JVP estimator)
    delta: list[Tensor]  # fp32, one per parameter (views of one flat Δ)
    exp_avg_sqs: list[Tensor]
    bias2: float

    @classmethod
    def build(
        cls, params: list[Tensor], grads: list[Tensor], moments: FlatMoments, step: int,
        group: dict, gate: StepGate,
    ) -> ForeachDenseUpdate:
        """Update the moments in place with `grads` (gated: `logra.optim.gate`) and form
        Δ = −lr·(m̂/(√v̂+ε) + λW)."""
        beta1, beta2 = group["betas"]
        lr, weight_decay = float(group["lr"]), group["weight_decay"]
        values = torch.cat([g.float().reshape(-1) for g in grads])
        if group["maximize"]:
            values.neg_()
        gate.update_moments([moments.exp_avg], [moments.exp_avg_sq], [values], beta1, beta2)
        bias1, bias2 = 1 - beta1**step, 1 - beta2**step
        denom = moments.exp_avg_sq.sqrt().div_(math.sqrt(bias2)).add_(group["eps"])
        delta = torch.div(moments.exp_avg, denom).mul_(-lr / bias1)
        if weight_decay != 0:
            delta.add_(torch.cat([p.float().reshape(-1) for p in params]),
                       alpha=-lr * weight_decay)
        views = [d.view_as(p) for d, p in zip(delta.split([p.numel() for p in params]), params,
                                               strict=True)]
        return cls(params=params, grads=grads, delta=views,
                   exp_avg_sqs=[v for _, v in moments.views], bias2=bias2)

    def predicted_fisher(self) -> Tensor:
        """Σ v̂ Δ² = Σ ‖√v Δ‖² / (1−β₂ᵗ)."""
        scaled = torch._foreach_mul(self.delta, torch._foreach_sqrt(self.exp_avg_sqs))
        return torch.stack(torch._foreach_norm(scaled)).square().sum() / self.bias2

    def store_delta(self) -> None:
        for g, d in zip(self.grads, self.delta, strict=True):
            g.copy_(d)

    def apply(self, gamma: float, gate: StepGate | None = None) -> None:
        """W ← W + γΔ; with a `gate`, nothing on a skipped step (Δ is finite here: the gated
        moments are, so the 0/1 factor `keep` masks it)."""
        if gate is not None and not gate.kept:
            torch._foreach_mul_(self.delta, gate.keep)
        if all(p.dtype == torch.float32 for p in self.params):
            torch._foreach_add_(self.params, self.delta, alpha=gamma)
        else:
            for p, d in zip(self.params, self.delta, strict=True):
                p.add_(d.to(p.dtype), alpha=gamma)
