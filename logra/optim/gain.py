"""The gain rule's sketch-space work for every sketched matrix of a step at once.

Once a step's gradients are sketched, the gain rule (`logra.optim.logra`) needs, for each
sketched matrix W_i (m_i × n_i, sketches L_i = Pᵀ G_i: k×n_i and R_i = G_i Q: m_i×r):

    moments      m ← lerp(m, x, 1−β₁),  v ← β₂ v + (1−β₂) x²      x = L_i, R_i (gated: `gate`)
    directions   u = m̂ / (√v̂ + ε)                                  k×n_i and m_i×r
    gains        √c_j = √(‖u_L[:,j]‖ / ‖L[:,j]‖)   √s_i = √(‖u_R[i,:]‖ / ‖R[i,:]‖)   (`sketch`)
    Fisher       ρ = (n_i/r) Σ_k v̂_R[:,k],  ρ/Σρ  (m_i)     κ = (m_i/k) Σ_k v̂_L[k,:]  (n_i)

and from them Δ_i = −lr·(√s ⊙ G_i ⊙ √c + λ W_i). Per matrix that is some fifty kernels on
tensors of a few thousand numbers; a model of many small matrices spends its step launching
them. Here the matrices of one param group and step count (one k, r, β, ε, lr: a `family`) are
taken together: the R-side sketches are concatenated along their rows (Σm × r) and the L-side
ones stacked by width (B × k × n), the moments lie in buffers of the same layout
(`logra.optim.packing`), so each moment operation, the norms, energies and gains are a few
kernels on the whole family, and each matrix reads its factors as views.

Every operation is the per-matrix one on the same numbers: the elementwise ones give each
element the same result wherever it lies, and a row's or column's reduction runs in the same
order in the concatenation as alone (measured for widths 1–18,992, ranks 4–64), so the factors
are bit for bit those of a matrix taken alone (tests/test_gain_family.py).

Under FSDP2 the matrices hold row shards: R, ρ, s are this rank's rows and the sums Σρ of a
family are all-reduced together (one all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from logra.optim.gate import StepGate
from logra.optim.packing import PackedMoments
from logra.optim.sketch import Reduce, column_gains, identity, row_gains


@dataclass(kw_only=True)
class Member:
    """Sketched matrices of one unit: one (L: k×n, R: m×r) or a stack of B (B×k×n, B×m×r).

    `moments` are the four sketch moments (m_L, v_L, m_R, v_R) of each matrix, this rank's
    rows of the R-side; `rows` is m, the matrix's full row count.
    """

    L: Tensor
    R: Tensor
    moments: list[tuple[Tensor, Tensor, Tensor, Tensor]]
    rows: int

    @property
    def stacked(self) -> bool:
        return self.L.dim() == 3

    def left(self) -> list[Tensor]:
        return list(self.L.unbind(0)) if self.stacked else [self.L]

    def right(self) -> list[Tensor]:
        return list(self.R.unbind(0)) if self.stacked else [self.R]


@dataclass(kw_only=True)
class GainFactors:
    """One member's factors, shaped as its sketches: (m,) and (n,), or (B, m) and (B, n)."""

    row_factor: Tensor  # −lr·√s (ascent: +lr·√s)
    col_gain: Tensor  # √c
    row_weight: Tensor  # ρ/Σρ
    col_weight: Tensor  # κ


def family_factors(
    members: list[Member], group: dict, step: int, gate: StepGate, reduce: Reduce = identity,
    packed: PackedMoments | None = None,
) -> list[GainFactors]:
    """Update the moments of every member's matrices in place with their sketches (gated; the
    sketches are negated in place under `maximize`) and return each member's gain factors.

    All members belong to `group` and have taken `step` steps (this one included); `reduce`
    sums over the ranks that hold the other rows (FSDP2), the identity otherwise. `packed`:
    the members' moments packed in buffers whose views they are (`logra.optim.packing`, as the
    optimizer pins them); None packs copies for this step and copies them back.
    """
    beta1, beta2 = group["betas"]
    if group["maximize"]:
        for member in members:
            member.L.neg_()
            member.R.neg_()
    matrices = [moments for member in members for moments in member.moments]
    temporary = packed is None
    if packed is None:
        packed = PackedMoments.gather(matrices)
    left = [x for member in members for x in member.left()]
    right = torch.cat([x for member in members for x in member.right()])  # Σm × r
    lefts = {width: torch.stack([left[i] for i in indices])  # F_n × k × n
             for width, indices in packed.widths.items()}
    gate.update_gated([*packed.m_L.values(), packed.m_R], [*packed.v_L.values(), packed.v_R],
                      [*(gate.values(L) for L in lefts.values()), gate.values(right)],
                      beta1, beta2)
    if temporary:
        packed.scatter(matrices)
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    directions = dict(bias1=bias1, bias2=bias2, eps=group["eps"])
    sign = -1.0 if group["maximize"] else 1.0
    row_factor, row_weight = _row_side(members, right, packed, reduce, **directions)
    row_factor.mul_(-float(group["lr"]) * sign)
    col_gain, col_weight = _column_side(members, lefts, packed, **directions)

    factors, row = [], 0
    for member, weight, gain, kappa in zip(members, row_weight, col_gain, col_weight,
                                           strict=True):
        shape = member.R.shape[:-1]  # (m,) or (B, m)
        factors.append(GainFactors(row_factor=row_factor[row:row + shape.numel()].view(shape),
                                   row_weight=weight, col_gain=gain, col_weight=kappa))
        row += shape.numel()
    return factors


def _direction(m: Tensor, v: Tensor, bias1: float, bias2: float,
               eps: float) -> tuple[Tensor, Tensor]:
    """(u, v̂): u = m̂ / (√v̂ + ε), m̂ = m / bias1, v̂ = v / bias2, as new tensors."""
    v_hat = v / bias2
    return (m / bias1).div_(v_hat.sqrt().add_(eps)), v_hat


def _row_side(
    members: list[Member], R: Tensor, packed: PackedMoments, reduce: Reduce,
    **directions: float,
) -> tuple[Tensor, list[Tensor]]:
    """√s of every matrix, concatenated along the rows (Σm), and each member's ρ/Σρ; R: the
    family's right sketches concatenated along the rows.

    The Fisher weights are fresh tensors, not views of a concatenation: the matrix-vector
    products of the KL estimate round by the alignment of their operands (MKL), so a weight
    must lie where the matrix taken alone would have it.
    """
    u, v_hat = _direction(packed.m_R, packed.v_R, **directions)
    row_gain = row_gains(R, u)
    energy = v_hat.sum(dim=-1)
    rhos, row = [], 0
    for member in members:  # ρ = (n/r) Σ_k v̂_R[:,k]
        shape = member.R.shape[:-1]
        columns_per_rank = member.L.shape[-1] / R.shape[1]
        rhos.append(energy[row:row + shape.numel()].view(shape).mul(columns_per_rank))
        row += shape.numel()
    totals = reduce(torch.cat([rho.sum(dim=-1).view(-1) for rho in rhos])).clamp_min(1e-30)
    weights, matrix = [], 0
    for rho in rhos:
        batch = rho.shape[0] if rho.dim() == 2 else 1
        total = totals[matrix:matrix + batch]
        weights.append(rho / (total[:, None] if rho.dim() == 2 else total[0]))
        matrix += batch
    return row_gain, weights


def _column_side(
    members: list[Member], lefts: dict[int, Tensor], packed: PackedMoments, **directions: float,
) -> tuple[list[Tensor], list[Tensor]]:
    """√c and κ of each member ((n,), or (B, n) for a stack); lefts: width -> the left sketches
    of that width's matrices, stacked in family order (as `packed.widths` lists them)."""
    position = {i: (width, j) for width, indices in packed.widths.items()
                for j, i in enumerate(indices)}  # matrix -> (width, index in its stack)
    gains, energies = {}, {}
    for width, L in lefts.items():
        u, v_hat = _direction(packed.m_L[width], packed.v_L[width], **directions)
        gains[width] = column_gains(L, u)
        energies[width] = v_hat.sum(dim=-2)
    col_gain, col_weight, matrix = [], [], 0
    for member in members:  # a stack's matrices are consecutive in their width's stack
        width, start = position[matrix]
        batch = member.L.shape[0] if member.stacked else 1
        select = slice(start, start + batch) if member.stacked else start
        col_gain.append(gains[width][select])
        # κ = (m/k) Σ_k v̂_L[k,:], a fresh tensor (see `_row_side`)
        col_weight.append(energies[width][select].mul(member.rows / member.L.shape[-2]))
        matrix += batch
    return col_gain, col_weight
