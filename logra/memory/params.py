"""Which parameters an optimizer sees, and how they are grouped.

The accountant and the real optimizers must agree on three things: the trainable parameters
(`model.parameters()` deduplicates tied weights, so a tied embedding/head counts once), which of
them are embeddings (the input embedding and the output head, which LoGRA gives their own rank,
and GaLore and APOLLO leave dense), and, for LoRA, which adapters `peft` adds. The helpers here
are used by both sides, so the rule is written once.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ParamInfo:
    """What the accountant needs to know about one trainable parameter."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    embedding: bool

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def embedding_params(model: nn.Module) -> dict[int, nn.Parameter]:
    """The input embedding(s) and the output head, by id (a tied pair appears once).

    Embeddings are the weights of every `nn.Embedding` module; the head is
    `model.get_output_embeddings()` when the model has one (Hugging Face models do).
    """
    found: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            found[id(module.weight)] = module.weight
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is not None and getattr(head, "weight", None) is not None:
        found[id(head.weight)] = head.weight
    return found


def trainable_params(model: nn.Module) -> list[ParamInfo]:
    """Every parameter with `requires_grad`, once each, in `named_parameters()` order."""
    embeddings = embedding_params(model)
    return [
        ParamInfo(name, tuple(p.shape), p.dtype, id(p) in embeddings)
        for name, p in model.named_parameters()
        if p.requires_grad
    ]


def logra_param_groups(
    model: nn.Module, rank: int = 16, embedding_rank: int | None = 64
) -> list[dict[str, Any]]:
    """Param groups for `logra.optim.LoGRA`: matrices at `rank`, embeddings at their own rank.

    `embedding_rank=None` puts the embeddings in a `sketch=False` group (dense AdamW moments).
    Empty groups are left out. `counted_state_bytes(model, "logra", rank=..., embedding_rank=...)`
    counts exactly the state an optimizer built from these groups allocates.
    """
    embeddings = embedding_params(model)
    params = [p for p in model.parameters() if p.requires_grad]
    rest = [p for p in params if id(p) not in embeddings]
    emb = [p for p in params if id(p) in embeddings]
    groups: list[dict[str, Any]] = []
    if rest:
        groups.append({"params": rest, "rank": rank})
    if emb:
        groups.append(
            {"params": emb, "sketch": False}
            if embedding_rank is None
            else {"params": emb, "rank": embedding_rank}
        )
    return groups


def with_lora(
    model: nn.Module, rank: int = 16, target_modules: str | list[str] = "all-linear"
) -> nn.Module:
    """A `peft` LoRA model around a parameter-free copy of `model` (adapters on `meta` too).

    `model` itself is left untouched: its parameters and buffers are replaced by `meta` tensors
    of the same shape in the copy, so wrapping a 27B model costs no parameter memory.
    `target_modules="all-linear"` is peft's "every linear layer but the output head".
    """
    from peft import LoraConfig, get_peft_model

    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"),
                                   requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    skeleton = copy.deepcopy(model, memo)
    with torch.device("meta"):
        return get_peft_model(skeleton, LoraConfig(r=rank, target_modules=target_modules))


def is_peft_model(model: nn.Module) -> bool:
    """Whether `model` already carries peft adapters."""
    from peft import PeftModel

    return isinstance(model, PeftModel)
