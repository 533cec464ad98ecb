"""Full optimizer steps against the formulas, computed independently in dense float64.

Each test feeds LoGRA (or the naive projection) a seeded stream of gradients, with weight decay
and non-default β, ε, and after every step compares the weights with W_{t−1} + Δ_t of
`dense_logra`, which rebuilds the sketches, the four bias-corrected moments and the rule's
direction from P and Q alone. A dropped bias correction, a wrong gain or a misplaced ε changes
Δ by far more than the tolerance (each step moves the weights by ~lr = 2e-2; the tolerance is
2e-6, fp32 round-off of weights of order 1).
"""

from __future__ import annotations

import pytest
import torch
from dense_logra import DenseLoGRA, adamw_step
from torch import nn

from logra import LoGRA, RandomProjectionAdam
from logra.optim import sketch as sk
from logra.optim.hyperparameters import RECONSTRUCTIONS
from logra.optim.units import partition, slots_with_grad

HYPER = dict(lr=2e-2, betas=(0.8, 0.95), eps=0.05, weight_decay=0.1)
STEPS = 4
SHAPE = (40, 24)  # two matrices of this shape: a stack of B = 2 on the batched path
SQUARE = 32
ATOL = 2e-6


def gradient_stream(shapes: list[tuple[int, ...]], steps: int) -> list[list[torch.Tensor]]:
    """Seeded gradients, a different scale per parameter and step (so ρ, κ and v̂ vary)."""
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(shape, generator=g) * (1 + i) * 0.5**t for i, shape in enumerate(shapes)]
            for t in range(steps)]


def projections(shape: tuple[int, int], rank: int, oversample: int) -> tuple[torch.Tensor, ...]:
    """The P, Q LoGRA sketches every matrix of this shape with (they depend on shape and seed)."""
    probe = nn.Parameter(torch.zeros(shape))
    opt = LoGRA([probe], rank=rank, oversample=oversample, predicted_kl_threshold=None)
    probe.grad = torch.ones(shape)
    opt.step()
    return opt.projections(probe)


def run_logra(reconstruction: str, foreach: bool, shape: tuple[int, int] = SHAPE,
              **extra) -> tuple[list, list, LoGRA, list]:
    """The weights before every step and after the last, the gradients, the optimizer, and the
    projections (P, Q) each step sketched the first matrix with."""
    torch.manual_seed(1)
    params = [nn.Parameter(torch.randn(shape)), nn.Parameter(torch.randn(shape)),
              nn.Parameter(torch.randn(shape[0]))]
    opt = LoGRA(params, rank=4, oversample=2, reconstruction=reconstruction, foreach=foreach,
                predicted_kl_threshold=None, **HYPER, **extra)
    stream = gradient_stream([p.shape for p in params], STEPS)
    # the first gradients lie almost inside span(P) and span(Q): the limited norms (the subspace
    # rule's residual, the channel rule's ‖G‖/‖sketch‖ ratios) then grow from a small start,
    # which the norm-growth limiter must cap
    P, Q = projections(shape, 4, 2)
    for i in range(2):
        stream[0][i] = P @ (P.T @ stream[0][i]) @ Q @ Q.T + 1e-2 * stream[0][i]
    history, used = [[p.detach().clone() for p in params]], []
    for grads in stream:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        history.append([p.detach().clone() for p in params])
        used.append(opt.projections(params[0]))
    return history, stream, opt, used


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_every_step_is_the_dense_formula(reconstruction: str, foreach: bool) -> None:
    check_against_the_dense_formula(reconstruction, foreach, SHAPE)


@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_every_rule_on_a_square_matrix(reconstruction: str) -> None:
    """m = n: the channel rule scales rows (its side is m ≥ n); every other rule as on a tall W."""
    check_against_the_dense_formula(reconstruction, False, (SQUARE, SQUARE))


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_a_refresh_step_carries_the_moments_into_the_new_projections(
        reconstruction: str, foreach: bool) -> None:
    """refresh_every=2, oversample=2, seed 7: step 3 draws new P, Q; the moments it starts from
    are the old ones carried over (`carry_into`), then updated with the new sketches."""
    check_against_the_dense_formula(reconstruction, foreach, SHAPE, refresh_every=2, seed=7)


def carry_into(reference: DenseLoGRA, P_new: torch.Tensor, Q_new: torch.Tensor) -> None:
    """The moments of `reference` re-expressed in new projections, as the optimizer's docstring
    (`logra.optim.moments`) states the carry, written out densely in float64:

        M̂ = m_R (P_oldᵀ m_R)^† m_L                       (truncated at rtol, the Nyström moment)
        V̂ = ρ κᵀ / Σρ,  ρ = (n/r) Σ_k v_R[:,k],  κ = (m/k) Σ_k v_L[k,:]
        m_L ← P_newᵀ M̂,  m_R ← M̂ Q_new,  v_L ← (P_new∘P_new)ᵀ V̂,  v_R ← V̂ (Q_new∘Q_new)

    on the raw (not bias-corrected) moments; the step count carries on."""
    moments, P_old = reference.moments, reference.P
    P_new, Q_new = P_new.double(), Q_new.double()
    (m, k), (n, r) = P_old.shape, Q_new.shape
    core = P_old.T @ moments["m_R"]
    M = moments["m_R"] @ torch.linalg.pinv(core, rtol=reference.rtol) @ moments["m_L"]
    rho = (n / r) * moments["v_R"].sum(dim=1)
    kappa = (m / k) * moments["v_L"].sum(dim=0)
    V = torch.outer(rho, kappa) / rho.sum()
    moments.update(m_L=P_new.T @ M, m_R=M @ Q_new, v_L=P_new.square().T @ V,
                   v_R=V @ Q_new.square())
    reference.P, reference.Q = P_new, Q_new


def test_channel_rule_on_a_wide_matrix_scales_columns() -> None:
    """m < n: the channels are the columns, scaled from the left sketch."""
    check_against_the_dense_formula("channel", False, (SHAPE[1], SHAPE[0] + 8))


def check_against_the_dense_formula(reconstruction: str, foreach: bool,
                                    shape: tuple[int, int], refresh_every: int | None = None,
                                    **extra) -> None:
    history, stream, opt, used = run_logra(reconstruction, foreach, shape,
                                           refresh_every=refresh_every, **extra)
    matrices = opt.param_groups[0]["params"][:2]
    units = partition(slots_with_grad(opt.param_groups), opt.state)
    batched = any(u.sketched and u.batched for u in units)
    assert batched == (foreach and reconstruction in ("gain", "nystrom"))
    P, Q = used[0]
    assert P.shape == (shape[0], 6) and Q.shape == (shape[1], 4)
    references = [DenseLoGRA(P, Q, reconstruction, HYPER["betas"], HYPER["eps"])
                  for _ in matrices]
    adam_state: dict[str, torch.Tensor] = {}
    for t, grads in enumerate(stream, start=1):
        before, after = history[t - 1], history[t]
        P_t, Q_t = used[t - 1]
        if refresh_every is None or t == 1 or (t - 1) % refresh_every:  # the same projections
            assert torch.equal(P_t, P) and torch.equal(Q_t, Q)
        else:  # a new refresh epoch: new projections, the moments carried into them
            assert not torch.allclose(P_t, P) and not torch.allclose(Q_t, Q)
            P, Q = P_t, Q_t
            for reference in references:
                carry_into(reference, P, Q)
        for i, reference in enumerate(references):
            delta = reference.step(before[i], grads[i], HYPER["lr"], HYPER["weight_decay"])
            assert float(delta.abs().max()) > 1e-3  # the step is large against the tolerance
            torch.testing.assert_close(after[i].double(), before[i].double() + delta,
                                       rtol=0, atol=ATOL, msg=f"matrix {i}, step {t}")
        delta = adamw_step(before[2], grads[2], adam_state, t, HYPER["lr"], HYPER["betas"],
                           HYPER["eps"], HYPER["weight_decay"])
        torch.testing.assert_close(after[2].double(), before[2].double() + delta, rtol=0,
                                   atol=ATOL, msg=f"bias, step {t}")
    if reconstruction in ("subspace", "channel") and refresh_every is None:
        # the stream grows the norm: the limiter acted (a refresh moves the residual elsewhere)
        assert all(r.limited > 0 for r in references)
    for p, reference in zip(matrices, references, strict=True):
        state = opt.state[p]
        for name, key in (("m_L", "exp_avg_L"), ("v_L", "exp_avg_sq_L"), ("m_R", "exp_avg_R"),
                          ("v_R", "exp_avg_sq_R")):
            # the carry's fp32 pseudo-inverse leaves ~1e-7 of moments of order 0.5
            torch.testing.assert_close(state[key].double(), reference.moments[name], rtol=1e-5,
                                       atol=1e-7 if refresh_every is None else 1e-6, msg=key)
        assert int(state["step"]) == STEPS


@pytest.mark.parametrize("shape", [(40, 24), (16, 40)], ids=["tall", "wide"])
def test_naive_projection_step_is_adam_in_the_fixed_subspace(shape: tuple[int, int]) -> None:
    """Tall: S = Pᵀ G, Δ = −lr (P u + λW); wide: S = G Q, Δ = −lr (u Qᵀ + λW); u is Adam's
    bias-corrected direction of S. P (or Q) is the one the optimizer seeds from its key."""
    torch.manual_seed(2)
    W = nn.Parameter(torch.randn(shape))
    rank, seed = 4, 3
    opt = RandomProjectionAdam([W], rank=rank, seed=seed, **HYPER)
    m, n = shape
    projection = sk.orthonormal_projection(max(m, n), rank, sk.seed_for(seed, 0, 0, 0))
    projection = projection.double()
    moments = {"m": torch.zeros(()), "v": torch.zeros(())}
    beta1, beta2 = HYPER["betas"]
    for t, (grad,) in enumerate(gradient_stream([shape], STEPS), start=1):
        before = W.detach().double().clone()
        W.grad = grad.clone()
        opt.step()
        S = projection.T @ grad.double() if m >= n else grad.double() @ projection
        moments["m"] = beta1 * moments["m"] + (1 - beta1) * S
        moments["v"] = beta2 * moments["v"] + (1 - beta2) * S**2
        u = (moments["m"] / (1 - beta1**t)) / ((moments["v"] / (1 - beta2**t)).sqrt()
                                                + HYPER["eps"])
        direction = projection @ u if m >= n else u @ projection.T
        delta = -HYPER["lr"] * (direction + HYPER["weight_decay"] * before)
        assert float(delta.abs().max()) > 1e-3
        torch.testing.assert_close(W.detach().double(), before + delta, rtol=0, atol=ATOL,
                                   msg=f"step {t}")
    torch.testing.assert_close(opt.state[W]["exp_avg"].double(), moments["m"], rtol=1e-5,
                               atol=1e-7)
