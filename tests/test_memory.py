"""Optimizer-state accounting: byte-exact against real optimizers, the papers' formulas, and the
real architectures counted on the meta device.

"Allocated" state is the sum of `nbytes` over every distinct tensor reachable from
`optimizer.state` after one step (objects such as GaLore's projector included; a tensor shared by
all parameters, like bitsandbytes' quantile maps, counts once). 0-d fp32 `step` tensors count.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from logra.memory import (
    ARCHITECTURES,
    architecture,
    count_params,
    counted_state_bytes,
    logra_param_groups,
    state_table,
)
from logra.memory.params import embedding_params
from logra.optim import LoGRA, RandomProjectionAdam


def held_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Sum of nbytes of every distinct tensor in the optimizer's state."""
    seen: dict[int, torch.Tensor] = {}

    def walk(obj) -> None:
        if isinstance(obj, torch.Tensor):
            seen.setdefault(id(obj), obj)
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, list | tuple):
            for value in obj:
                walk(value)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            walk(vars(obj))

    for state in optimizer.state.values():
        walk(state)
    return sum(t.nbytes for t in seen.values())


@pytest.fixture
def build(tiny_qwen2):
    """build(tied=True, dtype=fp32): a 2-layer Qwen2 with tensors on both sides of every
    threshold the rules have.

    Embedding 512×64 (sketched or dense by rank, 8-bit), q/o 64×64 (exactly bitsandbytes'
    4,096-element minimum), k/v 32×64 (below it; sketched at r=16, dense fallback at r=24),
    MLP 160×64, 1-D biases and norms.
    """
    def build_model(tied: bool = True, dtype: torch.dtype = torch.float32) -> nn.Module:
        return tiny_qwen2(vocab_size=512, hidden_size=64, intermediate_size=160,
                          tie_word_embeddings=tied).to(dtype)

    return build_model


def one_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    ids = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return optimizer


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adamw_is_byte_exact(tied: bool, dtype: torch.dtype, build) -> None:
    model = build(tied, dtype)
    opt = one_step(model, torch.optim.AdamW(model.parameters()))
    assert counted_state_bytes(model, "adamw") == held_bytes(opt)
    # torch keeps the moments in the parameters' dtype; a bf16 model has half the moment bytes
    fp32 = counted_state_bytes(model, "adamw", state_dtype="float32")
    assert fp32 == held_bytes(opt) if dtype == torch.float32 else fp32 > held_bytes(opt)


def test_adamw_amsgrad_is_byte_exact(build) -> None:
    model = build()
    opt = one_step(model, torch.optim.AdamW(model.parameters(), amsgrad=True))
    assert counted_state_bytes(model, "adamw", amsgrad=True) == held_bytes(opt)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize(("rank", "embedding_rank", "oversample"),
                         [(16, 8, 0), (24, None, 0), (16, 64, 4)])
def test_logra_is_byte_exact(tied: bool, rank: int, embedding_rank: int | None,
                             oversample: int, build) -> None:
    model = build(tied)
    groups = logra_param_groups(model, rank, embedding_rank)
    opt = one_step(model, LoGRA(groups, lr=1e-3, oversample=oversample))
    assert counted_state_bytes(model, "logra", rank=rank, embedding_rank=embedding_rank,
                               oversample=oversample) == held_bytes(opt)


def test_logra_param_groups_put_embeddings_apart(build) -> None:
    untied = build(tied=False)
    groups = logra_param_groups(untied, rank=16, embedding_rank=None)
    assert groups[1] == {"params": [untied.model.embed_tokens.weight, untied.lm_head.weight],
                         "sketch": False}
    assert len(groups[0]["params"]) + 2 == len(list(untied.parameters()))
    tied = build(tied=True)  # the tied pair is one parameter, once
    assert [len(g["params"]) for g in logra_param_groups(tied)] == [
        len(list(tied.parameters())) - 1, 1]


@pytest.mark.parametrize("rank", [8, 40])
def test_naive_projection_is_byte_exact(rank: int, build) -> None:
    model = build()
    opt = one_step(model, RandomProjectionAdam(model.parameters(), rank=rank))
    assert counted_state_bytes(model, "naive", rank=rank) == held_bytes(opt)


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"]])
def test_lora_is_byte_exact(targets, build) -> None:
    from peft import LoraConfig, get_peft_model

    plain = build()
    peft_model = get_peft_model(copy.deepcopy(plain), LoraConfig(r=4, target_modules=targets))
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    opt = one_step(peft_model, torch.optim.AdamW(trainable))
    held = held_bytes(opt)
    assert counted_state_bytes(peft_model, "lora") == held
    assert counted_state_bytes(plain, "lora", rank=4, target_modules=targets) == held
    # the plain model is left as it was: no adapters, nothing frozen
    assert all(p.requires_grad and not p.is_meta for p in plain.parameters())


def test_lora_counts_only_the_adapters_of_a_meta_model() -> None:
    with torch.device("meta"):
        layer = nn.Sequential(nn.Linear(1024, 256, bias=False))
    # one adapter pair A: 4×1024, B: 256×4, AdamW fp32 moments + two step tensors
    assert counted_state_bytes(layer, "lora", rank=4, target_modules=["0"]) == (
        2 * 4 * 4 * (1024 + 256) + 2 * 4)


def galore_groups(model: nn.Module, rank: int, **extra) -> list[dict]:
    """GaLore/APOLLO's usual split: 2-D weights but the embeddings projected, the rest dense."""
    embeddings = embedding_params(model)
    projected = [p for p in model.parameters() if p.dim() == 2 and id(p) not in embeddings]
    dense = [p for p in model.parameters() if not (p.dim() == 2 and id(p) not in embeddings)]
    return [{"params": dense},
            {"params": projected, "rank": rank, "update_proj_gap": 200, "scale": 0.25,
             "proj_type": "std", **extra}]


@pytest.mark.parametrize("rank", [8, 48])
def test_galore_is_byte_exact(rank: int, build) -> None:
    galore = pytest.importorskip("galore_torch")
    model = build(tied=False)
    opt = one_step(model, galore.GaLoreAdamW(galore_groups(model, rank),
                                             no_deprecation_warning=True))
    assert counted_state_bytes(model, "galore", rank=rank) == held_bytes(opt)


@pytest.mark.parametrize("rank", [8, 48])
def test_apollo_is_byte_exact(rank: int, build) -> None:
    apollo = pytest.importorskip("apollo_torch")
    model = build(tied=False)
    groups = galore_groups(model, rank, proj="random", scale_type="channel")
    opt = one_step(model, apollo.APOLLOAdamW(groups))
    assert counted_state_bytes(model, "apollo", rank=rank) == held_bytes(opt)
    # and over a second step (the norm-growth limiter's scalar exists from step 1 on)
    assert counted_state_bytes(model, "apollo", rank=rank) == held_bytes(one_step(model, opt))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adafactor_is_byte_exact(dtype: torch.dtype, build) -> None:
    model = build(tied=False, dtype=dtype)
    opt = one_step(model, torch.optim.Adafactor(model.parameters()))
    assert counted_state_bytes(model, "adafactor") == held_bytes(opt)


def test_adamw8bit_is_byte_exact(build) -> None:
    bnb = pytest.importorskip("bitsandbytes")
    model = build(tied=False)
    opt = one_step(model, bnb.optim.AdamW8bit(model.parameters()))
    assert counted_state_bytes(model, "adamw8bit") == held_bytes(opt)
    assert state_table(model, "adamw8bit")["(shared)"] == 2048  # the two quantile maps, once


def test_published_formulas_of_one_matrix() -> None:
    """GaLore, APOLLO, Flora, Adafactor and 8-bit Adam on W ∈ R^{m×n}, m = 256 ≤ n = 1024."""
    m, n, r = 256, 1024, 16
    with torch.device("meta"):
        layer = nn.Linear(n, m, bias=False)
    # GaLore (Zhao et al. 2024, Table 1): projection mr + moments 2nr
    assert counted_state_bytes(layer, "galore", rank=r) == 4 * (m * r + 2 * n * r)
    # APOLLO (Zhu et al. 2024): 2nr with the projection regenerated from its seed
    assert counted_state_bytes(layer, "apollo", rank=r, store_projection=False,
                               norm_limiter=False) == 4 * 2 * n * r
    assert counted_state_bytes(layer, "apollo", rank=r) == 4 * (m * r + 2 * n * r) + 4
    # Flora (Hao et al. 2024): compressed momentum m·r + Adafactor's factored m + n
    assert counted_state_bytes(layer, "flora", rank=r) == 4 * (m * r + m + n)
    # Adafactor (Shazeer & Stern 2018): row and column factors, + a step tensor
    assert counted_state_bytes(layer, "adafactor") == 4 * (m + n) + 4
    assert counted_state_bytes(layer, "adafactor", momentum=True) == 4 * (m + n + m * n) + 4
    # 8-bit Adam (Dettmers et al. 2022): 1 B per moment entry, fp32 absmax per 256-block
    assert counted_state_bytes(layer, "adamw8bit") == 2 * m * n + 2 * 4 * (m * n // 256) + 2 * 1024


def test_c1_layer_to_the_byte() -> None:
    """4096×4096 at r=16: 1,048,576 B for LoGRA vs 134,217,728 B for AdamW (moments only)."""
    with torch.device("meta"):
        layer = nn.Linear(4096, 4096, bias=False)
    assert counted_state_bytes(layer, "logra", rank=16, include_step=False) == 1_048_576
    assert counted_state_bytes(layer, "adamw", state_dtype="float32",
                               include_step=False) == 134_217_728
    # with the 0-d fp32 step tensor each keeps
    assert counted_state_bytes(layer, "logra", rank=16) == 1_048_580
    assert counted_state_bytes(layer, "adamw", state_dtype="float32") == 134_217_732


def test_rules_follow_the_optimizers_shape_rules() -> None:
    from logra.optim import projected_shape, sketch_shapes

    with torch.device("meta"):
        layer = nn.Linear(300, 200, bias=True)  # weight 200×300
    table = state_table(layer, "logra", rank=16)
    (k, n), (m, r) = sketch_shapes((200, 300), 16)
    assert table["weight"] == 8 * (k * n + m * r) + 4
    assert table["bias"] == 8 * 200 + 4
    assert state_table(layer, "naive", rank=16)["weight"] == 8 * math.prod(
        projected_shape((200, 300), 16)) + 4


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_architectures_match_their_published_sizes(name: str) -> None:
    arch = architecture(name)
    model = arch.build()
    total, non_embedding = count_params(model)
    assert abs(total / arch.published_params - 1) < 0.005, (total, arch.published_params)
    assert abs(non_embedding / arch.published_non_embedding_params - 1) < 0.005
    assert all(p.is_meta for p in model.parameters())


def test_embedding_example_of_qwen3_8b() -> None:
    """The report's 151,936 × 4,096 embedding is Qwen3-8B's (untied: the head too)."""
    model = architecture("qwen3-8b").build()
    shapes = {tuple(p.shape) for p in embedding_params(model).values()}
    assert shapes == {(151936, 4096)} and len(embedding_params(model)) == 2


COUNT_27B = r"""
import json, resource, torch
torch.set_num_threads(1)
from logra.memory import OPTIMIZERS, architecture, counted_state_bytes

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, after the imports
model = architecture("gemma-3-27b").build()
counts = {opt: counted_state_bytes(model, opt) for opt in OPTIMIZERS if opt != "lora"}
print(json.dumps({
    "grown_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
    "meta": all(p.is_meta for p in model.parameters()), "adamw": counts["adamw"],
    "expected_adamw": 4 * sum(p.numel() for p in model.parameters())
                      + 4 * len(list(model.parameters())),
}))
"""


def test_counting_27b_on_meta_allocates_nothing() -> None:
    """Measured in a fresh process: ru_maxrss is the process's lifetime peak, which earlier
    tests in this one have already raised."""
    out = subprocess.run([sys.executable, "-c", COUNT_27B], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["meta"]
    assert result["grown_mib"] < 512, result  # 27B bf16 parameters would be 50 GiB
    # bf16 moments, as torch.optim.AdamW would keep them
    assert result["adamw"] == result["expected_adamw"] > 4 * 25e9


def test_bad_input_names_the_valid_choices() -> None:
    with torch.device("meta"):
        layer = nn.Linear(8, 8)
    with pytest.raises(ValueError, match=r"valid: .*'logra'"):
        counted_state_bytes(layer, "sgd")
    with pytest.raises(ValueError, match=r"valid: .*'rank'"):
        counted_state_bytes(layer, "logra", rnak=4)
    with pytest.raises(ValueError, match="rank must be an int"):
        counted_state_bytes(layer, "logra", rank=0)
    with pytest.raises(ValueError, match=r"valid: .*'bf16'"):
        counted_state_bytes(layer, "adamw", state_dtype="float8")
    with pytest.raises(ValueError, match=r"valid: .*'gemma-3-27b'"):
        architecture("llama-70b")
