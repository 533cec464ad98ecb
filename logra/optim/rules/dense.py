"""AdamW's exact update, for the tensors LoGRA does not sketch (1-D, too small, `sketch=False`).

    m ← β₁ m + (1−β₁) g,   v ← β₂ v + (1−β₂) g²,   U = m̂ / (√v̂ + ε)      (fp32 moments)

Not a reconstruction rule (nothing is reconstructed), but stepped through the same interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logra.optim import batched, moments
from logra.optim.distributed import local
from logra.optim.packing import FlatMoments
from logra.optim.rules.base import Rule, Sketches, StepContext
from logra.optim.updates import DenseUpdate, Update, as_matrix

if TYPE_CHECKING:
    from logra.optim.units import Slot, Unit


class Dense(Rule):
    name = "dense"

    def updates(self, work: list[tuple[Unit, Sketches | None]],
                step: StepContext) -> list[Update]:
        return [_foreach(unit.slots, step) if unit.batched else _single(unit.slots[0], step)
                for unit, _ in work]


DENSE = Dense()


def _single(slot: Slot, step: StepContext) -> Update:
    """AdamW's moments of one tensor, advanced (gated); its Update."""
    group = slot.group
    beta1, beta2 = group["betas"]
    state = moments.dense_state(step.state[slot.param], slot.param)
    t = int(state["step"].item())
    grad = slot.grad.float()
    if group["maximize"]:
        grad = -grad
    exp_avg, exp_avg_sq = local(state["exp_avg"]), local(state["exp_avg_sq"])
    step.gate.update_moments([exp_avg], [exp_avg_sq], [grad], beta1, beta2)
    return DenseUpdate(
        param=slot.weight, lr=float(group["lr"]), weight_decay=group["weight_decay"],
        exp_avg=as_matrix(exp_avg), exp_avg_sq=as_matrix(exp_avg_sq),
        bias1=1 - beta1**t, bias2=1 - beta2**t, eps=group["eps"],
    )


def _foreach(slots: list[Slot], step: StepContext) -> batched.ForeachDenseUpdate:
    """AdamW's moments of dense tensors with one step count, packed flat (pinned as views of
    the buffers, or packed into copies for the step under FSDP2); their Update."""
    states = [moments.dense_state(step.state[s.param], s.param) for s in slots]
    own = [local(st["exp_avg"]) for st in states], [local(st["exp_avg_sq"]) for st in states]
    sharded = slots[0].shard is not None
    packed = (FlatMoments.gather(*own) if sharded
              else step.pinned(slots[0].group, slots, FlatMoments.gather, *own))
    update = batched.ForeachDenseUpdate.build(
        [s.weight for s in slots], [s.grad for s in slots], packed,
        int(states[0]["step"].item()), slots[0].group, step.gate)
    if sharded:
        packed.scatter(*own)
    return update
