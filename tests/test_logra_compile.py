"""The KL control's probe with `torch.compile`d models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from logra import LoGRA

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
