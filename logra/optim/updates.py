"""Per-parameter update rules, evaluated a block of rows at a time.

Once the moments are updated, each parameter's tentative update Δ (m×n, the parameter viewed as
a matrix) is a cheap function of small factors and of the gradient or weight rows. The step
needs Δ twice, first for the predicted KL (Σ F Δ²) and then to apply γΔ. Each block of rows is
computed where it is used, so no m×n temporary exists and the block stays in cache:

    Gain:     Δ_b = −lr · (s_b ⊙ G_b ⊙ c  + λ W_b)                       (s, c: row/column gains)
    Blend:    Δ_b = −lr · ((G_b + P_b (m̂_L − L)) ⊙ φ + λ W_b)               (φ: column scales)
    Subspace: Δ_b = −lr · (P_b u_L + (G_b − P_b L) ⊙ ζφ + λ W_b)
    Nyström:  Δ_b = −lr · ((m̂_R)_b (C^† m̂_L) / (√(ρ_b κᵀ/Σρ) + ε) + λ W_b)
    Dense:    Δ_b = −lr · ((m̂)_b / (√(v̂)_b + ε) + λ W_b)                 (AdamW)

Every rule also gives its diagonal Fisher weight for Σ_ij F_ij Δ_ij²: the rank-1 second moment
V̂ = ρκᵀ/Σρ for the sketched rules, Adam's v̂ for the dense one.

Blend and Subspace work on the left sketch only: P L = P Pᵀ G is the orthogonal projection of G
onto span(P), and since it keeps G's columns (a zero column of G stays zero), per-column scales
taken from the sketch can multiply the residual G − P L safely. (The two-sided projection
P Pᵀ G + (I − P Pᵀ) G Q Qᵀ mixes columns through Q: a column of G with no gradient gets a residual
there, and its scale, a ratio with a zero gradient norm, blows it up.)

Every path updates its Adam moments with one function, `update_moments`; `adam_direction` also
returns plain Adam's direction m̂/(√v̂+ε) of one tensor (the naive projection's rule).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from logra.optim.sketch import row_blocks

if TYPE_CHECKING:  # gate imports this module
    from logra.optim.gate import StepGate


def as_matrix(t: Tensor) -> Tensor:
    """The 2-D view the optimizer works on: shape[0] × rest, or 1 × numel for 0-D and 1-D.

    (`rest` is spelled out so that a shard with no rows, as FSDP2 leaves on some ranks, views.)
    """
    return t.view(t.shape[0], math.prod(t.shape[1:])) if t.dim() >= 2 else t.view(1, -1)


def update_moments(
    exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor], values: list[Tensor],
    weight: float | Tensor, decay: float | Tensor, beta2: float, *, foreach: bool,
) -> None:
    """Adam's moments of each x in `values`, in place, in torch.optim.AdamW's operations:

        m ← lerp(m, x, w) = m + w·(x − m)        v ← v·b + (1−β₂)·x²

    With w = 1−β₁ and b = β₂ that is m ← β₁ m + (1−β₁) x and v ← β₂ v + (1−β₂) x². w and b are
    numbers, or 0-d fp32 tensors on the moments' device (`logra.optim.gate` passes w = 0, b = 1
    on a skipped step; a 0-d fp32 operand rounds as the number does). Each x has its moments'
    shape and dtype (fp32). foreach: one `torch._foreach_*` call per operation for the whole
    list; else one tensor at a time (AdamW's single-tensor path).
    """
    if foreach:
        torch._foreach_lerp_(exp_avgs, values, [weight] * len(values))
        torch._foreach_mul_(exp_avg_sqs, decay)
        torch._foreach_addcmul_(exp_avg_sqs, values, values, value=1 - beta2)
        return
    for exp_avg, exp_avg_sq, x in zip(exp_avgs, exp_avg_sqs, values, strict=True):
        exp_avg.lerp_(x, weight)
        exp_avg_sq.mul_(decay).addcmul_(x, x, value=1 - beta2)


def adam_direction(
    grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, beta1: float, beta2: float,
    eps: float,
) -> Tensor:
    """Update Adam's fp32 moments in place with `grad` (any float dtype, the moments' shape);
    return m̂ / (√v̂ + ε), m̂ = m / (1−β₁ᵗ), v̂ = v / (1−β₂ᵗ), as a new fp32 tensor.

    The operations and their order follow `torch.optim.AdamW`'s single-tensor path, so the
    naive projection's dense parameters reproduce AdamW to round-off.
    """
    g = grad.float()
    update_moments([exp_avg], [exp_avg_sq], [g], 1 - beta1, beta2, beta2, foreach=False)
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    denom = (exp_avg_sq.sqrt() / math.sqrt(bias2)).add_(eps)
    return exp_avg.div(denom).mul_(1 / bias1)


@dataclass(kw_only=True)
class Update:
    """Δ = −lr·(U + λ W) for one parameter; subclasses define the direction U (scaled by −lr)."""

    param: Tensor
    lr: float
    weight_decay: float

    @property
    def weight(self) -> Tensor:
        """The parameter as a matrix (a view: applying γΔ writes the parameter)."""
        return as_matrix(self.param)

    def scaled_direction(self, rows: slice) -> Tensor:
        """−lr · U for a block of rows, as a new fp32 tensor."""
        raise NotImplementedError

    def fisher_sq(self, rows: slice, delta: Tensor) -> Tensor:
        """Σ_ij F_ij Δ_ij² over the block (fp32 scalar)."""
        raise NotImplementedError

    def delta(self, rows: slice) -> Tensor:
        d = self.scaled_direction(rows)
        if self.weight_decay != 0:
            d.add_(self.weight[rows].float(), alpha=-self.lr * self.weight_decay)
        return d

    def blocks(self) -> Iterator[slice]:
        return row_blocks(*self.weight.shape)

    def predicted_fisher(self) -> Tensor:
        """Σ F Δ² over the whole parameter, a block at a time."""
        return sum((self.fisher_sq(rows, self.delta(rows)) for rows in self.blocks()),
                   torch.zeros((), device=self.weight.device))

    def store_delta(self) -> None:
        """Δ into the gradient buffer, for estimators that need it whole (the JVP)."""
        out = as_matrix(self.param.grad)
        for rows in self.blocks():
            out[rows].copy_(self.delta(rows))

    def apply(self, gamma: float, gate: StepGate | None = None) -> None:
        """W ← W + γΔ, a block at a time; with a `gate` (its flag on the device, not read on
        the host), nothing on a skipped step whatever Δ holds then, and no NaN or ∞ of Δ
        (`StepGate.mask_`)."""
        for rows in self.blocks():
            d = self.delta(rows)
            if gate is not None:
                gate.mask_(d)
            self.weight[rows].add_(d.to(self.weight.dtype), alpha=gamma)


@dataclass(kw_only=True)
class RankOneFisher:
    """The sketched rules' diagonal Fisher V̂_ij = ρ_i κ_j / Σρ, kept as its two factors."""

    row_weight: Tensor  # ρ / Σρ, (m,)
    col_weight: Tensor  # κ, (n,)

    def fisher_sq(self, rows: slice, delta: Tensor) -> Tensor:
        return self.row_weight[rows] @ (delta.square() @ self.col_weight)


@dataclass(kw_only=True)
class GainUpdate(RankOneFisher, Update):
    """U = diag(s) G diag(c): the current gradient with Adam's sketch-space row/column gains."""

    grad: Tensor  # m×n gradient (any float dtype)
    row_factor: Tensor  # −lr·√s, (m,) (+lr·√s under `maximize`)
    col_gain: Tensor  # √c, (n,)

    def scaled_direction(self, rows: slice) -> Tensor:
        block = self.grad[rows].float() * self.row_factor[rows, None]
        return block.mul_(self.col_gain)


@dataclass(kw_only=True)
class NystromUpdate(RankOneFisher, Update):
    """U = M̂ / (√V̂ + ε) with M̂ = left · right = m̂_R · (C^† m̂_L)."""

    left: Tensor  # m̂_R, m×r, sign of `maximize` folded in
    right: Tensor  # C^† m̂_L, r×n
    eps: float

    def __post_init__(self) -> None:
        self._left = self.left * -self.lr
        self._row_scale = self.row_weight.sqrt()
        self._col_scale = self.col_weight.sqrt()

    def scaled_direction(self, rows: slice) -> Tensor:
        denom = torch.outer(self._row_scale[rows], self._col_scale).add_(self.eps)
        return (self._left[rows] @ self.right).div_(denom)


@dataclass(kw_only=True)
class DenseUpdate(Update):
    """AdamW: U = (m / (1−β₁ᵗ)) / (√v / √(1−β₂ᵗ) + ε), in torch.optim.AdamW's order of ops."""

    exp_avg: Tensor  # matrix view of the first moment (fp32)
    exp_avg_sq: Tensor  # matrix view of the second moment (fp32)
    bias1: float
    bias2: float
    eps: float

    def scaled_direction(self, rows: slice) -> Tensor:
        denom = (self.exp_avg_sq[rows].sqrt() / math.sqrt(self.bias2)).add_(self.eps)
        return self.exp_avg[rows].div(denom).mul_(-self.lr / self.bias1)

    def fisher_sq(self, rows: slice, delta: Tensor) -> Tensor:
        return (delta.square() * self.exp_avg_sq[rows]).sum() / self.bias2


@dataclass(kw_only=True)
class BlendUpdate(RankOneFisher, Update):
    """U = (G + P (m̂_L − L)) diag(φ): the current gradient with its part in span(P) replaced by
    the momentum's (Flora/Fira-style: momentum where the state holds it, the gradient elsewhere),
    each column scaled by φ_j = ‖u_L[:,j]‖ / max(‖L[:,j]‖, ‖m̂_L[:,j]‖). With maximize, G and the
    sketches are of the negated gradient.
    """

    grad: Tensor  # m×n gradient (any float dtype)
    grad_sign: float  # −1 under maximize
    P: Tensor  # m×k (this shard's rows)
    left_gap: Tensor  # m̂_L − L, k×n
    col_scale: Tensor  # φ, (n,)

    def __post_init__(self) -> None:
        self._col_factor = self.col_scale * -self.lr

    def scaled_direction(self, rows: slice) -> Tensor:
        block = self.grad[rows].float().mul(self.grad_sign)  # a new tensor: G stays as it is
        return block.addmm_(self.P[rows], self.left_gap).mul_(self._col_factor)


@dataclass(kw_only=True)
class SubspaceUpdate(RankOneFisher, Update):
    """U = P u_L + (G − P L) diag(ζφ)  (Fira, Chen et al. 2024, on the left sketch).

    P u_L is Adam's direction u = m̂/(√v̂+ε) of the left sketch mapped back (as GaLore and Fira map
    their projected Adam update back); G − P L is the gradient outside span(P), each column
    scaled by Fira's φ_j = ‖u_L[:,j]‖ / ‖L[:,j]‖ and by the norm-growth limiter ζ ≤ 1. With
    maximize, G and the sketches are of the negated gradient.
    """

    grad: Tensor  # m×n gradient (any float dtype)
    grad_sign: float  # −1 under maximize
    P: Tensor  # m×k (this shard's rows)
    left_adam: Tensor  # u_L, k×n
    left_grad: Tensor  # L, k×n
    col_scale: Tensor  # ζφ, (n,)

    def scaled_direction(self, rows: slice) -> Tensor:
        P = self.P[rows]
        block = self.grad[rows].float().mul(self.grad_sign)
        block.addmm_(P, self.left_grad, alpha=-1.0).mul_(self.col_scale)
        return block.addmm_(P, self.left_adam).mul_(-self.lr)
