"""The work of one LoGRA step: which parameters it updates, which are sketched, which go together.

A step takes every parameter with a gradient (a `Slot`: the parameter, its group and name, and
under FSDP2 its local rows). A parameter W viewed as m×n (shape[0] × rest) is sketched when its
group has `sketch=True` and the sketches store fewer numbers than W:

    k·n + m·r < m·n,    k = r + oversample ≤ m,    r ≤ n            (`sketch_shapes`)

Otherwise, and for 1-D or 0-D tensors, it gets AdamW's dense update.

The slots are then partitioned into `Unit`s updated together. Python time per parameter
dominates for small tensors, memory traffic for large ones, so a parameter is batched when its
group says `foreach=True`, or by default (`foreach=None`) when it has at most BATCH_MAX_NUMEL
elements (CPU_BATCH_MAX_NUMEL on the CPU). Batched sketched matrices of one group, shape and
step form one unit (stacked B×m×n, `logra.optim.batched`), batched dense tensors of one group
and step another (`torch._foreach_*`); every other parameter is a unit of its own. Under the
gain rule the sketch-space work of every sketched unit of one group and step is then done
together (`logra.optim.gain`); the matrix-sized work stays per unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from logra.optim.distributed import RowShard, local, row_shard
from logra.optim.rules import rule

# foreach=None batches tensors of at most this many elements: on an accelerator, where every
# kernel launch costs, BATCH_MAX_NUMEL; on the CPU, where the stacked copies cost memory traffic
# and a launch costs little, fewer. Measured on one CPU thread (interleaved rounds, r = 16,
# diagonal control): proxy-16m steps in 1.2× AdamW(foreach)'s time with 2^16 against 1.56× with
# 2^18; proxy-1m (matrices of ≤ 2^16) is the same either way.
BATCH_MAX_NUMEL = 1 << 18
CPU_BATCH_MAX_NUMEL = 1 << 16


def sketch_shapes(
    shape: tuple[int, ...] | torch.Size, rank: int, oversample: int = 0
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Shapes ((k, n), (m, r)) of the left and right sketches of a parameter, or None.

    None means the parameter gets dense AdamW: it is 1-D (or 0-D), or sketching would not store
    fewer numbers than the parameter has (k·n + m·r ≥ m·n, which includes rank ≥ min(m, n)).
    The memory accountant uses this same rule, so counted and allocated state agree.
    """
    if len(shape) < 2:
        return None
    m, n = shape[0], math.prod(shape[1:])
    k = rank + oversample
    if k > m or rank > n or k * n + m * rank >= m * n:
        return None
    return (k, n), (m, rank)


def is_sketched(group: dict[str, Any], shape: tuple[int, ...] | torch.Size) -> bool:
    """Whether a parameter of `shape` in param group `group` keeps sketch moments."""
    return group["sketch"] and sketch_shapes(shape, group["rank"], group["oversample"]) is not None


@dataclass
class Slot:
    """One parameter with a gradient in this step.

    `weight` and `grad` are what this rank updates and reads: the parameter and its gradient, or
    for an FSDP2 DTensor their local rows (`shard`), views that write through to the DTensor.
    """

    group: dict[str, Any]
    param: Tensor
    key: int  # position in the optimizer's parameter order (projections are keyed by shape)
    name: str
    weight: Tensor
    grad: Tensor
    shard: RowShard | None


@dataclass
class Unit:
    """Parameters updated together: one, or a batch (same group, shape and step)."""

    sketched: bool
    batched: bool
    slots: list[Slot]


def slots_with_grad(param_groups: list[dict[str, Any]]) -> list[Slot]:
    """Parameters with gradients, checked (sparse, complex) before any state changes; a
    non-contiguous gradient is replaced by a contiguous copy."""
    slots, key = [], 0
    for group_index, group in enumerate(param_groups):
        names = group.get("param_names")
        for i, p in enumerate(group["params"]):
            name = names[i] if names else f"group {group_index} parameter {i}"
            if p.grad is not None:
                if p.grad.is_sparse:
                    raise TypeError(f"LoGRA does not support sparse gradients ({name})")
                if p.grad.is_complex():
                    raise TypeError(f"LoGRA does not support complex gradients ({name})")
                if not p.grad.is_contiguous():
                    p.grad = p.grad.contiguous()
                slots.append(Slot(group, p, key, name, local(p), local(p.grad),
                                  row_shard(p, name)))
            key += 1
    return slots


def partition(slots: list[Slot], state: dict[Tensor, dict[str, Any]]) -> list[Unit]:
    """Partition the step's slots into units updated together (module docstring); `state` is
    the optimizer's, read for each parameter's step count (0 before its first step)."""
    units: dict[tuple, Unit] = {}
    for slot in slots:
        foreach = slot.group["foreach"]
        limit = CPU_BATCH_MAX_NUMEL if slot.param.device.type == "cpu" else BATCH_MAX_NUMEL
        batched = slot.param.numel() <= limit if foreach is None else foreach
        sketched = is_sketched(slot.group, slot.param.shape)
        if sketched and not rule(slot.group["reconstruction"]).stacked:
            batched = False  # the rule has no stacked form
        param_state = state[slot.param]
        step = int(param_state["step"].item()) if param_state else 0
        key = ((id(slot.group), sketched, tuple(slot.param.shape) if sketched else (), step,
                slot.shard is None) if batched else (slot.key,))
        units.setdefault(key, Unit(sketched, batched, [])).slots.append(slot)
    return list(units.values())
