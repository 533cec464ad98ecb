"""The per-GPU budget: every component on a case small enough to compute by hand."""

from __future__ import annotations

import dataclasses

import pytest

from logra.memory import (
    Assumptions,
    ModelShape,
    ModelStats,
    activation_bytes,
    architecture,
    budget,
    kv_cache_bytes,
    logits_bytes,
    max_fitting_length,
    model_stats,
    oom_step,
    peak_bytes,
    simulate,
    static_bytes,
)
from logra.memory.budget import GIB, activation_bytes_per_token_layer

# hidden 8, 3 layers, q 8, kv 4, MLP 16, vocab 50, 2 norms, no q/k norm; layer 2 slides (window 4)
SHAPE = ModelShape(hidden=8, layers=3, q_dim=8, kv_dim=4, intermediate=16, vocab=50,
                   norms_per_layer=2, qk_norm=False, windows=(None, None, 4))
STATS = ModelStats(shape=SHAPE, params=1000, trainable=1000, layer_params=100, largest_unit=300,
                   state_bytes=8000, reference_shared=False)


def test_static_components_by_hand() -> None:
    a = Assumptions(n_gpus=4, sharding="zero3")
    assert static_bytes(STATS, a) == {
        "weights": 1000 * 2 / 4,                 # 500
        "gathered weights": (300 + 1 * 100) * 2,  # largest unit + one prefetched layer: 800
        "gradients": 1000 * 2 / 4,               # 500
        "master weights": 1000 * 4 / 4,          # 1000
        "optimizer state": 8000 / 4,             # 2000
        "reference model": 1000 * 2 / 4,         # 500
    }
    assert static_bytes(STATS, dataclasses.replace(a, sharding="zero1")) == {
        "weights": 2000, "gathered weights": 0, "gradients": 2000, "master weights": 1000,
        "optimizer state": 2000, "reference model": 2000}
    assert static_bytes(STATS, dataclasses.replace(a, sharding="zero2"))["gradients"] == 500
    none = static_bytes(STATS, Assumptions(sharding="none", master_weights=False,
                                           reference_model=False, weight_bytes=4, grad_bytes=4))
    assert none == {"weights": 4000, "gathered weights": 0, "gradients": 4000,
                    "master weights": 0, "optimizer state": 8000, "reference model": 0}


def test_lora_shares_the_reference_with_its_base() -> None:
    lora = dataclasses.replace(STATS, trainable=10, reference_shared=True)
    parts = static_bytes(lora, Assumptions(n_gpus=1, sharding="none"))
    assert parts["reference model"] == 0 and parts["gradients"] == 20
    assert parts["weights"] == 2000  # the frozen base is still there


def test_activations_by_hand() -> None:
    # per token and layer: 2·(2·2·8 + 2·8 + 2·4 + 0 + 4·16) = 2·120 = 240 bytes
    assert activation_bytes_per_token_layer(SHAPE, 2) == 240
    qk = dataclasses.replace(SHAPE, qk_norm=True, norms_per_layer=4)
    assert activation_bytes_per_token_layer(qk, 2) == 2 * (2 * 4 * 8 + 16 + 8 + 12 + 64)
    # micro-batch 2 × 5 tokens: 10 tokens
    assert activation_bytes(SHAPE, 2, 5, checkpointing=False) == 10 * 3 * 240
    assert activation_bytes(SHAPE, 2, 5, checkpointing=True) == 10 * (3 * 8 * 2 + 240)
    assert activation_bytes(SHAPE, 2, 5, checkpointing=False, activation_bytes=4) == 14400


def test_logits_by_hand() -> None:
    # 10 tokens × vocab 50 × (2 B bf16 + 2 fp32 copies × 4 B)
    assert logits_bytes(SHAPE, 2, 5) == 10 * 50 * 10
    assert logits_bytes(SHAPE, 2, 5, logit_bytes=4, fp32_logit_copies=0) == 2000


def test_kv_cache_by_hand() -> None:
    # 3 sequences of 10 tokens: full layers cache 10 each, the sliding one 4; K and V, bf16
    assert kv_cache_bytes(SHAPE, 3, 10) == 3 * 2 * 4 * 2 * (10 + 10 + 4)
    assert kv_cache_bytes(SHAPE, 3, 2) == 3 * 2 * 4 * 2 * (2 + 2 + 2)


def test_peak_takes_the_larger_phase_unless_the_cache_persists() -> None:
    a = Assumptions(n_gpus=4, micro_batch=2, activation_checkpointing=False,
                    rollout_sequences_per_gpu=3)
    parts = budget(STATS, 5, a)
    static = 500 + 800 + 500 + 1000 + 2000 + 500
    training = 7200 + 5000
    rollout = 3 * 2 * 4 * 2 * (5 + 5 + 4)
    assert parts["activations"] == 7200 and parts["logits"] == 5000
    assert parts["kv cache"] == rollout
    assert peak_bytes(parts, a) == static + max(training, rollout)
    persists = dataclasses.replace(a, kv_cache_persists=True)
    assert peak_bytes(parts, persists) == static + training + rollout


def test_response_growth_and_capacity() -> None:
    a = Assumptions(initial_response_length=100, response_growth_per_step=2.5,
                    max_response_length=105, gpu_memory_gib=80, reserved_gib=4)
    assert [a.response_length(t) for t in range(4)] == [100, 102, 105, 105]
    assert a.capacity_bytes() == 76 * GIB


def test_oom_step_by_hand() -> None:
    """Static 5,300 B; training 3·240 + 50·10 = 1,220 B per token (ckpt off, micro-batch 1).

    Capacity 2·10⁻⁵ GiB = 21,474.8 B, so s_max = ⌊(21,474.8 − 5,300) / 1,220⌋ = 13 tokens;
    prompt 2, s₀ 3, growth 1.5/step: s(t) = 2 + ⌊3 + 1.5 t⌋ > 13 first at t = 6 (s = 14).
    """
    a = Assumptions(n_gpus=4, gpu_memory_gib=2e-5, reserved_gib=0,
                    activation_checkpointing=False, rollout_sequences_per_gpu=0,
                    prompt_length=2, initial_response_length=3, response_growth_per_step=1.5,
                    max_steps=50)
    assert sum(static_bytes(STATS, a).values()) == 5300
    assert max_fitting_length(STATS, a) == 13
    assert oom_step(STATS, a) == 6
    frame = simulate({"x": STATS}, a)
    assert frame[~frame.fits].step.min() == 6
    assert oom_step(STATS, dataclasses.replace(a, max_response_length=10)) is None
    assert oom_step(STATS, dataclasses.replace(a, gpu_memory_gib=1e-6)) == 0  # static alone


def test_model_shape_and_stats_of_real_architectures() -> None:
    gemma = architecture("gemma-3-27b").build()
    shape = ModelShape.of(gemma)
    assert (shape.hidden, shape.layers, shape.q_dim, shape.kv_dim) == (5376, 62, 4096, 2048)
    assert shape.norms_per_layer == 4 and shape.qk_norm
    assert shape.windows.count(None) == 10 and set(shape.windows) == {None, 1024}
    qwen = ModelShape.of(architecture("qwen2.5-7b").build())
    assert (qwen.norms_per_layer, qwen.qk_norm, set(qwen.windows)) == (2, False, {None})
    stats = model_stats(gemma, "logra", rank=16)
    assert stats.params == stats.trainable == 27_009_346_304
    assert stats.largest_unit == 262208 * 5376  # the tied embedding outweighs a layer
    assert stats.layer_params < stats.largest_unit and not stats.reference_shared


def test_lora_stats_count_adapters_as_trainable() -> None:
    model = architecture("qwen2.5-1.5b").build()
    stats = model_stats(model, "lora", rank=8)
    base = sum(p.numel() for p in model.parameters())
    assert stats.reference_shared and stats.params == base + stats.trainable
    # every linear of the 28 layers: r·(in + out) adapters
    per_layer = 8 * ((1536 + 1536) * 2 + (1536 + 256) * 2 + (1536 + 8960) * 3)
    assert stats.trainable == 28 * per_layer


def test_bad_assumptions_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"valid: .*'zero3'"):
        Assumptions(sharding="fsdp")
    with pytest.raises(ValueError, match="n_gpus must be positive"):
        Assumptions(n_gpus=0)
