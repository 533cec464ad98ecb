"""Property-based tests (hypothesis): the sketch algebra and the step over random shapes, ranks,
dtypes, gradient scales and hyperparameters.

Kept small (few examples, tiny matrices) so that the whole file runs in seconds.
"""

from __future__ import annotations

from unittest import mock

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn

from logra import LoGRA
from logra.optim import sketch as sk
from logra.optim.hyperparameters import RECONSTRUCTIONS

FAST = settings(max_examples=25, deadline=None, database=None,  # no .hypothesis/ left behind
                derandomize=True)  # the same examples on every run: CI cannot flake
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


@st.composite
def matrices(draw, max_side: int = 24):
    """(m, n, r, k): a matrix shape and a sketch rank r ≤ k = r + oversample ≤ m, r ≤ n."""
    m, n = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    r = draw(st.integers(1, min(m, n)))
    k = draw(st.integers(r, m))
    return m, n, r, k


@FAST
@given(shape=matrices(), seed=st.integers(0, 2**31), block=st.integers(1, 200),
       dtype=st.sampled_from(DTYPES))
def test_blocked_sketch_is_the_dense_products(shape, seed, block, dtype) -> None:
    """Whatever the block size (here down to one element: one row per block), L = Pᵀ G and
    R = G Q of the gradient converted to fp32; P and Q have orthonormal columns."""
    m, n, r, k = shape
    P, Q = sk.orthonormal_projection(m, k, seed), sk.orthonormal_projection(n, r, seed + 1)
    eye = torch.eye(k)
    torch.testing.assert_close(P.T @ P, eye, atol=1e-5, rtol=0)
    assert torch.equal(P, sk.orthonormal_projection(m, k, seed))  # regenerated identically
    G = torch.randn(m, n, generator=torch.Generator().manual_seed(seed)).to(dtype)
    with mock.patch.object(sk, "BLOCK_ELEMENTS", block):
        L, R = sk.sketch(G, P, Q)
    assert L.dtype == R.dtype == torch.float32
    torch.testing.assert_close(L, P.T @ G.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(R, G.float() @ Q, atol=1e-5, rtol=1e-5)


@FAST
@given(shape=matrices(), seed=st.integers(0, 2**31))
def test_the_gain_update_is_a_descent_direction(shape, seed) -> None:
    """D = diag(√s) G diag(√c) with gains ≥ 0, whatever the sketch-space Adam directions:
    ⟨D, G⟩ ≥ 0, and D is finite even for zero rows and columns of G."""
    m, n, r, k = shape
    g = torch.Generator().manual_seed(seed)
    G = torch.randn(m, n, generator=g)
    G[:, torch.rand(n, generator=g) < 0.2] = 0.0  # dead columns
    P, Q = sk.orthonormal_projection(m, k, seed), sk.orthonormal_projection(n, r, seed + 1)
    L, R = sk.sketch(G, P, Q)
    row_gain, col_gain = sk.gain_factors(L, R, torch.randn(k, n, generator=g),
                                         torch.randn(m, r, generator=g))
    assert (row_gain >= 0).all() and (col_gain >= 0).all()
    D = row_gain[:, None] * G * col_gain[None, :]
    assert torch.isfinite(D).all() and float((D * G).sum()) >= 0


@FAST
@given(shape=matrices(), rank=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_nystrom_recovers_a_matrix_of_rank_at_most_r(shape, rank, seed) -> None:
    """rank(M) ≤ r and a well-conditioned core C = Pᵀ M Q: M̂ = M Q C^† Pᵀ M = M."""
    m, n, r, k = shape
    rank = min(rank, r)
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(m, rank, generator=g, dtype=torch.float64) \
        @ torch.randn(rank, n, generator=g, dtype=torch.float64)
    P = sk.orthonormal_projection(m, k, seed).double()
    Q = sk.orthonormal_projection(n, r, seed + 1).double()
    m_L, m_R = P.T @ M, M @ Q
    singular = torch.linalg.svdvals(P.T @ m_R)
    assume(singular[rank - 1] > 1e-3 * singular[0])  # the core holds M's rank
    M_hat = sk.nystrom(m_R, m_L, P, rtol=1e-8)
    torch.testing.assert_close(M_hat, M, atol=1e-6 * float(M.abs().max()), rtol=1e-6)


@st.composite
def step_settings(draw):
    """A parameter shape and LoGRA keyword arguments, any rule and path."""
    shape = (draw(st.integers(1, 20)), draw(st.integers(1, 20)))
    if draw(st.booleans()):  # a conv-like 3-D tensor, viewed as shape[0] × rest
        shape = (*shape, draw(st.integers(1, 3)))
    options = dict(
        rank=draw(st.integers(1, 6)), oversample=draw(st.integers(0, 2)),
        reconstruction=draw(st.sampled_from(RECONSTRUCTIONS)),
        lr=draw(st.sampled_from((0.0, 1e-4, 1e-2, 1.0))),
        # β₂ = 0 is left out: with it v̂ forgets a gradient 10²⁰ times larger at once while m̂
        # remembers it, and u = m̂/(√v̂+ε) overflows fp32 (a known limit, not guarded)
        betas=(draw(st.sampled_from((0.0, 0.5, 0.9))), draw(st.sampled_from((0.5, 0.9, 0.999)))),
        eps=draw(st.sampled_from((1e-12, 1e-8, 1e-2))),
        weight_decay=draw(st.sampled_from((0.0, 0.01, 0.5))),
        predicted_kl_threshold=draw(st.sampled_from((None, 1e-6))),
        kl_estimator="diag", refresh_every=draw(st.sampled_from((None, 2))),
        maximize=draw(st.booleans()),
    )
    return shape, options


@FAST
@given(setting=step_settings(), dtype=st.sampled_from((torch.float32, torch.bfloat16)),
       scales=st.lists(st.sampled_from((0.0, 1e-30, 1e-3, 1.0, 1e3, 1e18, 1e30)), min_size=3,
                       max_size=3),
       seed=st.integers(0, 2**31))
def test_no_non_finite_value_reaches_the_weights(setting, dtype, scales, seed) -> None:
    """Finite gradients of any scale (zero, tiny, squares that overflow fp32) and a few with
    NaN or ∞: the weights stay finite, on the loop and the batched path alike."""
    shape, options = setting
    g = torch.Generator().manual_seed(seed)
    for foreach in (False, True):
        params = [nn.Parameter(torch.randn(shape, generator=g).to(dtype)),
                  nn.Parameter(torch.randn(shape, generator=g).to(dtype)),
                  nn.Parameter(torch.randn(shape[0], generator=g).to(dtype))]
        opt = LoGRA(params, foreach=foreach, **options)
        for scale in (*scales, float("nan"), float("inf")):
            for p in params:
                grad = torch.randn(p.shape, generator=g) * scale
                if p.dim() > 1:
                    grad[:, 0] = 0.0  # a dead column
                p.grad = grad.to(dtype)
            opt.step()
            for p in params:
                assert torch.isfinite(p).all(), (options, foreach, scale, opt.last_step)


@FAST
@given(setting=step_settings(), seed=st.integers(0, 2**31))
def test_loop_and_batched_paths_agree(setting, seed) -> None:
    """Same-shaped matrices stacked (foreach=True) or one at a time: the same weights."""
    shape, options = setting
    options["reconstruction"] = "gain"  # the rule with a stacked form and no pseudo-inverse
    g = torch.Generator().manual_seed(seed)
    start = [torch.randn(shape, generator=g) for _ in range(3)]
    grads = [[torch.randn(shape, generator=g) for _ in range(3)] for _ in range(3)]
    weights = []
    for foreach in (False, True):
        params = [nn.Parameter(w.clone()) for w in start]
        opt = LoGRA(params, foreach=foreach, **options)
        for step in grads:
            for p, grad in zip(params, step, strict=True):
                p.grad = grad.clone()
            opt.step()
        weights.append(params)
    for a, b in zip(*weights, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6 * (1 + options["lr"]))
