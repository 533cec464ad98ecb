"""Resolving and checking a GRPO run's config before any compute.

`resolve("experiments/grpo.yaml", scale, ["key=value", ...])` reads the YAML's defaults and
scale (through `logra.config.load_config`, which rejects unknown keys and scales and
ill-typed values), applies the overrides (each value parsed by `yaml.safe_load`, so `null`,
`1e-4` and `[q_proj, v_proj]` mean what they say), and returns a `GRPOConfig`: the typed,
frozen config whose construction checks every value against its type, its range or its valid
choices, once. Every failure is a `ConfigError` naming the key.

The run directory is `<results_dir>/runs/<run_name>`; without a run_name it is
`grpo-<optimizer>-<hash>`, the hash covering every key that changes the records and the
fingerprint of the code that computes them (`logra.provenance`), so that a change to that code
starts new runs rather than reading or extending the old code's. `steps` is not
among them: there is no learning-rate schedule, so the first k steps of a run do not depend on
how many follow, and raising `steps` extends a finished run in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from logra.config import ConfigError, as_number, coerce, load_config, named_errors, read_spec
from logra.data import TASKS
from logra.models import SCALES
from logra.optimizers import (
    OPTIMIZERS,
    REGISTRY,
    SETTINGS,
    KLEstimator,
    Names,
    OptimizerSettings,
    Reconstruction,
    check_optimizer,
)
from logra.provenance import fingerprint

EXPERIMENT = "grpo"
# Keys that do not change what a run computes: they stay out of the run directory's hash.
NOT_HASHED = ("run_name", "steps", "checkpoint_every", "results_dir", "data_dir", "threads",
              "scale", "tensorboard")
# key -> the key without which it does nothing (a key naming itself: nothing while it is null)
ONLY_WITH = {"kl_drift_window": "kl_drift_budget", "drift_probe_every": "drift_probe_every",
             "drift_probe_prompts": "drift_probe_every", "kl_drift_source": "kl_drift_source",
             "eval_samples": "eval_samples", "eval_sampled_prompts": "eval_samples"}

Count = Annotated[int, Field(ge=1)]
# a number is kept as given (16 stays an int): the run directory's hash reads the values
NonNegative = Annotated[int | float, Field(ge=0)]
Positive = Annotated[int | float, Field(gt=0)]
# The accepted values of a choice key, as the registries hold them when this module is imported.
Task = Literal[tuple(TASKS)]
Optimizer = Literal[OPTIMIZERS]


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["key=value", ...]` → {key: yaml.safe_load(value)}, and `1e-4` is a number (YAML 1.1
    reads exponents without a dot as strings)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {pair!r} is not of the form key=value")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"cannot parse the value of {key!r}: {value!r} ({err})") from err
        parsed = as_number(parsed)
        overrides[key.strip()] = parsed
    return overrides


def resolve(
    experiment: str | Path = EXPERIMENT, scale: str = "default", overrides: list[str] | None = None,
    **values: Any,
) -> GRPOConfig:
    """The validated config of `experiment` at `scale` with `key=value` overrides (and kwargs).

    `experiment` is the packaged `grpo` or any config file of its keys, on top of it: a copy of
    experiments/grpo.yaml edited anywhere, or a file of only the keys it changes."""
    merged = {**parse_overrides(overrides or []), **values}
    if "scale" in merged:
        raise ConfigError(f"scale is not a key: choose it with --scale ({scale!r} now)")
    keys = set(read_spec(EXPERIMENT)[0])
    unknown = sorted(set(read_spec(experiment)[0]) - keys)
    if unknown:
        raise ConfigError(f"{experiment} is not a GRPO config like experiments/{EXPERIMENT}.yaml: "
                          f"unknown keys {unknown}")
    for key in merged:
        if key not in keys:
            raise ConfigError(f"unknown key {key!r} in the overrides; valid keys: {sorted(keys)}")
    return GRPOConfig.from_mapping(load_config(experiment, scale, base=EXPERIMENT, **merged))


@dataclass(frozen=True, config=ConfigDict(strict=True, extra="forbid"))
class GRPOConfig:
    """One GRPO run's settings: every key of experiments/grpo.yaml, typed and checked.

    The values' single home is the YAML (its `defaults`, then a scale, then overrides:
    `resolve`); this class holds what each key accepts. Construction validates, once: the type
    of every key (strictly: `true` is no integer, `"1e-4"` no number), its range or its choices
    (`typing.Literal`), then the rules that tie keys together (`__post_init__`). A config is
    frozen; `replace` makes a changed copy and validates it again. Build one from a mapping with
    `from_mapping`, which turns pydantic's error into a `ConfigError` naming the key.
    """

    scale: str
    run_name: str | None
    model: str
    task: Task
    data_dir: str | None
    use_chat_template: bool
    dtype: Literal["float32", "bfloat16", "float16"]
    device: Literal["cpu", "cuda", "auto"]
    threads: Count
    optimizer: Optimizer
    lr: NonNegative
    weight_decay: NonNegative
    rank: Count
    reconstruction: Reconstruction
    kl_estimator: KLEstimator
    predicted_kl_threshold: Positive | None
    kl_drift_budget: Positive | None
    kl_drift_window: Count
    kl_drift_source: Literal["probe"] | None
    lora_rank: Count
    lora_alpha: Positive
    lora_targets: Names
    group_size: Annotated[int, Field(ge=2)]  # advantages need a group standard deviation
    prompts_per_step: Count
    max_new_tokens: Count
    updates_per_batch: Count
    clip_eps: Positive
    beta: NonNegative
    kl_target: Positive | None
    kl_horizon: Count
    seed: int
    steps: Count
    eval_every: Count
    eval_prompts: Count
    eval_batch_size: Count
    eval_samples: Count | None
    eval_sampled_prompts: Count | None
    drift_probe_every: Count | None
    drift_probe_prompts: Count
    checkpoint_every: Count
    results_dir: str
    tensorboard: bool

    def __post_init__(self) -> None:
        """The rules that tie keys together; each failure is a ConfigError naming its keys."""
        try:
            check_optimizer(self.optimizer)
        except ImportError as err:
            raise ConfigError(f"optimizer: {err}") from err
        if self.kl_drift_budget is not None and not REGISTRY[self.optimizer].kl_control:
            controlled = [name for name, entry in REGISTRY.items() if entry.kl_control]
            raise ConfigError(f"kl_drift_budget needs the KL control of an optimizer of "
                              f"{controlled}, not {self.optimizer!r}")
        if self.kl_target is not None and not self.beta > 0:
            raise ConfigError("kl_target (adaptive β) needs a starting beta > 0, got "
                              f"beta={self.beta!r}")
        probe = self.drift_probe_every
        if probe is not None and self.drift_probe_prompts > self.eval_prompts:
            raise ConfigError(f"drift_probe_prompts={self.drift_probe_prompts} exceeds "
                              f"eval_prompts={self.eval_prompts}: the probe's prompts are the "
                              "first test prompts")
        if (self.eval_sampled_prompts or 0) > self.eval_prompts:
            raise ConfigError(f"eval_sampled_prompts={self.eval_sampled_prompts} exceeds "
                              f"eval_prompts={self.eval_prompts}: the sampled problems are the "
                              "first test prompts")
        if self.kl_drift_source == "probe" and (self.kl_drift_budget is None or probe is None):
            raise ConfigError("kl_drift_source: probe feeds the drift budget from the drift "
                              "probe: it needs kl_drift_budget and drift_probe_every")
        if self.run_name is not None and (not self.run_name or "/" in self.run_name):
            raise ConfigError(f"run_name must be a non-empty directory name, "
                              f"got {self.run_name!r}")
        _check_model(self.model)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> GRPOConfig:
        """The config of `values` (every key, no other); ConfigError naming the first bad key."""
        with _named_errors():
            return cls(**values)

    def replace(self, **changes: Any) -> GRPOConfig:
        """A copy with `changes`, validated again; ConfigError naming the first bad key. Each
        value is read against the packaged default as `resolve` reads it (`logra.config.coerce`:
        an int for a float key becomes a float), so that `replace(lr=1)` and `resolve(lr=1)`
        name the same run directory."""
        defaults = read_spec(EXPERIMENT)[0]
        changes = {key: coerce(key, value, defaults[key]) if key in defaults else value
                   for key, value in changes.items()}
        with _named_errors():
            return dataclasses.replace(self, **changes)

    def optimizer_settings(self) -> OptimizerSettings:
        """What `build_optimizer` and `wrap_model` read: the keys of OptimizerSettings this
        config holds (its others at their defaults)."""
        return OptimizerSettings(**{key: getattr(self, key) for key in SETTINGS
                                    if hasattr(self, key)})

    def to_dict(self) -> dict[str, Any]:
        """{key: value}, in the YAML's order, lists as lists: what manifests, checkpoints and
        hashes hold (the YAML's and the JSON's types, so old manifests compare equal)."""
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self).items()}


KEYS = tuple(field.name for field in dataclasses.fields(GRPOConfig))


def _named_errors() -> AbstractContextManager[None]:
    return named_errors(KEYS, f"missing key {{key!r}}: a GRPO config sets every key of "
                              f"experiments/{EXPERIMENT}.yaml")


def _check_model(model: str) -> None:
    """A scale name, an existing directory, or a hub id `org/name`."""
    if model in SCALES or Path(model).is_dir():
        return
    if model.count("/") == 1 and not model.startswith((".", "/")) and all(model.split("/")):
        return
    raise ConfigError(
        f"model {model!r} is not a scale ({list(SCALES)}), an existing directory, "
        "or a hub id of the form org/name"
    )


def config_hash(config: GRPOConfig) -> str:
    """12 hex digits of the canonical JSON of the keys that change the records and of the code's
    fingerprint (`logra.provenance.fingerprint`).

    A key of `ONLY_WITH` is left out while the key it depends on is null (it cannot change the
    records then), so adding such a key keeps the runs already made without it valid.
    """
    values = config.to_dict()
    hashed = {k: v for k, v in sorted(values.items()) if k not in NOT_HASHED
              and not (k in ONLY_WITH and values[ONLY_WITH[k]] is None)}
    hashed["code"] = fingerprint()
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:12]


def run_dir(config: GRPOConfig) -> Path:
    """`<results_dir>/runs/<run_name or grpo-<optimizer>-<hash>>`."""
    name = config.run_name or f"{EXPERIMENT}-{config.optimizer}-{config_hash(config)}"
    return Path(config.results_dir) / "runs" / name


def data_dir(config: GRPOConfig) -> Path:
    """Where the run's generated tasks are cached: `data_dir`, or <results_dir>/data when null
    (results/data at the default results_dir), so that a run writes under its results_dir."""
    return Path(config.data_dir if config.data_dir is not None
                else Path(config.results_dir) / "data")


def result_keys_differ(saved: Mapping[str, Any], config: GRPOConfig) -> list[str]:
    """Keys (outside NOT_HASHED) whose values differ between a saved run's config and
    `config`."""
    values = config.to_dict()
    keys = (set(saved) | set(values)) - set(NOT_HASHED)
    inert = {k for k, dependency in ONLY_WITH.items()
             if saved.get(dependency) is None and values.get(dependency) is None}
    return sorted(k for k in keys - inert if saved.get(k) != values.get(k))
