"""TensorBoard tracking of a GRPO run: the config key changes no run's hash, and a smoke run's
events hold each record's scalars once, through a resume that extends it."""

from __future__ import annotations

import math

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from logra.experiments.config import EXPERIMENTS_DIR, ConfigError
from logra.models import prepare
from logra.rl import config as cfg
from logra.rl import runner
from logra.rl.tracking import TENSORBOARD_DIR

SCALES = sorted(yaml.safe_load((EXPERIMENTS_DIR / "grpo.yaml").read_text())["scales"])


@pytest.mark.parametrize("scale", SCALES)
def test_the_tensorboard_key_changes_no_run_directory(scale: str) -> None:
    """Runs made before the key existed keep their directories: the hash ignores it."""
    config = cfg.resolve(scale=scale)
    assert config["tensorboard"] is False
    before = {k: v for k, v in config.items() if k != "tensorboard"}  # a config without the key
    assert cfg.config_hash(config) == cfg.config_hash(before)
    assert cfg.run_dir(cfg.resolve(scale=scale, tensorboard=True)) == cfg.run_dir(config)
    assert cfg.result_keys_differ(before, cfg.resolve(scale=scale, tensorboard=True)) == []


def test_tensorboard_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="tensorboard must be true or false"):
        cfg.resolve(scale="smoke", overrides=["tensorboard=null"])
    with pytest.raises(ConfigError, match="tensorboard"):
        cfg.resolve(scale="smoke", overrides=["tensorboard=yes please"])


def scalars(directory) -> dict[str, dict[int, float]]:
    events = EventAccumulator(str(directory / TENSORBOARD_DIR))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)}
            for tag in events.Tags()["scalars"]}


def test_a_run_writes_each_records_scalars_once(tmp_path) -> None:
    data = tmp_path / "data"
    model = prepare("smoke", root=tmp_path / "models", data_dir=data, progress=False)
    config = cfg.resolve(scale="smoke", model=str(model), data_dir=str(data),
                         results_dir=str(tmp_path / "results"), tensorboard=True, steps=2,
                         eval_every=1, checkpoint_every=1)
    runner.run_grpo(config, progress=False)
    extended = runner.run_grpo({**config, "steps": 3}, progress=False)  # resumes at step 2
    logged = scalars(cfg.run_dir(config))
    assert sorted(logged["reward"]) == [1, 2, 3] and sorted(logged["eval_accuracy"]) == [0, 1, 2, 3]
    for column in extended.columns.drop("step"):
        expected = {int(step): float(value) for step, value in zip(
            extended["step"], extended[column], strict=True) if math.isfinite(value)}
        assert logged.get(column, {}) == pytest.approx(expected, rel=1e-6), column
