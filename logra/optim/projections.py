"""LoGRA's projection bank: the seeded orthonormal P and Q of every sketched shape, per epoch.

A sketched matrix W ∈ R^{m×n} (a tensor of more dims viewed as shape[0] × rest) is sketched as
L = Pᵀ G (k×n) and R = G Q (m×r) with orthonormal projections

    P ∈ R^{m×k},  k = rank + oversample         Q ∈ R^{n×r},  r = rank        PᵀP = I, QᵀQ = I

Projections depend on the shape, not on the parameter: every matrix with m rows shares one P,
every matrix with n columns one Q, drawn from (seed, dimension, columns, refresh epoch) by
`sketch.orthonormal_projection` with the seed `sketch.projection_seed(seed, side, dim, cols,
epoch)` (side 0: P, side 1: Q). That is one QR per distinct shape and step, identical on every
rank and after a restart whatever the parameter order, and each matrix's sketch is still a
random projection. The epoch of step t (counted from 1) is ⌊(t − 1) / refresh_every⌋, or 0 when
`refresh_every` is None (fixed projections).

P and Q are drawn and QR-factored on the CPU (bit-identical on every device) and copied to the
parameters' device. `cache` (the optimizer's `cache_projections`) says whether the bank keeps
them between steps: True (the default) keeps each distinct shape's pair on its device until the
next refresh epoch (m·k + n·r fp32 numbers per distinct shape, outside `optimizer.state`); False
regenerates them every step and keeps nothing outside `optimizer.state` (the report's "zero
persistent memory", which offloading needs). Measured on one CPU thread (r = 16, interleaved
rounds: `figures/optimizer_cost.md`, logra-r16 against logra-r16-regenerate), regenerating
costs 0.67 ms a step on proxy-1m (14 % of its step), 0.2 ms on proxy-16m and 0.8 ms on a
Qwen2.5-1.5B layer (under 1 %), for a cache of 0.09, 0.33 and 1.4 MB. On a GPU,
where a step takes about a millisecond, the CPU QRs and their blocking host-to-device copies
are expected to cost more than the step; not measured yet (`python scripts/gpu_checks.py --only
projections` on a GPU measures it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import torch
from torch import Tensor

from logra.optim import sketch as sk


class ProjectionKey(NamedTuple):
    """What one projection is drawn from, and the device its copy lives on."""

    seed: int
    side: int  # 0: P (the rows' side), 1: Q (the columns')
    dim: int  # rows of the projection: m for P, n for Q
    cols: int  # k for P, r for Q
    epoch: int
    device: str


class ProjectionBank:
    """The projections of every sketched shape at the current refresh epoch, drawn on demand and
    kept between steps as `cache` says (module docstring)."""

    def __init__(self, cache: bool, refresh_every: int | None) -> None:
        if not isinstance(cache, bool):
            raise ValueError(f"cache_projections must be True or False, got {cache!r}")
        if refresh_every is not None and (not isinstance(refresh_every, int) or refresh_every < 1):
            raise ValueError(f"refresh_every must be a positive int or None, got {refresh_every}")
        self.cache = cache
        self.refresh_every = refresh_every
        self._kept: dict[ProjectionKey, Tensor] = {}

    @property
    def cached(self) -> Mapping[ProjectionKey, Tensor]:
        """The projections held now (a read-only view): between steps, those `cache` keeps."""
        return MappingProxyType(self._kept)

    @property
    def nbytes(self) -> int:
        """Bytes of the projections held now."""
        return sum(t.nbytes for t in self._kept.values())

    def epoch(self, step: int) -> int:
        """The refresh epoch of step `step` (counted from 1): ⌊(step − 1) / refresh_every⌋."""
        return 0 if self.refresh_every is None else (step - 1) // self.refresh_every

    @staticmethod
    def draw(seed: int, side: int, dim: int, cols: int, epoch: int,
             device: torch.device | str) -> Tensor:
        """A dim×cols orthonormal projection drawn afresh, cached or not (fp32, on `device`)."""
        return sk.orthonormal_projection(
            dim, cols, sk.projection_seed(seed, side, dim, cols, epoch), device)

    def pair(self, group: dict[str, Any], param: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """P (m×k) and Q (n×r) that step `step` of `param` sketches with, from its param group's
        `seed`, `rank` and `oversample` at the step's refresh epoch, on `param`'s device; held
        until `end_step`."""
        m, n = param.shape[0], math.prod(param.shape[1:])
        rank, epoch, device = group["rank"], self.epoch(step), param.device
        return (self._projection(group["seed"], 0, m, rank + group["oversample"], epoch, device),
                self._projection(group["seed"], 1, n, rank, epoch, device))

    def _projection(self, seed: int, side: int, dim: int, cols: int, epoch: int,
                    device: torch.device) -> Tensor:
        key = ProjectionKey(seed, side, dim, cols, epoch, str(device))
        projection = self._kept.get(key)
        if projection is None:
            projection = self.draw(seed, side, dim, cols, epoch, device)
            for stale in [k for k in self._kept if k[:4] == key[:4]]:
                del self._kept[stale]  # an earlier refresh epoch's projection
            self._kept[key] = projection
        return projection

    def end_step(self) -> None:
        """End of a step: forget every projection unless `cache` keeps them."""
        if not self.cache:
            self._kept.clear()

    def clear(self) -> None:
        """Forget every projection (a loaded state may be at another epoch)."""
        self._kept.clear()
