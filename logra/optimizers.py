"""The optimizer registry: every optimizer the kit trains with, by name, built one way.

Each entry (`OptimizerSpec`) says how to build the optimizer over a model's trainable parameters
from a settings mapping, which package it needs, its label and colour in figures, and what it is
(sized by `rank`, refreshing a projection, wrapping the model, KL-controlled). Every experiment
reads this one table through `logra.methods`, where each optimizer is a method and presets of
them are more (adding a baseline is one entry here, plus the formula in `logra.memory.state` if
its bytes are to be counted from shapes alone).

    adamw        torch.optim.AdamW on every parameter (the dense baseline)
    adamw8bit    bitsandbytes AdamW8bit (Dettmers et al. 2022): block-wise 8-bit moments
    adafactor    torch.optim.Adafactor (Shazeer & Stern 2018): factored second moment, no momentum
    adam-mini    Adam-mini (Zhang et al. 2024; package `adam-mini`): one second moment per block
                 of heads / neurons; reads dim and head counts from `model.config`
    galore       GaLoreAdamW (Zhao et al. 2024; `galore-torch`): Adam on an SVD projection of rank
                 `rank` refreshed every `projection_gap` steps, scale `GALORE_SCALE`
    apollo       APOLLOAdamW (Zhu et al. 2024; `apollo-torch`): random projection of rank `rank`,
                 channel-wise scaling of the raw gradient, refreshed every `projection_gap` steps
    apollo-mini  APOLLO-Mini: rank 1, one scale per tensor, scale `APOLLO_MINI_SCALE` (the paper's
                 recipe); `rank` is ignored
    fira         Fira (Chen et al. 2024; `fira`): GaLore's Adam in the SVD subspace plus the
                 gradient's residual outside it, scaled per channel, with a norm-growth limiter;
                 α `FIRA_ALPHA`
    lora         LoRA adapters through `peft` (rank `lora_rank`, α `lora_alpha`, modules
                 `lora_targets`), AdamW on the adapters only; the base weights stay frozen
    naive        RandomProjectionAdam, the fixed one-sided random projection ablation
    logra        LoGRA (logra.optim) with `rank`, `reconstruction`, `kl_estimator`,
                 `predicted_kl_threshold` (None turns the KL control off), `kl_drift_budget` and
                 `kl_drift_window`; `dense_embeddings` gives the input embedding and the output
                 head dense AdamW, as GaLore's and APOLLO's recipes do; `refresh_projections`
                 draws new sketch projections every `projection_gap` steps, as they do (off:
                 one projection per shape for the whole run)
    adamw-kl     dense AdamW with LoGRA's predicted-KL step control: LoGRA with `sketch=False`

Settings read (`OptimizerSettings`, typed, one default each): `lr`, `weight_decay`, `seed`,
`rank`, and for some entries `reconstruction`, `kl_estimator`, `predicted_kl_threshold`,
`kl_drift_budget`, `lora_*`. GaLore, APOLLO and Fira project the 2-D weights of the transformer
blocks (their published recipes skip embeddings and the output head), and only matrices whose
smaller side exceeds the rank; every other parameter gets their plain AdamW. Asking for an
optimizer whose package is not installed is an error saying what to install.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, Literal

import torch
from pydantic import BeforeValidator, ConfigDict, Field
from pydantic.dataclasses import dataclass
from torch import Tensor, nn
from torch.optim import Optimizer

from logra.config import named_errors
from logra.optim import LoGRA, RandomProjectionAdam
from logra.optim.hyperparameters import KL_ESTIMATORS, RECONSTRUCTIONS

PROJECTION_GAP = 200  # GaLore's, APOLLO's and Fira's default refresh interval of the projections
# (their pretraining recipes: 200 steps of 10,000, i.e. 50 refreshes a run); settings may set
# `projection_gap` for runs of another length
GALORE_SCALE = 0.25  # GaLore's recipe (α in the paper)
APOLLO_SCALE = 1.0  # APOLLO's recipe for channel-wise scaling
APOLLO_MINI_SCALE = 128.0  # APOLLO-Mini's recipe: rank 1, tensor-wise scaling, α = 128
FIRA_ALPHA = 0.25  # Fira's recipe at 60M-350M (xichen-fy/Fira, pre_training_c4/scripts/)
Reconstruction = Literal[RECONSTRUCTIONS]  # LoGRA's rules, as `logra.optim.rules` registers them
KLEstimator = Literal[KL_ESTIMATORS]
Count = Annotated[int, Field(ge=1)]
NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tuple_of_list(value: Any) -> Any:
    """A YAML list as a tuple (a frozen config holds no mutable list); anything else as given,
    for the type check to judge (a bare string is not split into letters)."""
    return tuple(value) if isinstance(value, list) else value


Names = Annotated[tuple[str, ...], BeforeValidator(tuple_of_list), Field(min_length=1)]


@dataclass(frozen=True, config=ConfigDict(strict=True, extra="forbid"))
class OptimizerSettings:
    """What `build_optimizer` and `wrap_model` read, typed, with each default in one place.

    Only `lr` has no default. Construction checks each value's type (strictly: `true` is no
    integer, `"1e-3"` no number; an int given for a float becomes a float), range and choices,
    once; `from_mapping` turns a failure into a `ConfigError` naming the key, an unknown key
    included (a misspelt setting is refused, not ignored). An experiment's config that holds
    more keys passes the settings it holds (`logra.rl.config.GRPOConfig.optimizer_settings`).
    """

    lr: NonNegative
    weight_decay: NonNegative = 0.0
    seed: int = 0  # of the sketch and projection draws
    rank: Count = 16  # of every rank-sized optimizer but LoRA (`lora_rank`)
    reconstruction: Reconstruction = "gain"
    kl_estimator: KLEstimator = "calibrated"
    predicted_kl_threshold: Positive | None = None  # δ in nats; None: the control is off
    kl_drift_budget: Positive | None = None  # B in nats on the drift from the start
    kl_drift_window: Count = 5  # steps the drift estimate averages
    dense_embeddings: bool = False  # LoGRA: dense AdamW on the embeddings and head
    refresh_projections: bool = False  # LoGRA: new projections every `projection_gap` steps
    projection_gap: Count = PROJECTION_GAP
    lora_rank: Count = 8
    lora_alpha: Positive = 16.0
    lora_targets: Names = LORA_TARGETS

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> OptimizerSettings:
        """The settings of `values` (`lr` and any others); ConfigError naming the bad key."""
        with named_errors(SETTINGS, "settings have no {key!r}: every optimizer needs a learning "
                                    "rate"):
            return cls(**values)


SETTINGS = tuple(f.name for f in dataclasses.fields(OptimizerSettings))
Builder = Callable[[nn.Module, OptimizerSettings], Optimizer]


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer of the registry."""

    name: str
    label: str  # in figures and tables
    color: str  # matplotlib colour, the same in every figure
    build: Builder  # (model after `wrap_model`, settings) -> optimizer
    package: tuple[str, str] | None = None  # (module to import, name to pip install)
    ranked: bool = False  # `rank` sizes its state (sketches, projections, adapters)
    projected: bool = False  # refreshes a projection every `projection_gap` steps
    wraps_model: bool = False  # trains adapters (`wrap_model`), not the model's own weights
    kl_control: bool = False  # has LoGRA's predicted-KL step control (`predicted_kl_threshold`,
    # `kl_drift_budget`); the trainer feeds it through `logra.optim.KLControlled`


def _trainable(model: nn.Module) -> list[tuple[str, Tensor]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _adamw(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    return torch.optim.AdamW([p for _, p in _trainable(model)], lr=s.lr,
                             weight_decay=s.weight_decay)


def _adamw8bit(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    from bitsandbytes.optim import AdamW8bit

    return AdamW8bit([p for _, p in _trainable(model)], lr=s.lr,
                     weight_decay=s.weight_decay)


def _adafactor(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    return torch.optim.Adafactor([p for _, p in _trainable(model)], lr=s.lr,
                                 weight_decay=s.weight_decay)


def _adam_mini(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    from adam_mini import Adam_mini

    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_attention_heads"):
        raise ValueError("adam-mini needs a transformers model: it reads hidden_size and the "
                         "head counts from model.config")
    return Adam_mini(
        named_parameters=_trainable(model), lr=s.lr, weight_decay=s.weight_decay,
        dim=config.hidden_size, n_heads=config.num_attention_heads,
        n_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        verbose=False,
    )


def _logra(model: nn.Module, s: OptimizerSettings, sketch: bool = True) -> Optimizer:
    named = _trainable(model)
    params: list[Any] = named
    if s.dense_embeddings:  # GaLore's and APOLLO's recipe: AdamW on embeddings and head
        embeddings = _embedding_ids(model)
        groups = [{"params": [(n, p) for n, p in named if id(p) in embeddings], "sketch": False},
                  {"params": [(n, p) for n, p in named if id(p) not in embeddings]}]
        params = [group for group in groups if group["params"]]
    return LoGRA(
        params, lr=s.lr, weight_decay=s.weight_decay, rank=s.rank,
        predicted_kl_threshold=s.predicted_kl_threshold, reconstruction=s.reconstruction,
        kl_estimator=s.kl_estimator, kl_drift_budget=s.kl_drift_budget,
        kl_drift_window=s.kl_drift_window, seed=s.seed, sketch=sketch,
        refresh_every=s.projection_gap if s.refresh_projections else None,
    )


def _naive(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    return RandomProjectionAdam([p for _, p in _trainable(model)], lr=s.lr,
                                weight_decay=s.weight_decay, rank=s.rank, seed=s.seed)


def _galore(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    from galore_torch import GaLoreAdamW

    groups = _projected_groups(model, s.rank, s.projection_gap, scale=GALORE_SCALE)
    return GaLoreAdamW(groups, lr=s.lr, weight_decay=s.weight_decay,
                       no_deprecation_warning=True)


def _apollo(model: nn.Module, s: OptimizerSettings, mini: bool = False) -> Optimizer:
    from apollo_torch import APOLLOAdamW

    rank, scale, scale_type = (1, APOLLO_MINI_SCALE, "tensor") if mini else \
        (s.rank, APOLLO_SCALE, "channel")
    groups = _projected_groups(model, rank, s.projection_gap, scale=scale, proj="random",
                               scale_type=scale_type)
    return APOLLOAdamW(groups, lr=s.lr, weight_decay=s.weight_decay)


def _fira(model: nn.Module, s: OptimizerSettings) -> Optimizer:
    from fira import FiraAdamW

    groups = _projected_groups(model, s.rank, s.projection_gap, alpha=FIRA_ALPHA)
    return FiraAdamW(groups, lr=s.lr, weight_decay=s.weight_decay,
                     no_deprecation_warning=True)


REGISTRY: dict[str, OptimizerSpec] = {spec.name: spec for spec in (
    OptimizerSpec("adamw", "AdamW", "black", _adamw),
    OptimizerSpec("adamw8bit", "8-bit AdamW", "dimgray", _adamw8bit,
                  package=("bitsandbytes", "bitsandbytes")),
    OptimizerSpec("adafactor", "Adafactor", "tab:olive", _adafactor),
    OptimizerSpec("adam-mini", "Adam-mini", "tab:cyan", _adam_mini,
                  package=("adam_mini", "adam-mini")),
    OptimizerSpec("galore", "GaLore", "tab:orange", _galore, ranked=True, projected=True,
                  package=("galore_torch", "galore-torch")),
    OptimizerSpec("apollo", "APOLLO", "tab:green", _apollo, ranked=True, projected=True,
                  package=("apollo_torch", "apollo-torch")),
    OptimizerSpec("apollo-mini", "APOLLO-Mini", "yellowgreen",
                  lambda model, s: _apollo(model, s, mini=True), projected=True,
                  package=("apollo_torch", "apollo-torch")),
    OptimizerSpec("fira", "Fira", "tab:brown", _fira, ranked=True, projected=True,
                  package=("fira", "fira")),
    OptimizerSpec("lora", "LoRA", "tab:purple", _adamw, ranked=True, wraps_model=True),
    OptimizerSpec("naive", "naive projection", "tab:gray", _naive, ranked=True),
    OptimizerSpec("logra", "LoGRA", "tab:red", _logra, ranked=True, kl_control=True),
    OptimizerSpec("adamw-kl", "AdamW + KL control", "tab:blue",
                  lambda model, s: _logra(model, s, sketch=False), kl_control=True),
)}
OPTIMIZERS = tuple(REGISTRY)


def spec(name: str) -> OptimizerSpec:
    """The registry entry `name`: ValueError naming the valid ones, ImportError naming the
    missing package."""
    if name not in REGISTRY:
        raise ValueError(f"unknown optimizer {name!r}; valid optimizers: {list(OPTIMIZERS)}")
    entry = REGISTRY[name]
    if entry.package is not None and importlib.util.find_spec(entry.package[0]) is None:
        raise ImportError(f"optimizer {name!r} needs the package {entry.package[1]!r}: "
                          f"pip install {entry.package[1]}")
    return entry


def check_optimizer(name: str) -> None:
    """Raise as `spec` does when `name` cannot be built here."""
    spec(name)


def settings_of(settings: OptimizerSettings | Mapping[str, Any]) -> OptimizerSettings:
    """`settings` as OptimizerSettings (a mapping is checked: ConfigError naming the key)."""
    if isinstance(settings, OptimizerSettings):
        return settings
    return OptimizerSettings.from_mapping(settings)


def wrap_model(name: str, model: nn.Module,
               settings: OptimizerSettings | Mapping[str, Any]) -> nn.Module:
    """The model to train: LoRA adds `peft` adapters (initialized from the global RNG), the
    other optimizers train the model as it is."""
    s = settings_of(settings)
    if not spec(name).wraps_model:
        return model
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=s.lora_rank, lora_alpha=s.lora_alpha, target_modules=list(s.lora_targets),
                      lora_dropout=0.0, bias="none")
    return get_peft_model(model, lora)


def build_optimizer(name: str, model: nn.Module,
                    settings: OptimizerSettings | Mapping[str, Any]) -> Optimizer:
    """The optimizer `name` over the trainable parameters of `model` (after `wrap_model`), with
    `settings` (a mapping holds `lr` and any other keys of OptimizerSettings)."""
    s = settings_of(settings)
    return spec(name).build(model, s)


def _projected_groups(model: nn.Module, rank: int, gap: int,
                      **recipe: Any) -> list[dict[str, Any]]:
    """Param groups for GaLore-style optimizers: the block matrices whose smaller side exceeds
    `rank` with `rank`, `update_proj_gap` = gap, `proj_type="std"` and `recipe`; every other
    trainable parameter in a plain group. Empty groups are left out."""
    embeddings = _embedding_ids(model)
    low_rank, other = [], []
    for _, p in _trainable(model):
        projected = p.dim() == 2 and min(p.shape) > rank and id(p) not in embeddings
        (low_rank if projected else other).append(p)
    groups = [{"params": other},
              {"params": low_rank, "rank": rank, "update_proj_gap": gap,
               "proj_type": "std", **recipe}]
    return [group for group in groups if group["params"]]


def _embedding_ids(model: nn.Module) -> set[int]:
    """ids of the input embedding's and the output head's weights (none for a bare module)."""
    modules = (getattr(model, "get_input_embeddings", lambda: None)(),
               getattr(model, "get_output_embeddings", lambda: None)())
    return {id(m.weight) for m in modules if m is not None}


def measured_state_bytes(optimizer: Optimizer) -> int:
    """Bytes of every tensor the optimizer keeps between steps, each counted once.

    That is every tensor in `optimizer.state`, including those held by objects inside it
    (GaLore's, APOLLO's and Fira's projectors keep their projection matrices), and LoGRA's
    projections kept between steps outside it (`projection_bank.nbytes`, zero with
    `cache_projections=False`): all of it is persistent optimizer memory.
    """
    seen: set[int] = set()
    held = sum(t.nbytes for t in _tensors(optimizer.state, seen))
    bank = getattr(optimizer, "projection_bank", None)
    return held + (bank.nbytes if bank is not None else 0)


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
