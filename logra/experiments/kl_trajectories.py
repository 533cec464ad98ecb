"""KL trajectories: how far each optimizer's policy drifts from the reference during GRPO, and how
well a step's predicted KL foretells the KL it causes (notebooks/03_kl_trajectories; C5, C6).

Every trajectory is a GRPO run of one of the methods of `logra.experiments.grpo_runs` (its
`grpo_config`: experiments/grpo.yaml at `grpo_scale`, the GRPO keys of
experiments/kl_trajectories.yaml on top, then the method's optimizer settings, its lr
(`method_lr`, else `lr`) and the seed), evaluated before and after training, cached by config in
<results_dir>/runs/ and resumed when rerun: with notebook 04's GRPO keys, a method at its lr
there is notebook 04's run. `grpo_runs.command` prints the `logra-repro run` line of a run.

`run(cfg)` returns one tidy frame: one row per (method, seed, step) with the runner's records
(`logra.rl.COLUMNS`: kl = exact mean per-token KL(π_θ ‖ π_ref) of the policy that sampled the
step, step_kl = exact KL(π_before ‖ π_after) of the step's update on its own batch, predicted_kl,
gamma, reward, eval_accuracy, ...), plus the calibration runs (method "calibration").

Calibration (`calibration_run`, with the GRPO keys of `calibration_keys` on top: a smaller
batch, since each step is also probed by the JVP on the whole batch): LoGRA (gain) with the
default `kl_estimator="calibrated"` and an infinite budget, so that the optimizer predicts the
KL of every step in nats, as a controlled run would, but never scales one (the run takes the
steps logra-nokl would at the same keys and seed). With its default probe interval (every step)
that prediction is the JVP quadratic ½·ΔᵀFΔ on 1 in `kl_probe_stride` sequences of the batch;
the raw diagonal estimate ½·Δᵀ diag(V̂) Δ, times a factor refitted from the probes, would
predict the steps without a probe. Each step is also probed by the JVP prediction of the applied
Δ = W_after − W_before at the pre-step weights on the whole batch
(`logra.optim.kl.predicted_kl_jvp`), and every prediction is set against the measured step_kl.
`calibration_table` gives, per predictor, the median of measured/predicted and the share of
steps within a factor 4, the geometric-mean factor c, the free log-log slope and the rank
correlation. `schedule_table` replays the calibrated estimator offline from the same run's raw
diagonal and either probe's values for other probe intervals and windows, and for a trainer
that reports each step's measured KL (`LoGRA.observe_kl`): the evidence for the defaults.

The tables, figures and verdicts (`c5_claim`, `c6_claim`, by the rules in their docstrings) are
`logra.experiments.kl_trajectories_report`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from logra import io
from logra.config import typed
from logra.experiments import grpo_runs
from logra.experiments.grpo_runs import grpo_job, prepare_inputs
from logra.experiments.jobs import run_jobs
from logra.experiments.typed import (
    Count,
    ExperimentGRPOKeys,
    Method,
    Methods,
    Positive,
    Seeds,
    Task,
    Window,
)
from logra.methods import METHODS
from logra.optim.kl import predicted_kl_jvp
from logra.rl import config as grpo
from logra.rl import runner
from logra.rl.rollout import Rollout

EXPERIMENT = "kl_trajectories"
NOTEBOOK = "03_kl_trajectories"


@typed
class Config(grpo_runs.GRPOExperiment):
    """experiments/kl_trajectories.yaml's keys (its comments say what each holds):
    those of every RL experiment, and its own."""

    EXPERIMENT: ClassVar[str] = "kl_trajectories"
    methods: Methods
    method_lr: dict[Method, Positive] | None
    model: str | None
    task: Task | None
    lr: Positive | None
    calibration_keys: ExperimentGRPOKeys  # the experiment's GRPO keys the calibration run changes
    calibration_seeds: Seeds
    calibration_steps: Count
    smooth_steps: Count
    c5_window: Window
    c5_factor: Positive
    c5_min_kl: Positive
    final_steps: Count
    c6_factor: Positive


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/kl_trajectories.yaml at `scale`, with `overrides` on top, checked."""
    return Config.load(scale, **overrides)


# ---------------------------------------------------------------- GRPO configs


def method_lr(cfg: Config, method: str) -> float | None:
    """The lr of `method`'s runs: `method_lr`'s, else `lr` (None: grpo.yaml's)."""
    return (cfg.method_lr or {}).get(method, cfg.lr)


def grpo_config(cfg: Config, method: str, seed: int) -> grpo.GRPOConfig:
    """The resolved GRPO config of `method` at `seed`, at its lr, evaluated before and after
    training (as notebooks 04 and 09 build theirs, so equal settings share a run)."""
    return grpo_runs.grpo_config(cfg, grpo_runs.Run(method=method, seed=seed,
                                                    lr=method_lr(cfg, method),
                                                    eval_every=cfg.steps))


def calibration_config(cfg: Config, seed: int) -> grpo.GRPOConfig:
    """LoGRA gain predicting every step's KL with the calibrated estimate and an infinite
    budget (never clips), at the GRPO keys of `calibration_keys`."""
    config = grpo_runs.grpo_config({**cfg, **cfg.calibration_keys},
                                   grpo_runs.Run(method="logra", seed=seed))
    return config.replace(kl_estimator="calibrated", predicted_kl_threshold=math.inf,
                          steps=cfg.calibration_steps)


# ---------------------------------------------------------------- running


class JVPProbe:
    """An update hook (`logra.rl.runner.UpdateHook`) that measures every optimizer step by the
    exact JVP prediction ½·ΔᵀFΔ of the applied update Δ at the pre-step weights, on the step's
    batch; `values` holds one prediction per step, in nats per token."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def __call__(self, trainer: runner.Trainer, rollout: Rollout,
                 before: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            after = {n: p.detach().clone() for n, p in trainer.trainable.items()}
            delta = {n: after[n] - before[n] for n in after}
            try:
                for n, p in trainer.trainable.items():
                    p.copy_(before[n])
                probe = predicted_kl_jvp(trainer.policy, delta, kwargs=rollout.model_inputs(),
                                         token_mask=rollout.logits_mask())
            finally:
                for n, p in trainer.trainable.items():
                    p.copy_(after[n])
        self.values.append(float(probe))


def calibration_run(config: grpo.GRPOConfig) -> pd.DataFrame:
    """The records of the calibration run of `config` (`calibration_config`), with `jvp_kl`.

    Cached as <results_dir>/calibration/<config hash>-<steps>.csv.
    """
    path = (Path(config.results_dir) / "calibration"
            / f"{grpo.config_hash(config)}-{config.steps}.csv")
    if path.exists():
        return pd.read_csv(path)
    if config.updates_per_batch != 1:
        raise ValueError("the calibration probes one update per batch (updates_per_batch=1)")
    torch.set_num_threads(config.threads)
    probe = JVPProbe()
    trainer = runner.Trainer(config, progress=False, update_hooks=[probe])
    records = [trainer.step(t) for t in range(1, config.steps + 1)]
    frame = runner.frame(records).assign(jvp_kl=probe.values)
    io.write_frame(path, frame)
    return frame


def run(cfg: Config, progress: bool = True) -> pd.DataFrame:
    """Every (method, seed) run and the calibration runs of `cfg`, as one tidy frame
    (columns: method, seed, then `logra.rl.COLUMNS`, then jvp_kl)."""
    configs = {(m, s): grpo_config(cfg, m, s) for m in cfg.methods for s in cfg.seeds}
    calibrations = {s: calibration_config(cfg, s) for s in cfg.calibration_seeds}
    first = next(iter(configs.values()))
    prepare_inputs(cfg.results_dir, [first.model], [first.task])
    jobs: list[tuple[str, Any, Callable, grpo.GRPOConfig]] = [
        (m, s, grpo_job, c) for (m, s), c in configs.items()]
    jobs += [("calibration", s, calibration_run, c) for s, c in calibrations.items()]
    cost = {**{m: spec.cost for m, spec in METHODS.items()}, "calibration": 1.6}
    jobs.sort(key=lambda job: -cost[job[0]] * job[3].steps)
    results = run_jobs([(fn, (c,)) for _, _, fn, c in jobs], cfg.workers, EXPERIMENT,
                       progress)
    frames = [records.assign(method=m, seed=s)
              for (m, s, _, _), records in zip(jobs, results, strict=True)]
    frame = pd.concat(frames, ignore_index=True)
    if "jvp_kl" not in frame:
        frame["jvp_kl"] = np.nan
    order = {m: i for i, m in enumerate([*cfg.methods, "calibration"])}
    frame = frame.sort_values(["method", "seed", "step"], key=lambda col: col.map(order)
                              if col.name == "method" else col, kind="stable")
    return frame[["method", "seed", *runner.COLUMNS, "jvp_kl"]].reset_index(drop=True)
