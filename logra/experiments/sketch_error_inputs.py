"""Inputs of the sketch-error experiment (notebooks/01_sketch_error), every draw seeded.

Matrices with a known spectrum (exact low rank with equal singular values, power law σ_i = i^-α),
a synthetic embedding gradient (few non-zero rows, Zipfian token counts), streams of gradients
around a matrix, and the gradients of a tiny randomly initialised Qwen2 causal LM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from logra.models.random import random_qwen2

if TYPE_CHECKING:  # the experiment's config; sketch_error imports this module
    from logra.experiments.sketch_error import Config


def rng(seed: int) -> torch.Generator:
    """A torch.Generator seeded with `seed`."""
    return torch.Generator().manual_seed(seed)


def _orthonormal(rows: int, cols: int, generator: torch.Generator) -> Tensor:
    q, _ = torch.linalg.qr(torch.randn(rows, cols, generator=generator))
    return q


def spectrum_matrix(m: int, n: int, singular_values: Tensor, seed: int) -> Tensor:
    """U diag(σ) Vᵀ with Haar-random orthonormal U (m×p), V (n×p), p = len(σ) ≤ min(m, n)."""
    g = rng(seed)
    p = len(singular_values)
    return _orthonormal(m, p, g) @ torch.diag(singular_values.float()) @ _orthonormal(n, p, g).T


def low_rank_matrix(m: int, n: int, rank: int, seed: int) -> Tensor:
    """An m×n matrix of exact rank `rank` with equal singular values."""
    return spectrum_matrix(m, n, torch.ones(rank), seed)


def power_law_matrix(m: int, n: int, alpha: float, seed: int) -> Tensor:
    """An m×n matrix with singular values σ_i = i^-α, i = 1..min(m, n)."""
    index = torch.arange(1, min(m, n) + 1, dtype=torch.float64)
    return spectrum_matrix(m, n, index.pow(-alpha), seed)


def embedding_gradient(m: int, n: int, tokens: int, zipf: float, seed: int) -> Tensor:
    """A synthetic embedding gradient G = Σ_p e_{t_p} h_pᵀ (m = vocabulary, n = hidden).

    `tokens` positions draw token ids t_p with probability ∝ (frequency rank)^-zipf, the ranks
    assigned to ids by a random permutation; each position contributes a hidden-space gradient
    h_p ~ N(0, I_n). Only the rows of tokens present are non-zero, row i has norm ≈ √count_i·√n,
    and rank(G) ≤ min(#distinct tokens, n).
    """
    g = rng(seed)
    weights = torch.arange(1, m + 1, dtype=torch.float64).pow(-zipf)
    ids = torch.randperm(m, generator=g)[torch.multinomial(weights, tokens, True, generator=g)]
    hidden = torch.randn(tokens, n, generator=g)
    return torch.zeros(m, n).index_add_(0, ids, hidden)


def synthetic_inputs(cfg: Config) -> dict[str, Tensor]:
    """The synthetic matrices of the reconstruction experiment, by input name."""
    m, n = cfg.synthetic_shape
    inputs = {f"rank {k}": low_rank_matrix(m, n, k, cfg.seed + k) for k in cfg.low_ranks}
    for alpha in cfg.power_law_alphas:
        inputs[f"power law α={alpha:g}"] = power_law_matrix(m, n, alpha, cfg.seed + 1000)
    return inputs


def qwen2_model(cfg: Config) -> nn.Module:
    """A randomly initialised Qwen2 causal LM built from a local config (nothing downloaded)."""
    return random_qwen2(
        vocab_size=cfg.qwen_vocab, hidden_size=cfg.qwen_hidden,
        intermediate_size=cfg.qwen_intermediate, num_hidden_layers=cfg.qwen_layers,
        num_attention_heads=cfg.qwen_heads, num_key_value_heads=cfg.qwen_kv_heads,
        max_position_embeddings=max(128, cfg.qwen_seq), seed=cfg.seed,
    )


def qwen2_gradient_stream(cfg: Config) -> dict[str, list[Tensor]]:
    """Gradients of every 2-D weight of `qwen2_model` on `stream_steps` random token batches.

    The weights stay at their initialisation (the stream is minibatch noise around one point);
    each batch is qwen_batch × qwen_seq uniform random tokens, causal-LM loss.
    Returns {parameter name: [G_1, …, G_T]}.
    """
    model = qwen2_model(cfg)
    g = rng(cfg.seed + 1)
    matrices = {name: p for name, p in model.named_parameters() if p.ndim == 2}
    stream: dict[str, list[Tensor]] = {name: [] for name in matrices}
    for _ in range(cfg.stream_steps):
        ids = torch.randint(0, cfg.qwen_vocab, (cfg.qwen_batch, cfg.qwen_seq), generator=g)
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        for name, p in matrices.items():
            stream[name].append(p.grad.detach().clone())
    return stream


def synthetic_stream(matrix: Tensor, family: Callable[[int], Tensor], steps: int,
                     noise: float) -> list[Tensor]:
    """G_t = M + noise·‖M‖_F·E_t/‖E_t‖_F, E_t = family(t) a fresh draw of the same family."""
    stream = []
    for t in range(steps):
        e = family(t)
        stream.append(matrix + noise * matrix.norm() * e / e.norm())
    return stream
