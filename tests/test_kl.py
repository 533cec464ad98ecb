"""Predicted-KL step control and the exact KL probes."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn

from logra import LoGRA
from logra.optim.calibration import KLCalibration
from logra.optim.kl import (
    batch_rows,
    categorical_kl,
    fisher_quadratic,
    logits_of,
    predicted_kl_jvp,
)


def test_categorical_kl_matches_torch_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 7, 11, generator=g), torch.randn(4, 7, 11, generator=g)
    expected = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=a), torch.distributions.Categorical(logits=b)
    ).mean()
    torch.testing.assert_close(categorical_kl(a, b), expected)
    mask = torch.rand(4, 7, generator=g) > 0.5
    per_token = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=a), torch.distributions.Categorical(logits=b))
    torch.testing.assert_close(categorical_kl(a, b, mask), per_token[mask].mean())


def test_fisher_quadratic_is_half_vT_softmax_fisher_v() -> None:
    g = torch.Generator().manual_seed(1)
    logits, v = torch.randn(5, 9, generator=g), torch.randn(5, 9, generator=g)
    p = torch.softmax(logits, -1)
    fisher = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    expected = 0.5 * torch.einsum("ti,tij,tj->t", v, fisher, v).mean()
    torch.testing.assert_close(fisher_quadratic(logits, v), expected)


class SoftmaxPolicy(nn.Module):
    """π(a | x) = softmax(W₂ tanh(W₁ x)): a tiny categorical policy."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden = nn.Linear(16, 32)
        self.head = nn.Linear(32, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.hidden(x)))


def policy_gradient_step(policy: nn.Module, x: torch.Tensor) -> None:
    """Backpropagate a REINFORCE-like loss with random advantages."""
    g = torch.Generator().manual_seed(2)
    logits = policy(x)
    actions = torch.distributions.Categorical(logits=logits).sample()
    advantages = torch.randn(x.shape[0], generator=g)
    logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
    (-(advantages * logp).mean()).backward()


def test_jvp_probe_predicts_the_measured_kl_of_a_small_step() -> None:
    policy = SoftmaxPolicy()
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(3))
    opt = LoGRA(policy.parameters(), lr=3e-3, rank=4, predicted_kl_threshold=None)
    policy_gradient_step(policy, x)
    before = policy(x).detach()
    params_before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    opt.step()
    delta = {n: p.detach() - params_before[n] for n, p in policy.named_parameters()}
    with torch.no_grad():
        for n, p in policy.named_parameters():
            p.copy_(params_before[n])
    predicted = float(predicted_kl_jvp(policy, delta, (x,)))
    with torch.no_grad():
        for n, p in policy.named_parameters():
            p.add_(delta[n])
    measured = float(categorical_kl(before, policy(x).detach()))
    assert predicted > 0 and 0.8 <= measured / predicted <= 1.25


# The diagonal empirical Fisher of a batch-mean gradient predicts ~500x less than the exact
# probe on this policy (that is what kl_calibration is for), so each gets its own budget.
@pytest.mark.parametrize(("estimator", "threshold"), [("diag", 1e-6), ("jvp", 1e-4)])
def test_control_bounds_the_applied_prediction(estimator: str, threshold: float) -> None:
    policy = SoftmaxPolicy()
    x = torch.randn(128, 16, generator=torch.Generator().manual_seed(4))
    opt = LoGRA(policy.parameters(), lr=3e-2, rank=4, predicted_kl_threshold=threshold,
                kl_estimator=estimator)
    opt.attach(policy)
    seen_clipped = seen_free = False
    for step in range(12):
        opt.zero_grad()
        policy_gradient_step(policy, x[step % 2 :: 2])
        before = [p.detach().clone() for p in policy.parameters()]
        grads = [p.grad.clone() for p in policy.parameters()]
        opt.step()
        info = opt.last_step
        assert info["clipped"] == (info["predicted_kl"] > threshold)
        assert info["clipped"] == (info["gamma"] < 1.0)
        assert info["applied_kl"] <= threshold * (1 + 1e-6)
        if info["clipped"]:
            assert info["gamma"] == pytest.approx((threshold / info["predicted_kl"]) ** 0.5)
        for b, g, p in zip(before, grads, policy.parameters(), strict=True):
            if estimator == "jvp":  # W ← W + γΔ with Δ left in the gradient buffer
                torch.testing.assert_close(p - b, info["gamma"] * p.grad, atol=1e-7, rtol=1e-5)
            else:  # Δ recomputed block-wise: the gradient is left as it was
                assert torch.equal(p.grad, g)
        seen_clipped |= info["clipped"]
        seen_free |= not info["clipped"]
        opt.param_groups[0]["lr"] *= 0.5  # shrinking steps: late steps fall under the bound
    assert seen_clipped and seen_free


def test_jvp_control_on_a_transformers_model_meets_the_kl_budget(tiny_qwen2) -> None:
    """Attached to a Qwen2 (SDPA attention), the controlled step's measured KL ≈ δ."""
    model = tiny_qwen2()
    ids = torch.randint(0, 48, (4, 24), generator=torch.Generator().manual_seed(5))
    threshold = 1e-3
    opt = LoGRA(model.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=threshold,
                kl_estimator="jvp")
    opt.attach(model)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    before = out.logits.detach()
    opt.step()  # no arguments: the batch comes from the forward pre-hook
    assert opt.last_step["clipped"]
    with torch.no_grad():
        after = model(input_ids=ids).logits
    measured = float(categorical_kl(before, after))
    assert 0.8 <= measured / threshold <= 1.25
    opt.detach()


def test_explicit_kl_batch_and_missing_batch(tiny_qwen2) -> None:
    model = tiny_qwen2()
    ids = torch.randint(0, 48, (2, 16), generator=torch.Generator().manual_seed(6))
    opt = LoGRA(model.parameters(), lr=1e-3, rank=4, kl_estimator="jvp",
                predicted_kl_threshold=0.02)
    model(input_ids=ids, labels=ids).loss.backward()
    with pytest.raises(RuntimeError, match="needs a batch"):
        opt.step()
    assert not opt.state  # checked before any moment changed
    model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.set_kl_batch(model, input_ids=ids)
    opt.step()
    assert opt.last_step["predicted_kl"] > 0


def test_logits_of_rejects_outputs_without_logits() -> None:
    with pytest.raises(TypeError, match="logits"):
        logits_of({"loss": 1})


# ---------------------------------------------------------------- the calibrated default


def test_calibration_is_the_median_ratio_of_the_last_window() -> None:
    fit = KLCalibration(window=3)
    assert not fit.calibrated and math.isnan(fit.scale)
    assert not fit.observe(0.0, 1.0) and not fit.observe(1.0, math.nan)  # nothing to learn
    for estimate, kl in ((1.0, 100.0), (2.0, 2.0), (1.0, 10.0), (1.0, 1000.0)):
        assert fit.observe(estimate, kl)
    # the window holds the ratios 1, 10, 1000 (100 fell out): the median is 10
    assert fit.scale == pytest.approx(10.0)
    fit.observe(1.0, 4.0)  # ratios 10, 1000, 4: median 10
    assert fit.scale == pytest.approx(10.0)
    restored = KLCalibration(window=3)
    restored.load_state_dict(fit.state_dict())
    assert restored.log_ratios == fit.log_ratios
    with pytest.raises(ValueError, match="kl_calibration_window"):
        KLCalibration(window=0)


def _measured_step_kl(policy: nn.Module, opt: LoGRA, x: torch.Tensor) -> float:
    """Take one optimizer step on x and return the KL(π_before ‖ π_after) it caused on x."""
    with torch.no_grad():
        before = policy(x)
    opt.step()
    with torch.no_grad():
        return float(categorical_kl(before, policy(x)))


def test_calibrated_default_probes_on_schedule_and_predicts_nats() -> None:
    """Attached, the default estimate probes on step 1 and every kl_probe_every steps (the
    probe is the prediction there), scales the diagonal estimate by the fitted factor
    in between, and lands within a factor 2 of the measured KL of each step."""
    policy = SoftmaxPolicy()
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(7))
    opt = LoGRA(policy.parameters(), lr=3e-3, rank=4, predicted_kl_threshold=1.0,
                kl_probe_every=3)
    assert opt.kl_estimator == "calibrated"
    opt.attach(policy)
    ratios, probed = [], []
    for _ in range(9):
        opt.zero_grad()
        policy_gradient_step(policy, x)
        scale_before = opt.kl_fit.scale
        measured = _measured_step_kl(policy, opt, x)
        info = opt.last_step
        probed.append(info["kl_probed"])
        if not info["kl_probed"]:  # the fitted factor of the earlier probes, times the diagonal
            assert info["predicted_kl"] == pytest.approx(scale_before * info["diag_kl"])
        ratios.append(measured / info["predicted_kl"])
    assert probed == [True, False, False] * 3
    assert len(opt.kl_fit.log_ratios) == 3
    # the diagonal estimate alone is orders of magnitude off on this policy; calibrated, it is not
    assert opt.kl_fit.scale > 10
    assert all(0.5 <= r <= 2.0 for r in ratios), ratios
    opt.detach()


def test_uncalibrated_default_warns_once_and_does_not_clip_until_told_the_kl() -> None:
    policy = SoftmaxPolicy()
    x = torch.randn(128, 16, generator=torch.Generator().manual_seed(8))
    opt = LoGRA(policy.parameters(), lr=3e-2, rank=4, predicted_kl_threshold=1e-9)
    with pytest.warns(UserWarning, match="observe_kl"):
        policy_gradient_step(policy, x)
        measured = _measured_step_kl(policy, opt, x)
    info = opt.last_step
    assert math.isnan(info["predicted_kl"]) and info["gamma"] == 1.0 and not info["clipped"]
    assert info["diag_kl"] > 0 and not info["skipped"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        opt.zero_grad()
        policy_gradient_step(policy, x)
        opt.step()
    assert opt.observe_kl(measured) and opt.kl_fit.calibrated
    expected_scale = opt.kl_fit.scale
    opt.zero_grad()
    policy_gradient_step(policy, x)
    opt.step()
    info = opt.last_step
    assert info["predicted_kl"] == pytest.approx(expected_scale * info["diag_kl"])
    assert info["clipped"] and info["gamma"] == pytest.approx((1e-9 / info["predicted_kl"]) ** 0.5)


def test_observe_kl_pairs_the_measured_kl_with_the_applied_estimate() -> None:
    """After a clipped step the applied estimate is γ²·d, and the ratio is taken against it."""
    policy = SoftmaxPolicy()
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(9))
    opt = LoGRA(policy.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-3,
                kl_estimator="diag", kl_calibration=1e6)
    policy_gradient_step(policy, x)
    opt.step()
    info = opt.last_step
    assert info["clipped"]
    assert opt.observe_kl(5e-4)
    assert opt.kl_fit.scale == pytest.approx(5e-4 / (info["gamma"] ** 2 * info["diag_kl"]))
    assert not opt.observe_kl(0.0)
    assert not opt.observe_kl(-1e-9)  # round-off below 0: not used, no error


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_observe_kl_refuses_a_kl_that_is_no_kl(bad: float) -> None:
    """NaN or a negative KL once went into the fit and switched the calibration off."""
    policy = SoftmaxPolicy()
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(9))
    opt = LoGRA(policy.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-3,
                kl_estimator="calibrated")
    policy_gradient_step(policy, x)
    opt.step()
    fit = list(opt.kl_fit.log_ratios)
    with pytest.raises(ValueError, match="observe_kl needs the measured KL"):
        opt.observe_kl(bad)
    assert opt.kl_fit.log_ratios == fit
    assert opt.observe_kl(1e-4) and opt.kl_fit.calibrated


def test_calibration_survives_a_checkpoint() -> None:
    torch.manual_seed(0)
    x = torch.randn(128, 16, generator=torch.Generator().manual_seed(10))
    policies = [SoftmaxPolicy(), SoftmaxPolicy()]
    first = LoGRA(policies[0].parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-5,
                  kl_probe_every=4)
    first.attach(policies[0])
    for _ in range(2):
        first.zero_grad()
        policy_gradient_step(policies[0], x)
        first.step()
    state = copy.deepcopy(first.state_dict())  # as a checkpoint file would hold it
    assert state["kl_steps"] == 2 and state["kl_log_ratios"].numel() == 1
    policies[1].load_state_dict(policies[0].state_dict())
    second = LoGRA(policies[1].parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-5,
                   kl_probe_every=4)
    second.load_state_dict(state)
    second.attach(policies[1])
    for opt, policy in zip((first, second), policies, strict=True):
        opt.zero_grad()
        torch.manual_seed(11)  # the same sampled actions for both
        policy_gradient_step(policy, x)
        opt.step()
    assert not second.last_step["kl_probed"]  # step 3 of 4: the schedule carried over
    assert second.last_step["predicted_kl"] == first.last_step["predicted_kl"]
    for a, b in zip(policies[0].parameters(), policies[1].parameters(), strict=True):
        assert torch.equal(a, b)


def test_batch_rows_slices_every_batched_tensor_from_a_rotating_offset() -> None:
    ids = torch.arange(10 * 3).view(10, 3)
    mask = torch.ones(10, 3, dtype=torch.bool)
    positions = torch.arange(3)  # not batched: passed on
    args, kwargs, token_mask = batch_rows((), dict(input_ids=ids, attention_mask=mask,
                                                   position_ids=positions, flag=True),
                                          mask, stride=4, offset=5)
    assert torch.equal(kwargs["input_ids"], ids[[1, 5, 9]])  # offset 5 mod 4 = 1
    assert torch.equal(kwargs["attention_mask"], mask[[1, 5, 9]])
    assert kwargs["position_ids"] is positions and kwargs["flag"] is True
    assert token_mask.shape == (3, 3) and args == ()
    whole = batch_rows((ids,), {}, None, stride=1, offset=0)
    assert whole[0][0] is ids
    few = batch_rows((ids[:3],), {}, None, stride=4, offset=0)  # fewer rows than the stride
    assert few[0][0].shape[0] == 3


def test_subsampled_probe_predicts_the_whole_batch_kl() -> None:
    """The default probe replays a quarter of the batch; on a batch of like rows its
    prediction stays within a factor 2 of the whole batch's measured KL."""
    policy = SoftmaxPolicy()
    x = torch.randn(512, 16, generator=torch.Generator().manual_seed(12))
    opt = LoGRA(policy.parameters(), lr=3e-3, rank=4, predicted_kl_threshold=1.0)
    assert (opt.kl_probe_every, opt.kl_probe_stride) == (1, 4)
    for _ in range(6):
        opt.zero_grad()
        policy_gradient_step(policy, x)
        opt.set_kl_batch(policy, x)
        measured = _measured_step_kl(policy, opt, x)
        assert opt.last_step["kl_probed"]
        assert 0.5 <= measured / opt.last_step["predicted_kl"] <= 2.0


def test_drift_budget_shrinks_the_step_budget_as_the_reference_kl_grows() -> None:
    policy = SoftmaxPolicy()
    opt = LoGRA(policy.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-3,
                kl_drift_budget=0.04)
    assert opt.step_threshold() == 1e-3  # nothing reported yet: δ alone
    opt.observe_reference_kl(0.01)  # √0.04 − √0.01 = 0.1: room 0.01 > δ
    assert opt.step_threshold() == 1e-3
    opt.observe_reference_kl(0.0361)  # (0.2 − 0.19)² = 1e-4 < δ
    assert opt.step_threshold() == pytest.approx(1e-4)
    opt.observe_reference_kl(0.05)  # past the budget: no room
    assert opt.step_threshold() == 0.0
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(13))
    opt.set_kl_batch(policy, x)
    before = [p.detach().clone() for p in policy.parameters()]
    policy_gradient_step(policy, x)
    opt.step()
    assert opt.last_step["gamma"] == 0.0 and opt.last_step["threshold"] == 0.0
    assert all(torch.equal(b, p) for b, p in zip(before, policy.parameters(), strict=True))
    with pytest.raises(ValueError, match="KL ≥ 0"):
        opt.observe_reference_kl(math.nan)
    with pytest.raises(ValueError, match="kl_drift_budget"):
        LoGRA(policy.parameters(), kl_drift_budget=0.0)
    budget_only = LoGRA(policy.parameters(), predicted_kl_threshold=None, kl_drift_budget=0.04)
    assert budget_only.step_threshold() is None
    budget_only.observe_reference_kl(0.01)
    assert budget_only.step_threshold() == pytest.approx(0.01)


def test_drift_budget_reads_the_largest_of_the_recent_reference_kls() -> None:
    """A batch that reads the drift low must not open the budget: K is the max over a window."""
    policy = SoftmaxPolicy()
    opt = LoGRA(policy.parameters(), predicted_kl_threshold=None, kl_drift_budget=0.04,
                kl_drift_window=3)
    for kl in (0.0361, 0.01, 0.01):
        opt.observe_reference_kl(kl)
    assert opt.step_threshold() == pytest.approx(1e-4)  # (0.2 − 0.19)²: 0.0361 still counts
    restored = LoGRA(policy.parameters(), predicted_kl_threshold=None, kl_drift_budget=0.04,
                     kl_drift_window=3)
    restored.load_state_dict(opt.state_dict())
    assert restored.step_threshold() == pytest.approx(1e-4)
    opt.observe_reference_kl(0.01)  # 0.0361 leaves the window
    assert opt.step_threshold() == pytest.approx(0.01)
    latest = LoGRA(policy.parameters(), predicted_kl_threshold=None, kl_drift_budget=0.04,
                   kl_drift_window=1)
    for kl in (0.0361, 0.01):
        latest.observe_reference_kl(kl)
    assert latest.step_threshold() == pytest.approx(0.01)
    with pytest.raises(ValueError, match="kl_drift_window"):
        LoGRA(policy.parameters(), kl_drift_window=0)


@pytest.mark.parametrize("estimator", ["calibrated", "diag"])
def test_a_controlled_step_is_gamma_times_the_free_step(estimator: str) -> None:
    """From the same state, W_ctl − W0 = γ·(W_free − W0); on the diagonal path KL̂ is
    ½ Σ_ij V̂_ij Δ_ij² with V̂ = ρκᵀ/Σρ rebuilt here from the sketches of the step (one step:
    v̂ = L², R²), times kl_calibration."""
    g = torch.Generator().manual_seed(14)
    w0, grad = torch.randn(48, 40, generator=g), torch.randn(48, 40, generator=g)
    x = torch.randn(32, 40, generator=g)
    weights, steps = {}, {}
    for name, threshold in (("free", None), ("ctl", 1e-4)):
        policy = nn.Linear(40, 48, bias=False)  # a linear softmax policy
        with torch.no_grad():
            policy.weight.copy_(w0)
        opt = LoGRA(policy.parameters(), lr=1e-2, rank=4, weight_decay=0.0,
                    predicted_kl_threshold=threshold, kl_estimator=estimator,
                    kl_calibration=1e3)
        opt.set_kl_batch(policy, x)
        policy.weight.grad = grad.clone()
        opt.step()
        weights[name], steps[name] = policy.weight.detach(), opt
    info = steps["ctl"].last_step
    assert info["clipped"] and 0 < info["gamma"] < 1
    # fp32 round-off of W + γΔ at |W| ≈ 3 is ~2e-7; the step's entries are ~1e-3
    torch.testing.assert_close(weights["ctl"] - w0, info["gamma"] * (weights["free"] - w0),
                               rtol=0, atol=1e-6)
    delta = weights["free"] - w0
    P, Q = steps["free"].projections(next(iter(steps["free"].state)))
    L, R = P.T @ grad, grad @ Q
    m, n = grad.shape
    rho = (n / Q.shape[1]) * R.square().sum(dim=1)
    kappa = (m / P.shape[1]) * L.square().sum(dim=0)
    diag = 0.5 * float((rho[:, None] * kappa[None, :] * delta.square()).sum() / rho.sum())
    assert info["diag_kl"] == pytest.approx(diag, rel=1e-4)
    if estimator == "diag":
        assert info["predicted_kl"] == pytest.approx(1e3 * diag, rel=1e-4)
    else:  # the probe: ½ΔᵀFΔ of the linear softmax policy on every 4th row of x
        logits, tangent = x[::4] @ w0.T, x[::4] @ delta.T
        assert info["kl_probed"]
        assert info["predicted_kl"] == pytest.approx(float(fisher_quadratic(logits, tangent)),
                                                     rel=1e-4)
