"""Resolving and checking a GRPO run's config before any compute.

`resolve("experiments/grpo.yaml", scale, ["key=value", ...])` reads the YAML's defaults and
scale (through `logra.config.load_config`, which rejects unknown keys and scales and
ill-typed values), applies the overrides (each value parsed by `yaml.safe_load`, so `null`,
`1e-4` and `[q_proj, v_proj]` mean what they say), and `validate` checks every value against
its range or its valid choices. Every failure is a `ConfigError` naming the key.

The run directory is `<results_dir>/runs/<run_name>`; without a run_name it is
`grpo-<optimizer>-<hash>`, the hash covering every key that changes the records and the
fingerprint of the code that computes them (`logra.provenance`), so that a change to that code
starts new runs rather than reading or extending the old code's. `steps` is not
among them: there is no learning-rate schedule, so the first k steps of a run do not depend on
how many follow, and raising `steps` extends a finished run in place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from logra.config import ConfigError, as_number, load_config, read_spec
from logra.data import TASKS
from logra.models import SCALES
from logra.optim.hyperparameters import KL_ESTIMATORS, RECONSTRUCTIONS
from logra.optimizers import OPTIMIZERS, REGISTRY, check_optimizer
from logra.provenance import fingerprint

EXPERIMENT = "grpo"
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda", "auto")
# Keys that do not change what a run computes: they stay out of the run directory's hash.
NOT_HASHED = ("run_name", "steps", "checkpoint_every", "results_dir", "data_dir", "threads",
              "scale", "tensorboard")
# key -> the key without which it does nothing (a key naming itself: nothing while it is null)
ONLY_WITH = {"kl_drift_window": "kl_drift_budget", "drift_probe_every": "drift_probe_every",
             "drift_probe_prompts": "drift_probe_every", "kl_drift_source": "kl_drift_source",
             "eval_samples": "eval_samples", "eval_sampled_prompts": "eval_samples"}
DRIFT_SOURCES = ("probe",)  # kl_drift_source: null (each step's batch KL) or one of these
POSITIVE_INTS = ("steps", "group_size", "prompts_per_step", "max_new_tokens", "updates_per_batch",
                 "eval_every", "eval_prompts", "eval_batch_size", "checkpoint_every", "rank",
                 "lora_rank", "threads", "kl_horizon", "kl_drift_window", "drift_probe_prompts")
NONNEGATIVE = ("lr", "weight_decay", "beta")
POSITIVE = ("clip_eps", "lora_alpha")
CHOICES: dict[str, tuple[str, ...]] = {
    "task": tuple(TASKS), "dtype": DTYPES, "device": DEVICES, "reconstruction": RECONSTRUCTIONS,
    "kl_estimator": KL_ESTIMATORS, "optimizer": OPTIMIZERS,
}


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
) -> dict[str, Any]:
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
    return validate(load_config(experiment, scale, base=EXPERIMENT, **merged))


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """`config` unchanged if every value is in range; ConfigError naming the first bad key."""
    for key in POSITIVE_INTS:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key} must be an integer >= 1, got {value!r}")
    for key in (*NONNEGATIVE, *POSITIVE):
        if isinstance(config[key], bool) or not isinstance(config[key], int | float):
            raise ConfigError(f"{key} must be a number, got {config[key]!r}")
    for key in NONNEGATIVE:
        if not config[key] >= 0:
            raise ConfigError(f"{key} must be >= 0, got {config[key]!r}")
    for key in POSITIVE:
        if not config[key] > 0:
            raise ConfigError(f"{key} must be > 0, got {config[key]!r}")
    if config["group_size"] < 2:
        raise ConfigError(f"group_size must be >= 2 (advantages need a group std), "
                          f"got {config['group_size']}")
    for key, choices in CHOICES.items():
        if config[key] not in choices:
            raise ConfigError(f"{key} must be one of {list(choices)}, got {config[key]!r}")
    try:
        check_optimizer(config["optimizer"])
    except ImportError as err:
        raise ConfigError(f"optimizer: {err}") from err
    for key in ("predicted_kl_threshold", "kl_drift_budget", "kl_target"):
        value = config[key]
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, int | float) or value <= 0):
            raise ConfigError(f"{key} must be a number > 0 or null, got {value!r}")
    if config["kl_drift_budget"] is not None and not REGISTRY[config["optimizer"]].kl_control:
        controlled = [name for name, entry in REGISTRY.items() if entry.kl_control]
        raise ConfigError(f"kl_drift_budget needs the KL control of an optimizer of {controlled}, "
                          f"not {config['optimizer']!r}")
    if config["kl_target"] is not None and not config["beta"] > 0:
        raise ConfigError("kl_target (adaptive β) needs a starting beta > 0, got "
                          f"beta={config['beta']!r}")
    probe = config["drift_probe_every"]
    if probe is not None and (isinstance(probe, bool) or not isinstance(probe, int) or probe < 1):
        raise ConfigError(f"drift_probe_every must be an integer >= 1 or null, got {probe!r}")
    if probe is not None and config["drift_probe_prompts"] > config["eval_prompts"]:
        raise ConfigError(f"drift_probe_prompts={config['drift_probe_prompts']} exceeds "
                          f"eval_prompts={config['eval_prompts']}: the probe's prompts are the "
                          "first test prompts")
    for key in ("eval_samples", "eval_sampled_prompts"):
        value = config[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"{key} must be an integer >= 1 or null, got {value!r}")
    if (config["eval_sampled_prompts"] or 0) > config["eval_prompts"]:
        raise ConfigError(f"eval_sampled_prompts={config['eval_sampled_prompts']} exceeds "
                          f"eval_prompts={config['eval_prompts']}: the sampled problems are the "
                          "first test prompts")
    source = config["kl_drift_source"]
    if source is not None:
        if source not in DRIFT_SOURCES:
            raise ConfigError(f"kl_drift_source must be null or one of {list(DRIFT_SOURCES)}, "
                              f"got {source!r}")
        if config["kl_drift_budget"] is None or probe is None:
            raise ConfigError("kl_drift_source: probe feeds the drift budget from the drift "
                              "probe: it needs kl_drift_budget and drift_probe_every")
    targets = config["lora_targets"]
    if not targets or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"lora_targets must be a non-empty list of module names, got {targets!r}")
    if not isinstance(config["tensorboard"], bool):
        raise ConfigError(f"tensorboard must be true or false, got {config['tensorboard']!r}")
    for key in ("run_name", "data_dir"):
        if config[key] is not None and not isinstance(config[key], str):
            raise ConfigError(f"{key} must be a string or null, got {config[key]!r}")
    run_name = config["run_name"]
    if run_name is not None and (not run_name or "/" in run_name):
        raise ConfigError(f"run_name must be a non-empty directory name, got {run_name!r}")
    _check_model(config["model"])
    return config


def _check_model(model: Any) -> None:
    """A scale name, an existing directory, or a hub id `org/name`."""
    if not isinstance(model, str):
        raise ConfigError(f"model must be a string, got {model!r}")
    if model in SCALES or Path(model).is_dir():
        return
    if model.count("/") == 1 and not model.startswith((".", "/")) and all(model.split("/")):
        return
    raise ConfigError(
        f"model {model!r} is not a scale ({list(SCALES)}), an existing directory, "
        "or a hub id of the form org/name"
    )


def config_hash(config: dict[str, Any]) -> str:
    """12 hex digits of the canonical JSON of the keys that change the records and of the code's
    fingerprint (`logra.provenance.fingerprint`).

    A key of `ONLY_WITH` is left out while the key it depends on is null (it cannot change the
    records then), so adding such a key keeps the runs already made without it valid.
    """
    hashed = {k: v for k, v in sorted(config.items()) if k not in NOT_HASHED
              and not (k in ONLY_WITH and config.get(ONLY_WITH[k]) is None)}
    hashed["code"] = fingerprint()
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:12]


def run_dir(config: dict[str, Any]) -> Path:
    """`<results_dir>/runs/<run_name or grpo-<optimizer>-<hash>>`."""
    name = config["run_name"] or f"{EXPERIMENT}-{config['optimizer']}-{config_hash(config)}"
    return Path(config["results_dir"]) / "runs" / name


def data_dir(config: dict[str, Any]) -> Path:
    """Where the run's generated tasks are cached: `data_dir`, or <results_dir>/data when null
    (results/data at the default results_dir), so that a run writes under its results_dir."""
    return Path(config["data_dir"] if config["data_dir"] is not None
                else Path(config["results_dir"]) / "data")


def result_keys_differ(saved: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Keys (outside NOT_HASHED) whose values differ between a saved run and `config`."""
    keys = (set(saved) | set(config)) - set(NOT_HASHED)
    inert = {k for k, dependency in ONLY_WITH.items()
             if saved.get(dependency) is None and config.get(dependency) is None}
    return sorted(k for k in keys - inert if saved.get(k) != config.get(k))
