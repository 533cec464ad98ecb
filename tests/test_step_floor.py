"""scripts/step_floor.py: its eager floor is LoGRA's gain step, and it measures on a proxy."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from logra.experiments import optimizer_cost as oc
from logra.optim import LoGRA
from logra.paths import checkout_root

SCRIPT = checkout_root() / "scripts" / "step_floor.py"


def load_script():
    spec = importlib.util.spec_from_file_location("step_floor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_floor_takes_logra_s_gain_step() -> None:
    """Three steps of the floor and of LoGRA (gain, control off) from the same weights and
    gradients end at the same weights to fp32 round-off: the floor is the same arithmetic."""
    floor_script = load_script()
    floor_model, logra_model = oc.build_case("proxy-1m"), oc.build_case("proxy-1m")
    floor = floor_script.FloorStep(floor_model)
    logra = LoGRA(logra_model.parameters(), lr=floor_script.LR, rank=floor_script.RANK,
                  weight_decay=floor_script.WEIGHT_DECAY, predicted_kl_threshold=None,
                  foreach=True)
    generator = torch.Generator().manual_seed(3)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=generator) for p in floor_model.parameters()]
        oc.set_grads(floor_model, grads)
        oc.set_grads(logra_model, grads)
        floor.step()
        logra.step()
    moved = 0.0
    for a, b, start in zip(floor_model.parameters(), logra_model.parameters(),
                           oc.build_case("proxy-1m").parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        moved = max(moved, (b - start).abs().max().item())
    assert moved > 1e-5  # the steps moved the weights


def test_the_phases_take_logra_s_own_step() -> None:
    """The phases, called in order, are LoGRA's step: the same weights and state bit for bit,
    so their times split the step being benchmarked, not another one."""
    floor_script = load_script()
    models = [oc.build_case("proxy-1m") for _ in range(2)]
    optimizers = [LoGRA(m.parameters(), lr=1e-3, rank=16, predicted_kl_threshold=None)
                  for m in models]
    generator = torch.Generator().manual_seed(4)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=generator) for p in models[0].parameters()]
        for model in models:
            oc.set_grads(model, grads)
        optimizers[0].step()
        with torch.no_grad():
            floor_script.logra_phases(optimizers[1])
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(a, b)
        theirs = optimizers[1].state[b]
        for name, value in optimizers[0].state[a].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(theirs[name])), name


def test_the_script_measures_every_phase() -> None:
    times = load_script().measure("proxy-1m", rounds=2)
    assert {"adamw", "floor", "sketch GEMMs", "logra", "  work list and sketches",
            "  finiteness flag", "  moments and Δ", "  W ← W + Δ"} == set(times)
    assert all(ms > 0 for ms in times.values())


def test_the_floor_refuses_a_matrix_logra_would_not_sketch() -> None:
    with pytest.raises(ValueError, match=r"a \(32, 32\) matrix is too small to sketch"):
        load_script().FloorStep(oc.build_case("smoke"))


def test_the_compiled_floor_takes_the_eager_floor_s_step() -> None:
    """`--compiled` times the same arithmetic: three steps of the compiled floor end at the
    eager floor's weights to fp32 round-off (a model of two shapes and a vector, to keep the
    compilation short)."""
    floor_script = load_script()
    models = [torch.nn.ParameterList([torch.nn.Parameter(torch.randn(64, 96)),
                                      torch.nn.Parameter(torch.randn(64, 96)),
                                      torch.nn.Parameter(torch.randn(48, 64)),
                                      torch.nn.Parameter(torch.randn(64))])
              for _ in range(2)]
    with torch.no_grad():
        for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
            b.copy_(a)
    start = [p.detach().clone() for p in models[0].parameters()]
    eager = floor_script.FloorStep(models[0])
    compiled = floor_script.FloorStep(models[1], compiled=True)
    generator = torch.Generator().manual_seed(5)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=generator) for p in models[0].parameters()]
        for model in models:
            oc.set_grads(model, grads)
        eager.step()
        compiled.step()
    for a, b, before in zip(models[0].parameters(), models[1].parameters(), start, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
        assert (a - before).abs().max() > 1e-5  # the steps moved every tensor
