"""The sums over row shards, in one process: two threads stand for two FSDP2 ranks.

Under FSDP2 a rank holds rows [o_i, o_i + m_i) of W and of its gradient, and the few quantities
that span rows (L = Pᵀ G, the Nyström core Pᵀ m_R, Σρ, the limiter's column norms) are summed
over the ranks by the `reduce` each function takes (`logra.optim.distributed`). Here each thread
runs the same function on its rows with a `reduce` that sums over the threads, and the rows it
returns must be those of the unsharded call. A missing sum (Σρ of one shard only, say) is off by
about the share of the other rank, far beyond the tolerance; tests/test_distributed.py runs the
same step under two real gloo processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor

from logra.optim import gain
from logra.optim import sketch as sk
from logra.optim.gate import StepGate
from logra.optim.limiter import residual_limit

M, N, RANK, OVERSAMPLE = 30, 20, 4, 2
K = RANK + OVERSAMPLE
SHARDS = (slice(0, 16), slice(16, 30))  # torch.chunk's ⌈30/2⌉ = 15 would do too; unequal is harder
GROUP = dict(betas=(0.8, 0.95), eps=1e-3, lr=0.1, maximize=False)


class ThreadAllReduce:
    """An all-reduce (sum, in place) among `world` threads, in a fixed order on every thread."""

    def __init__(self, world: int) -> None:
        self.barrier = threading.Barrier(world, timeout=30)
        self.parts: list[Tensor | None] = [None] * world
        self.calls = 0

    def reduce_for(self, rank: int) -> Callable[[Tensor], Tensor]:
        def reduce(tensor: Tensor) -> Tensor:
            self.parts[rank] = tensor.clone()
            self.barrier.wait()
            total = sum(self.parts[1:], self.parts[0])
            self.barrier.wait()  # every thread has read every part
            if rank == 0:
                self.calls += 1
            return tensor.copy_(total)
        return reduce


def on_shards(work: Callable[[int, slice, Callable[[Tensor], Tensor]], Any]) -> list[Any]:
    """`work(rank, rows, reduce)` on every shard at once, one thread each; their results."""
    all_reduce = ThreadAllReduce(len(SHARDS))
    with ThreadPoolExecutor(len(SHARDS)) as pool:
        futures = [pool.submit(work, rank, rows, all_reduce.reduce_for(rank))
                   for rank, rows in enumerate(SHARDS)]
        results = [future.result() for future in futures]
    assert all_reduce.calls > 0, "nothing was summed over the shards"
    return results


def data() -> dict[str, Tensor]:
    """Projections, two gradients whose rows differ in scale, and moments of a 30×20 matrix."""
    g = torch.Generator().manual_seed(0)
    return dict(
        P=sk.orthonormal_projection(M, K, 11), P_new=sk.orthonormal_projection(M, K, 12),
        Q_new=sk.orthonormal_projection(N, RANK, 13),
        grads=[torch.randn(M, N, generator=g) * torch.linspace(0.2, 3, M)[:, None]
               for _ in range(2)],
        Q=sk.orthonormal_projection(N, RANK, 14),
        m_L=torch.randn(K, N, generator=g), v_L=torch.rand(K, N, generator=g),
        m_R=torch.randn(M, RANK, generator=g), v_R=torch.rand(M, RANK, generator=g) + 0.1,
    )


def test_gain_factors_of_row_shards_are_the_rows_of_the_whole() -> None:
    """Two steps of the gain rule's moments and factors: √s and ρ/Σρ row by row, √c and κ whole."""
    d = data()

    def factors(rows: slice, reduce: Callable[[Tensor], Tensor]) -> list[gain.GainFactors]:
        state = [torch.zeros(K, N), torch.zeros(K, N), torch.zeros(M, RANK)[rows].clone(),
                 torch.zeros(M, RANK)[rows].clone()]
        for step, G in enumerate(d["grads"], start=1):
            L = reduce(d["P"][rows].T @ G[rows])
            member = gain.Member(L=L, R=G[rows] @ d["Q"], moments=[tuple(state)], rows=M)
            (out,) = gain.family_factors([member], GROUP, step, StepGate(torch.tensor(True)),
                                         reduce)
        return out

    whole = factors(slice(0, M), sk.identity)
    for rows, part in zip(SHARDS, on_shards(lambda _, rows, reduce: factors(rows, reduce)),
                          strict=True):
        torch.testing.assert_close(part.row_weight, whole.row_weight[rows], rtol=1e-5, atol=0)
        torch.testing.assert_close(part.row_factor, whole.row_factor[rows], rtol=1e-5, atol=0)
        torch.testing.assert_close(part.col_gain, whole.col_gain, rtol=1e-5, atol=0)
        torch.testing.assert_close(part.col_weight, whole.col_weight, rtol=1e-5, atol=0)
    assert abs(float(whole.row_weight.sum()) - 1) < 1e-5  # ρ/Σρ: a distribution over the rows


def test_moments_carried_to_new_projections_by_shards_are_the_rows_of_the_whole() -> None:
    """The refresh's transport: m_R, v_R by rows, m_L, v_L whole (replicated)."""
    d = data()

    def carried(rows: slice, reduce: Callable[[Tensor], Tensor]) -> tuple[Tensor, ...]:
        m_L, m_R = sk.transport_first_moment(d["m_R"][rows], d["m_L"], d["P"][rows],
                                             d["P_new"][rows], d["Q_new"], 0.05, reduce)
        v_L, v_R = sk.transport_second_moment(d["v_R"][rows], d["v_L"], d["P_new"][rows],
                                              d["Q_new"], reduce, rows=M)
        return m_L, m_R, v_L, v_R

    m_L, m_R, v_L, v_R = carried(slice(0, M), sk.identity)
    for rows, part in zip(SHARDS, on_shards(lambda _, rows, reduce: carried(rows, reduce)),
                          strict=True):
        for got, want in zip(part, (m_L, m_R[rows], v_L, v_R[rows]), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_nystrom_core_of_row_shards_is_the_whole_core() -> None:
    d = data()
    whole = sk.nystrom_right(d["m_R"], d["m_L"], d["P"], 0.05)
    for part in on_shards(lambda _, rows, reduce: sk.nystrom_right(
            d["m_R"][rows], d["m_L"], d["P"][rows], 0.05, reduce)):
        torch.testing.assert_close(part, whole, rtol=1e-4, atol=1e-6)


def test_residual_limit_of_row_shards_is_the_whole_limit() -> None:
    """The subspace rule's limiter: ‖G[:,j]‖² summed over the shards, one ζ for all ranks."""
    d = data()
    G, scale = d["grads"][1], torch.rand(N, generator=torch.Generator().manual_seed(3)) + 0.5

    def zeta(rows: slice, reduce: Callable[[Tensor], Tensor]) -> tuple[float, float]:
        state = dict(residual_norm=1.0)  # the last step's norm: this one grows far past 1 %
        L = reduce(d["P"][rows].T @ G[rows])
        return (residual_limit(state, G[rows], L, scale, reduce, StepGate(torch.tensor(True))),
                state["residual_norm"])

    whole = zeta(slice(0, M), sk.identity)
    assert whole[0] < 0.5  # the limit acts
    for part in on_shards(lambda _, rows, reduce: zeta(rows, reduce)):
        assert abs(part[0] - whole[0]) <= 1e-5 * whole[0]
        assert abs(part[1] - whole[1]) <= 1e-5 * whole[1]
