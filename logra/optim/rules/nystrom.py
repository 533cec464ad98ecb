"""The Nyström rule: the report's "pseudo-inverse coupling" read literally.

    M̂ = m̂_R (Pᵀ m̂_R)^† m̂_L        generalized Nyström (truncated pseudo-inverse, `rtol`)
    V̂_ij = ρ_i κ_j / Σρ             from the sketches' second moments (`sketch.energies`)
    U = M̂ / (√V̂ + ε)

Exact while the first moment has rank ≤ r; an oblique projection above that, which can point
uphill (docs/design.md §1.2). It reads G only through L and R, so under DDP the sketches can be
all-reduced instead of G (`logra.optim.comm_hook`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logra.optim import batched, moments
from logra.optim import sketch as sk
from logra.optim.distributed import local, reducer
from logra.optim.rules.base import (
    MatrixRule,
    Sketches,
    SketchStep,
    StepContext,
    register,
    sketch_step,
)
from logra.optim.updates import NystromUpdate, Update

if TYPE_CHECKING:
    from logra.optim.units import Unit


@register
class Nystrom(MatrixRule):
    name = "nystrom"
    sketch_only = True
    stacked = True

    def updates(self, work: list[tuple[Unit, Sketches]], step: StepContext) -> list[Update]:
        return [_stacked(unit, *sketches, step) if unit.batched
                else self.update(sketch_step(unit.slots[0], *sketches, step))
                for unit, sketches in work]

    def update(self, s: SketchStep) -> Update:
        left = s.m_R / s.bias1
        right = sk.nystrom_right(left, s.m_L / s.bias1, s.P, s.group["rtol"], s.reduce)
        return NystromUpdate(left=left, right=right, eps=s.group["eps"], **s.common)


def _stacked(unit: Unit, P, Q, G, L, R, step: StepContext) -> batched.StackedUpdate:
    """Moments of B same-shaped matrices by foreach ops; their Δ on the stack."""
    slots = unit.slots
    states = [step.sketch_state(s, L[0], R[0], P, Q) for s in slots]
    stacked_moments = ([local(s[name]) for s in states] for name in moments.SKETCH_MOMENTS)
    return batched.StackedUpdate.nystrom(
        [s.weight for s in slots], G, L, R, P, *stacked_moments, int(states[0]["step"].item()),
        slots[0].param.shape[0], slots[0].group, step.gate, reducer(slots[0].shard))
