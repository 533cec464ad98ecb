"""The GRPO runs the notebooks share: the optimizer methods, how an experiment config becomes a
`logra.rl` run config, the `logra-repro run` line of a run, and the run jobs.

A run is `logra.rl.run_grpo` of experiments/grpo.yaml at the experiment's `grpo_scale`, the
experiment's GRPO keys (`GRPO_KEYS`) on top, then the method's optimizer settings and the seed;
it is cached by config in <results_dir>/runs/ and resumed when rerun, so two notebooks that
build the same config (the KL notebook's and the comparison's adamw and logra runs) share the
run. The methods are `logra.methods.METHODS` (their optimizer, preset settings, label and
colour); a KL-controlled method's δ is the experiment's `kl_budget` unless its preset says
otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from logra.data import load_task
from logra.data.registry import SPLITS
from logra.methods import METHODS
from logra.models import SCALES, prepare
from logra.rl import config as grpo
from logra.rl import run_grpo

# keys of experiments/grpo.yaml an experiment sets (null in its YAML: grpo.yaml's value)
GRPO_KEYS = ("model", "task", "lr", "rank", "prompts_per_step", "group_size", "max_new_tokens",
             "eval_every", "eval_prompts", "eval_batch_size", "eval_samples",
             "eval_sampled_prompts", "results_dir")
ALWAYS_SHOWN = ("optimizer", "seed", "steps", "lr")  # keys `command` writes even at their default


def check_runs(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` itself, once its `methods`, `seeds`, `steps` and `workers` are valid (ValueError
    naming them otherwise)."""
    unknown = sorted(set(cfg["methods"]) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; valid: {list(METHODS)}")
    if not cfg["seeds"] or cfg["steps"] < 1 or cfg["workers"] < 0:
        raise ValueError("seeds must be non-empty, steps >= 1 and workers >= 0 (0: one per "
                         "CPU core)")
    return cfg


def grpo_config(cfg: dict[str, Any], method: str, seed: int, **values: Any) -> dict[str, Any]:
    """The resolved logra.rl config of `method` at `seed` under experiment config `cfg`.

    `values` override GRPO keys (the comparison notebook sets `model` this way).
    """
    entry = METHODS[method]
    overrides = {k: cfg[k] for k in GRPO_KEYS if k in cfg and cfg[k] is not None}
    overrides.update(values)
    overrides.update(steps=cfg["steps"], seed=seed, optimizer=entry.optimizer,
                     predicted_kl_threshold=cfg["kl_budget"])
    overrides.update(entry.settings)
    return grpo.resolve(scale=cfg["grpo_scale"], **overrides)


def command(config: dict[str, Any]) -> str:
    """The `logra-repro run` line that computes the run of a resolved GRPO `config`: the keys
    that differ from experiments/grpo.yaml at its scale, and always `ALWAYS_SHOWN`."""
    scale = config["scale"]
    base = grpo.resolve(scale=scale)
    keys = [k for k in config if k != "scale"
            and (k in ALWAYS_SHOWN or config[k] != base.get(k))]
    flag = "" if scale == "default" else f" --scale {scale}"
    pairs = " ".join(f"{k}={_yaml(config[k])}" for k in keys)
    return f"logra-repro run experiments/grpo.yaml{flag} {pairs}"


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def is_real_scale(cfg: dict[str, Any], model: str | None = None) -> bool:
    """Whether the runs of `cfg` use a hub model (GPU scale) rather than a proxy built here."""
    model = model or grpo.resolve(scale=cfg["grpo_scale"],
                                  **({"model": cfg["model"]} if cfg.get("model") else {}))["model"]
    return not (model in SCALES and SCALES[model].is_proxy) and not Path(model).is_dir()


def prepare_inputs(cfg: dict[str, Any], models: list[str], tasks: list[str]) -> None:
    """Build missing proxies and generate the task data in this process, before any worker
    starts (workers must not build the same proxy or write the same cache at once); both under
    <results_dir> (models/, data/), where the runs look for them."""
    results = Path(cfg["results_dir"])
    for model in models:
        if model in SCALES:
            prepare(model, root=results / "models", data_dir=results / "data")
    for task in tasks:
        for split in SPLITS:
            load_task(task, split, results / "data")


def grpo_job(config: dict[str, Any]) -> pd.DataFrame:
    """One GRPO run (or its cached records)."""
    return run_grpo(config, progress=False)
