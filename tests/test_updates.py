"""The block-wise update rules agree with their dense formulas."""

from __future__ import annotations

import torch

from logra.optim import sketch as sk
from logra.optim import updates as up


def setup(m: int = 2500, n: int = 300, r: int = 8):
    """A matrix taller than one block of rows, with sketch moments after one step."""
    g = torch.Generator().manual_seed(0)
    G, W = torch.randn(m, n, generator=g), torch.randn(m, n, generator=g)
    P, Q = sk.orthonormal_projection(m, r, 1), sk.orthonormal_projection(n, r, 2)
    L, R = sk.sketch(G, P, Q)
    rho, kappa = sk.energies(R.square(), L.square())
    return G, W, P, L, R, rho, kappa


def dense_fisher(rho: torch.Tensor, kappa: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    return (sk.rank1_second_moment(rho, kappa) * delta.square()).sum()


def test_gain_update_matches_its_formula() -> None:
    G, W, _, L, R, rho, kappa = setup()
    assert len(list(sk.row_blocks(*G.shape))) > 1
    row_gain, col_gain = sk.gain_factors(L, R, L.sign(), R.sign())
    rule = up.GainUpdate(param=W.clone(), lr=0.1, weight_decay=0.01, grad=G,
                         row_factor=-0.1 * row_gain, col_gain=col_gain,
                         row_weight=rho / rho.sum(), col_weight=kappa)
    expected = -0.1 * (row_gain[:, None] * G * col_gain[None, :] + 0.01 * W)
    rule.param.grad = torch.empty_like(G)
    rule.store_delta()
    torch.testing.assert_close(rule.param.grad, expected)
    torch.testing.assert_close(rule.predicted_fisher(), dense_fisher(rho, kappa, expected))
    rule.apply(0.5)
    torch.testing.assert_close(rule.weight, W + 0.5 * expected)


def test_nystrom_update_matches_its_formula() -> None:
    G, W, P, L, R, rho, kappa = setup()
    right = sk.nystrom_right(R, L, P, 0.05)
    rule = up.NystromUpdate(param=W.clone(), lr=0.1, weight_decay=0.0, left=R, right=right,
                            eps=1e-8, row_weight=rho / rho.sum(), col_weight=kappa)
    M_hat = sk.nystrom(R, L, P, 0.05)
    expected = -0.1 * M_hat / (sk.rank1_second_moment(rho, kappa).sqrt() + 1e-8)
    rule.param.grad = torch.empty_like(G)
    rule.store_delta()
    torch.testing.assert_close(rule.param.grad, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(rule.predicted_fisher(), dense_fisher(rho, kappa, expected),
                               rtol=1e-4, atol=0)


def test_dense_update_is_adamw() -> None:
    g = torch.Generator().manual_seed(3)
    W, m, v = torch.randn(7, 5, generator=g), torch.randn(7, 5, generator=g), torch.rand(7, 5)
    rule = up.DenseUpdate(param=W.clone(), lr=0.01, weight_decay=0.1, exp_avg=m, exp_avg_sq=v,
                          bias1=0.1, bias2=0.001, eps=1e-8)
    expected = -0.01 * ((m / 0.1) / ((v / 0.001).sqrt() + 1e-8) + 0.1 * W)
    rule.apply(1.0)
    torch.testing.assert_close(rule.weight, W + expected)
    torch.testing.assert_close(rule.predicted_fisher(),
                               ((v / 0.001) * (rule.delta(slice(0, 7))) ** 2).sum())


def test_as_matrix_views_every_rank() -> None:
    assert up.as_matrix(torch.zeros(())).shape == (1, 1)
    assert up.as_matrix(torch.zeros(5)).shape == (1, 5)
    conv = torch.zeros(4, 3, 2, 2)
    view = up.as_matrix(conv)
    assert view.shape == (4, 12) and view.data_ptr() == conv.data_ptr()
