"""No silent substitutions: where LoGRA cannot do what it was asked, it warns or raises, naming
the parameter and what happened."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from logra import LoGRA


def test_a_rank_that_does_not_fit_a_matrix_warns_naming_it() -> None:
    """rank 16 does not fit a conv weight viewed 8×27 (16 > 8 rows) nor a 24×24 matrix (its
    sketches would hold 16·48 ≥ 24·24 numbers): both keep dense AdamW moments, and say so."""
    torch.manual_seed(0)
    conv, small, large = nn.Conv2d(3, 8, 3), nn.Linear(24, 24), nn.Linear(64, 96)
    with pytest.warns(UserWarning, match=r"rank=16 .* 2 matrices.*conv\.weight \(8, 3, 3, 3\), "
                                         r"small\.weight \(24, 24\)"):
        LoGRA([("conv.weight", conv.weight), ("conv.bias", conv.bias),
               ("small.weight", small.weight), ("large.weight", large.weight)], rank=16)
    with pytest.warns(UserWarning, match=r"rank=40 .* 1 matrices.*parameter 0 \(96, 64\)"):
        LoGRA([large.weight], rank=40)  # 40·(96 + 64) ≥ 96·64
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fitting rank, vectors, a dense group: nothing to say
        opt = LoGRA([{"params": [large.weight, large.bias]},
                     {"params": [conv.weight, small.weight], "sketch": False}], rank=16)
        opt.add_param_group({"params": [small.bias]})
    with pytest.warns(UserWarning, match="rank=16"):  # a group added later is checked too
        opt.add_param_group({"params": [small.weight.detach().clone().requires_grad_()]})


def stepped(rank: int) -> tuple[nn.Module, LoGRA]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(40, 48), nn.Tanh(), nn.Linear(48, 32))
    opt = LoGRA(net.parameters(), lr=1e-2, rank=rank, predicted_kl_threshold=None)
    net(torch.randn(8, 40)).square().mean().backward()
    opt.step()
    return net, opt


def test_a_state_of_another_rank_is_refused_naming_both() -> None:
    """Loading a rank-8 state into a rank-4 optimizer made it rank 8 (torch takes the saved
    groups' hyperparameters): refused instead, before anything changes."""
    _, saved = stepped(rank=8)
    net, opt = stepped(rank=4)
    before = {p: {k: v.clone() for k, v in s.items() if isinstance(v, torch.Tensor)}
              for p, s in opt.state.items()}
    with pytest.raises(ValueError, match=r"saved with rank=8.*has rank=4.*rank=8 to resume"):
        opt.load_state_dict(saved.state_dict())
    assert opt.param_groups[0]["rank"] == 4
    assert all(torch.equal(v, opt.state[p][k]) for p, s in before.items() for k, v in s.items())
    resumed = LoGRA(net.parameters(), lr=1e-2, rank=8, predicted_kl_threshold=None)
    resumed.load_state_dict(saved.state_dict())  # the saved rank loads
    assert resumed.param_groups[0]["rank"] == 8


@pytest.mark.parametrize("outputs", [1, None])
def test_the_probe_refuses_a_model_without_logits(outputs: int | None) -> None:
    """A regression model's output, (B, 1) or (B,), is no categorical policy: its softmax KL
    is 0 (or spans the batch) and would never clip. The step raises, leaving no state."""
    torch.manual_seed(0)
    head = nn.Linear(16, 1)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), head,
                          *([nn.Flatten(0)] if outputs is None else []))
    opt = LoGRA(model.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-4)
    opt.attach(model)
    x, y = torch.randn(32, 8), torch.randn(32)
    (model(x).reshape(-1) - y).square().mean().backward()
    # (the probe replays every 4th row of the batch: 8 of 32)
    with pytest.raises(ValueError, match=r"output of shape \(8,( 1)?\).*predicted_kl_threshold"):
        opt.step()
    assert not opt.state


def test_the_naive_projection_refuses_a_state_of_another_rank() -> None:
    """RandomProjectionAdam took the saved groups' rank as torch does: refused, unchanged."""
    from logra.optim import RandomProjectionAdam

    torch.manual_seed(0)
    net = nn.Linear(32, 24)
    saved = RandomProjectionAdam(net.parameters(), lr=1e-2, rank=8)
    net(torch.randn(4, 32)).square().sum().backward()
    saved.step()
    opt = RandomProjectionAdam(net.parameters(), lr=1e-2, rank=4)
    with pytest.raises(ValueError, match=r"saved with rank=8.*has rank=4"):
        opt.load_state_dict(saved.state_dict())
    assert opt.param_groups[0]["rank"] == 4 and not opt.state
    same = RandomProjectionAdam(net.parameters(), lr=1e-2, rank=8)
    same.load_state_dict(saved.state_dict())
    assert same.param_groups[0]["rank"] == 8
