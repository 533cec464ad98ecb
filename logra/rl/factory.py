"""Optimizers by name, built the same way for every run, and the bytes of state they keep.

    adamw      torch.optim.AdamW on every parameter (the dense baseline)
    adamw-kl   dense AdamW with LoGRA's predicted-KL step control: LoGRA with `sketch=False`
               (AdamW's exact update on every parameter), `kl_estimator` and
               `predicted_kl_threshold` as for logra
    lora       LoRA adapters through `peft` (rank `lora_rank`, α `lora_alpha`, modules
               `lora_targets`), AdamW on the adapters only; the base weights stay frozen
    logra      LoGRA (logra.optim) with `rank`, `reconstruction`, `kl_estimator` and
               `predicted_kl_threshold` (null turns the KL control off)
    naive      RandomProjectionAdam, the fixed one-sided random projection ablation
    galore     GaLoreAdamW (Zhao et al. 2024; package `galore-torch`): SVD projection of rank
               `rank` refreshed every `PROJECTION_GAP` steps, scale `GALORE_SCALE`
    apollo     APOLLOAdamW (Zhu et al. 2024; package `apollo-torch`): random projection of rank
               `rank`, channel-wise scaling, refreshed every `PROJECTION_GAP` steps
    adafactor  torch.optim.Adafactor (Shazeer & Stern 2018): factored second moment, no momentum

GaLore and APOLLO project the 2-D weights of the transformer blocks (their published recipes
skip embeddings and the output head), and only matrices whose smaller side exceeds the rank;
every other parameter gets their plain AdamW. Their packages are optional: asking for one that
is not installed is an error saying what to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from logra.optim import LoGRA, RandomProjectionAdam

OPTIMIZERS = ("adamw", "lora", "logra", "naive", "galore", "apollo", "adafactor", "adamw-kl")
OPTIONAL_PACKAGES = {"galore": ("galore_torch", "galore-torch"),
                     "apollo": ("apollo_torch", "apollo-torch")}
PROJECTION_GAP = 200  # GaLore's and APOLLO's default refresh interval of their projections
GALORE_SCALE = 0.25  # GaLore's recipe (α in the paper)
APOLLO_SCALE = 1.0  # APOLLO's recipe for channel-wise scaling


def check_optimizer(name: str) -> None:
    """ValueError naming the valid optimizers, or ImportError naming the missing package."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid optimizers: {list(OPTIMIZERS)}")
    if name in OPTIONAL_PACKAGES:
        module, package = OPTIONAL_PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"optimizer {name!r} needs the package {package!r}: "
                              f"pip install {package}")


def wrap_policy(name: str, model: nn.Module, config: dict[str, Any]) -> nn.Module:
    """The model to train: LoRA adds `peft` adapters (initialized from the global RNG), the
    other optimizers train the model as it is."""
    if name != "lora":
        return model
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config["lora_rank"], lora_alpha=config["lora_alpha"],
        target_modules=list(config["lora_targets"]), lora_dropout=0.0, bias="none",
    )
    return get_peft_model(model, lora)


def build_optimizer(name: str, model: nn.Module, config: dict[str, Any]) -> Optimizer:
    """The optimizer `name` over the trainable parameters of `model` (after `wrap_policy`).

    Reads lr, weight_decay, seed, rank, reconstruction, kl_estimator, predicted_kl_threshold,
    kl_drift_budget from `config`.
    """
    check_optimizer(name)
    lr, weight_decay = config["lr"], config["weight_decay"]
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    if name in ("adamw", "lora"):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name in ("logra", "adamw-kl"):
        return LoGRA(
            named, lr=lr, weight_decay=weight_decay, rank=config["rank"],
            predicted_kl_threshold=config["predicted_kl_threshold"],
            reconstruction=config["reconstruction"], kl_estimator=config["kl_estimator"],
            kl_drift_budget=config["kl_drift_budget"], seed=config["seed"],
            sketch=name == "logra",
        )
    if name == "naive":
        return RandomProjectionAdam(params, lr=lr, weight_decay=weight_decay, rank=config["rank"],
                                    seed=config["seed"])
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=lr, weight_decay=weight_decay)
    low_rank, other = _split_projected(model, named, config["rank"])
    projected = dict(params=low_rank, rank=config["rank"], update_proj_gap=PROJECTION_GAP,
                     proj_type="std")
    if name == "galore":
        from galore_torch import GaLoreAdamW

        groups = [{"params": other}, {**projected, "scale": GALORE_SCALE}]
        return GaLoreAdamW(_nonempty(groups), lr=lr, weight_decay=weight_decay,
                           no_deprecation_warning=True)
    from apollo_torch import APOLLOAdamW

    groups = [{"params": other},
              {**projected, "scale": APOLLO_SCALE, "proj": "random", "scale_type": "channel"}]
    return APOLLOAdamW(_nonempty(groups), lr=lr, weight_decay=weight_decay)


def _split_projected(
    model: nn.Module, named: list[tuple[str, Tensor]], rank: int
) -> tuple[list[Tensor], list[Tensor]]:
    """(block matrices with min side > rank, every other trainable parameter)."""
    modules = (getattr(model, "get_input_embeddings", lambda: None)(),
               getattr(model, "get_output_embeddings", lambda: None)())  # a bare nn.Module: none
    embeddings = {id(m.weight) for m in modules if m is not None}
    low_rank, other = [], []
    for _, p in named:
        projected = p.dim() == 2 and min(p.shape) > rank and id(p) not in embeddings
        (low_rank if projected else other).append(p)
    return low_rank, other


def _nonempty(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [group for group in groups if group["params"]]


def state_bytes(optimizer: Optimizer) -> int:
    """Bytes of every tensor the optimizer keeps in `optimizer.state`, each counted once.

    Tensors held by objects inside the state (GaLore's and APOLLO's projectors keep their
    projection matrices) count too: they are persistent optimizer memory.
    """
    seen: set[int] = set()
    return sum(t.nbytes for t in _tensors(optimizer.state, seen))


def _tensors(value: Any, seen: set[int]) -> Iterator[Tensor]:
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, seen)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item, seen)
    elif hasattr(value, "__dict__") and not isinstance(value, type | nn.Module):
        yield from _tensors(vars(value), seen)
