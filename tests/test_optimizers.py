"""The optimizer registry: every entry builds from its own package and trains a transformers LM;
bad names and settings fail before anything is built."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from logra.config import ConfigError
from logra.optimizers import (
    OPTIMIZERS,
    REGISTRY,
    SETTINGS,
    OptimizerSettings,
    build_optimizer,
    measured_state_bytes,
    spec,
    wrap_model,
)


def installed(name: str) -> bool:
    package = REGISTRY[name].package
    return package is None or importlib.util.find_spec(package[0]) is not None


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_lowers_the_loss_of_a_tiny_lm(name: str, tiny_qwen2) -> None:
    if not installed(name):
        pytest.skip(f"{REGISTRY[name].package[1]} is not installed")
    settings = dict(lr=1e-2, rank=4, lora_rank=4, lora_targets=["q_proj", "v_proj"])
    model = wrap_model(name, tiny_qwen2(), settings)
    optimizer = build_optimizer(name, model, settings)
    ids = torch.arange(48).repeat(4, 1)[:, :24]  # a fixed, learnable sequence
    losses = []
    for _ in range(15):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.05, losses
    assert measured_state_bytes(optimizer) > 0
    if REGISTRY[name].wraps_model:
        assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)


def test_registry_entries_are_distinct_in_figures() -> None:
    labels = [entry.label for entry in REGISTRY.values()]
    colors = [entry.color for entry in REGISTRY.values()]
    assert len(set(labels)) == len(labels) and len(set(colors)) == len(colors)


def test_bad_requests_name_the_culprit(tiny_qwen2) -> None:
    with pytest.raises(ValueError, match=r"unknown optimizer 'sgd'; valid optimizers: \['adamw'"):
        spec("sgd")
    with pytest.raises(ValueError, match="settings have no 'lr': every optimizer needs a learn"):
        build_optimizer("adamw", tiny_qwen2(), {"rank": 4})
    with pytest.raises(ValueError, match="adam-mini needs a transformers model"):
        build_optimizer("adam-mini", torch.nn.Linear(4, 4), {"lr": 1e-3})


def test_apollo_mini_is_rank_one_whatever_the_rank(tiny_qwen2) -> None:
    if not installed("apollo-mini"):
        pytest.skip("apollo-torch is not installed")
    optimizer = build_optimizer("apollo-mini", tiny_qwen2(), {"lr": 1e-3, "rank": 8})
    projected = [g for g in optimizer.param_groups if "rank" in g]
    assert projected and all(g["rank"] == 1 and g["scale_type"] == "tensor" for g in projected)


def test_logra_with_dense_embeddings_keeps_adamw_moments_there(tiny_qwen2) -> None:
    """GaLore's and APOLLO's recipe: embeddings and head get dense AdamW, the blocks sketches."""
    model = tiny_qwen2(vocab_size=300)  # tied embeddings: one matrix, 300×32
    optimizer = build_optimizer("logra", model, {"lr": 1e-3, "rank": 4,
                                                 "dense_embeddings": True})
    dense, sketched = optimizer.param_groups
    assert not dense["sketch"] and sketched["sketch"]
    assert [p.shape for p in dense["params"]] == [torch.Size([300, 32])]
    ids = torch.arange(24).repeat(2, 1)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    embedding = dense["params"][0]
    assert optimizer.state[embedding]["exp_avg"].shape == embedding.shape
    assert any("exp_avg_L" in optimizer.state[p] for p in sketched["params"])


def test_measured_state_bytes_count_logra_s_kept_projections(tiny_qwen2) -> None:
    """The projections LoGRA keeps between steps are persistent memory outside
    `optimizer.state`: counted with `cache_projections=True`, absent without, and the
    difference is exactly the distinct shapes' P (m×(r+oversample)) and Q (n×r) in fp32."""
    from logra.optim import LoGRA

    ids = torch.arange(24).repeat(2, 1)
    measured = {}
    for cache in (True, False):
        model = tiny_qwen2()
        optimizer = LoGRA(model.parameters(), lr=1e-3, rank=4, cache_projections=cache)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        measured[cache] = (measured_state_bytes(optimizer), optimizer)
    kept = measured[True][1].projection_bank.cached
    expected = sum(t.numel() * 4 for t in kept.values())
    assert expected > 0 and not measured[False][1].projection_bank.cached
    assert measured[True][0] - measured[False][0] == expected


def test_registry_defaults_agree_with_the_packaged_grpo_config() -> None:
    """A setting both `OptimizerSettings` and experiments/grpo.yaml hold has one value, except
    the KL threshold: off for a drop-in optimizer, the report's 0.02 for its GRPO runs; and a
    GRPO config hands the optimizer exactly the settings it holds."""
    from logra.rl.config import resolve

    defaults = OptimizerSettings(lr=1e-3)
    packaged = resolve()
    shared = sorted(set(SETTINGS) & set(packaged.to_dict()) - {"lr", "predicted_kl_threshold"})
    assert {"lora_rank", "lora_alpha", "lora_targets", "rank", "reconstruction"} <= set(shared)
    disagree = {k: (getattr(defaults, k), getattr(packaged, k)) for k in shared
                if getattr(defaults, k) != getattr(packaged, k)}
    assert not disagree
    assert defaults.predicted_kl_threshold is None and packaged.predicted_kl_threshold == 0.02
    handed = packaged.replace(lr=3e-4, rank=8, lora_targets=["q_proj"]).optimizer_settings()
    assert (handed.lr, handed.rank, handed.lora_targets) == (3e-4, 8, ("q_proj",))
    assert handed.predicted_kl_threshold == 0.02
    assert handed.dense_embeddings is False  # a key GRPO does not hold: its default


def test_settings_are_checked_once_and_name_the_culprit(tiny_qwen2) -> None:
    """A misspelt, ill-typed or unknown-choice setting is a ConfigError naming the key, before
    any optimizer is built: a typo is refused, not silently left at its default."""
    model = tiny_qwen2()
    for settings, message in (
        ({"lr": 1e-3, "rnak": 4}, r"unknown key 'rnak'; valid keys: \[.*'rank'"),
        ({"lr": 1e-3, "reconstruction": "gian"},
         r"reconstruction: input should be 'blend', .*'gain'.*got 'gian'"),
        ({"lr": 1e-3, "rank": True}, r"rank: input should be a valid integer, got True"),
        ({"lr": "1e-3"}, r"lr: input should be a valid number, got '1e-3'"),
        ({"lr": 1e-3, "rank": 0}, r"rank: input should be greater than or equal to 1"),
        ({"lr": 1e-3, "predicted_kl_threshold": 0.0}, r"predicted_kl_threshold: input should"),
    ):
        with pytest.raises(ConfigError, match=message):
            build_optimizer("logra", model, settings)
    with pytest.raises(ConfigError, match="unknown key 'lora_rnak'"):
        wrap_model("lora", model, {"lr": 1e-3, "lora_rnak": 2})
    typed = OptimizerSettings(lr=1, lora_targets=["q_proj"])  # an int for a float, a YAML list
    assert isinstance(typed.lr, float) and typed.lora_targets == ("q_proj",)
    assert build_optimizer("logra", model, typed).param_groups[0]["rank"] == 16
