"""Measurements of the sketch-error experiment (notebooks/01_sketch_error): how much of a matrix
a rank-r sketch keeps, and how close each update rule's step is to AdamW's.

Reconstruction. For M ∈ R^{m×n} and seeded orthonormal P ∈ R^{m×k}, Q ∈ R^{n×r} (the optimizer's
own `sketch.orthonormal_projection`), with L = PᵀM and R = MQ (`sketch.sketch`), the METHODS are
    nystrom_rtol0        M̂ = R (PᵀR)^† L, pseudo-inverse with no cutoff (rtol = 0), k = r
    nystrom_truncated    the same with LoGRA's default cutoff rtol (`default_rtol()`)
    nystrom_oversampled  the same with rtol, left sketch k = r + round(oversample_ratio·r)
    projection           one-sided P Pᵀ M (M Q Qᵀ when m < n): the naive ablation's subspace
    svd                  the best rank-r approximation (Eckart–Young), from singular values
metrics: relative error ‖M − M̂‖_F / ‖M‖_F and cosine ⟨M, M̂⟩_F / (‖M‖_F ‖M̂‖_F).

Update directions. The RULES — dense AdamW, LoGRA "gain", LoGRA "nystrom" and
RandomProjectionAdam, weight decay 0 and no KL control (`make_optimizer`) — run on identical
gradient streams from weights 0 (`applied_updates`); metric: cosine between each rule's applied
update W_t − W_{t−1} and AdamW's.

A rank is measured on a matrix only where LoGRA would sketch it (`sketch_shapes(shape, r)` is not
None, i.e. r·(m+n) < m·n); elsewhere the optimizer falls back to dense AdamW and there is
nothing to measure. `reconstruction_rows` and `direction_rows` return rows of the tidy frame of
`sketch_error.run`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from logra.optim import LoGRA, RandomProjectionAdam, sketch_shapes
from logra.optim import sketch as sk

METHODS = ("nystrom_rtol0", "nystrom_truncated", "nystrom_oversampled", "projection", "svd")
RULES = ("adamw", "logra_gain", "logra_nystrom", "naive_projection")


def default_rtol() -> float:
    """LoGRA's default pseudo-inverse cutoff, read from its signature so the two never drift."""
    return float(inspect.signature(LoGRA).parameters["rtol"].default)


def measurable(shape: tuple[int, int], rank: int) -> bool:
    """Whether LoGRA sketches an m×n matrix at this rank (else it runs dense AdamW)."""
    return sketch_shapes(tuple(shape), rank) is not None


def reconstruct(M: Tensor, rank: int, method: str, seed: int, oversample_ratio: float = 1.0
                ) -> Tensor | None:
    """M̂ of an m×n matrix by `method` (see the module docstring); None if it does not fit.

    Projections come from the optimizer's `sketch.orthonormal_projection`, seeded by
    `sketch.seed_for(seed, 0, 0, side)`; `svd` is the explicit truncated SVD.
    """
    m, n = M.shape
    left_seed, right_seed = sk.seed_for(seed, 0, 0, 0), sk.seed_for(seed, 0, 0, 1)
    if method == "svd":
        U, S, Vh = torch.linalg.svd(M, full_matrices=False)
        return (U[:, :rank] * S[:rank]) @ Vh[:rank]
    if method == "projection":
        if m >= n:
            P = sk.orthonormal_projection(m, rank, left_seed)
            return P @ (P.T @ M)
        Q = sk.orthonormal_projection(n, rank, right_seed)
        return (M @ Q) @ Q.T
    k = rank + round(oversample_ratio * rank) if method == "nystrom_oversampled" else rank
    if k > m:
        return None
    rtol = 0.0 if method == "nystrom_rtol0" else default_rtol()
    P = sk.orthonormal_projection(m, k, left_seed)
    Q = sk.orthonormal_projection(n, rank, right_seed)
    L, R = sk.sketch(M, P, Q)
    return sk.nystrom(R, L, P, rtol)


def relative_error(M: Tensor, M_hat: Tensor) -> float:
    """‖M − M̂‖_F / ‖M‖_F."""
    return float((M - M_hat).norm() / M.norm())


def cosine(A: Tensor, B: Tensor) -> float:
    """⟨A, B⟩_F / (‖A‖_F ‖B‖_F), in float64; 0 if either is zero."""
    a, b = A.double().flatten(), B.double().flatten()
    denom = float(a.norm() * b.norm())
    return float(a @ b) / denom if denom > 0 else 0.0


def svd_errors(M: Tensor, ranks: Iterable[int]) -> dict[int, tuple[float, float]]:
    """{r: (relative error, cosine)} of the best rank-r approximation, from singular values.

    Eckart–Young: ‖M − M_r‖_F² = Σ_{i>r} σ_i², and ⟨M, M_r⟩ = ‖M_r‖² so cos = ‖M_r‖/‖M‖.
    """
    energy = torch.linalg.svdvals(M.double()).square()
    total = float(energy.sum())
    out = {}
    for r in ranks:
        kept = float(energy[:r].sum())
        out[r] = (math.sqrt(max(total - kept, 0.0) / total), math.sqrt(kept / total))
    return out


def reconstruction_rows(experiment: str, input_name: str, matrix_name: str, M: Tensor,
                        ranks: Iterable[int], seeds: Iterable[int], oversample_ratio: float
                        ) -> list[dict[str, Any]]:
    """Relative error and cosine of every method at every measurable rank and sketch seed.

    The SVD rows (deterministic) carry seed −1.
    """
    m, n = M.shape
    ranks = [r for r in ranks if measurable((m, n), r)]
    base = dict(experiment=experiment, input=input_name, matrix=matrix_name, m=m, n=n, step=-1)
    rows = []
    for r, (err, cos) in svd_errors(M, ranks).items():
        for metric, value in (("rel_error", err), ("cosine", cos)):
            rows.append(dict(base, rank=r, method="svd", seed=-1, metric=metric, value=value))
    for r in ranks:
        for method in METHODS[:-1]:
            for seed in seeds:
                M_hat = reconstruct(M, r, method, seed, oversample_ratio)
                if M_hat is None:
                    continue
                for metric, value in (("rel_error", relative_error(M, M_hat)),
                                      ("cosine", cosine(M, M_hat))):
                    rows.append(dict(base, rank=r, method=method, seed=seed, metric=metric,
                                     value=value))
    return rows


def make_optimizer(rule: str, params: list[nn.Parameter], rank: int, lr: float,
                   betas: tuple[float, float]) -> torch.optim.Optimizer:
    """One of RULES on `params`, weight decay 0 and (LoGRA) no KL control."""
    if rule == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=0.0)
    if rule == "naive_projection":
        return RandomProjectionAdam(params, lr=lr, rank=rank, betas=betas, weight_decay=0.0)
    if rule in ("logra_gain", "logra_nystrom"):
        return LoGRA(params, lr=lr, rank=rank, betas=betas, weight_decay=0.0,
                     predicted_kl_threshold=None, reconstruction=rule.removeprefix("logra_"),
                     cache_projections=True)
    raise ValueError(f"unknown update rule {rule!r}; valid: {RULES}")


def applied_updates(streams: list[list[Tensor]], rule: str, rank: int, lr: float,
                    betas: tuple[float, float]) -> list[list[Tensor]]:
    """Updates W_t − W_{t−1} of one optimizer fed the gradient streams, step by step.

    streams[j][t] is the gradient of matrix j at step t; all matrices share one optimizer (as
    in a model). Weights start at 0; returns updates[t][j].
    """
    params = [nn.Parameter(torch.zeros(s[0].shape)) for s in streams]
    optimizer = make_optimizer(rule, params, rank, lr, betas)
    updates = []
    for t in range(len(streams[0])):
        before = [p.detach().clone() for p in params]
        for p, s in zip(params, streams, strict=True):
            p.grad = s[t].clone()
        optimizer.step()
        updates.append([p.detach() - b for p, b in zip(params, before, strict=True)])
    return updates


def direction_rows(input_name: str, streams: dict[str, list[Tensor]], ranks: Iterable[int],
                   lr: float, betas: tuple[float, float]) -> list[dict[str, Any]]:
    """Per step and matrix, cosine(update of each sketched rule, update of AdamW).

    At each rank only the matrices LoGRA sketches at that rank take part.
    """
    names = list(streams)
    reference = applied_updates([streams[k] for k in names], "adamw", 1, lr, betas)
    rows = []
    for r in ranks:
        chosen = [j for j, k in enumerate(names) if measurable(streams[k][0].shape, r)]
        if not chosen:
            continue
        for rule in RULES[1:]:
            updates = applied_updates([streams[names[j]] for j in chosen], rule, r, lr, betas)
            for t, step_updates in enumerate(updates):
                for j, update in zip(chosen, step_updates, strict=True):
                    m, n = update.shape
                    rows.append(dict(
                        experiment="direction", input=input_name, matrix=names[j], m=m, n=n,
                        rank=r, method=rule, seed=-1, step=t + 1, metric="cosine",
                        value=cosine(update, reference[t][j]),
                    ))
    return rows
