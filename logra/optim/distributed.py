"""What LoGRA's step needs from other ranks when parameters are sharded, and nothing otherwise.

FSDP2 (`torch.distributed.fsdp.fully_shard`) makes every parameter a DTensor sharded on dim 0
over a 1-D device mesh: rank i holds rows [o_i, o_i + m_i) of W (viewed m×n) and of its gradient
(FSDP2 reduce-scatters the mean gradient). The step works on those local rows. With
P_i = P[o_i : o_i + m_i] the rows of P that meet them, the pieces that span rows are sums of
per-shard terms, and each costs one all-reduce:

    L  = Pᵀ G = Σ_i P_iᵀ G_i              left sketch, k×n
    C  = Pᵀ m̂_R = Σ_i P_iᵀ (m̂_R)_i        Nyström core, k×r
    Σρ = Σ_i Σ_{rows of i} ρ              normalization of the rank-1 Fisher V̂ = ρκᵀ/Σρ
    KL̂ = Σ_i ½ Σ_{rows of i} F Δ²          the predicted KL: one scalar for the whole step
    finite                                 one flag for the whole step, so all ranks skip alike

Everything else is row-local: R_i = G_i Q, the moments m_R, v_R (sharded like W), the row
gains, Δ's rows. The left moments m_L, v_L (k×n) are replicated on every rank, so each rank keeps
2·k·n + 2·m_i·r state numbers instead of the single process's 2·(k·n + m·r) / w share.
In the optimizer's state they are DTensors (Replicate and Shard(0) on the parameter's mesh), so
`torch.distributed.checkpoint` saves one copy of m_L and every rank's rows of m_R.

Without a process group (a single process, or plain replicated tensors as under DDP) every helper
here is the identity. `torch.distributed.tensor` (0.5 s to import) is only looked up, never
imported: a DTensor cannot exist before its module is.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from logra.optim.sketch import identity

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True)
class RowShard:
    """This rank's rows [start, start + rows) of a parameter sharded on dim 0 over `mesh`."""

    mesh: DeviceMesh
    start: int
    rows: int

    @property
    def group(self) -> dist.ProcessGroup:
        return self.mesh.get_group()

    @property
    def slice(self) -> slice:
        return slice(self.start, self.start + self.rows)


def row_shard(param: Tensor, name: str) -> RowShard | None:
    """The local rows of a DTensor parameter (FSDP2's Shard(0) on a 1-D mesh); None if plain.

    The row offset follows `torch.chunk`, which FSDP2 and DTensor's Shard(0) both use: chunks of
    ⌈m/w⌉ rows, the last ones shorter or empty. Other layouts (HSDP's 2-D mesh, Shard(1), tensor
    parallelism) are refused with an error naming the parameter.
    """
    if not is_dtensor(param):
        return None
    from torch.distributed.tensor import Shard

    mesh, placements = param.device_mesh, tuple(param.placements)
    if mesh.ndim != 1 or placements != (Shard(0),):
        raise NotImplementedError(
            f"LoGRA supports DTensor parameters sharded on dim 0 over a 1-D mesh (FSDP2's "
            f"default); {name} has placements {placements} on a {mesh.ndim}-D mesh"
        )
    m, world, rank = param.shape[0], mesh.size(), mesh.get_local_rank()
    chunk = math.ceil(m / world)
    start = min(rank * chunk, m)
    rows = param.to_local().shape[0]
    if rows != min(chunk, m - start):
        raise RuntimeError(
            f"{name}: this rank holds {rows} rows, not the rows {start}:"
            f"{start + min(chunk, m - start)} of {m} that torch.chunk (FSDP2's layout) assigns"
        )
    return RowShard(mesh, start, rows)


def mesh_group(shards: list[RowShard | None]) -> dist.ProcessGroup | None:
    """The process group of the sharded parameters' mesh (one for all of them), or None when no
    parameter is sharded."""
    meshes = {shard.mesh for shard in shards if shard is not None}
    if len(meshes) > 1:
        raise NotImplementedError("LoGRA supports DTensor parameters on one device mesh only")
    return meshes.pop().get_group() if meshes else None


def is_dtensor(tensor: Tensor) -> bool:
    """Whether `tensor` is a DTensor, without importing `torch.distributed.tensor`."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def local(tensor: Tensor) -> Tensor:
    """The local part of a DTensor (a view: writing it writes the DTensor), else the tensor."""
    return tensor.to_local() if is_dtensor(tensor) else tensor


def all_reduce_sum(tensor: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """Sum `tensor` over `group` in place and return it; the identity without a group."""
    if group is not None:
        dist.all_reduce(tensor, group=group)
    return tensor


def reducer(shard: RowShard | None) -> Callable[[Tensor], Tensor]:
    """The `reduce` of `logra.optim.sketch` for a parameter: a sum over its mesh if sharded."""
    if shard is None:
        return identity
    return partial(all_reduce_sum, group=shard.group)


def true_on_every_rank(flag: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """Whether a boolean scalar is true on every rank of `group`, as a boolean scalar on the
    flag's device (the flag itself without a group): no host synchronization."""
    if group is None:
        return flag
    flag = flag.to(torch.float32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return flag.bool()


def distribute_state(
    tensor: Tensor, shard: RowShard | None, sharded_rows: bool, rows: int
) -> Tensor:
    """A state tensor laid out like its parameter: Shard(0) with `rows` global rows if
    `sharded_rows` (the right moments), else Replicate (the left moments); unchanged if plain."""
    if shard is None:
        return tensor
    from torch.distributed.tensor import DTensor, Replicate, Shard

    placement = Shard(0) if sharded_rows else Replicate()
    shape = (rows, *tensor.shape[1:]) if sharded_rows else tensor.shape
    return DTensor.from_local(tensor, shard.mesh, (placement,), run_check=False,
                              shape=torch.Size(shape), stride=_contiguous_stride(shape))


def _contiguous_stride(shape: tuple[int, ...] | torch.Size) -> tuple[int, ...]:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= size
    return tuple(reversed(stride))
