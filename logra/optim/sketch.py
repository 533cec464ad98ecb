"""The linear algebra of two-sided gradient sketches.

For a matrix M ∈ R^{m×n} and projections P ∈ R^{m×k}, Q ∈ R^{n×r} with orthonormal columns
(k = r + oversampling ≥ r), the sketches are

    left  sketch  L = Pᵀ M   (k×n)
    right sketch  R = M Q    (m×r)

Everything here is stateless: the optimizer owns the moments and calls these functions.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Rows processed at once by `weighted_sq_norm`: bounds its temporary to CHUNK_ROWS × n floats.
CHUNK_ROWS = 256


def seed_for(seed: int, key: int, epoch: int, side: int) -> int:
    """A 63-bit generator seed from (optimizer seed, parameter key, refresh epoch, side).

    A fixed polynomial hash, so the same projection comes back on every rank, in every process
    and after a checkpoint round trip, with nothing but these four integers stored.
    """
    h = 0x9E3779B97F4A7C15
    for part in (seed, key, epoch, side):
        h = (h * 0x100000001B3 + int(part) + 1) % (1 << 63)
    return h


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
    """Left and right sketches of an m×n matrix in fp32: (Pᵀ G: k×n, G Q: m×r)."""
    g = grad.float()
    return P.T @ g, g @ Q


def nystrom(m_R: Tensor, m_L: Tensor, P: Tensor, rtol: float) -> Tensor:
    """Generalized Nyström reconstruction  M̂ = m_R (Pᵀ m_R)^† m_L.

    Shapes: m_R m×r, m_L k×n, P m×k, core C = Pᵀ m_R k×r; returns m×n.
    Exact when rank(M) ≤ r and C has full rank; then Pᵀ M̂ = m_L and M̂ Q = m_R.
    The pseudo-inverse drops singular values of C below `rtol`·σ_max (rtol = 0 keeps every
    non-zero one), which is what keeps the oblique projection from blowing up when rank(M) > r.
    A zero core gives M̂ = 0.
    """
    core = P.T @ m_R
    core_pinv = torch.linalg.pinv(core, rtol=rtol)  # r×k
    return m_R @ (core_pinv @ m_L)


def nystrom_into(out: Tensor, m_R: Tensor, m_L: Tensor, P: Tensor, rtol: float) -> Tensor:
    """`nystrom` written into `out` (m×n, any float dtype) with no other m×n temporary."""
    core_pinv = torch.linalg.pinv(P.T @ m_R, rtol=rtol)
    right = core_pinv @ m_L  # r×n
    if out.dtype == torch.float32:
        return torch.mm(m_R, right, out=out)
    return out.copy_(m_R @ right)


def energies(v_R: Tensor, v_L: Tensor) -> tuple[Tensor, Tensor]:
    """Row and column energies of the dense second moment, from the sketches' second moments.

    For a random orthonormal Q, E[(G Q)²_ik] ≈ (1/n) Σ_j G²_ij, so
        ρ_i = (n/r) Σ_k v_R[i,k]  ≈ Σ_j V_ij     (m,)
        κ_j = (m/k) Σ_k v_L[k,j]  ≈ Σ_i V_ij     (n,)
    """
    m, r = v_R.shape
    k, n = v_L.shape
    return v_R.sum(dim=1).mul_(n / r), v_L.sum(dim=0).mul_(m / k)


def rank1_second_moment(rho: Tensor, kappa: Tensor) -> Tensor:
    """Adafactor-style rank-1 second moment V̂_ij = ρ_i κ_j / Σ_i ρ_i (m×n).

    Used only on small matrices and in tests; the optimizer applies the same factorization
    row by row without forming it.
    """
    return torch.outer(rho, kappa) / rho.sum().clamp_min(torch.finfo(rho.dtype).tiny)


def normalize_by_rank1_(update: Tensor, rho: Tensor, kappa: Tensor, eps: float) -> Tensor:
    """In place: update_ij ← update_ij / (√V̂_ij + ε) with V̂ = rank1_second_moment(ρ, κ).

    Works through CHUNK_ROWS rows at a time, so the temporary is CHUNK_ROWS×n, never m×n.
    """
    total = rho.sum().clamp_min(torch.finfo(rho.dtype).tiny)
    row_scale = (rho / total).sqrt_()
    col_scale = kappa.sqrt()
    for start in range(0, update.shape[0], CHUNK_ROWS):
        block = update[start : start + CHUNK_ROWS]
        denom = torch.outer(row_scale[start : start + CHUNK_ROWS], col_scale).add_(eps)
        block.div_(denom.to(block.dtype))
    return update


def gain_scale_(
    grad: Tensor, L: Tensor, R: Tensor, u_L: Tensor, u_R: Tensor, tiny: float = 1e-30
) -> Tensor:
    """In place: the two-sided gain update D_ij = √s_i · G_ij · √c_j, written over `grad`.

    Column gains c_j = ‖u_L[:,j]‖ / ‖L[:,j]‖ and row gains s_i = ‖u_R[i,:]‖ / ‖R[i,:]‖ measure how
    much Adam, run in sketch space (u = m̂/(√v̂+ε)), rescales each column and row of the current
    gradient. Both gains are ≥ 0, so D is always a descent direction (⟨D, G⟩ ≥ 0).
    Shapes: grad m×n, L and u_L k×n, R and u_R m×r.
    """
    col_gain = u_L.norm(dim=0).div_(L.norm(dim=0).clamp_min_(tiny)).sqrt_()  # (n,)
    row_gain = u_R.norm(dim=1).div_(R.norm(dim=1).clamp_min_(tiny)).sqrt_()  # (m,)
    grad.mul_(row_gain.to(grad.dtype)[:, None]).mul_(col_gain.to(grad.dtype)[None, :])
    return grad


def weighted_sq_norm(delta: Tensor, row_weight: Tensor, col_weight: Tensor) -> Tensor:
    """Σ_ij row_weight_i · col_weight_j · Δ_ij²  in fp32, CHUNK_ROWS rows at a time."""
    total = torch.zeros((), dtype=torch.float32, device=delta.device)
    for start in range(0, delta.shape[0], CHUNK_ROWS):
        block = delta[start : start + CHUNK_ROWS].float()
        total += row_weight[start : start + CHUNK_ROWS] @ (block.square() @ col_weight)
    return total


def transport_first_moment(
    m_R: Tensor, m_L: Tensor, P_old: Tensor, P_new: Tensor, Q_new: Tensor, rtol: float
) -> tuple[Tensor, Tensor]:
    """Re-sketch the Nyström first moment in new projections without forming it.

    M̂ = m_R C^† m_L, so  P_newᵀ M̂ = (P_newᵀ m_R) C^† m_L  and  M̂ Q_new = m_R C^† (m_L Q_new).
    """
    core_pinv = torch.linalg.pinv(P_old.T @ m_R, rtol=rtol)
    return (P_new.T @ m_R) @ (core_pinv @ m_L), m_R @ (core_pinv @ (m_L @ Q_new))


def transport_second_moment(
    v_R: Tensor, v_L: Tensor, P_new: Tensor, Q_new: Tensor
) -> tuple[Tensor, Tensor]:
    """Re-sketch the rank-1 second moment V̂ = ρκᵀ/Σρ in new projections.

    E[(P_newᵀ G)²_kj] = Σ_i P_new[i,k]² V_ij, and likewise on the right, so
    v_L_new = ((P_new²)ᵀ ρ) κᵀ / Σρ  and  v_R_new = ρ (κᵀ Q_new²) / Σρ.
    """
    rho, kappa = energies(v_R, v_L)
    total = rho.sum().clamp_min(torch.finfo(rho.dtype).tiny)
    v_L_new = torch.outer(P_new.square().T @ rho, kappa) / total
    v_R_new = torch.outer(rho, kappa @ Q_new.square()) / total
    return v_L_new, v_R_new
