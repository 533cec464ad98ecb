"""The KL control's probe with `torch.compile`d models, and a probe that fails: the step leaves
the optimizer as it found it."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from logra import LoGRA
from logra.optim.control import KLControl

VOCAB = 40


def tiny_lm() -> nn.Sequential:
    """Token embedding, one hidden layer, a head over the vocabulary: logits (B, T, VOCAB)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(VOCAB, 32), nn.Linear(32, 48), nn.Tanh(),
                         nn.Linear(48, VOCAB))


def ids(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (8, 12), generator=torch.Generator().manual_seed(seed))


def backward(model: nn.Module, batch: torch.Tensor) -> None:
    logits = model(batch)
    nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB),
                                batch[:, 1:].reshape(-1)).backward()


@pytest.fixture
def fresh_dynamo():
    """No compiled graph of an earlier test is reused (dynamo does not guard on hooks)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("fresh_dynamo")
def test_the_probe_runs_on_a_compiled_model_and_clips() -> None:
    """attach(torch.compile(model)): the hook on the wrapper records every batch, and the JVP
    runs on the eager module inside (inductor's kernels have no forward-mode derivative)."""
    model = tiny_lm()
    compiled = torch.compile(model)
    opt = LoGRA(model.parameters(), 1e-3, predicted_kl_threshold=1e-7, rank=4)
    opt.attach(compiled)
    for step in range(2):
        before = [p.detach().clone() for p in model.parameters()]
        opt.zero_grad(set_to_none=True)
        backward(compiled, ids(step))
        opt.step()
        assert opt.last_step["kl_probed"], step
        assert 0 < opt.last_step["gamma"] < 1 and opt.last_step["clipped"], opt.last_step
        assert opt.last_step["applied_kl"] == pytest.approx(1e-7, rel=1e-6)
        assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


@pytest.mark.usefixtures("fresh_dynamo")
def test_attaching_the_eager_module_after_compiling_it_warns_what_to_do() -> None:
    """A hook added to a module dynamo has already compiled is not run (so for an nn.Sequential,
    torch 2.13): the control has no batch, and says so (attach the compiled module) instead of
    silently not acting."""
    model = tiny_lm()
    compiled = torch.compile(model)
    backward(compiled, ids(0))  # compiled before the hook exists
    opt = LoGRA(model.parameters(), 1e-3, predicted_kl_threshold=1e-7, rank=4)
    opt.attach(model)
    opt.zero_grad(set_to_none=True)
    backward(compiled, ids(1))
    with pytest.warns(UserWarning, match=r"torch\.compile.*attach\(compiled"):
        opt.step()
    assert not opt.last_step["kl_probed"]
    opt.attach(compiled)  # what the warning says: the probe now runs
    opt.zero_grad(set_to_none=True)
    backward(compiled, ids(2))
    opt.step()
    assert opt.last_step["kl_probed"] and opt.last_step["clipped"]


def test_jvp_estimator_without_a_recorded_batch_names_torch_compile() -> None:
    model = tiny_lm()
    opt = LoGRA(model.parameters(), 1e-3, predicted_kl_threshold=1e-7, rank=4,
                kl_estimator="jvp")
    opt.attach(model)
    for p in model.parameters():  # gradients from a pass the hook did not see
        p.grad = torch.randn_like(p)
    with pytest.raises(RuntimeError, match=r"attach\(model\) is in place.*torch\.compile"):
        opt.step()
    assert not opt.state


def policy() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 40), nn.Tanh(), nn.Linear(40, 12))


def controlled(net: nn.Module) -> LoGRA:
    return LoGRA(net.parameters(), 1e-2, rank=4, predicted_kl_threshold=1e-4,
                 kl_estimator="jvp")


def policy_backward(net: nn.Module, x: torch.Tensor, seed: int) -> None:
    net.zero_grad(set_to_none=True)
    target = torch.randint(0, 12, (x.shape[0],), generator=torch.Generator().manual_seed(seed))
    nn.functional.cross_entropy(net(x), target).backward()


@pytest.mark.parametrize("steps_before", [0, 2])
def test_a_probe_that_raises_leaves_the_optimizer_as_it_was(monkeypatch, steps_before) -> None:
    """The probe runs after the moments were updated: when it raises, step() puts the step
    counters and moments back, so that the next step is the one an optimizer that never saw the
    failure takes."""
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))
    net, reference = policy(), policy()
    opt, ref = controlled(net), controlled(reference)
    for o, n in ((opt, net), (ref, reference)):
        o.set_kl_batch(n, x)
        for step in range(steps_before):
            policy_backward(n, x, step)
            o.step()
    state, weights = copy.deepcopy(opt.state_dict()), [p.detach().clone() for p in net.parameters()]

    def fail(*args, **kwargs):
        raise RuntimeError("probe failed")

    policy_backward(net, x, steps_before)
    monkeypatch.setattr(KLControl, "jvp_kl", fail)
    with pytest.raises(RuntimeError, match="probe failed"):
        opt.step()
    monkeypatch.undo()
    after = opt.state_dict()
    assert after["kl_steps"] == state["kl_steps"] == steps_before
    assert after["state"].keys() == state["state"].keys()
    for index, entry in state["state"].items():
        assert after["state"][index].keys() == entry.keys()
        for key, value in entry.items():
            assert torch.equal(after["state"][index][key], value) if isinstance(
                value, torch.Tensor) else after["state"][index][key] == value, (index, key)
    assert all(torch.equal(a, p) for a, p in zip(weights, net.parameters(), strict=True))

    for o, n in ((opt, net), (ref, reference)):  # the gradients hold Δ now: computed again
        policy_backward(n, x, steps_before)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            o.step()
    assert [opt.last_step[k] for k in ("predicted_kl", "gamma", "kl_probed")] == [
        ref.last_step[k] for k in ("predicted_kl", "gamma", "kl_probed")]
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), reference.parameters(),
                                                 strict=True))
