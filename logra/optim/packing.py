"""Moments packed in a few buffers, so that one kernel does an Adam operation for many tensors.

A family (`logra.optim.gain`) holds F sketched matrices W_1 … W_F (a stacked unit contributes
its B matrices, consecutively) with moments m_L, v_L (k×n_f) and m_R, v_R (m_f×r). Packed:

    m_R, v_R          (Σ_f m_f) × r     every matrix's R-side moments, stacked along the rows
    m_L[n], v_L[n]    F_n × k × n       the L-side moments of the F_n matrices of width n

both in family order: the layout in which `gain.family_factors` concatenates the sketches, so
each moment update, direction and energy is one kernel over the family instead of one per
matrix (on a model of many small matrices, most of a step's time is those launches).

The optimizer pins a family's packing (`pin`): each matrix's moments in `optimizer.state`
become views into the buffers, so the state keeps AdamW's per-parameter layout (a checkpoint
saves and loads as before) while the step updates the buffers. A state entry that is no longer
the view the packing put there (after `load_state_dict`, or a user's assignment) is noticed at
the next step (`is_pinned`) and the family is packed again from the state's values. A family
whose moments cannot be views (FSDP2's DTensor shards) is packed into copies for one step and
copied back (`gather`, `scatter`). Elementwise kernels give every element the same result
wherever it lies in a tensor, so a packed family updates its moments bit for bit as matrix by
matrix (tests/test_gain_family.py).

The dense tensors of a batched unit (1-D weights and biases with one step count) pack the same
way into two flat buffers (`FlatMoments`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from logra.optim.moments import SKETCH_MOMENTS

Moments = tuple[Tensor, Tensor, Tensor, Tensor]  # (m_L, v_L, m_R, v_R) of one matrix


@dataclass(kw_only=True)
class PackedMoments:
    """A family's moments in buffers (module docstring) and each matrix's views into them."""

    m_R: Tensor  # (Σ m_f) × r
    v_R: Tensor
    m_L: dict[int, Tensor]  # width n -> F_n × k × n
    v_L: dict[int, Tensor]
    widths: dict[int, list[int]]  # width n -> the family indices of its matrices, in order
    views: list[Moments]  # each matrix's (m_L, v_L, m_R, v_R) as views into the buffers

    @classmethod
    def gather(cls, moments: list[Moments]) -> PackedMoments:
        """New buffers holding copies of each matrix's moments (in family order)."""
        widths: dict[int, list[int]] = {}
        for i, (m_L, *_) in enumerate(moments):
            widths.setdefault(m_L.shape[1], []).append(i)
        m_R, v_R = (torch.cat([x[side] for x in moments]) for side in (2, 3))
        m_L, v_L = ({n: torch.stack([moments[i][side] for i in indices])
                     for n, indices in widths.items()} for side in (0, 1))
        views: list[Moments | None] = [None] * len(moments)
        row = 0
        position = {i: (n, j) for n, indices in widths.items() for j, i in enumerate(indices)}
        for i, x in enumerate(moments):
            n, j = position[i]
            rows = slice(row, row + x[2].shape[0])
            views[i] = (m_L[n][j], v_L[n][j], m_R[rows], v_R[rows])
            row = rows.stop
        return cls(m_R=m_R, v_R=v_R, m_L=m_L, v_L=v_L, widths=widths, views=views)

    def scatter(self, moments: list[Moments]) -> None:
        """Copy the buffers back into each matrix's own moments (after a `gather`)."""
        for own, packed in zip(moments, self.views, strict=True):
            for target, source in zip(own, packed, strict=True):
                target.copy_(source)

    def is_pinned(self, states: list[dict[str, Any]]) -> bool:
        """Whether each matrix's state still holds this packing's views (`pin`)."""
        return _is_pinned(states, SKETCH_MOMENTS, self.views)

    def pin(self, states: list[dict[str, Any]]) -> None:
        """Make each matrix's moments in `states` (plain tensors) views into the buffers."""
        _pin(states, SKETCH_MOMENTS, self.views)


DENSE_MOMENTS = ("exp_avg", "exp_avg_sq")


@dataclass(kw_only=True)
class FlatMoments:
    """AdamW's moments of several dense tensors (one step count: a batched dense unit) in two
    flat buffers of Σ numel numbers, the tensors in order; each tensor's moments are views
    shaped as it. Pinned and checked as `PackedMoments` are."""

    exp_avg: Tensor  # Σ numel
    exp_avg_sq: Tensor
    views: list[tuple[Tensor, Tensor]]  # each tensor's (exp_avg, exp_avg_sq)

    @classmethod
    def gather(cls, exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor]) -> FlatMoments:
        """New buffers holding copies of the moments."""
        exp_avg, exp_avg_sq = (torch.cat([t.reshape(-1) for t in side])
                               for side in (exp_avgs, exp_avg_sqs))
        sizes = [t.numel() for t in exp_avgs]
        views = [(a.view_as(t), b.view_as(t)) for a, b, t in zip(
            exp_avg.split(sizes), exp_avg_sq.split(sizes), exp_avgs, strict=True)]
        return cls(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, views=views)

    def scatter(self, exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor]) -> None:
        """Copy the buffers back into each tensor's own moments (after a `gather`)."""
        for (a, b), own_a, own_b in zip(self.views, exp_avgs, exp_avg_sqs, strict=True):
            own_a.copy_(a)
            own_b.copy_(b)

    def is_pinned(self, states: list[dict[str, Any]]) -> bool:
        return _is_pinned(states, DENSE_MOMENTS, self.views)

    def pin(self, states: list[dict[str, Any]]) -> None:
        _pin(states, DENSE_MOMENTS, self.views)


class Packings:
    """Each unit's packing kept from one step to the next, keyed by the caller (a group and the
    unit's parameters). Inside `step()`, `pinned` reuses a unit's packing while its states still
    hold the packing's views, else gathers the states' values into new buffers and pins them;
    when the step ends, only the packings used in it are kept, so a unit not stepped lets its
    buffers go (a step that raises keeps the previous step's)."""

    def __init__(self) -> None:
        self._kept: dict[tuple, PackedMoments | FlatMoments] = {}
        self._used: dict[tuple, PackedMoments | FlatMoments] = {}

    @contextmanager
    def step(self) -> Iterator[None]:
        self._used = {}
        yield
        self._kept, self._used = self._used, {}

    def pinned(self, key: tuple, states: list[dict[str, Any]],
               gather: Callable[..., PackedMoments | FlatMoments],
               *moments: list) -> PackedMoments | FlatMoments:
        """The packing of the unit `key` whose moments live in `states`: last step's while
        still pinned, else `gather(*moments)` pinned into `states`."""
        packed = self._kept.get(key)
        if packed is None or not packed.is_pinned(states):
            packed = gather(*moments)
            packed.pin(states)
        self._used[key] = packed
        return packed

    def clear(self) -> None:
        """Forget every packing (the states' moments are packed again when next stepped)."""
        self._kept.clear()
        self._used.clear()


def _is_pinned(states: list[dict[str, Any]], names: tuple[str, ...],
               views: list[tuple[Tensor, ...]]) -> bool:
    return len(states) == len(views) and all(
        state[name] is view for state, own in zip(states, views, strict=True)
        for name, view in zip(names, own, strict=True))


def _pin(states: list[dict[str, Any]], names: tuple[str, ...],
         views: list[tuple[Tensor, ...]]) -> None:
    for state, own in zip(states, views, strict=True):
        state.update(zip(names, own, strict=True))
