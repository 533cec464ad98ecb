"""The reconstruction-rule registry: a rule is one object, and adding one is one module.

`logra.optim.rules` registers each rule by name; the optimizer's checks, the batching of
same-shaped matrices (`stacked`) and the DDP communication hook (`sketch_only`) read the rule,
not its name. Here a test module adds a rule in one place, the way a researcher would, and the
optimizer takes it everywhere: accepted by name, stepped by its formula, never stacked when it
has no stacked form, given sketch-only projections only when it declares that it reads G through
the sketches alone. tests/test_step_arithmetic.py and test_momentum_rules.py pin each built-in
rule's arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from logra import LoGRA
from logra.optim import rules
from logra.optim.hyperparameters import RECONSTRUCTIONS
from logra.optim.units import partition, slots_with_grad
from logra.optim.updates import GainUpdate, Update


class ScaledGradient(rules.MatrixRule):
    """U = α G: a rule whose Δ is known by hand, −lr·α·G (the sketch moments still advance)."""

    name = "test-scaled-gradient"
    alpha = 0.5

    def update(self, s: rules.SketchStep) -> Update:
        m, n = s.grad.shape
        return GainUpdate(grad=s.grad, row_factor=torch.full((m,), -s.common["lr"] * self.alpha),
                          col_gain=torch.ones(n), **s.common)


class SketchOnlyScaledGradient(ScaledGradient):
    """The same Δ, declared (for the test's sake) to read G only through its sketches."""

    name = "test-sketch-only"
    sketch_only = True


@pytest.fixture
def registered() -> Iterator[None]:
    """The two test rules registered for one test, then removed again."""
    for cls in (ScaledGradient, SketchOnlyScaledGradient):
        rules.register(cls)
    yield
    for cls in (ScaledGradient, SketchOnlyScaledGradient):
        del rules.RULES[cls.name]


def test_the_kit_registers_its_five_rules_and_their_declarations() -> None:
    assert set(RECONSTRUCTIONS) == {"gain", "nystrom", "blend", "subspace", "channel"}
    assert {n for n, r in rules.RULES.items() if r.sketch_only} == {"nystrom"}
    assert {n for n, r in rules.RULES.items() if r.stacked} == {"gain", "nystrom"}
    assert all(r.name == n for n, r in rules.RULES.items())


def test_an_unregistered_rule_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=r"Invalid reconstruction: 'mystery' \(one of .*'gain'"):
        LoGRA([nn.Parameter(torch.zeros(32, 24))], reconstruction="mystery")


def test_a_rule_needs_a_name_to_register() -> None:
    class Nameless(rules.MatrixRule):
        def update(self, s: rules.SketchStep) -> Update:
            raise AssertionError

    with pytest.raises(TypeError, match="Nameless needs a class attribute `name`"):
        rules.register(Nameless)


@pytest.mark.usefixtures("registered")
@pytest.mark.parametrize("foreach", [True, False])
def test_a_rule_added_in_one_module_steps_by_its_formula(foreach: bool) -> None:
    """Two same-shaped matrices and a bias: the matrices get −lr·α·G (and decoupled weight
    decay), the bias AdamW's step; with `foreach=True` the matrices stay separate units
    because the rule has no stacked form, and both keep sketch moments, not dense ones."""
    torch.manual_seed(0)
    weights = [nn.Parameter(torch.randn(32, 24)) for _ in range(2)]
    bias = nn.Parameter(torch.randn(24))
    before = [w.detach().clone() for w in weights]
    opt = LoGRA([*weights, bias], lr=0.1, weight_decay=0.01, rank=4, foreach=foreach,
                reconstruction=ScaledGradient.name)
    grads = [torch.randn(32, 24) for _ in weights]
    for w, g in zip(weights, grads, strict=True):
        w.grad = g.clone()
    bias.grad = torch.randn(24)
    units = partition(slots_with_grad(opt.param_groups), opt.state)
    assert sorted(len(u.slots) for u in units if u.sketched) == [1, 1]
    opt.step()
    for w, w0, g in zip(weights, before, grads, strict=True):
        torch.testing.assert_close(w.detach(), w0 - 0.1 * 0.5 * g - 0.1 * 0.01 * w0)
        assert set(opt.state[w]) >= {"exp_avg_L", "exp_avg_R"}
        assert "exp_avg" not in opt.state[w]
    assert "exp_avg" in opt.state[bias]


@pytest.mark.usefixtures("registered")
def test_the_comm_hook_plan_follows_the_rules_declaration() -> None:
    """`sketch_only_projections` hands (P, Q) to a rule that reads G only through L and R and
    None to one that reads G itself, whatever their names."""
    w = nn.Parameter(torch.zeros(32, 24))
    for name, sends_sketches in ((ScaledGradient.name, False),
                                 (SketchOnlyScaledGradient.name, True)):
        opt = LoGRA([w], rank=4, reconstruction=name)
        (plan,) = opt.sketch_only_projections([w])
        assert (plan is not None) == sends_sketches
        if sends_sketches:
            assert plan[0].shape == (32, 4) and plan[1].shape == (24, 4)


@pytest.mark.parametrize("shape", [(256, 64), (64, 256)])
def test_the_channel_rule_steps_as_far_as_apollo_at_the_same_rate(shape) -> None:
    """APOLLO's learning rates carry over to the channel rule: fed the same gradients, a
    channel of Δ has about the norm of APOLLO's (whose Gaussian projections divide by ≈‖G[i,:]‖,
    the rule by √(n/r)·‖R[i,:]‖); without the √(r/n) it would be √(64/16) = 2 times longer.
    Rows are the channels of the tall matrix, columns of the wide one, in both."""
    apollo = pytest.importorskip("apollo_torch")
    torch.manual_seed(0)
    weight = torch.randn(shape)
    grads = [torch.randn(shape) * torch.rand(shape[0], 1) for _ in range(3)]

    def last_step(make) -> torch.Tensor:
        param = nn.Parameter(weight.clone())
        opt = make([param])
        for grad in grads:
            before = param.detach().clone()
            param.grad = grad.clone()
            opt.step()
        return param.detach() - before

    ours = last_step(lambda ps: LoGRA(ps, lr=1e-3, rank=16, weight_decay=0.0,
                                      reconstruction="channel"))
    theirs = last_step(lambda ps: apollo.APOLLOAdamW(
        [{"params": ps, "rank": 16, "proj": "random", "scale_type": "channel", "scale": 1.0,
          "update_proj_gap": 200, "proj_type": "std"}], lr=1e-3, weight_decay=0.0))
    dim = 1 if shape[0] >= shape[1] else 0
    ratio = (ours.norm(dim=dim) / theirs.norm(dim=dim)).median().item()
    assert 0.8 < ratio < 1.25, ratio
