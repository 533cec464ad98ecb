"""The linear algebra of two-sided gradient sketches.

For a matrix M ∈ R^{m×n} and projections P ∈ R^{m×k}, Q ∈ R^{n×r} with orthonormal columns
(k = r + oversampling ≥ r), the sketches are

    left  sketch  L = Pᵀ M   (k×n)
    right sketch  R = M Q    (m×r)

Everything here is stateless: the optimizer owns the moments and calls these functions.

When the rows of M are sharded over ranks (FSDP2), a product Pᵀ X that sums over rows is a sum
of per-shard products; the functions that form one take `reduce`, which sums it over the ranks
(the identity in a single process), and P is then the shard's rows of P.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

# Elements per block of rows: 2^18 fp32 numbers = 1 MiB, which stays in a core's cache.
BLOCK_ELEMENTS = 1 << 18

Reduce = Callable[[Tensor], Tensor]


def identity(tensor: Tensor) -> Tensor:
    """The `reduce` of a single process: nothing to sum over."""
    return tensor


def row_blocks(rows: int, cols: int) -> Iterator[slice]:
    """Consecutive row ranges of about BLOCK_ELEMENTS elements each."""
    step = max(1, BLOCK_ELEMENTS // max(cols, 1))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


def seed_for(seed: int, key: int, epoch: int, side: int) -> int:
    """A 63-bit generator seed from (optimizer seed, parameter key, refresh epoch, side).

    A fixed polynomial hash, so the same projection comes back on every rank, in every process
    and after a checkpoint round trip, with nothing but these four integers stored.
    """
    h = 0x9E3779B97F4A7C15
    for part in (seed, key, epoch, side):
        h = (h * 0x100000001B3 + int(part) + 1) % (1 << 63)
    return h


def projection_seed(seed: int, side: int, dim: int, cols: int, epoch: int) -> int:
    """Seed of LoGRA's projection with `cols` orthonormal columns in dimension `dim` at refresh
    `epoch` (side 0: P, 1: Q): keyed by shape, so equal shapes share their projections."""
    return seed_for(seed, (dim << 20) | cols, epoch, side)


def orthonormal_projection(
    rows: int, cols: int, seed: int, device: torch.device | str = "cpu"
) -> Tensor:
    """The Q factor of a seeded Gaussian matrix: rows×cols, fp32, orthonormal columns.

    Drawn and factored on the CPU so that the projection is bit-identical whatever device the
    parameter lives on (a CUDA generator draws a different stream); then moved to `device`.
    Cost: rows·cols Gaussian draws and an O(rows·cols²) Householder QR.
    """
    if cols > rows:
        raise ValueError(f"cannot draw {cols} orthonormal columns in dimension {rows}")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    gaussian = torch.randn(rows, cols, generator=generator, dtype=torch.float32)
    q, _ = torch.linalg.qr(gaussian, mode="reduced")
    return q.to(device)


def sketch(grad: Tensor, P: Tensor, Q: Tensor) -> tuple[Tensor, Tensor]:
    """Left and right sketches of an m×n matrix in fp32: (Pᵀ G: k×n, G Q: m×r).

    One pass over G, a block of rows at a time: L accumulates P_bᵀ G_b and R_b = G_b Q is
    written, while G_b is in cache. A bf16 gradient is converted one block at a time.
    """
    m, n = grad.shape
    L = torch.zeros(P.shape[1], n, dtype=torch.float32, device=grad.device)
    R = torch.empty(m, Q.shape[1], dtype=torch.float32, device=grad.device)
    for rows in row_blocks(m, n):
        block = grad[rows].float()
        L.addmm_(P[rows].T, block)
        torch.mm(block, Q, out=R[rows])
    return L, R


def nystrom(m_R: Tensor, m_L: Tensor, P: Tensor, rtol: float) -> Tensor:
    """Generalized Nyström reconstruction  M̂ = m_R (Pᵀ m_R)^† m_L.

    Shapes: m_R m×r, m_L k×n, P m×k, core C = Pᵀ m_R k×r; returns m×n.
    Exact when rank(M) ≤ r and C has full rank; then Pᵀ M̂ = m_L and M̂ Q = m_R.
    The pseudo-inverse drops singular values of C below `rtol`·σ_max. rtol = 0 keeps them all,
    fp32 round-off included, so it is exact only when r = rank(M) exactly: for r > rank(M) it
    inverts round-off, and for rank(M) > r the oblique projection can blow up. A cutoff tames
    both but also drops real directions (the sketch-error notebook measures it). A zero core
    gives M̂ = 0.
    """
    return m_R @ nystrom_right(m_R, m_L, P, rtol)


def nystrom_right(
    m_R: Tensor, m_L: Tensor, P: Tensor, rtol: float, reduce: Reduce = identity
) -> Tensor:
    """The right factor C^† m_L (r×n) of M̂ = m_R · C^† m_L, with C = Pᵀ m_R (k×r)."""
    return torch.linalg.pinv(reduce(P.T @ m_R), rtol=rtol) @ m_L


def energies(v_R: Tensor, v_L: Tensor, rows: int | None = None) -> tuple[Tensor, Tensor]:
    """Row and column energies of the dense second moment, from the sketches' second moments.

    For a random orthonormal Q, E[(G Q)²_ik] ≈ (1/n) Σ_j G²_ij, so
        ρ_i = (n/r) Σ_k v_R[i,k]  ≈ Σ_j V_ij     (m,)
        κ_j = (m/k) Σ_k v_L[k,j]  ≈ Σ_i V_ij     (n,)

    Leading batch dimensions, if any, are kept. `rows` is m when v_R holds a shard of the rows.
    """
    m, r = v_R.shape[-2:]
    k, n = v_L.shape[-2:]
    m = m if rows is None else rows
    return v_R.sum(dim=-1).mul_(n / r), v_L.sum(dim=-2).mul_(m / k)


def rank1_second_moment(rho: Tensor, kappa: Tensor) -> Tensor:
    """Adafactor-style rank-1 second moment V̂_ij = ρ_i κ_j / Σ_i ρ_i (m×n).

    Used on small matrices and in tests; the optimizer keeps only the two factors
    (`updates.RankOneFisher`).
    """
    return torch.outer(rho, kappa) / rho.sum().clamp_min(torch.finfo(rho.dtype).tiny)


def norms(x: Tensor, dim: int) -> Tensor:
    """Euclidean norms along `dim`, √Σ x² (as `x.norm(dim=dim)`, which overflows alike).

    A plain sum reduction: on the CPU the norm kernel reduces over a dimension other than the
    last about 20× slower (240 µs against 10 µs for a 16×16×128 tensor over dim 1).
    """
    return x.square().sum(dim=dim).sqrt_()


def sqrt_ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """√(numerator / denominator) elementwise, formed as √numerator / √denominator (it overflows
    far later than the ratio), and 0 where the denominator is 0: a zero row or column of the
    sketch is a zero row or column of G, which no gain moves (and ∞ · 0 would be NaN)."""
    return torch.where(denominator > 0, numerator.sqrt() / denominator.sqrt(),
                       torch.zeros_like(denominator))


def gain_factors(L: Tensor, R: Tensor, u_L: Tensor, u_R: Tensor) -> tuple[Tensor, Tensor]:
    """Square roots of the row and column gains (√s: (m,), √c: (n,)) of the gain update.

    The update is D_ij = √s_i · G_ij · √c_j with column gains c_j = ‖u_L[:,j]‖ / ‖L[:,j]‖ and row
    gains s_i = ‖u_R[i,:]‖ / ‖R[i,:]‖: how much Adam, run in sketch space (u = m̂/(√v̂+ε)),
    rescales each column and row of the current gradient. Both are ≥ 0, so D is always a descent
    direction (⟨D, G⟩ ≥ 0). Shapes: L and u_L k×n, R and u_R m×r.
    """
    return row_gains(R, u_R), column_gains(L, u_L)


def row_gains(R: Tensor, u_R: Tensor) -> Tensor:
    """√s_i = √(‖u_R[i,:]‖ / ‖R[i,:]‖) of every row of R, u_R (…×r: m×r, or rows concatenated)."""
    return sqrt_ratio(norms(u_R, -1), norms(R, -1))


def column_gains(L: Tensor, u_L: Tensor) -> Tensor:
    """√c_j = √(‖u_L[:,j]‖ / ‖L[:,j]‖) of every column of L, u_L (…×k×n: k×n, or stacked)."""
    return sqrt_ratio(norms(u_L, -2), norms(L, -2))


def channel_gains(
    L: Tensor, R: Tensor, u_L: Tensor, u_R: Tensor, rows_are_channels: bool,
    rows: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Row and column gains (s: (m,), c: (n,)) of the "channel" update D = diag(s) G diag(c),
    one of them all ones: APOLLO's channel-wise scaling (Zhu et al. 2024) read from the sketch
    that keeps the larger side. Rows are the channels when m ≥ n, else columns:

        s_i = ‖u_R[i,:]‖ / (√(n/r)·‖R[i,:]‖)        c_j = ‖u_L[:,j]‖ / (√(m/k)·‖L[:,j]‖)

    The full ratio, not its square root as in `gain_factors`; 0 where the sketch's row or
    column is 0 (a zero row or column of G). For an orthonormal Q, E‖(G Q)[i,:]‖² =
    (r/n)·‖G[i,:]‖² (as `energies` reads it), so √(n/r)·‖R[i,:]‖ estimates ‖G[i,:]‖: the norm
    APOLLO's Gaussian projections (entries N(0, 1/r)) divide by. A channel of D then has the
    norm of Adam's direction in the sketch, ‖u_R[i,:]‖ ≈ √r, as in APOLLO, whose learning rates
    carry over. Without the √(n/r) it would be √(n/r) times longer (Adam's own row norm, √n),
    which the learning rate does not undo where the embeddings and head take dense AdamW steps
    at the same rate (APOLLO's recipe; notebook 10's text model at rank 16: √(128/16) = 2.8).

    Shapes: L, u_L k×n; R, u_R m×r (or this rank's rows of them: `rows` is then m).
    """
    (k, n), (m, r) = L.shape, R.shape
    m = m if rows is None else rows
    if rows_are_channels:
        return ratio(norms(u_R, 1), norms(R, 1)).mul_(math.sqrt(r / n)), torch.ones_like(L[0])
    return torch.ones_like(R[:, 0]), ratio(norms(u_L, 0), norms(L, 0)).mul_(math.sqrt(k / m))


def ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """numerator / denominator elementwise, 0 where the denominator is 0 (see `sqrt_ratio`)."""
    tiny = torch.finfo(denominator.dtype).tiny
    return torch.where(denominator > 0, numerator / denominator.clamp_min(tiny),
                       torch.zeros_like(denominator))


def column_scale(u_L: Tensor, column_norms: Tensor) -> Tensor:
    """φ_j = ‖u_L[:,j]‖ / norms_j (n,): how much Adam, run on the left sketch, rescales column j
    (Fira's scaling factor). `column_norms` are the norms it is relative to (≥ 0). A zero norm
    means a zero column of G, whose residual is zero whatever φ_j: φ_j = 0 there (a huge φ_j
    would overflow φ_j² in the limiter's norm)."""
    return ratio(norms(u_L, 0), column_norms)


def transport_first_moment(
    m_R: Tensor, m_L: Tensor, P_old: Tensor, P_new: Tensor, Q_new: Tensor, rtol: float,
    reduce: Reduce = identity,
) -> tuple[Tensor, Tensor]:
    """Re-sketch the Nyström first moment in new projections without forming it.

    M̂ = m_R C^† m_L, so  P_newᵀ M̂ = (P_newᵀ m_R) C^† m_L  and  M̂ Q_new = m_R C^† (m_L Q_new).
    """
    core_pinv = torch.linalg.pinv(reduce(P_old.T @ m_R), rtol=rtol)
    return reduce(P_new.T @ m_R) @ (core_pinv @ m_L), m_R @ (core_pinv @ (m_L @ Q_new))


def transport_second_moment(
    v_R: Tensor, v_L: Tensor, P_new: Tensor, Q_new: Tensor, reduce: Reduce = identity,
    rows: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Re-sketch the rank-1 second moment V̂ = ρκᵀ/Σρ in new projections.

    E[(P_newᵀ G)²_kj] = Σ_i P_new[i,k]² V_ij, and likewise on the right, so
    v_L_new = ((P_new²)ᵀ ρ) κᵀ / Σρ  and  v_R_new = ρ (κᵀ Q_new²) / Σρ.
    """
    rho, kappa = energies(v_R, v_L, rows)
    total = reduce(rho.sum()).clamp_min(torch.finfo(rho.dtype).tiny)
    # ρ/Σρ before the outer product: ρ_i κ_j alone can overflow fp32 where V̂ does not
    v_L_new = torch.outer(reduce(P_new.square().T @ rho) / total, kappa)
    v_R_new = torch.outer(rho / total, kappa @ Q_new.square())
    return v_L_new, v_R_new
