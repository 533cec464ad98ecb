"""The sketch moments of a gain family packed in a few buffers: one kernel per Adam operation.

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
"""

from __future__ import annotations

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
        return len(states) == len(self.views) and all(
            state[name] is view for state, views in zip(states, self.views, strict=True)
            for name, view in zip(SKETCH_MOMENTS, views, strict=True))

    def pin(self, states: list[dict[str, Any]]) -> None:
        """Make each matrix's moments in `states` (plain tensors) views into the buffers."""
        for state, views in zip(states, self.views, strict=True):
            state.update(zip(SKETCH_MOMENTS, views, strict=True))
