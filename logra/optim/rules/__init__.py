"""Reconstruction rules: how LoGRA turns a sketched matrix's moments into its Δ.

A rule is one object, registered by name in `RULES` (`register`): `LoGRA(reconstruction=name)`,
the hyperparameter checks, the batching of same-shaped matrices and the DDP communication hook
all read it. It declares what it needs (`Rule`: does it read G only through the sketches, has
it a stacked form) and does its work in `updates`, from the step's sketches (`sketch`). The
kit's rules, one module each, with their math:

    gain       diag(√s) G diag(√c): two-sided channel scaling (default)     `rules.gain`
    nystrom    m̂_R (Pᵀ m̂_R)^† m̂_L / (√V̂ + ε): generalized Nyström          `rules.nystrom`
    blend      (G + P (m̂_L − L)) diag(φ): the momentum in span(P)           `rules.blend`
    subspace   P u_L + (G − P L) diag(ζφ): Fira                              `rules.subspace`
    channel    ζ diag(s) G or ζ G diag(c): APOLLO                            `rules.channel`

Unsketched tensors step as AdamW (`DENSE`). Adding a rule is one module: a `Rule` (or
`MatrixRule`, one matrix at a time from a `SketchStep`) subclass with a `name`, decorated with
`register`, imported before the optimizer is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logra.optim.rules import blend, channel, gain, nystrom, subspace  # noqa: F401 (registers)
from logra.optim.rules.base import (
    RULES,
    MatrixRule,
    Rule,
    Sketches,
    SketchStep,
    StepContext,
    register,
    sketch,
    sketch_step,
)
from logra.optim.rules.dense import DENSE
from logra.optim.updates import Update

if TYPE_CHECKING:
    from logra.optim.units import Unit

def rule(name: str) -> Rule:
    """The registered rule `name`; ValueError naming the registered ones."""
    if name not in RULES:
        raise ValueError(f"Invalid reconstruction: {name!r} (one of {tuple(RULES)})")
    return RULES[name]


def rule_of(unit: Unit) -> Rule:
    """The rule a unit steps by: its group's reconstruction if sketched, else AdamW's."""
    return rule(unit.slots[0].group["reconstruction"]) if unit.sketched else DENSE


def unit_updates(units: list[Unit], sketches: list[Sketches | None],
                 step: StepContext) -> list[Update]:
    """Update every unit's moments (gated by `step.gate`) and return the Updates that yield
    their Δ, in unit order; each rule is handed all of its units at once."""
    work: dict[int, tuple[Rule, list[int]]] = {}
    for i, unit in enumerate(units):
        r = rule_of(unit)
        work.setdefault(id(r), (r, []))[1].append(i)
    updates: list[Update] = [None] * len(units)  # type: ignore[list-item]
    for r, indices in work.values():
        for i, update in zip(indices, r.updates([(units[i], sketches[i]) for i in indices], step),
                             strict=True):
            updates[i] = update
    return updates


__all__ = ["DENSE", "RULES", "MatrixRule", "Rule", "SketchStep", "Sketches",
           "StepContext", "register", "rule", "rule_of", "sketch", "sketch_step", "unit_updates"]
