"""Randomly initialised Qwen2 causal LMs built from a local config (nothing downloaded)."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def random_qwen2(
    *, vocab_size: int, hidden_size: int, intermediate_size: int, num_hidden_layers: int,
    num_attention_heads: int, num_key_value_heads: int, max_position_embeddings: int,
    seed: int, tie_word_embeddings: bool = False, pad_token_id: int | None = None,
    bos_token_id: int | None = None, eos_token_id: int | None = None,
) -> Qwen2ForCausalLM:
    """A Qwen2 with weights drawn from `seed`, leaving the global RNG as it was.

    The arguments are Qwen2Config's fields of the same names; the token ids only tell
    generation which tokens pad, begin and end a sequence (None: Qwen2Config's default).
    """
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads, max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings, pad_token_id=pad_token_id,
        bos_token_id=bos_token_id, eos_token_id=eos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)
