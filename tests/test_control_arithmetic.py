"""The predicted-KL control on the diagonal path, checked against numbers computed here.

A controlled LoGRA and a free copy (control off) are fed the same gradients; before every step
the free copy is reset to the controlled weights. Their moments depend on the gradients only, so
both take the same Δ from the same state, and the step must be W_ctl − W = γ·(W_free − W) with

    KL̂ = c · ½ Σ_ij V̂_ij Δ_ij²,   γ = min(1, √(δ / KL̂))

where Δ = W_free − W, c = `kl_calibration`, and V̂ is rebuilt here from the saved state: the
rank-1 ρκᵀ/Σρ of the sketches' bias-corrected second moments for a matrix, Adam's v̂ for a vector.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from logra import LoGRA

BETAS = (0.8, 0.95)
RANK, OVERSAMPLE = 4, 2
CALIBRATION = 50.0
THRESHOLD = 0.1
LRS = (2e-2, 2e-4, 2e-2, 2e-4, 2e-2)  # KL̂ ∝ lr²: steps above and below δ


def parameters(seed: int) -> list[nn.Parameter]:
    """Two same-shaped matrices (a stack on the batched path) and a vector (dense AdamW)."""
    torch.manual_seed(seed)
    return [nn.Parameter(torch.randn(40, 24)), nn.Parameter(torch.randn(40, 24)),
            nn.Parameter(torch.randn(40))]


def diagonal_fisher(opt: LoGRA, p: torch.Tensor, step: int) -> torch.Tensor:
    """V̂ of `p` from its saved state after `step` steps."""
    state = opt.state_dict()["state"][next(i for i, q in enumerate(opt.param_groups[0]["params"])
                                           if q is p)]
    bias2 = 1 - BETAS[1] ** step
    if "exp_avg_sq" in state:
        return state["exp_avg_sq"].double() / bias2
    v_L, v_R = state["exp_avg_sq_L"].double() / bias2, state["exp_avg_sq_R"].double() / bias2
    m, n = p.shape
    rho = (n / RANK) * v_R.sum(dim=1)
    kappa = (m / (RANK + OVERSAMPLE)) * v_L.sum(dim=0)
    return torch.outer(rho, kappa) / rho.sum()


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
def test_the_controlled_step_is_gamma_times_the_free_step(foreach: bool) -> None:
    options = dict(rank=RANK, oversample=OVERSAMPLE, betas=BETAS, weight_decay=0.1,
                   foreach=foreach, kl_estimator="diag")
    controlled, free = parameters(0), parameters(0)
    ctl_opt = LoGRA(controlled, predicted_kl_threshold=THRESHOLD, kl_calibration=CALIBRATION,
                    **options)
    free_opt = LoGRA(free, predicted_kl_threshold=None, **options)
    g = torch.Generator().manual_seed(1)
    gammas = []
    for step, lr in enumerate(LRS, start=1):
        for opt in (ctl_opt, free_opt):
            opt.param_groups[0]["lr"] = lr
        before = [p.detach().clone() for p in controlled]
        with torch.no_grad():
            for p, q in zip(free, controlled, strict=True):
                p.copy_(q)
        for p, q in zip(controlled, free, strict=True):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        ctl_opt.step()
        free_opt.step()
        deltas = [(q.detach() - b).double() for q, b in zip(free, before, strict=True)]
        diag = 0.5 * sum(float((diagonal_fisher(ctl_opt, p, step) * d.square()).sum())
                         for p, d in zip(controlled, deltas, strict=True))
        predicted = CALIBRATION * diag
        gamma = min(1.0, math.sqrt(THRESHOLD / predicted))
        info = ctl_opt.last_step
        assert info["diag_kl"] == pytest.approx(diag, rel=1e-4)
        assert info["predicted_kl"] == pytest.approx(predicted, rel=1e-4)
        assert info["gamma"] == pytest.approx(gamma, rel=1e-5)
        assert info["clipped"] == (gamma < 1.0) and not info["skipped"]
        for p, b, d in zip(controlled, before, deltas, strict=True):
            # fp32 round-off of W + γΔ at |W| ≈ 3 is ~2e-7; |Δ| reaches ~lr
            torch.testing.assert_close((p.detach() - b).double(), gamma * d, rtol=0, atol=1e-6)
        gammas.append(gamma)
    assert any(g < 0.5 for g in gammas) and any(g == 1.0 for g in gammas)


@pytest.mark.parametrize("estimator", ["diag", "calibrated", "jvp"])
@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
def test_a_step_whose_prediction_overflows_keeps_the_weights(estimator: str,
                                                            foreach: bool) -> None:
    """Finite gradients, but lr = 1e30 makes Δ² overflow fp32: KL̂ is not finite, so the step
    is skipped and counted, and the next sane step proceeds."""
    policy = nn.Sequential(nn.Linear(24, 40), nn.Tanh(), nn.Linear(40, 40))
    x = torch.randn(8, 24, generator=torch.Generator().manual_seed(2))
    opt = LoGRA(policy.parameters(), lr=1e30, rank=RANK, foreach=foreach,
                predicted_kl_threshold=1e-3, kl_estimator=estimator)
    opt.set_kl_batch(policy, x)
    policy(x).logsumexp(-1).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters())
    before = [p.detach().clone() for p in policy.parameters()]
    opt.step()
    info = opt.last_step
    assert info["skipped"] and info["gamma"] == 0.0 and opt.skipped_steps == 1
    assert not math.isfinite(info["predicted_kl"])
    assert all(torch.equal(b, p) for b, p in zip(before, policy.parameters(), strict=True))
    opt.param_groups[0]["lr"] = 1e-3
    opt.zero_grad()
    policy(x).logsumexp(-1).mean().backward()
    opt.step()
    assert not opt.last_step["skipped"] and opt.skipped_steps == 1
    assert not all(torch.equal(b, p) for b, p in zip(before, policy.parameters(), strict=True))
    assert all(torch.isfinite(p).all() for p in policy.parameters())
