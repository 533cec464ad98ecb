"""The sketch algebra: Nyström exactness and consistency, gain direction, rank-1 energies."""

from __future__ import annotations

import pytest
import torch

from logra.optim import sketch as sk


def low_rank(m: int, n: int, rank: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, rank, generator=g) @ torch.randn(rank, n, generator=g)


def projections(m: int, n: int, k: int, r: int, seed: int = 1):
    return (sk.orthonormal_projection(m, k, seed), sk.orthonormal_projection(n, r, seed + 1))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(("rank", "r", "oversample"), [(1, 4, 0), (8, 8, 0), (5, 16, 0), (8, 8, 4)])
def test_nystrom_exact_for_rank_at_most_r(rank: int, r: int, oversample: int) -> None:
    M = low_rank(96, 64, rank)
    P, Q = projections(96, 64, r + oversample, r)
    m_L, m_R = sk.sketch(M, P, Q)
    M_hat = sk.nystrom(m_R, m_L, P, rtol=0.0 if rank == r else 1e-6)
    assert rel_err(M_hat, M) < 1e-4


def test_nystrom_reproduces_both_sketches_when_core_full_rank() -> None:
    M = torch.randn(80, 48, generator=torch.Generator().manual_seed(3))  # full rank > r
    P, Q = projections(80, 48, 12, 12)
    m_L, m_R = sk.sketch(M, P, Q)
    M_hat = sk.nystrom(m_R, m_L, P, rtol=0.0)
    assert torch.linalg.matrix_rank(P.T @ m_R) == 12
    assert rel_err(P.T @ M_hat, m_L) < 1e-4
    assert rel_err(M_hat @ Q, m_R) < 1e-4


def test_blocked_sketch_matches_dense_products() -> None:
    G = torch.randn(3000, 200, generator=torch.Generator().manual_seed(2))  # several row blocks
    P, Q = projections(3000, 200, 8, 8)
    L, R = sk.sketch(G, P, Q)
    torch.testing.assert_close(L, P.T @ G, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(R, G @ Q, atol=1e-4, rtol=1e-4)
    L16, R16 = sk.sketch(G.bfloat16(), P, Q)
    assert L16.dtype == torch.float32 and R16.dtype == torch.float32
    torch.testing.assert_close(L16, P.T @ G.bfloat16().float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("core", ["zero", "rank_deficient"])
def test_degenerate_core_gives_finite_result(core: str) -> None:
    M = torch.zeros(32, 24) if core == "zero" else low_rank(32, 24, 2)
    P, Q = projections(32, 24, 8, 8)
    m_L, m_R = sk.sketch(M, P, Q)
    untruncated = sk.nystrom(m_R, m_L, P, rtol=0.0)  # keeps round-off singular values
    assert torch.isfinite(untruncated).all()
    M_hat = sk.nystrom(m_R, m_L, P, rtol=0.05)  # the optimizer's default cutoff
    if core == "zero":
        assert untruncated.abs().max() == 0 and M_hat.abs().max() == 0
    else:
        assert rel_err(M_hat, M) < 1e-4


def test_truncation_tames_the_oblique_projection_above_rank_r() -> None:
    """Above rank r the untruncated core inflates the error past 1; truncation lowers it.

    Even truncated, the reconstruction stays far from the optimum (SVD error 0.34 here): the
    reason the optimizer's default is the gain rule, not Nyström.
    """
    M = low_rank(128, 96, 24, seed=5)
    P, Q = projections(128, 96, 16, 16, seed=7)
    m_L, m_R = sk.sketch(M, P, Q)
    untruncated = rel_err(sk.nystrom(m_R, m_L, P, rtol=0.0), M)
    truncated = rel_err(sk.nystrom(m_R, m_L, P, rtol=0.1), M)
    assert untruncated > 1.0
    assert truncated < 0.5 * untruncated


def test_projection_is_orthonormal_and_deterministic() -> None:
    P = sk.orthonormal_projection(200, 16, seed=42)
    torch.testing.assert_close(P.T @ P, torch.eye(16), atol=1e-5, rtol=0)
    assert torch.equal(P, sk.orthonormal_projection(200, 16, seed=42))
    assert not torch.equal(P, sk.orthonormal_projection(200, 16, seed=43))
    with pytest.raises(ValueError, match="orthonormal columns"):
        sk.orthonormal_projection(8, 16, seed=0)


def test_seed_for_separates_every_component() -> None:
    base = sk.seed_for(0, 3, 0, 0)
    others = {sk.seed_for(1, 3, 0, 0), sk.seed_for(0, 4, 0, 0), sk.seed_for(0, 3, 1, 0),
              sk.seed_for(0, 3, 0, 1)}
    assert base not in others and len(others) == 4
    assert 0 <= base < 2**63


def test_gain_update_is_a_descent_direction_with_adam_magnitude() -> None:
    G = torch.randn(64, 48, generator=torch.Generator().manual_seed(0)) * 1e-3
    P, Q = projections(64, 48, 8, 8)
    L, R = sk.sketch(G, P, Q)
    # first Adam step: u = sign-like (m̂/√v̂ = ±1 per entry)
    u_L, u_R = L / (L.abs() + 1e-12), R / (R.abs() + 1e-12)
    row_gain, col_gain = sk.gain_factors(L, R, u_L, u_R)
    D = row_gain[:, None] * G * col_gain[None, :]
    assert (row_gain >= 0).all() and (col_gain >= 0).all()
    assert float((D * G).sum()) > 0
    rms = float(D.square().mean().sqrt())
    assert 0.3 < rms < 3.0  # Adam-like: O(1) per entry whatever the gradient's scale


def test_energies_estimate_row_and_column_energies() -> None:
    g = torch.Generator().manual_seed(0)
    scale = torch.linspace(0.5, 2.0, 512)[:, None] * torch.linspace(1.0, 3.0, 384)[None, :]
    G = torch.randn(512, 384, generator=g) * scale
    P, Q = projections(512, 384, 64, 64)
    L, R = sk.sketch(G, P, Q)
    rho, kappa = sk.energies(R.square(), L.square())
    assert rel_err(rho, G.square().sum(1)) < 0.35
    assert rel_err(kappa, G.square().sum(0)) < 0.35
    assert rel_err(rho.sum(), G.square().sum()) < 0.1


def test_transported_moments_are_the_sketches_of_the_reconstruction() -> None:
    M = low_rank(60, 50, 4)
    P, Q = projections(60, 50, 8, 8, seed=1)
    P2, Q2 = projections(60, 50, 8, 8, seed=11)
    m_L, m_R = sk.sketch(M, P, Q)
    new_L, new_R = sk.transport_first_moment(m_R, m_L, P, P2, Q2, rtol=1e-6)
    want_L, want_R = sk.sketch(M, P2, Q2)
    assert rel_err(new_L, want_L) < 1e-3 and rel_err(new_R, want_R) < 1e-3
    v_L, v_R = sk.transport_second_moment(m_R.square(), m_L.square(), P2, Q2)
    assert v_L.shape == (8, 50) and v_R.shape == (60, 8) and (v_L >= 0).all()
