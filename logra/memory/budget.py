"""Per-GPU memory of RL post-training on one node, and the step at which it runs out.

Every assumption is a field of `Assumptions` with a documented default. For a model with P
parameters (T of them trainable), optimizer state S bytes, N GPUs and ZeRO stage z, one GPU holds

    weights           P·b_w / N₃                        N₃ = N under ZeRO-3 (FSDP full shard)
    gathered weights  (U + f·Λ)·b_w   (ZeRO-3 only)     U: largest unit (a decoder layer, the
                                                        embedding or the head), Λ: a decoder layer,
                                                        f: layers prefetched
    gradients         T·b_g / N₂                        N₂ = N under ZeRO-2 and ZeRO-3
    master weights    T·4 / N₁                          N₁ = N under any ZeRO stage
    optimizer state   S / N₁
    reference model   P·b_w / N₃                        0 under LoRA: the reference policy is the
                                                        base with the adapters switched off

and, for a micro-batch of B sequences of s = prompt + response tokens (Korthikanti et al. 2022's
accounting of saved activations, redone for SwiGLU, grouped-query attention and fused attention
kernels that save no score matrix),

    per token and layer  a = b_a·(2·ν·h + 2·d_q + 2·d_kv + κ·(d_q + d_kv) + 4·i)
                         (ν norms of width h, each saving input and output; q, k, v and the
                         attention output; κ = 1 if q/k are RMS-normed; gate, up, act(gate)
                         and their product in the MLP of width i)
    activations          B·s·L·a                      without checkpointing
                         B·s·(L·h·b_a + a)             with: each layer's input, plus one layer
                                                      recomputed during backward
    logits               B·s·V·(b_ℓ + 4·c)             bf16 logits and c fp32 copies (the upcast
                                                      and the log-softmax kept for backward)
    rollout KV cache     R·2·d_kv·b_kv·Σ_layers min(s, window)   R sequences decoded at once

Training and rollout alternate, so the peak is static + max(activations + logits, KV cache), or
their sum when the inference engine keeps its cache through training (`kv_cache_persists`).
Not modelled: communication buckets, the optimizer step's temporaries (the step runs after the
activations are freed) and the transient memory of the no-grad reference and old-policy passes.

Over an RL run the response length grows, s(t) = prompt + min(max, s₀ + g·t), and the simulator
reports the first step whose peak exceeds (M − reserved) GiB, if any.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import pandas as pd
from torch import nn

from logra.memory.params import embedding_params, is_peft_model, with_lora
from logra.memory.state import counted_state_bytes

SHARDINGS = ("none", "zero1", "zero2", "zero3")
GIB = 2**30
STATIC = ("weights", "gathered weights", "gradients", "master weights", "optimizer state",
          "reference model")
TRAINING = ("activations", "logits")
ROLLOUT = ("kv cache",)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class Assumptions:
    """The assumptions of the per-GPU budget. Bytes are per stored number.

    Node:
        n_gpus: GPUs sharing the run (8).
        gpu_memory_gib: memory of one GPU (80: an "80 GB" A100/H100 has 80 GiB of HBM).
        reserved_gib: memory no tensor can use: CUDA context, NCCL buffers, allocator
            fragmentation (4).
        sharding: "none", "zero1" (optimizer state and master weights sharded), "zero2"
            (+ gradients) or "zero3" (+ weights and reference model; = FSDP full shard).
    Precision:
        weight_bytes: policy and reference weights (2, bf16).
        grad_bytes: gradients (2, bf16).
        master_weights: keep an fp32 master copy of the trainable parameters (True).
        reference_model: keep a frozen reference policy for the KL penalty (True).
        prefetch_layers: ZeRO-3 layers gathered ahead of the one computing (1).
    Training pass:
        micro_batch: sequences per forward/backward (1).
        activation_checkpointing: recompute each layer in backward (True).
        activation_bytes: saved activations (2, bf16).
        logit_bytes: logits as the head emits them (2, bf16).
        fp32_logit_copies: fp32 copies of the logits alive at the peak (2: upcast, log-softmax).
    Rollout:
        rollout_sequences_per_gpu: sequences decoded at once on one GPU (16).
        kv_bytes: KV-cache entries (2, bf16).
        kv_cache_persists: the inference engine keeps its cache during training (False).
    The run:
        prompt_length: prompt tokens (512).
        initial_response_length: mean response length at step 0 (1024).
        response_growth_per_step: tokens the response grows each step (1.25, about the rate of
            DeepSeek-R1-Zero's Figure 3: ~1k to ~10k tokens in ~8k steps).
        max_response_length: cap on the response (None: uncapped).
        max_steps: length of the simulated run (2000).
    """

    n_gpus: int = 8
    gpu_memory_gib: float = 80.0
    reserved_gib: float = 4.0
    sharding: str = "zero3"
    weight_bytes: int = 2
    grad_bytes: int = 2
    master_weights: bool = True
    reference_model: bool = True
    prefetch_layers: int = 1
    micro_batch: int = 1
    activation_checkpointing: bool = True
    activation_bytes: int = 2
    logit_bytes: int = 2
    fp32_logit_copies: int = 2
    rollout_sequences_per_gpu: int = 16
    kv_bytes: int = 2
    kv_cache_persists: bool = False
    prompt_length: int = 512
    initial_response_length: int = 1024
    response_growth_per_step: float = 1.25
    max_response_length: int | None = None
    max_steps: int = 2000

    def __post_init__(self) -> None:
        if self.sharding not in SHARDINGS:
            raise ValueError(f"unknown sharding {self.sharding!r}; valid: {list(SHARDINGS)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or value is None or f.name == "sharding":
                continue
            if value < 0 or (value == 0 and f.name in ("n_gpus", "gpu_memory_gib")):
                raise ValueError(f"{f.name} must be positive, got {value!r}")

    def capacity_bytes(self) -> float:
        """Memory one GPU can give to tensors."""
        return (self.gpu_memory_gib - self.reserved_gib) * GIB

    def response_length(self, step: int) -> int:
        """Response tokens at `step`: s₀ + g·t, capped at `max_response_length`."""
        length = int(self.initial_response_length + self.response_growth_per_step * step)
        return length if self.max_response_length is None else min(length,
                                                                    self.max_response_length)


@dataclass(frozen=True)
class ModelShape:
    """The dimensions that size activations and the KV cache."""

    hidden: int
    layers: int
    q_dim: int  # heads × head_dim
    kv_dim: int  # KV heads × head_dim
    intermediate: int
    vocab: int
    norms_per_layer: int  # RMSNorms of width `hidden` in a decoder layer
    qk_norm: bool  # per-head RMSNorm of queries and keys (Qwen3, Gemma 3)
    windows: tuple[int | None, ...]  # sliding window of each layer; None: full attention

    @classmethod
    def of(cls, model: nn.Module) -> ModelShape:
        """Read the shape off a Hugging Face causal LM (or a peft model around one)."""
        c = model.config
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        layer_types = getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers
        window = getattr(c, "sliding_window", None)
        first = [(name, p) for name, p in model.named_parameters()
                 if (match := _LAYER.search(name)) and match.group(1) == "0"]
        norms = [(name, p.numel()) for name, p in first if "norm" in name and p.dim() == 1]
        return cls(
            hidden=c.hidden_size,
            layers=c.num_hidden_layers,
            q_dim=c.num_attention_heads * head_dim,
            kv_dim=c.num_key_value_heads * head_dim,
            intermediate=c.intermediate_size,
            vocab=c.vocab_size,
            norms_per_layer=sum(n == c.hidden_size for _, n in norms),
            qk_norm=any(n == head_dim != c.hidden_size for _, n in norms),
            windows=tuple(window if t == "sliding_attention" else None for t in layer_types),
        )


@dataclass(frozen=True)
class ModelStats:
    """What the budget needs from one model under one optimizer, counted once."""

    shape: ModelShape
    params: int  # every parameter, frozen ones included, tied ones once
    trainable: int
    layer_params: int  # the largest decoder layer
    largest_unit: int  # the largest of a decoder layer, the embedding, the head
    state_bytes: int
    reference_shared: bool  # LoRA: the reference policy is the base, adapters off


def model_stats(model: nn.Module, optimizer: str, **options) -> ModelStats:
    """Count `model` once for the budget. `options` go to `counted_state_bytes` (for "lora", `rank`
    and `target_modules` choose the adapters of a plain model)."""
    if optimizer == "lora" and not is_peft_model(model):
        adapter = {k: options.pop(k) for k in ("rank", "target_modules") if k in options}
        model = with_lora(model, **adapter)
    layers: dict[str, int] = {}
    for name, p in model.named_parameters():
        if match := _LAYER.search(name):
            layers[match.group(1)] = layers.get(match.group(1), 0) + p.numel()
    layer = max(layers.values(), default=0)
    embeddings = [p.numel() for p in embedding_params(model).values()]
    return ModelStats(
        shape=ModelShape.of(model),
        params=sum(p.numel() for p in model.parameters()),
        trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
        layer_params=layer,
        largest_unit=max([layer, *embeddings]),
        state_bytes=counted_state_bytes(model, optimizer, **options),
        reference_shared=optimizer == "lora",
    )


def static_bytes(stats: ModelStats, a: Assumptions) -> dict[str, float]:
    """Per-GPU bytes that do not depend on the sequence length (see the module docstring)."""
    n = a.n_gpus
    n1 = n if a.sharding != "none" else 1
    n2 = n if a.sharding in ("zero2", "zero3") else 1
    n3 = n if a.sharding == "zero3" else 1
    gathered = 0.0
    if a.sharding == "zero3":
        gathered = (stats.largest_unit + a.prefetch_layers * stats.layer_params) * a.weight_bytes
    reference = a.reference_model and not stats.reference_shared
    return {
        "weights": stats.params * a.weight_bytes / n3,
        "gathered weights": gathered,
        "gradients": stats.trainable * a.grad_bytes / n2,
        "master weights": stats.trainable * 4 / n1 if a.master_weights else 0.0,
        "optimizer state": stats.state_bytes / n1,
        "reference model": stats.params * a.weight_bytes / n3 if reference else 0.0,
    }


def activation_bytes_per_token_layer(shape: ModelShape, activation_bytes: int = 2) -> int:
    """a = b_a·(2·ν·h + 2·d_q + 2·d_kv + κ·(d_q + d_kv) + 4·i): saved per token and layer."""
    numbers = (2 * shape.norms_per_layer * shape.hidden + 2 * shape.q_dim + 2 * shape.kv_dim
               + shape.qk_norm * (shape.q_dim + shape.kv_dim) + 4 * shape.intermediate)
    return activation_bytes * numbers


def activation_bytes(
    shape: ModelShape, micro_batch: int, seq_len: int, checkpointing: bool,
    activation_bytes: int = 2,
) -> int:
    """Saved activations of one micro-batch: B·s·L·a, or B·s·(L·h·b_a + a) with checkpointing."""
    tokens = micro_batch * seq_len
    per_layer = activation_bytes_per_token_layer(shape, activation_bytes)
    if checkpointing:
        return tokens * (shape.layers * shape.hidden * activation_bytes + per_layer)
    return tokens * shape.layers * per_layer


def logits_bytes(
    shape: ModelShape, micro_batch: int, seq_len: int, logit_bytes: int = 2,
    fp32_logit_copies: int = 2,
) -> int:
    """Logits of one micro-batch: B·s·V·(b_ℓ + 4·c)."""
    return micro_batch * seq_len * shape.vocab * (logit_bytes + 4 * fp32_logit_copies)


def kv_cache_bytes(shape: ModelShape, sequences: int, seq_len: int, kv_bytes: int = 2) -> int:
    """KV cache of `sequences` decoded at once: R·2·d_kv·b_kv·Σ_layers min(s, window)."""
    cached = sum(seq_len if w is None else min(seq_len, w) for w in shape.windows)
    return sequences * 2 * shape.kv_dim * kv_bytes * cached


def budget(stats: ModelStats, seq_len: int, a: Assumptions) -> dict[str, float]:
    """Every component of one GPU's memory at sequence length `seq_len` (prompt + response)."""
    shape = stats.shape
    return {
        **static_bytes(stats, a),
        "activations": float(activation_bytes(shape, a.micro_batch, seq_len,
                                              a.activation_checkpointing, a.activation_bytes)),
        "logits": float(logits_bytes(shape, a.micro_batch, seq_len, a.logit_bytes,
                                     a.fp32_logit_copies)),
        "kv cache": float(kv_cache_bytes(shape, a.rollout_sequences_per_gpu, seq_len,
                                         a.kv_bytes)),
    }


def peak_bytes(components: dict[str, float], a: Assumptions) -> float:
    """static + max(training, rollout), or static + training + rollout if the cache persists."""
    static = sum(components[k] for k in STATIC)
    training = sum(components[k] for k in TRAINING)
    rollout = sum(components[k] for k in ROLLOUT)
    return static + (training + rollout if a.kv_cache_persists else max(training, rollout))


def simulate(stats: dict[str, ModelStats], a: Assumptions) -> pd.DataFrame:
    """Peak memory per GPU at every step of the run, for each optimizer's stats.

    Columns: optimizer, step, response_length, peak_gib, capacity_gib, fits.
    """
    rows = []
    for name, s in stats.items():
        for step in range(a.max_steps + 1):
            response = a.response_length(step)
            peak = peak_bytes(budget(s, a.prompt_length + response, a), a)
            rows.append((name, step, response, peak / GIB, a.capacity_bytes() / GIB,
                         peak <= a.capacity_bytes()))
    return pd.DataFrame(rows, columns=["optimizer", "step", "response_length", "peak_gib",
                                       "capacity_gib", "fits"])


def oom_step(stats: ModelStats, a: Assumptions) -> int | None:
    """The first step whose peak exceeds the GPU's capacity, or None within `max_steps`.

    The peak grows with the response, so this bisects on the step.
    """
    def exceeds(step: int) -> bool:
        seq = a.prompt_length + a.response_length(step)
        return peak_bytes(budget(stats, seq, a), a) > a.capacity_bytes()

    if not exceeds(a.max_steps):
        return None
    lo, hi = -1, a.max_steps  # exceeds(lo) is False (virtual), exceeds(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if exceeds(mid) else (mid, hi)
    return hi


def max_fitting_length(stats: ModelStats, a: Assumptions) -> int:
    """The longest prompt + response that fits (0 if even the static memory does not)."""
    def fits(seq: int) -> bool:
        return peak_bytes(budget(stats, seq, a), a) <= a.capacity_bytes()

    if not fits(0):
        return 0
    hi = 1
    while fits(hi):  # terminates: the logits alone grow without bound
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
