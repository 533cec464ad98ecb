"""The GRPO runs the notebooks share: the optimizer methods, how an experiment config becomes a
`logra.rl` run config, the `logra-repro run` line of a run, and the run jobs.

Every RL experiment plans its runs as `Run`s (method, seed, and what each run sets) and builds
their configs with `grpo_config`: experiments/grpo.yaml at the experiment's `grpo_scale`, the
experiment's GRPO keys (`typed.GRPO_KEYS`) on top, then the run's own keys and the method's
preset. A run is `logra.rl.run_grpo` of that config; it is cached by config in
<results_dir>/runs/ and resumed when rerun, so two notebooks that
build the same config (the KL notebook's and the comparison's adamw and logra runs) share the
run. The methods are `logra.methods.METHODS` (their optimizer, preset settings, label and
colour); a KL-controlled method's δ is the experiment's `predicted_kl_threshold` (the
optimizer's own name for it) unless its preset says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from logra.config import TypedConfig, typed
from logra.data import load_task
from logra.data.registry import SPLITS
from logra.experiments.typed import (
    GRPO_KEYS,
    Count,
    GRPOCount,
    Positive,
    Seeds,
    Workers,
)
from logra.methods import METHODS
from logra.models import SCALES, prepare
from logra.rl import config as grpo
from logra.rl import run_grpo

ALWAYS_SHOWN = ("optimizer", "seed", "steps", "lr")  # keys `command` writes even at their default


@typed
class GRPOExperiment(TypedConfig):
    """The keys every RL experiment's config holds (its `Config` adds its own): the scale of
    experiments/grpo.yaml its runs start from, their seeds, steps and workers, the δ of its
    KL-controlled methods, and the GRPO keys its runs share (None: grpo.yaml's value)."""

    scale: str
    grpo_scale: str
    seeds: Seeds
    steps: Count
    workers: Workers
    predicted_kl_threshold: Positive | None
    rank: GRPOCount
    prompts_per_step: GRPOCount
    group_size: GRPOCount
    max_new_tokens: GRPOCount
    eval_prompts: GRPOCount
    eval_samples: GRPOCount
    eval_sampled_prompts: GRPOCount
    eval_batch_size: GRPOCount
    results_dir: str


@dataclass(frozen=True, kw_only=True)
class Run:
    """One GRPO run an experiment plans: `method` (of `logra.methods`) at `seed`, and what the
    run sets beyond the experiment's GRPO keys (None: the experiment's value, else grpo.yaml's).

    Every RL experiment plans its runs as these and builds their configs with `grpo_config`;
    `study` and `setting` name the part of the experiment a run belongs to, for its tables.
    """

    method: str
    seed: int
    lr: float | None = None
    delta: float | None = None  # δ of a controlled method (None: the experiment's δ)
    model: str | None = None
    task: str | None = None
    steps: int | None = None
    eval_every: int | None = None
    keys: tuple[tuple[str, Any], ...] = ()  # further GRPO keys, (key, value) pairs
    study: str = ""  # e.g. "sweep", "seeds", "frontier", "budget"
    setting: str = ""  # the run's name where its study names runs

    @property
    def label(self) -> str:
        """The setting's name, else the method's short label (with δ when it has one)."""
        if self.setting:
            return self.setting
        short = METHODS[self.method].short
        return short if self.delta is None else f"{short} + control, δ = {self.delta:g}"


def grpo_config(cfg: Mapping[str, Any], run: Run) -> grpo.GRPOConfig:
    """The resolved logra.rl config of `run` under experiment config `cfg`: grpo.yaml at
    `grpo_scale`, the experiment's `GRPO_KEYS`, what the run sets, then the method's preset
    (which may turn the control off: its δ is the run's `delta`, else the experiment's
    `predicted_kl_threshold`)."""
    entry = METHODS[run.method]
    overrides = {k: cfg[k] for k in GRPO_KEYS if k in cfg and cfg[k] is not None}
    set_by_run = dict(model=run.model, task=run.task, lr=run.lr, eval_every=run.eval_every)
    overrides.update({k: v for k, v in set_by_run.items() if v is not None})
    overrides.update(run.keys)
    delta = cfg["predicted_kl_threshold"] if run.delta is None else run.delta
    overrides.update(steps=run.steps or cfg["steps"], seed=run.seed, optimizer=entry.optimizer,
                     predicted_kl_threshold=delta)
    overrides.update(entry.settings)
    return grpo.resolve(scale=cfg["grpo_scale"], **overrides)


def command(config: grpo.GRPOConfig) -> str:
    """The `logra-repro run` line that computes the run of a resolved GRPO `config`: the keys
    that differ from experiments/grpo.yaml at its scale, and always `ALWAYS_SHOWN`."""
    values, base = config.to_dict(), grpo.resolve(scale=config.scale).to_dict()
    keys = [k for k in values if k != "scale" and (k in ALWAYS_SHOWN or values[k] != base[k])]
    flag = "" if config.scale == "default" else f" --scale {config.scale}"
    pairs = " ".join(f"{k}={_yaml(values[k])}" for k in keys)
    return f"logra-repro run experiments/grpo.yaml{flag} {pairs}"


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def is_real_scale(cfg: GRPOExperiment, model: str | None = None) -> bool:
    """Whether the runs of `cfg` use a hub model (GPU scale) rather than a proxy built here."""
    model = model or grpo.resolve(scale=cfg.grpo_scale,
                                  **({"model": cfg["model"]} if cfg.get("model") else {})).model
    return not (model in SCALES and SCALES[model].is_proxy) and not Path(model).is_dir()


def prepare_inputs(results_dir: str | Path, models: list[str], tasks: list[str]) -> None:
    """Build missing proxies and generate the task data in this process, before any worker
    starts (workers must not build the same proxy or write the same cache at once); both under
    <results_dir> (models/, data/), where the runs look for them."""
    results = Path(results_dir)
    for model in models:
        if model in SCALES:
            prepare(model, root=results / "models", data_dir=results / "data")
    for task in tasks:
        for split in SPLITS:
            load_task(task, split, results / "data")


def grpo_job(config: grpo.GRPOConfig) -> pd.DataFrame:
    """One GRPO run (or its cached records)."""
    return run_grpo(config, progress=False)
