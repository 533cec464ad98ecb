"""The gain rule (the default): the current gradient, rescaled by what Adam does in sketch space.

    u_L = m̂_L / (√v̂_L + ε),  u_R = m̂_R / (√v̂_R + ε)
    c_j = ‖u_L[:,j]‖ / ‖L[:,j]‖,  s_i = ‖u_R[i,:]‖ / ‖R[i,:]‖
    U = diag(√s) G diag(√c)

a two-sided version of APOLLO's channel-wise scaling (Zhu et al. 2024): a positive rescaling of
G, so always a descent direction, full rank every step. The matrices of one param group and step
count are taken together as a family (`logra.optim.gain`: a few kernels for the family instead of
some fifty per matrix), bit for bit the per-matrix arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logra.optim import batched, gain, moments
from logra.optim.distributed import reducer
from logra.optim.packing import PackedMoments
from logra.optim.rules.base import Rule, Sketches, StepContext, register
from logra.optim.updates import GainUpdate, Update, as_matrix

if TYPE_CHECKING:
    from logra.optim.units import Unit


@register
class Gain(Rule):
    name = "gain"
    stacked = True

    def updates(self, work: list[tuple[Unit, Sketches]], step: StepContext) -> list[Update]:
        families: dict[tuple, list[tuple[int, gain.Member]]] = {}
        for i, (unit, sketches) in enumerate(work):
            first = unit.slots[0]
            P, Q, *_, L, R = sketches
            states = [step.sketch_state(s, L[0] if unit.batched else L,
                                        R[0] if unit.batched else R, P, Q) for s in unit.slots]
            member = gain.Member(L=L, R=R, rows=first.param.shape[0],
                                 moments=[moments.sketch_moments(st) for st in states])
            key = (id(first.group), int(states[0]["step"].item()), first.shard is None)
            families.setdefault(key, []).append((i, member))
        updates: list[Update] = [None] * len(work)  # type: ignore[list-item]
        for (_, t, unsharded), family in families.items():
            first = work[family[0][0]][0].slots[0]
            members = [member for _, member in family]
            packed = None  # FSDP2 shards: family_factors packs copies for the step
            if unsharded:
                slots = [s for i, _ in family for s in work[i][0].slots]
                packed = step.pinned(first.group, slots, PackedMoments.gather,
                                     [m for member in members for m in member.moments])
            factors = gain.family_factors(members, first.group, t, step.gate,
                                          reducer(first.shard), packed)
            for (i, _), factor in zip(family, factors, strict=True):
                updates[i] = _update(*work[i], factor)
        return updates


def _update(unit: Unit, sketches: Sketches, factors: gain.GainFactors) -> Update:
    """One unit's Δ from its factors: a matrix's rows a block at a time, or a stack's Δ over its
    stacked gradients."""
    group = unit.slots[0].group
    lr, weight_decay = float(group["lr"]), group["weight_decay"]
    if unit.batched:
        return batched.gain_update([s.weight for s in unit.slots], sketches[2],
                                   factors.row_factor, factors.col_gain, factors.row_weight,
                                   factors.col_weight, lr, weight_decay)
    slot = unit.slots[0]
    return GainUpdate(param=slot.weight, lr=lr, weight_decay=weight_decay,
                      grad=as_matrix(slot.grad), row_factor=factors.row_factor,
                      col_gain=factors.col_gain, row_weight=factors.row_weight,
                      col_weight=factors.col_weight)
