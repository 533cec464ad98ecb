"""Tracking: TensorBoard for GRPO runs (the config key changes no run's hash; a smoke run's
events hold each record's scalars once, through a resume that extends it), and LoGRA's metrics
in any Hugging Face Trainer's logs."""

from __future__ import annotations

import math

import datasets
import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import Trainer, TrainerCallback, TrainingArguments

from logra import LoGRA
from logra.config import EXPERIMENTS_DIR, ConfigError
from logra.integrations.trainer import add_logra_metrics, unwrap
from logra.models import prepare
from logra.rl import config as cfg
from logra.rl import runner
from logra.rl.tracking import TENSORBOARD_DIR

SCALES = sorted(yaml.safe_load((EXPERIMENTS_DIR / "grpo.yaml").read_text())["scales"])


@pytest.mark.parametrize("scale", SCALES)
def test_the_tensorboard_key_changes_no_run_directory(scale: str) -> None:
    """Runs made before the key existed keep their directories: the hash ignores it."""
    config = cfg.resolve(scale=scale)
    assert config.tensorboard is False
    before = {k: v for k, v in config.to_dict().items() if k != "tensorboard"}  # an old run's
    assert cfg.run_dir(cfg.resolve(scale=scale, tensorboard=True)) == cfg.run_dir(config)
    assert cfg.result_keys_differ(before, cfg.resolve(scale=scale, tensorboard=True)) == []


def test_tensorboard_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="tensorboard: input should be a valid boolean, got None"):
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
    extended = runner.run_grpo(config.replace(steps=3), progress=False)  # resumes at step 2
    logged = scalars(cfg.run_dir(config))
    assert sorted(logged["reward"]) == [1, 2, 3] and sorted(logged["eval_accuracy"]) == [0, 1, 2, 3]
    for column in extended.columns.drop("step"):
        expected = {int(step): float(value) for step, value in zip(
            extended["step"], extended[column], strict=True) if math.isfinite(value)}
        assert logged.get(column, {}) == pytest.approx(expected, rel=1e-6), column


# ---------------------------------------------------------------- LoGRA in a Hugging Face Trainer


class Reporter(TrainerCallback):
    """Stands for a report_to integration: what each on_log hands it, and LoGRA's γ per step."""

    def __init__(self) -> None:
        self.logs: list[dict] = []
        self.gammas: list[float] = []

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs) -> None:
        self.gammas.append(unwrap(optimizer).last_step["gamma"])

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        self.logs.append(dict(logs))


def test_any_trainer_logs_logras_metrics_per_logging_window(tiny_qwen2, tmp_path) -> None:
    """A plain transformers.Trainer: LoGRA's keys reach the reporting callbacks and the log
    history, γ averaged over each window of two steps; the probe replays the LM batch."""
    model = tiny_qwen2()
    ids = torch.randint(0, 48, (32, 12), generator=torch.Generator().manual_seed(0))
    data = datasets.Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=4, logging_steps=2,
                             per_device_train_batch_size=8, report_to="none", use_cpu=True,
                             save_strategy="no", disable_tqdm=True, seed=0)
    optimizer = LoGRA(model.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=1e-6)
    reporter = Reporter()
    trainer = Trainer(model, args, train_dataset=data, optimizers=(optimizer, None),
                      callbacks=[reporter])
    add_logra_metrics(trainer)
    trainer.train()
    rows = [row for row in trainer.state.log_history if "logra/gamma" in row]
    reported = [logs for logs in reporter.logs if "logra/gamma" in logs]
    assert [row["step"] for row in rows] == [2, 4] and len(reported) == 2
    windows = [reporter.gammas[:2], reporter.gammas[2:]]
    for row, logs, gammas in zip(rows, reported, windows, strict=True):
        assert row["logra/gamma"] == logs["logra/gamma"] == pytest.approx(sum(gammas) / 2)
        assert "loss" in row and math.isfinite(row["logra/predicted_kl"])
    assert min(reporter.gammas) < 1  # δ = 1e-6 clips
    assert rows[0]["logra/kl_probed"] == 1.0  # attached: the JVP probe replayed the batch
    assert rows[-1]["logra/skipped_steps"] == 0.0
