"""What every reconstruction rule shares: the `Rule` interface, its registry, and a step's work.

A step hands each rule the units (`logra.optim.units`) whose param group names it, with their
sketches (`sketch`), and a `StepContext`: the optimizer's state, its projection bank and
moment packings, and the step's finiteness gate. The rule updates their moments in place (gated)
and returns, unit by unit, the `Update` that yields Δ (`logra.optim.updates`). The prelude most
rules share, one matrix at a time, is `sketch_step`:

    m_L ← β₁ m_L + (1−β₁) L     v_L ← β₂ v_L + (1−β₂) L²      (and the same for R; gated)
    bias1 = 1 − β₁ᵗ,  bias2 = 1 − β₂ᵗ
    ρ, κ = energies(v̂_R, v̂_L)   the Fisher weights of the diagonal KL estimate (`sketch.energies`)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor

from logra.optim import batched, moments
from logra.optim import sketch as sk
from logra.optim.distributed import reducer
from logra.optim.gate import StepGate
from logra.optim.packing import FlatMoments, PackedMoments, Packings
from logra.optim.projections import ProjectionBank
from logra.optim.updates import Update, as_matrix

if TYPE_CHECKING:
    from logra.optim.units import Slot, Unit

# A unit's sketches: (P, Q, L, R), or (P, Q, G, L, R) with its B gradients stacked (B×m×n) when
# the unit is batched; P: m×k (this rank's rows under FSDP2), Q: n×r, L: k×n, R: m×r (B× each).
Sketches = tuple[Tensor, ...]


@dataclass
class StepContext:
    """What a rule reads and keeps of the optimizer during one step."""

    state: dict[Tensor, dict[str, Any]]  # the optimizer's per-parameter state
    bank: ProjectionBank
    packings: Packings
    gate: StepGate

    def sketch_state(self, slot: Slot, L: Tensor, R: Tensor, P: Tensor, Q: Tensor) -> dict:
        """The slot's sketch-moment state (`logra.optim.moments`), created on first use, its
        step advanced, and on the first step of a refresh epoch its moments carried into P, Q
        (P: this rank's rows of P when sharded)."""
        m = slot.param.shape[0]
        state = moments.sketch_state(self.state[slot.param], L, R, slot.shard, rows=m)
        epoch = self.bank.epoch(int(state["step"].item()))
        if epoch != state["epoch"]:
            group = slot.group
            k = group["rank"] + group["oversample"]
            P_old = self.bank.draw(group["seed"], 0, m, k, state["epoch"], slot.param.device)
            if slot.shard is not None:
                P_old = P_old[slot.shard.slice]
            moments.transport(state, P_old, P, Q, group["rtol"], reducer(slot.shard), rows=m)
            state["epoch"] = epoch
        return state

    def pinned(self, group: dict[str, Any], slots: list[Slot],
               gather: Callable[..., PackedMoments | FlatMoments],
               *moments: list) -> PackedMoments | FlatMoments:
        """The packing of a unit's moments (`logra.optim.packing`): last step's while the
        slots' states still hold its views, else `gather(*moments)` and pinned; kept for the
        next step."""
        return self.packings.pinned((id(group), *(id(s.param) for s in slots)),
                                    [self.state[s.param] for s in slots], gather, *moments)


class Rule(ABC):
    """A reconstruction rule: how a sketched matrix's moments and gradient become its Δ.

    `sketch_only`: Δ reads the gradient only through L = Pᵀ G and R = G Q, so a DDP
    communication hook may all-reduce (L, R) instead of G (`logra.optim.comm_hook`).
    `stacked`: the rule has a form for B same-shaped matrices stacked (`logra.optim.batched`),
    so `foreach` batches them into one unit; without it every matrix is a unit of its own.
    """

    name: ClassVar[str]
    sketch_only: ClassVar[bool] = False
    stacked: ClassVar[bool] = False

    @abstractmethod
    def updates(self, work: list[tuple[Unit, Sketches]], step: StepContext) -> list[Update]:
        """Update the moments of this step's units of the rule (gated by `step.gate`) and
        return the Update that yields each one's Δ, in the order of `work`."""


RULES: dict[str, Rule] = {}


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: make `LoGRA(reconstruction=cls.name)` use an instance of `cls`."""
    if not isinstance(getattr(cls, "name", None), str):
        raise TypeError(f"{cls.__name__} needs a class attribute `name` (a str) to be registered")
    RULES[cls.name] = cls()
    return cls


def sketch(unit: Unit, state: dict[Tensor, dict[str, Any]], bank: ProjectionBank
           ) -> Sketches | None:
    """The sketches of a sketched unit's gradients (`Sketches`), changing no state; P and Q of
    the refresh epoch its coming step falls in. None for a dense unit (nothing to sketch).

    For row shards P is the shard's rows of P, L the all-reduced sum of the shards' Pᵢᵀ Gᵢ and
    R the shard's rows of G Q.
    """
    if not unit.sketched:
        return None
    first = unit.slots[0]
    param_state = state[first.param]
    step = int(param_state["step"].item()) if param_state else 0
    P, Q = bank.pair(first.group, first.param, step + 1)
    reduce = reducer(first.shard)
    if first.shard is not None:
        P = P[first.shard.slice]
    if not unit.batched:
        L, R = sk.sketch(as_matrix(first.grad), P, Q)
        return P, Q, reduce(L), R
    G, L, R = batched.stacked_sketch([s.grad for s in unit.slots], P, Q)
    return P, Q, G, reduce(L), R


@dataclass(kw_only=True)
class SketchStep:
    """One matrix's step once its sketch moments have moved: what `MatrixRule.update` reads.

    `grad` is G as an m×n matrix (this rank's rows; unnegated under `maximize`, while L and R
    are negated); `common` holds the keyword arguments every rank-one-Fisher `Update` takes
    (the weight, lr, weight decay, and the Fisher weights ρ/Σρ: (m,), κ: (n,)).
    """

    slot: Slot
    state: dict[str, Any]
    P: Tensor
    L: Tensor
    R: Tensor
    grad: Tensor
    m_L: Tensor
    v_L: Tensor
    m_R: Tensor
    v_R: Tensor
    bias1: float
    bias2: float
    reduce: sk.Reduce
    gate: StepGate
    common: dict[str, Any]

    @property
    def group(self) -> dict[str, Any]:
        return self.slot.group

    @property
    def grad_sign(self) -> float:
        """−1 under `maximize` (Δ ascends along the unnegated G), else 1."""
        return -1.0 if self.group["maximize"] else 1.0

    def left_adam(self) -> tuple[Tensor, Tensor]:
        """m̂_L (k×n) and Adam's direction in the left sketch u_L = m̂_L / (√v̂_L + ε)."""
        m_hat = self.m_L / self.bias1
        return m_hat, m_hat / (self.v_L / self.bias2).sqrt_().add_(self.group["eps"])

    def right_adam(self) -> Tensor:
        """Adam's direction in the right sketch u_R = m̂_R / (√v̂_R + ε) (m×r)."""
        return (self.m_R / self.bias1).div_((self.v_R / self.bias2).sqrt_()
                                            .add_(self.group["eps"]))


def sketch_step(slot: Slot, P: Tensor, Q: Tensor, L: Tensor, R: Tensor,
                step: StepContext) -> SketchStep:
    """Advance one matrix's sketch moments with (L, R), gated (module docstring; L and R are
    negated in place under `maximize`), and return what its rule builds Δ from."""
    group = slot.group
    beta1, beta2 = group["betas"]
    state = step.sketch_state(slot, L, R, P, Q)
    t = int(state["step"].item())
    if group["maximize"]:
        L, R = L.neg_(), R.neg_()
    m_L, v_L, m_R, v_R = moments.sketch_moments(state)
    step.gate.update_moments([m_L, m_R], [v_L, v_R], [L, R], beta1, beta2)
    bias1, bias2 = 1 - beta1**t, 1 - beta2**t
    rho, kappa = sk.energies(v_R / bias2, v_L / bias2, rows=slot.param.shape[0])
    reduce = reducer(slot.shard)
    common = dict(param=slot.weight, lr=float(group["lr"]), weight_decay=group["weight_decay"],
                  row_weight=rho / reduce(rho.sum()).clamp_min(1e-30), col_weight=kappa)
    return SketchStep(slot=slot, state=state, P=P, L=L, R=R, grad=as_matrix(slot.grad),
                      m_L=m_L, v_L=v_L, m_R=m_R, v_R=v_R, bias1=bias1, bias2=bias2,
                      reduce=reduce, gate=step.gate, common=common)


class MatrixRule(Rule):
    """A rule that builds each matrix's Δ alone, from its `SketchStep`."""

    def updates(self, work: list[tuple[Unit, Sketches]], step: StepContext) -> list[Update]:
        return [self.update(sketch_step(unit.slots[0], *sketches, step))
                for unit, sketches in work]

    @abstractmethod
    def update(self, s: SketchStep) -> Update:
        """The Update that yields the matrix's Δ."""
