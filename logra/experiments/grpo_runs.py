"""The GRPO runs the notebooks share: the optimizer methods, how an experiment config becomes a
`logra.rl` run config, the `logra-repro run` line of a run, and the run jobs.

A run is `logra.rl.run_grpo` of experiments/grpo.yaml at the experiment's `grpo_scale`, the
experiment's GRPO keys (`GRPO_KEYS`) on top, then the method's optimizer settings and the seed;
it is cached by config in <results_dir>/runs/ and resumed when rerun, so two notebooks that
build the same config (the KL notebook's and the comparison's adamw and logra runs) share the
run. The methods (`METHODS`):

    adamw          dense torch AdamW, no control (the reference the report compares against)
    adamw-kl       dense AdamW with the predicted-KL step control: LoGRA with sketch=False on
                   every parameter, the JVP estimate, budget δ = kl_budget
    logra          LoGRA, gain reconstruction (the default), control δ, JVP estimate
    logra-nystrom  LoGRA, truncated Nyström reconstruction, control δ, JVP estimate
    logra-nokl     LoGRA, gain reconstruction, no control
    naive          the naive one-sided random projection (RandomProjectionAdam), no control
    lora, galore, apollo, adafactor   (the comparison notebook's other optimizers)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from logra.data import load_task
from logra.data.registry import SPLITS
from logra.models import SCALES, prepare
from logra.rl import config as grpo
from logra.rl import run_grpo

# keys of experiments/grpo.yaml an experiment sets (null in its YAML: grpo.yaml's value)
GRPO_KEYS = ("model", "task", "lr", "rank", "prompts_per_step", "group_size", "max_new_tokens",
             "eval_every", "eval_prompts", "eval_batch_size", "results_dir")
ALWAYS_SHOWN = ("optimizer", "seed", "steps", "lr")  # keys `command` writes even at their default


@dataclass(frozen=True)
class Method:
    """An optimizer setting of the GRPO runs, and how the notebooks draw and schedule it."""

    label: str
    color: str
    overrides: dict[str, Any] = field(default_factory=dict)  # GRPO keys beyond `optimizer`
    optimizer: str = ""
    controlled: bool = False  # uses the predicted-KL step control
    cost: float = 1.0  # relative step time measured here (schedules the longest runs first)
    style: str = "-"  # line style (dashed where a curve may lie on another method's)


METHODS: dict[str, Method] = {
    "adamw": Method("dense AdamW", "#000000", optimizer="adamw"),
    "adamw-kl": Method("dense AdamW + KL control", "#7f7f7f", optimizer="adamw-kl",
                       controlled=True, cost=1.3, style="--"),
    "logra": Method("LoGRA gain + KL control", "#d62728", optimizer="logra", controlled=True,
                    cost=1.3),
    "logra-nystrom": Method("LoGRA Nyström + KL control", "#ff7f0e", optimizer="logra",
                            overrides={"reconstruction": "nystrom"}, controlled=True, cost=1.6),
    "logra-nokl": Method("LoGRA gain, no control", "#e377c2", optimizer="logra",
                         overrides={"predicted_kl_threshold": None}, style="--"),
    "naive": Method("naive random projection", "#1f77b4", optimizer="naive", cost=1.5),
    "lora": Method("LoRA", "#2ca02c", optimizer="lora", cost=1.5),
    "galore": Method("GaLore", "#9467bd", optimizer="galore", cost=1.1),
    "apollo": Method("APOLLO", "#8c564b", optimizer="apollo"),
    "adafactor": Method("Adafactor", "#17becf", optimizer="adafactor"),
}


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
    spec = METHODS[method]
    overrides = {k: cfg[k] for k in GRPO_KEYS if k in cfg and cfg[k] is not None}
    overrides.update(values)
    overrides.update(steps=cfg["steps"], seed=seed, optimizer=spec.optimizer,
                     predicted_kl_threshold=cfg["kl_budget"])
    overrides.update(spec.overrides)
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
