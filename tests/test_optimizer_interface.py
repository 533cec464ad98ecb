"""LoGRA and the naive projection as drop-ins for AdamW: positional order, errors naming the
argument, other optimizers' states refused, and the KL control's keys in the param groups."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from logra import REPORT_RL_SETTINGS, LoGRA, RandomProjectionAdam
from logra.optim.hyperparameters import KL_CONTROL_KEYS


def model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(40, 48), nn.Tanh(), nn.Linear(48, 32))


def backward(net: nn.Module, seed: int) -> None:
    x = torch.randn(16, 40, generator=torch.Generator().manual_seed(seed))
    net.zero_grad(set_to_none=True)
    net(x).square().mean().backward()


def clipping_logra(net: nn.Module, **kwargs) -> LoGRA:
    """The diagonal estimate times a large constant: every step is predicted over δ and clipped,
    without a batch to probe."""
    return LoGRA(net.parameters(), lr=1e-2, rank=4, kl_estimator="diag", kl_calibration=1e8,
                 **{"predicted_kl_threshold": 1e-3, **kwargs})


# ---------------------------------------------------------------- the naive projection


def test_naive_positional_arguments_follow_adamw() -> None:
    net = model()
    opt = RandomProjectionAdam(net.parameters(), 1e-3, (0.8, 0.99), 1e-6, 0.05, rank=8)
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"], group["rank"]) == (
        1e-3, (0.8, 0.99), 1e-6, 0.05, 8)
    with pytest.raises(TypeError):  # rank is keyword-only
        RandomProjectionAdam(net.parameters(), 1e-3, (0.9, 0.999), 1e-8, 0.01, False, 16)
    with pytest.raises(ValueError, match="amsgrad"):
        RandomProjectionAdam(net.parameters(), 1e-3, (0.9, 0.999), 1e-8, 0.01, True)


@pytest.mark.parametrize(("kwargs", "error", "culprit"), [
    (dict(lr="1e-3"), ValueError, "lr must be a number.*YAML"),
    (dict(betas=0.9), ValueError, "betas must be a pair"),
    (dict(betas=(0.9, 1.0)), ValueError, "betas"),
    (dict(eps=-1e-8), ValueError, "eps"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay"),
    (dict(rank=0), ValueError, "rank"),
    (dict(seed=1.5), ValueError, "seed"),
])
def test_naive_bad_hyperparameters_name_the_argument(kwargs, error, culprit) -> None:
    with pytest.raises(error, match=culprit):
        RandomProjectionAdam(model().parameters(), **kwargs)


def test_naive_refuses_an_adamw_state() -> None:
    net = model()
    adamw = torch.optim.AdamW(net.parameters(), lr=1e-3)
    backward(net, 0)
    adamw.step()
    opt = RandomProjectionAdam(net.parameters(), rank=4)
    with pytest.raises(ValueError, match="not a RandomProjectionAdam state"):
        opt.load_state_dict(adamw.state_dict())
    assert not opt.state


# ---------------------------------------------------------------- LoGRA's KL-control keys


@pytest.mark.parametrize(("kwargs", "culprit"), [
    (dict(predicted_kl_threshold="0.02"), "predicted_kl_threshold"),
    (dict(kl_calibration="1e3"), "kl_calibration"), (dict(kl_calibration=0.0), "kl_calibration"),
    (dict(kl_probe_every=0), "kl_probe_every"), (dict(kl_probe_stride=1.5), "kl_probe_stride"),
    (dict(kl_drift_budget=-1.0), "kl_drift_budget"),
    (dict(kl_drift_window=True), "kl_drift_window"),
    (dict(eps=0.0), "eps"),
])
def test_bad_kl_control_values_name_the_argument(kwargs: dict, culprit: str) -> None:
    with pytest.raises(ValueError, match=culprit):
        LoGRA(model().parameters(), **kwargs)


def test_kl_control_keys_live_in_the_param_groups_and_the_state_dict() -> None:
    net = model()
    opt = LoGRA(net.parameters(), predicted_kl_threshold=0.05, kl_estimator="diag",
                kl_calibration=3.0, kl_drift_budget=0.5, kl_drift_window=2)
    expected = dict(predicted_kl_threshold=0.05, kl_estimator="diag", kl_calibration=3.0,
                    kl_probe_every=1, kl_probe_stride=4, kl_drift_budget=0.5, kl_drift_window=2)
    assert {k: opt.param_groups[0][k] for k in KL_CONTROL_KEYS} == expected
    assert {k: opt.state_dict()["param_groups"][0][k] for k in KL_CONTROL_KEYS} == expected
    assert (opt.predicted_kl_threshold, opt.kl_estimator) == (0.05, "diag")  # read the groups
    with pytest.raises(AttributeError):
        opt.predicted_kl_threshold = 0.1  # one place to set it: the groups


def test_a_schedule_on_delta_sets_each_steps_budget() -> None:
    """A LambdaLR-like schedule of δ in the groups: every clipped step applies exactly δ_t."""
    net = model()
    opt = clipping_logra(net)
    for t in range(4):
        delta_t = 1e-3 * 0.5**t
        for group in opt.param_groups:
            group["predicted_kl_threshold"] = delta_t
        backward(net, t)
        opt.step()
        assert opt.last_step["clipped"] and opt.last_step["threshold"] == delta_t
        assert opt.last_step["applied_kl"] == pytest.approx(delta_t, rel=1e-9)


def test_a_checkpoint_carries_a_changed_delta() -> None:
    net = model()
    opt = clipping_logra(net)
    opt.param_groups[0]["predicted_kl_threshold"] = 2e-4
    backward(net, 0)
    opt.step()
    restored = clipping_logra(model())
    restored.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert restored.predicted_kl_threshold == 2e-4 and restored.step_threshold() == 2e-4


def test_groups_that_disagree_on_the_control_are_refused() -> None:
    """One γ scales the whole step: every group must hold the same δ (and estimator, ...)."""
    first, second = model(), model(1)
    with pytest.raises(ValueError, match="disagree on predicted_kl_threshold"):
        LoGRA([{"params": first.parameters()},
               {"params": second.parameters(), "predicted_kl_threshold": 0.5}])
    opt = LoGRA([{"params": first.parameters()}, {"params": second.parameters()}], lr=1e-2,
                rank=4)
    with pytest.raises(ValueError, match="disagree on kl_estimator"):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(3))], "kl_estimator": "jvp"})
    assert len(opt.param_groups) == 2
    backward(first, 0)
    backward(second, 0)
    weights = [p.detach().clone() for p in (*first.parameters(), *second.parameters())]
    opt.param_groups[1]["predicted_kl_threshold"] = 0.5  # a schedule that set one group only
    with pytest.raises(ValueError, match="disagree on predicted_kl_threshold"):
        opt.step()
    after = [*first.parameters(), *second.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(weights, after, strict=True)) and not opt.state
    opt.param_groups[1]["kl_estimator"] = "exact"
    opt.param_groups[0]["kl_estimator"] = "exact"
    opt.param_groups[1]["predicted_kl_threshold"] = opt.param_groups[0]["predicted_kl_threshold"]
    with pytest.raises(ValueError, match="kl_estimator must be one of"):  # checked at step too
        opt.step()


def test_a_state_saved_without_the_control_keys_gets_the_constructors_values() -> None:
    """Checkpoints written when δ and the estimator were optimizer attributes still load."""
    net = model()
    opt = LoGRA(net.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=None)
    backward(net, 0)
    opt.step()
    state = copy.deepcopy(opt.state_dict())
    for group in state["param_groups"]:
        for key in KL_CONTROL_KEYS:
            del group[key]
    restored = LoGRA(model().parameters(), lr=1e-2, rank=4, predicted_kl_threshold=3e-3,
                     kl_estimator="diag")
    restored.load_state_dict(state)
    assert (restored.predicted_kl_threshold, restored.kl_estimator) == (3e-3, "diag")
    assert restored.state_dict()["state"][0]["step"] == 1


def test_an_adamw_state_is_named_as_not_logra() -> None:
    net = model()
    adamw = torch.optim.AdamW(net.parameters(), lr=1e-3)
    backward(net, 0)
    adamw.step()
    with pytest.raises(ValueError, match="not a LoGRA state"):
        LoGRA(net.parameters()).load_state_dict(adamw.state_dict())


# ---------------------------------------------------------------- defaults


def test_the_defaults_are_adamw_s_with_the_control_off() -> None:
    """A drop-in: AdamW's lr, betas, eps and weight decay, and no KL control, so a plain loop
    steps without a batch to probe and without a warning; the report's RL settings are a
    preset."""
    net = model()
    opt, adamw = LoGRA(net.parameters()), torch.optim.AdamW(net.parameters())
    keys = ("lr", "betas", "eps", "weight_decay")
    assert {k: opt.defaults[k] for k in keys} == {k: adamw.defaults[k] for k in keys}
    assert opt.predicted_kl_threshold is None and opt.step_threshold() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(2):
            backward(net, step)
            opt.step()
    assert opt.last_step["gamma"] == 1.0 and not opt.last_step["kl_probed"]
    report = LoGRA(model().parameters(), **REPORT_RL_SETTINGS)
    assert (report.defaults["lr"], report.predicted_kl_threshold, report.defaults["rank"]) == (
        1e-6, 0.02, 16)
    with pytest.raises(TypeError):
        REPORT_RL_SETTINGS["lr"] = 1e-3  # read-only: copy it to change a setting
