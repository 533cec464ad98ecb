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
              **extra) -> tuple[list, list, LoGRA]:
    """The weights before every step and after the last, the gradients, and the optimizer."""
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
    history = [[p.detach().clone() for p in params]]
    for grads in stream:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        history.append([p.detach().clone() for p in params])
    return history, stream, opt


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_every_step_is_the_dense_formula(reconstruction: str, foreach: bool) -> None:
    check_against_the_dense_formula(reconstruction, foreach, SHAPE)


def test_channel_rule_on_a_wide_matrix_scales_columns() -> None:
    """m < n: the channels are the columns, scaled from the left sketch."""
    check_against_the_dense_formula("channel", False, (SHAPE[1], SHAPE[0] + 8))


def check_against_the_dense_formula(reconstruction: str, foreach: bool,
                                    shape: tuple[int, int]) -> None:
    history, stream, opt = run_logra(reconstruction, foreach, shape)
    matrices = opt.param_groups[0]["params"][:2]
    units = partition(slots_with_grad(opt.param_groups), opt.state)
    batched = any(u.sketched and u.batched for u in units)
    assert batched == (foreach and reconstruction in ("gain", "nystrom"))
    P, Q = opt.projections(matrices[0])
    assert P.shape == (shape[0], 6) and Q.shape == (shape[1], 4)
    references = [DenseLoGRA(P, Q, reconstruction, HYPER["betas"], HYPER["eps"])
                  for _ in matrices]
    adam_state: dict[str, torch.Tensor] = {}
    for t, grads in enumerate(stream, start=1):
        before, after = history[t - 1], history[t]
        for i, reference in enumerate(references):
            delta = reference.step(before[i], grads[i], HYPER["lr"], HYPER["weight_decay"])
            assert float(delta.abs().max()) > 1e-3  # the step is large against the tolerance
            torch.testing.assert_close(after[i].double(), before[i].double() + delta,
                                       rtol=0, atol=ATOL, msg=f"matrix {i}, step {t}")
        delta = adamw_step(before[2], grads[2], adam_state, t, HYPER["lr"], HYPER["betas"],
                           HYPER["eps"], HYPER["weight_decay"])
        torch.testing.assert_close(after[2].double(), before[2].double() + delta, rtol=0,
                                   atol=ATOL, msg=f"bias, step {t}")
    if reconstruction in ("subspace", "channel"):  # the stream grows the norm: limiter acted
        assert all(r.limited > 0 for r in references)
    for p, reference in zip(matrices, references, strict=True):
        state = opt.state[p]
        for name, key in (("m_L", "exp_avg_L"), ("v_L", "exp_avg_sq_L"), ("m_R", "exp_avg_R"),
                          ("v_R", "exp_avg_sq_R")):
            torch.testing.assert_close(state[key].double(), reference.moments[name],
                                       rtol=1e-5, atol=1e-7, msg=key)
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
