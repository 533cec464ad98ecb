"""The real architectures the report talks about, built locally on the `meta` device.

Each entry holds the numbers of the published config (no download: the config classes of
`transformers` are filled in here) and the parameter counts the model cards and tech reports
publish, so a test can check the build against them:

    name          config (hidden, MLP, layers, heads/KV heads, vocab)   published parameters
    qwen2.5-1.5b  1536, 8960, 28, 12/2, 151,936, tied                1.54B (1.31B non-embedding)
    qwen2.5-7b    3584, 18944, 28, 28/4, 152,064                     7.61B (6.53B)
    qwen3-8b      4096, 12288, 36, 32/8 (head dim 128), 151,936      8.2B (6.95B)
    gemma-3-27b   5376, 21504, 62, 32/16 (head dim 128), 262,208,    27.0B of text: 1,416M embedding
                  tied; 5 sliding-window (1024) layers per global    + 25,600M non-embedding
                  one                                                (Gemma Team 2025, Table 1)

"Non-embedding" counts everything but the token embedding and an untied output head.
A model built here has every parameter on `meta`: shapes and dtypes, no storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from logra.memory.params import embedding_params


@dataclass(frozen=True)
class PublishedArchitecture:
    """A published architecture: its config class and arguments, and its published size."""

    name: str
    label: str
    config_class: str  # name of the `transformers` config class
    config_kwargs: dict[str, Any]
    published_params: float  # total, as published
    published_non_embedding_params: float
    source: str

    def config(self):
        """The `transformers` config object (built locally, nothing downloaded)."""
        import transformers

        return getattr(transformers, self.config_class)(**self.config_kwargs)

    def build(self, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
        """The causal LM on the `meta` device: every parameter has a shape, none has storage."""
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(self.config(), dtype=dtype)


ARCHITECTURES: dict[str, PublishedArchitecture] = {
    a.name: a
    for a in (
        PublishedArchitecture(
            "qwen2.5-1.5b", "Qwen2.5-1.5B", "Qwen2Config",
            dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                 tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1e6),
            1.54e9, 1.31e9, "Qwen2.5-1.5B(-Instruct) model card",
        ),
        PublishedArchitecture(
            "qwen2.5-7b", "Qwen2.5-7B", "Qwen2Config",
            dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                 tie_word_embeddings=False, max_position_embeddings=32768, rope_theta=1e6),
            7.61e9, 6.53e9, "Qwen2.5-7B(-Instruct) model card",
        ),
        PublishedArchitecture(
            "qwen3-8b", "Qwen3-8B", "Qwen3Config",
            dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                 tie_word_embeddings=False, max_position_embeddings=40960, rope_theta=1e6),
            8.2e9, 6.95e9, "Qwen3-8B model card",
        ),
        PublishedArchitecture(
            "gemma-3-27b", "Gemma-3-27B", "Gemma3TextConfig",
            dict(hidden_size=5376, intermediate_size=21504, num_hidden_layers=62,
                 num_attention_heads=32, num_key_value_heads=16, head_dim=128,
                 vocab_size=262208, tie_word_embeddings=True, sliding_window=1024,
                 query_pre_attn_scalar=168, max_position_embeddings=131072),
            27.016e9, 25.6e9, "Gemma 3 technical report, Table 1 (text parameters)",
        ),
    )
}


def architecture(name: str) -> PublishedArchitecture:
    """Look up an architecture by name; a ValueError names the valid ones."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}; valid: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def count_params(model: nn.Module) -> tuple[int, int]:
    """(total, non-embedding) parameter counts; tied weights count once.

    Non-embedding excludes the input embedding and an output head that is not tied to it.
    """
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for p in embedding_params(model).values())
    return total, total - embedding

