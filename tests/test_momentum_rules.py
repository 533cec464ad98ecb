"""The rules that carry momentum from the sketch state: "blend" and "subspace".

Both work on the left sketch's projection P L = P Pᵀ G; the tests check that each rule is what
its formula says where the answer is known by hand, that a column whose gradient vanishes gets a
finite step (the two-sided projection blew such columns up), and Fira's norm-growth limiter
(tests/test_optim_training.py trains with both).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from logra import LoGRA


def projections() -> tuple[torch.Tensor, torch.Tensor]:
    """P (48×4) and Q (32×4) of every 48×32 matrix at rank 4, seed 0 (they depend on the shape
    and seed only)."""
    W = nn.Parameter(torch.zeros(48, 32))
    opt = LoGRA([W], rank=4, predicted_kl_threshold=None)
    W.grad = torch.randn(48, 32)
    opt.step()
    return opt.projections(W)


def steps(reconstruction: str, grads: list[torch.Tensor], **kwargs) -> torch.Tensor:
    """The last Δ after one step per gradient (lr 1, no weight decay)."""
    W = nn.Parameter(torch.zeros(48, 32))
    opt = LoGRA([W], lr=1.0, weight_decay=0.0, rank=4, predicted_kl_threshold=None,
                reconstruction=reconstruction, **kwargs)
    for g in grads:
        before = W.detach().clone()
        W.grad = g.clone()
        opt.step()
    return W.detach() - before


def test_blend_of_a_constant_gradient_is_the_gradient_scaled_per_column() -> None:
    """m̂ = G and v̂ = G² exactly, so u_L = sign(L), the momentum gap is zero and
    Δ[:, j] = −G[:, j] · √k / ‖L[:, j]‖ (ε aside)."""
    P, _ = projections()
    g = torch.randn(48, 32, generator=torch.Generator().manual_seed(1))
    phi = P.shape[1] ** 0.5 / (P.T @ g).norm(dim=0)
    torch.testing.assert_close(steps("blend", [g, g, g], eps=1e-12), -g * phi,
                               rtol=1e-4, atol=1e-6)


def test_blend_replaces_the_gradient_inside_span_p_by_the_momentum() -> None:
    g, h = torch.randn(48, 32), torch.randn(48, 32)
    P, _ = projections()
    delta = steps("blend", [g, h])
    outside = torch.eye(48) - P @ P.T
    # outside span(P) Δ is the current gradient, column-scaled: Δ_out[:, j] ∥ (I − PPᵀ) h[:, j]
    cosine = nn.functional.cosine_similarity(outside @ delta, -(outside @ h), dim=0)
    torch.testing.assert_close(cosine, torch.ones(32), rtol=0, atol=1e-4)
    # inside it, the momentum (β₁ = 0.9, bias-corrected): Pᵀ(m̂) = Pᵀ(0.1·0.9 g + 0.1 h)/0.19
    momentum = P.T @ (0.09 * g + 0.1 * h) / 0.19
    cosine = nn.functional.cosine_similarity(P.T @ delta, -momentum, dim=0)
    torch.testing.assert_close(cosine, torch.ones(32), rtol=0, atol=1e-4)


def test_subspace_of_a_gradient_inside_span_p_is_adam_there() -> None:
    """G = P A has no residual: Δ = −P u_L, and Adam's first step is u_L = sign(A)."""
    P, _ = projections()
    A = torch.randn(P.shape[1], 32)
    torch.testing.assert_close(steps("subspace", [P @ A], eps=1e-12), -P @ torch.sign(A),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rule", ["blend", "subspace"])
def test_a_column_whose_gradient_vanishes_gets_a_finite_step(rule: str) -> None:
    """A dead unit (column) keeps momentum but no gradient: its scale must not divide by zero."""
    g = torch.randn(48, 32, generator=torch.Generator().manual_seed(0))
    dead = g.clone()
    dead[:, 5] = 0.0
    delta = steps(rule, [g, dead, dead])
    assert torch.isfinite(delta).all()
    assert 0 < delta[:, 5].abs().max() <= delta.abs().max(dim=0).values.median()


def test_subspace_residual_grows_at_most_one_percent_a_step() -> None:
    P, _ = projections()
    A, E = torch.randn(P.shape[1], 32), torch.randn(48, 32)
    E -= P @ (P.T @ E)  # E outside span(P)
    W = nn.Parameter(torch.zeros(48, 32))
    opt = LoGRA([W], lr=1.0, rank=4, predicted_kl_threshold=None, reconstruction="subspace")
    norms = []
    for residual in (1e-3, 1.0, 1.0, 1e-4):
        W.grad = P @ A + residual * E
        opt.step()
        norms.append(opt.state[W]["residual_norm"])
    assert norms[1] == pytest.approx(1.01 * norms[0], rel=1e-5)
    assert norms[2] == pytest.approx(1.01 * norms[1], rel=1e-5)
    assert norms[3] < norms[2]  # shrinking is never limited
    assert opt.state_dict()["state"][0]["residual_norm"] == norms[3]


@pytest.mark.parametrize("rule", ["blend", "subspace"])
def test_maximize_on_the_negated_loss_takes_the_same_steps(rule: str) -> None:
    grads = [torch.randn(48, 32) for _ in range(3)]
    down = steps(rule, grads)
    up = steps(rule, [-g for g in grads], maximize=True)
    torch.testing.assert_close(up, down, rtol=1e-5, atol=1e-6)


def test_a_zero_column_keeps_the_limiter_finite() -> None:
    """A dead column (zero gradient, nonzero momentum) once made φ_j² overflow to inf and the
    limiter's memory NaN, switching it off for good."""
    g = torch.randn(48, 32, generator=torch.Generator().manual_seed(2))
    W = nn.Parameter(torch.zeros(48, 32))
    opt = LoGRA([W], lr=1e-2, rank=4, predicted_kl_threshold=None, reconstruction="subspace")
    for step in range(4):
        W.grad = g.clone()
        if step:
            W.grad[:, 3] = 0.0
        opt.step()
        assert math.isfinite(opt.state[W]["residual_norm"]) and opt.state[W]["residual_norm"] > 0


@pytest.mark.parametrize("delta", [None, 1e-3])
def test_a_skipped_step_leaves_the_subspace_limiter_s_memory(delta) -> None:
    """A NaN in one matrix's gradient skips the step for all: the other matrix's remembered
    residual norm must not move either, with the control off or on."""
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(40, 24, generator=g)) for _ in range(2)]
    opt = LoGRA(params, lr=1e-2, rank=4, reconstruction="subspace",
                predicted_kl_threshold=delta, kl_estimator="diag", kl_calibration=1.0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()
    remembered = opt.state[params[0]]["residual_norm"]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * 3.0  # would grow the norm and move it
    params[1].grad[0, 0] = math.nan
    opt.step()
    assert bool(opt.last_step["skipped"])
    assert opt.state[params[0]]["residual_norm"] == remembered
