"""A DDP communication hook that all-reduces LoGRA's sketches instead of the gradients.

Sketches are linear. With per-rank gradients G_1 … G_w of a matrix and their mean Ḡ,

    L̄ = mean_i Pᵀ G_i = Pᵀ Ḡ   (k×n)          R̄ = mean_i G_i Q = Ḡ Q   (m×r),

so all-reducing k·n + m·r numbers instead of m·n gives every rank the sketches of the mean
gradient (compare PyTorch's PowerSGD hook, which all-reduces low-rank factors of G but is lossy).
The hook then writes into the gradient buffer the minimum-norm matrix with exactly these
sketches,

    X = P L̄ + (R̄ − P C) Qᵀ,   C = Pᵀ R̄ (= L̄ Q)      i.e.   X = Ḡ − (I − PPᵀ) Ḡ (I − QQᵀ):

Ḡ less its part outside both sketched subspaces (rank ≤ k + r). Pᵀ X = L̄ and X Q = R̄ because
PᵀP = I and QᵀQ = I, so the optimizer sketches `p.grad` as usual and gets L̄, R̄ to round-off;
p.grad is the same on every rank; and a gradient clipping between backward and step scales X,
hence the sketches, as it would scale Ḡ (only the norm it clips by, ‖X‖ ≤ ‖Ḡ‖, differs).

What this makes exact, and what it cannot:
- Matrices whose rule reads G only through L and R (`Rule.sketch_only` in
  `logra.optim.rules`: of the kit's rules, Nyström): their LoGRA trajectory with this hook
  equals the dense all-reduce run's (to fp32 round-off). These are compressed.
- The other reconstructions also read G itself (the default gain rule D = √s ⊙ G ⊙ √c; channel,
  blend and subspace): from X instead of Ḡ they would take another step. No exact scheme sends
  less than G for them, so their matrices, like dense-AdamW parameters (1-D, small,
  `sketch=False`), are all-reduced in full by this hook.
  `LoGRA.sketch_only_projections` says which parameters are compressed.

Bytes: a compressed m×n matrix sends (k·n + m·r)·4 bytes (fp32 sketches) where dense all-reduce
sends m·n·(bytes of the gradient dtype); for square n×n and k = r the ratio is 2r/n (fp32): 6.25 %
at r = 16, n = 512; 1.56 % at n = 2048; 0.78 % at n = 4096. `SketchHookState` counts both.

Usage (after building the optimizer; the state keeps a reference to it):

    model = DistributedDataParallel(model)
    optimizer = LoGRA(model.parameters(), reconstruction="nystrom", ...)
    state = register_sketch_hook(model, optimizer)
    ...; state.sent_bytes / state.dense_bytes     # cumulative, over every backward
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations as objects.
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from logra.optim.logra import LoGRA
from logra.optim.sketch import sketch
from logra.optim.updates import as_matrix


@dataclass
class SketchHookState:
    """The hook's state: the optimizer whose projections it uses, the group, byte counters."""

    optimizer: LoGRA
    process_group: dist.ProcessGroup | None = None
    sent_bytes: int = 0  # payload all-reduced by this hook, summed over buckets and backwards
    dense_bytes: int = 0  # payload a dense all-reduce of the same buckets would have sent

    @property
    def ratio(self) -> float:
        """Bytes sent / bytes a dense all-reduce sends (NaN before the first backward)."""
        return self.sent_bytes / self.dense_bytes if self.dense_bytes else float("nan")


def register_sketch_hook(
    model: nn.parallel.DistributedDataParallel, optimizer: LoGRA,
    process_group: dist.ProcessGroup | None = None,
) -> SketchHookState:
    """Register `sketch_allreduce_hook` on a DDP model; returns the state with the counters."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        raise TypeError(f"register_sketch_hook needs a DistributedDataParallel model, "
                        f"got {type(model).__name__}")
    if not isinstance(optimizer, LoGRA):
        raise TypeError(f"register_sketch_hook needs a LoGRA optimizer, "
                        f"got {type(optimizer).__name__}")
    state = SketchHookState(optimizer, process_group)
    model.register_comm_hook(state, sketch_allreduce_hook)
    return state


@torch.no_grad()
def sketch_allreduce_hook(
    state: SketchHookState, bucket: dist.GradBucket
) -> torch.futures.Future[Tensor]:
    """All-reduce (mean) the sketches of the bucket's compressible matrices and the rest in full;
    the returned bucket holds the mean of the rest and X (module docstring) for the matrices.

    Two collectives at most per bucket: one fp32 tensor of every sketch, one tensor of every
    other gradient in the bucket's dtype.
    """
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    grads = bucket.gradients()
    plans = state.optimizer.sketch_only_projections(bucket.parameters())
    state.dense_bytes += buffer.numel() * buffer.element_size()
    dense = [g for g, plan in zip(grads, plans, strict=True) if plan is None]
    compressed = [(g, plan) for g, plan in zip(grads, plans, strict=True) if plan is not None]
    if not compressed:
        state.sent_bytes += buffer.numel() * buffer.element_size()
        return _all_reduce(buffer.div_(world), group).then(lambda fut: fut.value()[0])

    sketches = [t for g, (P, Q) in compressed for t in sketch(as_matrix(g), P, Q)]
    flat_sketches = torch.cat([t.reshape(-1) for t in sketches]).div_(world)
    payload = [flat_sketches]
    if dense:
        payload.append(torch.cat([g.reshape(-1) for g in dense]).div_(world))
    state.sent_bytes += sum(t.numel() * t.element_size() for t in payload)
    futures = [_all_reduce(t, group) for t in payload]

    def unpack(_: torch.futures.Future) -> Tensor:
        with torch.no_grad():
            if dense:
                for g, mean in zip(dense, payload[1].split([g.numel() for g in dense]),
                                   strict=True):
                    g.copy_(mean.view_as(g))
            parts = iter(flat_sketches.split([t.numel() for t in sketches]))
            for g, (P, Q) in compressed:
                L, R = next(parts).view(P.shape[1], -1), next(parts).view(-1, Q.shape[1])
                as_matrix(g).copy_(min_norm_with_sketches(P, Q, L, R))
        return buffer

    return torch.futures.collect_all(futures).then(unpack)


def min_norm_with_sketches(P: Tensor, Q: Tensor, L: Tensor, R: Tensor) -> Tensor:
    """The minimum-norm X (m×n) with Pᵀ X = L and X Q = R: X = P L + (R − P (Pᵀ R)) Qᵀ.

    P: m×k and Q: n×r with orthonormal columns; L: k×n and R: m×r consistent sketches of one
    matrix G (Pᵀ R = L Q). Then X = G − (I − PPᵀ) G (I − QQᵀ), orthogonal to every matrix
    whose sketches are both zero. One m×n temporary.
    """
    return torch.addmm(P @ L, R - P @ (P.T @ R), Q.T)


def _all_reduce(tensor: Tensor, group: dist.ProcessGroup) -> torch.futures.Future:
    return dist.all_reduce(tensor, group=group, async_op=True).get_future()
