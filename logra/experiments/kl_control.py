"""The predicted-KL step control where GRPO learns: what it buys against the plain learning-rate
cut, a stress test, and what it costs (notebooks/09_kl_control; claims C5 and C6 at proxy scale).

LoGRA scales each step by γ = min(1, √(δ / KL̂)), KL̂ the predicted KL(π_before ‖ π_after) of the
step in nats per token. Its value is judged as the RLHF literature draws it (Gao et al. 2022;
Rafailov et al. 2023, Fig. 2): held-out reward against the final KL(π_θ ‖ π_ref), one point per
run, and against the obvious alternative, a smaller learning rate:

- **frontier**: the runs of `points`, each a (method, lr, δ). A method's runs without the control
  (δ null; for `adamw-kl` its free twin `adamw`) are its **lr cut**: the plain way to drift less.
  Each controlled run is compared with the lr cut at the same final KL (`lr_matched`: the lr
  cut's held-out pass@1 interpolated linearly in log KL between the two lr-cut runs around it)
  and, by paired per-problem tests, with the lr-cut run nearest in final KL and with the
  uncontrolled run at its own lr (`frontier_table`, Holm's correction over the table).
- **stress**: the runs of `points` at `stress_lr`, where uncontrolled steps are largest: does the
  naive projection run away (C5), does the control prevent a runaway (C6)?
- **naive_sweep**: the naive projection at every lr of `naive_lrs`, at every seed. At the
  stress lr its median step KL is two orders smaller than LoGRA's and its greedy pass@1 does
  not move, so "it does not run away there" is weak evidence; the sweep raises its lr until it
  learns and beyond, and C5 is read at the lr where it learns best (`c5_sweep_claim`).
- **bands**: the few points on which the frontier's verdict turns (`band_points`: a controlled
  point, its lr cut around it in KL, its lr without the control) at every seed of `band_seeds`,
  the same comparisons on seed means and C6 on every seed. A band point that is one of
  `points`, at a seed of `seeds`, is the frontier's run, trained once, so the bands cost only
  the other seeds.
- **budget** (beyond the report; where `budget_runs` is set): a bound B on the drift
  KL(π_θ ‖ π_ref) against GRPO's β·KL penalty, fixed and adaptive (Ziegler et al. 2019).
- **cost**: seconds per GRPO step with and without the control (`control_cost`).

Every run is a `logra.rl` GRPO run built by `grpo_runs.grpo_config` (experiments/grpo.yaml at
`grpo_scale`, the GRPO keys of experiments/kl_control.yaml, the method's preset, lr, δ as the
`predicted_kl_threshold` of a controllable method, seed), so a run with notebook 04's settings is
notebook 04's run, read from the cache. Each run evaluates its policy before and after training:
greedy pass@1 on `eval_prompts` held-out problems and sampled pass@1 (`eval_samples` at
temperature 1) on the first `eval_sampled_prompts`, problem by problem. The control uses the
default KL estimate (`kl_estimator="calibrated"`), so δ is a per-token KL per step.

`run(cfg)` returns two tidy frames: `frame`, one row per (study, step record) (study, method,
delta (NaN: no control), lr, seed, setting (a budget run's name), then `logra.rl.COLUMNS`; a run
two studies share is listed under each), and `problems`, one row per (study, run, problem) of
the final evaluation (study, method, delta, lr, seed, setting, problem, greedy, sampled), with
the policy before RL as method "base", once per seed. The tables, figures and
claims are `logra.experiments.kl_control_report`'s.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from logra.config import typed
from logra.experiments import grpo_runs
from logra.experiments.grpo_runs import Run
from logra.experiments.jobs import run_jobs
from logra.experiments.typed import (
    Count,
    GRPOKeys,
    Level,
    Method,
    Positive,
    Seeds,
    Shape,
    Task,
    Window,
)
from logra.methods import METHODS
from logra.rl import config as grpo
from logra.rl import runner

EXPERIMENT = "kl_control"
NOTEBOOK = "09_kl_control"
BASE = "base"  # the policy before RL, in `problems`
MEASURES = ("greedy", "sampled")
# a controlled method's twin without the control: its lr cut
FREE = {"adamw-kl": "adamw", "logra": "logra-nokl"}
STUDIES = ("frontier", "bands", "naive_sweep", "budget", "cost")  # what `studies` can select


def family(method: str) -> str:
    """The method whose uncontrolled runs are `method`'s lr cut (itself if it has no control)."""
    return FREE.get(method, method)


def _points(cfg: Config, key: str = "points") -> list[tuple[str, float, float | None]]:
    """`points` (or `band_points`, by `key`) as (method, lr, δ): δ is the entry's third value,
    else `predicted_kl_threshold`, for a controlled method, and None for the others. ValueError
    naming the key and a bad entry."""
    points = []
    for entry in cfg[key]:  # [method, lr] or [method, lr, δ]: the type says so
        method, lr, *delta = entry
        if method not in METHODS:
            raise ValueError(f"{key}: unknown method {method!r}; valid: {list(METHODS)}")
        if not isinstance(lr, int | float) or not lr > 0:
            raise ValueError(f"{key}: {entry!r}: the lr must be a positive number")
        controlled = METHODS[method].controlled
        if delta and not controlled:
            raise ValueError(f"{key}: {entry!r}: {method!r} has no KL control to give a δ")
        value = (delta[0] if delta else cfg.predicted_kl_threshold) if controlled else None
        if controlled and not (isinstance(value, int | float) and value > 0):
            raise ValueError(f"{key}: {entry!r}: δ must be a positive number")
        points.append((method, float(lr), value))
    if len(set(points)) < len(points):
        raise ValueError(f"{key}: an entry is given twice")
    return points


@typed
class Config(grpo_runs.GRPOExperiment):
    """experiments/kl_control.yaml's keys (its comments say what each holds):
    those of every RL experiment, and its own."""

    EXPERIMENT: ClassVar[str] = "kl_control"
    model: str
    task: Task
    # [method, lr] or [method, lr, δ]: checked by `_points`
    points: Annotated[list[Annotated[list[Any], Field(min_length=2, max_length=3)]],
                      Field(min_length=1)]
    stress_lr: Positive
    band_points: list[Annotated[list[Any], Field(min_length=2, max_length=3)]]  # as points
    band_seeds: Seeds
    naive_lrs: Annotated[list[Positive], Field(min_length=3)]  # ascending: checked by `config`
    studies: Annotated[list[Literal[STUDIES]], Field(min_length=1)]
    budget_runs: dict[str, GRPOKeys]  # setting -> GRPO keys on top of the experiment's
    budget_method: Method
    budget_lr: Positive
    budget_steps: Count
    budget_seeds: Seeds
    budget_probe_every: Count
    budget_probe_prompts: Count
    cost_batches: list[Shape]  # [prompts, samples per prompt]
    cost_lr: Positive
    cost_steps: Count
    cost_rounds: Annotated[int, Field(ge=2)]  # the first is a warm-up
    alpha: Level
    smooth_steps: Count
    final_steps: Count
    runaway_kl: Positive
    c5_window: Window
    c6_factor: Positive


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/kl_control.yaml at `scale`, with the overrides that are not None on top
    (a notebook's parameters pass None for "the scale's value"), checked."""
    cfg = Config.load(scale, **{k: v for k, v in overrides.items() if v is not None})
    points = _points(cfg)
    stress = {m for m, lr, _ in points if lr == cfg.stress_lr}
    if "frontier" in cfg.studies and not {"adamw", "naive"} <= stress:
        raise ValueError(f"points must hold adamw and naive at stress_lr {cfg.stress_lr:g} "
                         f"(the C5 stress test); they hold {sorted(stress)}")
    if "bands" in cfg.studies and not _points(cfg, "band_points"):
        raise ValueError("band_points is empty: give the points to band, or leave 'bands' out "
                         "of studies")
    if sorted(set(cfg.naive_lrs)) != list(cfg.naive_lrs):
        raise ValueError(f"naive_lrs must ascend without repeats (its ends tell whether the best "
                         f"lr is bracketed), got {cfg.naive_lrs}")
    if cfg.budget_runs and not METHODS[cfg.budget_method].controllable:
        raise ValueError(f"budget_method must be one of "
                         f"{[m for m, spec in METHODS.items() if spec.controllable]}, "
                         f"got {cfg.budget_method!r}")
    preset = METHODS[cfg.budget_method].settings
    for setting, keys in cfg.budget_runs.items():
        if clash := sorted(set(keys) & set(preset)):
            raise ValueError(f"budget_runs: {setting!r} sets {clash}, which budget_method "
                             f"{cfg.budget_method!r} presets (logra.methods)")
    return cfg


def plan(cfg: Config) -> list[Run]:
    """Every run of the `studies` asked for: the points at every seed, the band points at every
    band seed, the naive projection at every lr of `naive_lrs` and seed, then the budget
    study's (each budget run also has its `setting`, its name in
    `budget_runs`, and the GRPO keys that setting gives), each evaluated before and after
    training."""
    runs = []
    if "frontier" in cfg.studies:
        runs += [Run(study="frontier", method=method, lr=lr, delta=delta, seed=seed,
                     eval_every=cfg.steps)
                 for method, lr, delta in _points(cfg) for seed in cfg.seeds]
    if "bands" in cfg.studies:
        runs += [Run(study="bands", method=method, lr=lr, delta=delta, seed=seed,
                     eval_every=cfg.steps)
                 for method, lr, delta in _points(cfg, "band_points")
                 for seed in cfg.band_seeds]
    if "naive_sweep" in cfg.studies:
        runs += [Run(study="naive_sweep", method="naive", lr=lr, seed=seed, eval_every=cfg.steps)
                 for lr in cfg.naive_lrs for seed in cfg.seeds]
    if "budget" not in cfg.studies:
        return runs
    # the budget is judged on the probe, not the noisy batch KL
    probe = (("drift_probe_every", cfg.budget_probe_every),
             ("drift_probe_prompts", cfg.budget_probe_prompts))
    runs += [Run(study="budget", method=cfg.budget_method, lr=cfg.budget_lr, seed=seed,
                 setting=setting, steps=cfg.budget_steps, eval_every=cfg.budget_steps,
                 keys=(*sorted(keys.items()), *probe))
             for setting, keys in cfg.budget_runs.items() for seed in cfg.budget_seeds]
    return runs


def grpo_config(cfg: Config, run: Run) -> grpo.GRPOConfig:
    """The resolved `logra.rl` config of one run (`grpo_runs.grpo_config`)."""
    return grpo_runs.grpo_config(cfg, run)


def _job(config: grpo.GRPOConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One GRPO run (or its cached records) and its per-problem evaluations."""
    records = grpo_runs.grpo_job(config)
    return records, pd.read_csv(grpo.run_dir(config) / runner.PROBLEMS_FILE)


KEYS = ["study", "method", "delta", "lr", "seed", "setting"]


def run(cfg: Config, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every run of `plan(cfg)` (cached runs are read back): the `frame` and `problems` frames
    of the module docstring."""
    runs = plan(cfg)
    configs = [grpo_config(cfg, r) for r in runs]
    grpo_runs.prepare_inputs(cfg.results_dir, [configs[0].model], [configs[0].task])
    # a run two studies share (a band point or a naive lr at a frontier seed) is trained once
    first = {grpo.run_dir(c): i for i, c in reversed(list(enumerate(configs)))}
    order = sorted(first.values(),  # the longest first
                   key=lambda i: -METHODS[runs[i].method].cost * configs[i].steps)
    results = run_jobs([(_job, (configs[i],)) for i in order], cfg.workers, EXPERIMENT,
                       progress)
    done = dict(zip(order, results, strict=True))
    frames, problems = [], []
    for r, c in zip(runs, configs, strict=True):  # in the order of `plan`, the tables' order
        records, evaluated = done[first[grpo.run_dir(c)]]
        keys = dict(study=r.study, method=r.method, lr=r.lr, seed=r.seed, setting=r.setting,
                    delta=math.nan if r.delta is None else r.delta)
        frames.append(records.assign(**keys))
        final = evaluated[evaluated["step"] == evaluated["step"].max()]
        problems.append(final.assign(**keys))
        problems.append(evaluated[evaluated["step"] == 0].assign(**{**keys, "method": BASE}))
    frame = pd.concat(frames, ignore_index=True)[[*KEYS, *runner.COLUMNS]]
    problems = pd.concat(problems, ignore_index=True).drop(columns="step")
    base = problems["method"] == BASE  # the policy before RL: one copy per seed
    problems = pd.concat([problems[~base], problems[base].drop_duplicates(["seed", "problem"])
                          .assign(study="", lr=math.nan, delta=math.nan, setting="")],
                         ignore_index=True)
    return frame, problems[[*KEYS, "problem", *MEASURES]]


def measured(problems: pd.DataFrame) -> list[str]:
    """The measures of `MEASURES` the runs evaluated (sampled pass@1 only where `eval_samples`
    is set; not at the GPU scales)."""
    return [m for m in MEASURES if problems[m].notna().any()]


# ---------------------------------------------------------------- cost of the control

COST_SETTINGS: dict[str, dict[str, Any]] = {
    "dense AdamW (torch)": dict(optimizer="adamw"),
    "LoGRA, no control": dict(optimizer="logra", predicted_kl_threshold=None),
    "LoGRA + control (default estimate)": dict(optimizer="logra", predicted_kl_threshold=1e-3),
    "LoGRA + control (JVP on the whole batch)": dict(optimizer="logra",
                                                     predicted_kl_threshold=1e-3,
                                                     kl_estimator="jvp"),
}


def control_cost(cfg: Config, progress: bool = True) -> pd.DataFrame:
    """Seconds per GRPO step (rollout, update, measurements) of each of `COST_SETTINGS`, for
    each batch (prompts, samples) of `cost_batches`: the trainers take `cost_rounds` rounds of
    `cost_steps` steps in turn, in one process on one thread, so that the machine's noise falls
    on all alike; the first round of each is a warm-up and not counted. Columns: batch,
    setting, s/step (median over counted steps), ratio to dense AdamW's, and the control's own
    share over LoGRA without it."""
    import torch
    from tqdm.auto import tqdm

    torch.set_num_threads(1)
    rows = []
    for prompts, samples in cfg.cost_batches:
        trainers = {}
        for name, keys in COST_SETTINGS.items():
            config = grpo.resolve(scale=cfg.grpo_scale, model=cfg.model, task=cfg.task,
                                  lr=cfg.cost_lr, rank=cfg.rank, prompts_per_step=prompts,
                                  group_size=samples, max_new_tokens=cfg.max_new_tokens,
                                  results_dir=cfg.results_dir, eval_prompts=8, **keys)
            trainers[name] = runner.Trainer(config, progress=False)
        seconds: dict[str, list[float]] = {name: [] for name in trainers}
        total = cfg.cost_rounds * len(trainers)
        bar = tqdm(total=total, desc=f"cost {prompts}x{samples}", disable=not progress)
        for round_ in range(cfg.cost_rounds):
            for name, trainer in trainers.items():
                for t in range(1, cfg.cost_steps + 1):
                    record = trainer.step(round_ * cfg.cost_steps + t)
                    if round_ > 0:
                        seconds[name].append(record["seconds"])
                bar.update()
        bar.close()
        adamw = float(np.median(seconds["dense AdamW (torch)"]))
        free = float(np.median(seconds["LoGRA, no control"]))
        for name, values in seconds.items():
            median = float(np.median(values))
            rows.append({"batch (prompts × samples)": f"{prompts} × {samples}",
                         "setting": name, "steps timed": len(values),
                         "s/step (median)": median, "÷ dense AdamW": median / adamw,
                         "÷ LoGRA without control": median / free})
    return pd.DataFrame(rows)
