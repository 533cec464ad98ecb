"""Every experiment's config is typed: one field per key of its YAML, the YAML's values at every
scale kept exactly (value and type), bad values refused naming the key, frozen, and read as the
mapping the experiment code indexes."""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

import pytest

from logra.config import ConfigError, TypedConfig, load_config, packaged_experiments, scales_of
from logra.experiments import typed

EXPERIMENTS = [name for name in packaged_experiments() if name != "grpo"]  # grpo: GRPOConfig


def config_class(experiment: str) -> type[TypedConfig]:
    return importlib.import_module(f"logra.experiments.{experiment}").Config


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types, all the way down (1 and 1.0 differ)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b, strict=True)))
    return type(a) is type(b) and a == b


def test_every_experiment_has_a_typed_config_of_exactly_its_yaml_keys() -> None:
    assert len(EXPERIMENTS) == 11
    for experiment in EXPERIMENTS:
        cls = config_class(experiment)
        assert issubclass(cls, TypedConfig) and experiment == cls.EXPERIMENT
        fields = {field.name for field in dataclasses.fields(cls)}
        assert fields == set(load_config(experiment, scales_of(experiment)[0])), experiment


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_scale_validates_and_keeps_the_yaml_values_exactly(experiment: str) -> None:
    """Typing changes no value a run's cache key or a table reads: 16 stays an int, 1e-3 a
    float, a list a list."""
    cls = config_class(experiment)
    for scale in scales_of(experiment):
        loaded = load_config(experiment, scale)
        typed = cls.from_mapping(loaded)
        assert dict(typed) == loaded and typed == loaded
        assert all(same(typed[key], loaded[key]) for key in loaded), (experiment, scale)


@pytest.mark.parametrize(("experiment", "overrides", "message"), [
    ("kl_control", {"seeds": []}, r"seeds: list should have at least 1 item"),
    ("kl_control", {"studies": ["frontier", "bugdet"]},
     r"studies: input should be 'frontier', 'bands', 'naive_sweep', 'budget' or 'cost', "
     r"got 'bugdet'"),
    ("kl_control", {"budget_runs": {"B": {"kl_drift_budgt": 0.03}}},
     r"budget_runs: 'kl_drift_budgt' is not a key of experiments/grpo.yaml \(did you mean "
     r"kl_drift_budget.*\), got \{'kl_drift_budgt': 0.03\}"),
    ("kl_control", {"budget_runs": {"B": {"kl_drift_budget": 0.03, "kl_drift_source": "batch"}}},
     r"budget_runs: kl_drift_source: input should be 'probe'"),
    ("kl_trajectories", {"calibration_keys": {"eval_prompts": 2.5}},
     r"calibration_keys: eval_prompts: input should be a valid integer, got "),
    ("kl_trajectories", {"calibration_keys": {"kl_drift_budget": 0.03}},
     r"calibration_keys: 'kl_drift_budget' is not a key this experiment sets: one of \['lr'"),
    ("kl_trajectories", {"calibration_keys": {"task": "math-synth"}},
     r"calibration_keys: 'task' is shared by every run of the experiment"),
    ("kl_control", {"budget_method": "logra-nokll"},
     r"budget_method: input should be one of \['adamw', .*'logra-nokl'.*\], got 'logra-nokll'"),
    ("comparison", {"methods": ["adamw", "lorra"]}, r"methods: input should be one of .*'lorra'"),
    ("comparison", {"lr_grid": {"adamw": [1e-4, -1e-3]}},
     r"lr_grid: input should be greater than 0, got -0.001"),
    ("comparison", {"alpha": 1.5}, r"alpha: input should be less than 1, got 1.5"),
    ("rl_regime", {"tasks": ["gsm-synt"]}, r"tasks: input should be 'gsm-synth'"),
    ("rl_regime", {"workers": -1}, r"workers: input should be greater than or equal to 0"),
    ("kl_trajectories", {"method_lr": {"adamw": "1e-4"}},
     r"method_lr: input should be a valid number, got '1e-4'"),
    ("kl_trajectories", {"c5_window": [50]}, r"c5_window: list should have at least 2 items"),
    ("memory", {"sharding": "zero4"}, r"sharding: input should be 'none', 'zero1', 'zero2' or"),
    ("memory", {"models": ["qwen2.5-3b"]}, r"models: input should be 'qwen2.5-1.5b'"),
    ("long_horizon", {"betas": [0.9, 1.0]}, r"betas: input should be less than 1, got 1.0"),
    ("long_horizon", {"reconstructions": ["gian"]}, r"reconstructions: input should be 'blend'"),
    ("optimizer_cost", {"control_estimators": ["exact"]},
     r"control_estimators: input should be 'none', 'calibrated', 'diag' or 'jvp'"),
    ("training_quality", {"task": "txt"}, r"task: input should be 'text' or 'sft', got 'txt'"),
    ("rare_tokens", {"shares": [0.0]}, r"shares: input should be greater than 0"),
    ("communication", {"measured_model": "proxy-2m"}, r"measured_model: input should be"),
])
def test_a_bad_value_is_refused_naming_its_key(experiment: str, overrides: dict[str, Any],
                                               message: str) -> None:
    module = importlib.import_module(f"logra.experiments.{experiment}")
    scale = "smoke" if "smoke" in scales_of(experiment) else "default"
    with pytest.raises(ConfigError, match=message):
        module.config(scale, **overrides)


def test_a_config_is_frozen_checked_again_on_replace_and_read_as_a_mapping() -> None:
    from logra.experiments import kl_control

    cfg = kl_control.config("smoke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seeds = [1]  # type: ignore[misc]
    changed = cfg.replace(seeds=[0, 1])
    assert changed.seeds == changed["seeds"] == [0, 1] and cfg.seeds == [0]
    with pytest.raises(ConfigError, match=r"seeds: input should be a valid integer, got 'a'"):
        cfg.replace(seeds=["a"])
    with pytest.raises(ConfigError, match=r"unknown key 'sedes'; valid keys: \[.*'seeds'"):
        cfg.replace(sedes=[0])
    with pytest.raises(ConfigError, match=r"missing key 'seeds': the config of kl_control sets"):
        kl_control.Config.from_mapping({k: v for k, v in cfg.items() if k != "seeds"})
    with pytest.raises(KeyError):
        cfg["sedes"]
    assert {**cfg}["steps"] == cfg.steps and len(cfg) == len(dataclasses.fields(cfg))


def test_grpo_key_overlays_read_numbers_keep_none_where_allowed_and_refuse_a_preset_key() -> None:
    """A setting's "1e-4" (YAML 1.1 reads it as text) is the number; the calibration run's None
    is grpo.yaml's value; a budget setting may not set what its method presets."""
    from logra.experiments import kl_control, kl_trajectories
    from logra.rl import config as grpo

    cfg = kl_control.config("smoke", budget_runs={"B": {"kl_drift_budget": "1e-4"}})
    assert same(cfg.budget_runs["B"], {"kl_drift_budget": 1e-4})
    budget = [r for r in kl_control.plan(cfg) if r.study == "budget"]
    assert kl_control.grpo_config(cfg, budget[0]).kl_drift_budget == 1e-4
    with pytest.raises(ConfigError, match=r"budget_runs: 'beta_' is not a key of "
                                         r"experiments/grpo.yaml \(did you mean beta"):
        kl_control.config("smoke", budget_runs={"B": {"beta_": 0.1}})

    traj = kl_trajectories.config("smoke", calibration_keys={"eval_prompts": None, "rank": 2})
    calibration = kl_trajectories.calibration_config(traj, seed=0)
    assert calibration.rank == 2 != traj.rank
    assert calibration.eval_prompts == grpo.resolve(scale=traj.grpo_scale).eval_prompts
    assert calibration.eval_prompts != traj.eval_prompts
    with pytest.raises(ConfigError, match=r"budget_runs: eval_prompts: input should be"):
        kl_control.config("smoke", budget_runs={"B": {"eval_prompts": None}})

    with pytest.raises(ValueError, match=r"budget_runs: 'B' sets \['reconstruction'\], which "
                                         r"budget_method 'logra-nystrom' presets"):
        kl_control.config("smoke", budget_method="logra-nystrom",
                          budget_runs={"B": {"reconstruction": "gain"}})


@pytest.mark.parametrize("key", [*typed.PLANNED_KEYS, *typed.SHARED_KEYS])
def test_a_budget_setting_may_not_set_what_its_study_plans_or_every_run_shares(key: str) -> None:
    from logra.experiments import kl_control

    why = {**typed.PLANNED_KEYS, **typed.SHARED_KEYS}[key]
    with pytest.raises(ConfigError, match=rf"budget_runs: '{key}' {re.escape(why)}"):
        kl_control.config("smoke", budget_runs={"B": {key: 1}})


def test_the_reserved_keys_cover_what_a_run_plan_sets() -> None:
    """Every GRPO key a `Run` or `grpo_config` sets per run (a `Run` field of the same name, the
    method's optimizer, the run's δ, the budget study's probe), and those its inputs are prepared
    for once, is reserved: a setting that set one would undo its own study."""
    from logra.experiments.grpo_runs import Run

    run_fields = {f.name for f in dataclasses.fields(Run)} & set(typed.GRPO_KEY_TYPES)
    per_run = run_fields | {"optimizer", "predicted_kl_threshold", "drift_probe_every",
                            "drift_probe_prompts"}
    assert per_run <= set(typed.PLANNED_KEYS) | set(typed.SHARED_KEYS)
    assert {"model", "task", "results_dir"} <= set(typed.SHARED_KEYS)
    assert not set(typed.PLANNED_KEYS) & set(typed.SHARED_KEYS)
