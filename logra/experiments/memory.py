"""Memory accounting at 1.5B/7B/27B and the single-node budget (notebook 02_memory, C1–C4).

    config(scale, **overrides)   experiments/memory.yaml resolved
    run(config)                  optimizer-state bytes by optimizer × architecture (tidy)
    param_counts, budget_frame, oom_run, oom_curve   the other frames

`logra.experiments.memory_report` holds the tables, figures and the claims C1–C4.

Optimizer state is counted as the optimizer sees the parameters: under mixed precision it
updates fp32 master weights, so the architectures are built in fp32 (on `meta`) for the state,
while the budget prices weights, gradients and the reference model at the assumed precision.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Annotated, Any, ClassVar, Literal

import pandas as pd
import torch
from pydantic import Field
from torch import nn

from logra.config import TypedConfig, typed
from logra.experiments.typed import Count, Counts, NonNegative, NonNegativeInt, Positive
from logra.memory import (
    ARCHITECTURES,
    Assumptions,
    ModelStats,
    architecture,
    count_params,
    model_stats,
    oom_step,
    simulate,
)
from logra.memory import OPTIMIZERS as STATE_OPTIMIZERS
from logra.memory.budget import GIB, SHARDINGS, STATIC, TRAINING, budget

ASSUMPTION_KEYS = tuple(f.name for f in dataclasses.fields(Assumptions))
LABELS = {
    "adamw": "AdamW (fp32 states)",
    "adamw_bf16": "AdamW (bf16 states)",
    "adamw8bit": "8-bit AdamW",
    "adafactor": "Adafactor",
    "adafactor_momentum": "Adafactor (with β₁ momentum)",
    "galore": "GaLore",
    "apollo": "APOLLO",
    "apollo_paper": "APOLLO (projection from seed, as published)",
    "flora": "Flora",
    "lora": "LoRA",
    "naive": "naive projection",
    "logra": "LoGRA",
    "logra_emb_rank": "LoGRA (embeddings at rank r)",
    "logra_emb_dense": "LoGRA (embeddings dense)",
}
Architecture = Literal[tuple(ARCHITECTURES)]
Variant = Literal[tuple(LABELS)]  # a row of the state table
StateOptimizer = Literal[STATE_OPTIMIZERS]  # an optimizer `logra.memory` counts the state of


@typed
class Config(TypedConfig):
    """experiments/memory.yaml's keys (its comments say what each holds)."""

    EXPERIMENT: ClassVar[str] = "memory"
    scale: str
    models: Annotated[list[Architecture], Field(min_length=1)]
    variants: Annotated[list[Variant], Field(min_length=1)]
    budget_models: list[Architecture]
    budget_optimizers: list[StateOptimizer]
    oom_model: Architecture
    oom_optimizers: list[StateOptimizer]
    growth_rates: Annotated[list[Positive], Field(min_length=1)]
    rank: Count
    embedding_rank: Count
    lora_rank: Count
    c2_micro_batches: Counts
    c2_seq_lens: Counts
    n_gpus: Count
    gpu_memory_gib: Positive
    reserved_gib: NonNegative
    sharding: Literal[SHARDINGS]
    weight_bytes: Count
    grad_bytes: Count
    master_weights: bool
    reference_model: bool
    prefetch_layers: NonNegativeInt
    micro_batch: Count
    activation_checkpointing: bool
    activation_bytes: Count
    logit_bytes: Count
    fp32_logit_copies: NonNegativeInt
    rollout_sequences_per_gpu: Count
    kv_bytes: Count
    kv_cache_persists: bool
    prompt_length: Count
    initial_response_length: Count
    response_growth_per_step: NonNegative
    max_response_length: Count | None  # None: uncapped
    max_steps: Count


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/memory.yaml at `scale`, with `overrides` on top, checked."""
    return Config.load(scale, **overrides)


def assumptions(cfg: Config, **changes) -> Assumptions:
    """The node budget's assumptions from a config (and `changes` on top)."""
    return dataclasses.replace(Assumptions(**{k: cfg[k] for k in ASSUMPTION_KEYS}), **changes)


@cache
def meta_model(name: str) -> nn.Module:
    """The architecture `name` built in fp32 on `meta` (no storage), once per process."""
    return architecture(name).build(torch.float32)


def _options(cfg: Config, variant: str) -> tuple[str, dict]:
    """The optimizer and `counted_state_bytes` options of a row of the state table."""
    if variant not in LABELS:
        raise ValueError(f"unknown variant {variant!r}; valid: {list(LABELS)}")
    r, er = cfg.rank, cfg.embedding_rank
    return {
        "adamw": ("adamw", {"state_dtype": "float32"}),
        "adamw_bf16": ("adamw", {"state_dtype": "bfloat16"}),
        "adamw8bit": ("adamw8bit", {}),
        "adafactor": ("adafactor", {}),
        "adafactor_momentum": ("adafactor", {"momentum": True}),
        "galore": ("galore", {"rank": r}),
        "apollo": ("apollo", {"rank": r}),
        "apollo_paper": ("apollo", {"rank": r, "store_projection": False}),
        "flora": ("flora", {"rank": r}),
        "lora": ("lora", {"rank": cfg.lora_rank}),
        "naive": ("naive", {"rank": r}),
        "logra": ("logra", {"rank": r, "embedding_rank": er}),
        "logra_emb_rank": ("logra", {"rank": r, "embedding_rank": r}),
        "logra_emb_dense": ("logra", {"rank": r, "embedding_rank": None}),
    }[variant]


@cache
def option_stats(name: str, optimizer: str, options: tuple) -> ModelStats:
    """`model_stats` of `name` under `optimizer` with `options` (sorted key-value pairs),
    once per process."""
    return model_stats(meta_model(name), optimizer, **dict(options))


def stats(cfg: Config, name: str, variant: str) -> ModelStats:
    """Budget statistics of an architecture under a state-table variant (cached)."""
    optimizer, options = _options(cfg, variant)
    if variant == "adamw" and not cfg.master_weights:
        options = {"state_dtype": "bfloat16"}  # without fp32 masters AdamW keeps bf16 moments
    return option_stats(name, optimizer, tuple(sorted(options.items())))


def run(cfg: Config) -> pd.DataFrame:
    """Optimizer-state bytes by optimizer × architecture.

    Columns: model, variant, optimizer (label), state_bytes, params, bytes_per_param,
    percent_of_adamw (of AdamW with fp32 states).
    """
    rows = []
    for name in cfg.models:
        dense = option_stats(name, "adamw", (("state_dtype", "float32"),))
        for variant in cfg.variants:
            optimizer, options = _options(cfg, variant)
            b = option_stats(name, optimizer, tuple(sorted(options.items()))).state_bytes
            rows.append((architecture(name).label, variant, LABELS[variant], b, dense.params,
                         b / dense.params, 100 * b / dense.state_bytes))
    return pd.DataFrame(rows, columns=["model", "variant", "optimizer", "state_bytes", "params",
                                       "bytes_per_param", "percent_of_adamw"])


def param_counts(cfg: Config) -> pd.DataFrame:
    """Parameter counts of the built architectures beside the published ones."""
    rows = []
    for name in cfg.models:
        arch = architecture(name)
        total, non_emb = count_params(meta_model(name))
        rows.append((arch.label, total, arch.published_params, 100 * (total / arch.published_params
                     - 1), non_emb, arch.published_non_embedding_params,
                     100 * (non_emb / arch.published_non_embedding_params - 1), arch.source))
    return pd.DataFrame(rows, columns=[
        "model", "params", "published", "error_percent", "non_embedding", "published_non_embedding",
        "non_embedding_error_percent", "source"])


def budget_frame(cfg: Config) -> pd.DataFrame:
    """Per-GPU bytes by component for each budget model × optimizer, at the initial length.

    Columns: model, optimizer, component, phase (static / training / rollout), gib, seq_len,
    capacity_gib.
    """
    a = assumptions(cfg)
    seq = a.prompt_length + a.initial_response_length
    rows = []
    for name in cfg.budget_models:
        for variant in cfg.budget_optimizers:
            parts = budget(stats(cfg, name, variant), seq, a)
            for component, value in parts.items():
                phase = ("static" if component in STATIC else
                         "training" if component in TRAINING else "rollout")
                rows.append((architecture(name).label, LABELS[variant], component, phase,
                             value / GIB, seq, a.capacity_bytes() / GIB))
    return pd.DataFrame(rows, columns=["model", "optimizer", "component", "phase", "gib",
                                       "seq_len", "capacity_gib"])


def oom_run(cfg: Config) -> pd.DataFrame:
    """Peak per-GPU memory at every step of the default RL run, for the OOM model."""
    a = assumptions(cfg)
    frame = simulate({LABELS[v]: stats(cfg, cfg.oom_model, v)
                      for v in cfg.oom_optimizers}, a)
    return frame.assign(model=architecture(cfg.oom_model).label)


def oom_curve(cfg: Config, growth_rates: list[float] | None = None) -> pd.DataFrame:
    """First OOM step (None: none within max_steps) by response growth rate and optimizer."""
    rows = []
    for g in growth_rates or cfg.growth_rates:
        a = assumptions(cfg, response_growth_per_step=float(g))
        for v in cfg.oom_optimizers:
            rows.append((float(g), LABELS[v], oom_step(stats(cfg, cfg.oom_model, v), a)))
    return pd.DataFrame(rows, columns=["growth_per_step", "optimizer", "oom_step"]).astype(
        {"oom_step": "Int64"})
