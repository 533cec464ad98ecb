"""Hyperparameters reach the step: per-group lr and weight decay, schedules, maximize, a tensor
lr; and the optimizer survives deepcopy and a save → load → save round trip unchanged.

LoGRA is built with keyword arguments only, and every expectation is computed from the values
passed in, not read back from the optimizer.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from logra import LoGRA
from logra.optim.hyperparameters import RECONSTRUCTIONS


def parameters(seed: int = 0) -> list[nn.Parameter]:
    """Two 40×24 matrices (sketched; a stack on the batched path) and a vector (dense)."""
    torch.manual_seed(seed)
    return [nn.Parameter(torch.randn(40, 24)), nn.Parameter(torch.randn(40, 24)),
            nn.Parameter(torch.randn(24))]


def gradients(step: int, params: list[torch.Tensor]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) for p in params]


def set_gradients(step: int, params: list[torch.Tensor]) -> None:
    for p, grad in zip(params, gradients(step, params), strict=True):
        p.grad = grad


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_each_group_takes_its_own_lr_and_weight_decay() -> None:
    """A group at lr 0 does not move (its weight decay is lr·λ = 0 too); another group's
    weights are those of a LoGRA that holds that group alone."""
    frozen, moving, alone = parameters(0), parameters(1), parameters(1)
    opt = LoGRA([{"params": frozen, "lr": 0.0, "weight_decay": 0.5},
                 {"params": moving, "lr": 1e-2, "weight_decay": 0.2}],
                lr=3e-3, weight_decay=0.0, rank=4, predicted_kl_threshold=None)
    solo = LoGRA(alone, lr=1e-2, weight_decay=0.2, rank=4, predicted_kl_threshold=None)
    start = [p.detach().clone() for p in frozen]
    for step in range(3):
        set_gradients(step, frozen)
        set_gradients(step, moving)
        set_gradients(step, alone)
        opt.step()
        solo.step()
    assert same(start, frozen)
    assert same(moving, alone) and not same(moving, parameters(1))


@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_a_scheduled_lr_scales_the_step_linearly(reconstruction: str) -> None:
    """With the control off, Δ_t = −lr_t (U_t + λ W_{t−1}) and U_t depends on the gradients
    only: under LambdaLR(0.5^t) the direction U_t = −Δ_t/lr_t − λW_{t−1} is the one of a
    constant-lr run fed the same gradients."""
    lr, decay = 1e-2, 0.1
    runs = []
    for schedule in (None, lambda t: 0.5**t):
        params = parameters()
        opt = LoGRA(params, lr=lr, weight_decay=decay, rank=4, reconstruction=reconstruction,
                    predicted_kl_threshold=None)
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule) if schedule else None
        directions = []
        for step in range(4):
            before = [p.detach().clone() for p in params]
            set_gradients(step, params)
            opt.step()
            step_lr = lr * (0.5**step if schedule else 1.0)
            directions.append([-(p.detach() - b) / step_lr - decay * b
                               for p, b in zip(params, before, strict=True)])
            if scheduler:
                scheduler.step()
        runs.append(directions)
    for constant, scheduled in zip(*runs, strict=True):
        for a, b in zip(constant, scheduled, strict=True):
            # Δ/lr divides fp32 round-off of W + Δ (~2e-7) by lr down to 1.25e-3
            torch.testing.assert_close(b, a, rtol=0, atol=5e-4)


def regression_loss(model: nn.Module, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(16, 24, generator=g), torch.randn(16, 40, generator=g)
    return nn.functional.mse_loss(model(x), y)


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_maximize_is_minimizing_the_negated_loss(reconstruction: str, foreach: bool) -> None:
    """Seeded data; the control on (diag, clipping) so that γ must agree as well."""
    trajectories = []
    for maximize in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(24, 40), nn.Tanh(), nn.Linear(40, 40))
        opt = LoGRA(model.parameters(), lr=1e-2, rank=4, reconstruction=reconstruction,
                    foreach=foreach, maximize=maximize, kl_estimator="diag",
                    predicted_kl_threshold=1e-8)
        for step in range(4):
            opt.zero_grad()
            loss = regression_loss(model, step)
            (-loss if maximize else loss).backward()
            opt.step()
        assert opt.last_step["clipped"]
        trajectories.append([p.detach() for p in model.parameters()])
    for down, up in zip(*trajectories, strict=True):
        torch.testing.assert_close(up, down, rtol=0, atol=1e-6)


@pytest.mark.parametrize("reconstruction", [*RECONSTRUCTIONS, "dense"])
def test_weight_decay_alone_shrinks_the_weights(reconstruction: str) -> None:
    """A zero gradient has a zero direction, whatever the rule: W ← (1 − lr·λ) W."""
    lr, decay = 0.05, 0.3
    params = parameters()
    start = [p.detach().clone() for p in params]
    rule = dict(sketch=False) if reconstruction == "dense" else dict(reconstruction=reconstruction)
    opt = LoGRA(params, lr=lr, weight_decay=decay, rank=4, predicted_kl_threshold=None, **rule)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    for p, w in zip(params, start, strict=True):
        torch.testing.assert_close(p.detach(), (1 - lr * decay) * w, rtol=1e-6, atol=0)


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "batched"])
def test_a_tensor_lr_is_the_same_as_its_float(foreach: bool) -> None:
    weights = []
    for lr in (1e-2, torch.tensor(1e-2)):
        params = parameters()
        opt = LoGRA(params, lr=lr, rank=4, foreach=foreach, predicted_kl_threshold=None)
        for step in range(3):
            set_gradients(step, params)
            opt.step()
        weights.append(params)
    assert same(*weights)


def test_a_deep_copy_continues_the_same_run_independently() -> None:
    params = parameters()
    opt = LoGRA(params, lr=1e-2, rank=4, reconstruction="subspace", cache_projections=True,
                predicted_kl_threshold=None)
    for step in range(2):
        set_gradients(step, params)
        opt.step()
    copied = copy.deepcopy({"params": params, "opt": opt})
    state_before = copy.deepcopy(opt.state_dict())
    for step in range(2, 4):
        set_gradients(step, copied["params"])
        copied["opt"].step()
    assert_equal(opt.state_dict(), state_before)  # stepping the copy left the original alone
    for step in range(2, 4):
        set_gradients(step, params)
        opt.step()
    assert same(params, copied["params"])
    assert_equal(opt.state_dict(), copied["opt"].state_dict())


def assert_equal(a, b, path: str = "state_dict") -> None:
    """Nested dicts, lists and tensors, equal element for element (tensors: dtype too)."""
    assert type(a) is type(b), path
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_equal(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), path
    else:
        assert a == b, path


@pytest.mark.filterwarnings("ignore:LoGRA. predicted_kl_threshold")  # step 1: uncalibrated
@pytest.mark.parametrize("reconstruction", RECONSTRUCTIONS)
def test_save_load_save_gives_the_same_state_dict(reconstruction: str) -> None:
    """Through a file: moments, step counts, the subspace limiter's memory, the KL calibration
    window and the drift budget's recent reference KLs all come back as they were."""
    options = dict(lr=1e-2, rank=4, reconstruction=reconstruction, refresh_every=2,
                   predicted_kl_threshold=1e-3, kl_drift_budget=0.5)
    params = parameters()
    opt = LoGRA(params, **options)
    for step in range(3):
        set_gradients(step, params)
        opt.observe_reference_kl(0.01 * step)
        opt.step()
        assert opt.observe_kl(1e-4)
    saved = opt.state_dict()
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    restored = LoGRA(parameters(), **options)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert_equal(restored.state_dict(), saved)
