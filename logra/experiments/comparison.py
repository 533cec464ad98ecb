"""Optimizer comparison: LoRA vs dense AdamW vs LoGRA (and the other low-memory optimizers)
after GRPO, each at its own learning rate, decided by paired per-problem tests
(notebooks/04_optimizer_comparison; claims C7, C8).

The runs are `logra.rl` GRPO runs in the regime where dense AdamW GRPO learns (notebook 11;
`experiments/comparison.yaml`), built by `grpo_runs.grpo_config` with the method's preset
(`logra.methods`). Each run evaluates its policy before and after (`eval_every` = steps):
greedy pass@1 on `eval_prompts` held-out problems and sampled pass@1 (`eval_samples`
completions at temperature 1 with fixed seeds) on the first `eval_sampled_prompts`, kept
per problem (`runner.PROBLEMS_FILE`), so two runs are compared problem by problem.

    1. the sweep: every lr of `lr_grid[method]` at `sweep_seed`; the chosen lr has the highest
       final sampled pass@1 (ties: greedy); it is bracketed when not at an end of the grid.
       With `chosen_lrs` (a sweep table a sweeping scale wrote,
       `comparison_report.sweep_table`) the chosen lrs are read from it instead and nothing is
       swept (`read_chosen`);
    2. the seeds: every seed of `seeds` at the chosen lr (the sweep's run reused).

`run(cfg)` returns two tidy frames. `runs`, one row per run:

    model, method, lr, seed    the run
    greedy_before, greedy      held-out greedy pass@1 (0–1) before and after RL
    sampled_before, sampled    held-out sampled pass@1 (0–1) before and after RL
    final_kl        exact mean per-token KL(π_θ ‖ π_ref) of the last `FINAL_STEPS` steps
    state_bytes     bytes of the optimizer's state at the last step
    step_seconds    median wall time of a GRPO step (evaluation excluded)
    steps           GRPO steps of the run
    <task> greedy   greedy pass@1 of the final policy on each of `extra_eval_tasks`

and `problems`, one row per (run, problem) of the final evaluation (model, method, lr, seed,
problem, greedy, sampled; sampled NaN past `eval_sampled_prompts`), with the policy before RL
as method "base". The paired tests, tables, figures and claims are
`logra.experiments.comparison_report`'s.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import Field

from logra import io, paths
from logra.config import typed
from logra.experiments import grpo_runs
from logra.experiments.grpo_runs import Run
from logra.experiments.jobs import run_jobs
from logra.experiments.typed import (
    Level,
    LRs,
    Method,
    Methods,
    PathText,
    Positive,
    Task,
)
from logra.methods import METHODS
from logra.rl import config as grpo
from logra.rl import runner

EXPERIMENT = "comparison"
NOTEBOOK = "04_optimizer_comparison"
FINAL_STEPS = 5
REFERENCE = "adamw"
BASE = "base"  # the policy before RL, in `problems` and the tables
MEASURES = ("greedy", "sampled")


def measured(frame: pd.DataFrame) -> list[str]:
    """The measures of `MEASURES` that `frame` (runs or problems) holds any value of: greedy
    always, sampled only where the runs evaluated it (`eval_samples`; not at the GPU scales)."""
    return [m for m in MEASURES if frame[m].notna().any()]


@typed
class Config(grpo_runs.GRPOExperiment):
    """experiments/comparison.yaml's keys (its comments say what each holds):
    those of every RL experiment, and its own."""

    EXPERIMENT: ClassVar[str] = "comparison"
    methods: Methods
    lr_grid: dict[Method, LRs]
    sweep_seed: int
    chosen_lrs: PathText | None  # a sweep table to read the lrs from (None: sweep)
    models: Annotated[list[str], Field(min_length=1)]
    task: Task
    extra_eval_tasks: list[Task]
    alpha: Level
    c8_tolerance: Positive


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/comparison.yaml at `scale`, with the overrides that are not None on top,
    checked: the types, then the rules between keys, then the chosen-lr table if one is named
    (a missing one means the grids are swept, and is said)."""
    cfg = Config.load(scale, **{k: v for k, v in overrides.items() if v is not None})
    if REFERENCE not in cfg.methods:
        raise ValueError(f"methods must include {REFERENCE!r}, the reference of every test")
    missing = [m for m in cfg.methods if m not in cfg.lr_grid]
    if missing:
        raise ValueError(f"lr_grid has no learning rates for methods {missing}")
    if cfg.chosen_lrs is not None:
        if chosen_lrs_path(cfg).is_file():
            read_chosen(cfg)  # a table that lacks a method fails here, before any run
        else:
            print(f"chosen_lrs: {chosen_lrs_path(cfg)} does not exist; sweeping the lr grids")
            cfg = cfg.replace(chosen_lrs=None)
    if not reads_chosen(cfg) and cfg.sweep_seed not in cfg.seeds:
        raise ValueError(f"sweep_seed {cfg.sweep_seed} must be one of seeds {cfg.seeds}")
    return cfg


def chosen_lrs_path(cfg: Config) -> Path:
    """`cfg.chosen_lrs` as an absolute path (relative ones under the project root)."""
    return paths.project_path(cfg.chosen_lrs)


def reads_chosen(cfg: Config) -> bool:
    """Whether the chosen lrs come from a sweep table instead of a sweep (`config` sets
    `chosen_lrs` to None where its table does not exist)."""
    return cfg.chosen_lrs is not None


def grpo_config(cfg: Config, run: Run) -> grpo.GRPOConfig:
    """The resolved GRPO config of one run, evaluated before and after training; a run without
    an lr is at its method's chosen lr where the lrs are read, else at the first of its grid."""
    lr = run.lr
    if lr is None:
        lr = (read_chosen(cfg).loc[(run.model, run.method), "lr"] if reads_chosen(cfg)
              else cfg.lr_grid[run.method][0])
    return grpo_runs.grpo_config(cfg, replace(run, lr=lr, eval_every=cfg.steps))


# ---------------------------------------------------------------- running


ALL = 10**9


def extra_accuracy(config: grpo.GRPOConfig, task: str) -> float:
    """Greedy pass@1 of the run's final policy on the test split of `task` (the same number of
    problems as the run's own evaluation), cached in <results_dir>/heldout/<run name>.json."""
    path = Path(config.results_dir) / "heldout" / f"{grpo.run_dir(config).name}.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    key = f"{task}/{config.steps}/{config.eval_prompts}/{config.max_new_tokens}"
    if key not in saved:
        trainer = runner.Trainer(config.replace(task=task, eval_samples=None,
                                                eval_sampled_prompts=None), progress=False)
        step, _ = trainer.load(grpo.run_dir(config) / runner.CHECKPOINT_FILE)
        if step != config.steps:
            raise RuntimeError(f"{grpo.run_dir(config)}: checkpoint at step {step}, not at "
                               f"{config.steps}; rerun it with steps={config.steps}")
        saved[key] = trainer.evaluate()[0]["eval_accuracy"]
        io.write_json(path, saved)
    return saved[key]


def run_job(config: grpo.GRPOConfig, extra_tasks: list[str]) -> dict[str, Any]:
    """One GRPO run (or its cached records), its per-problem evaluations, and its final
    policy's greedy pass@1 on each of `extra_tasks`."""
    records = grpo_runs.grpo_job(config)
    problems = pd.read_csv(grpo.run_dir(config) / runner.PROBLEMS_FILE)
    return dict(records=records, problems=problems,
                extra={task: extra_accuracy(config, task) for task in extra_tasks})


def _run_row(run: Run, result: dict[str, Any]) -> dict[str, Any]:
    records, problems = result["records"], result["problems"]
    train = records[records["step"] >= 1]
    last = int(train["step"].max())
    before, after = (problems[problems["step"] == s] for s in (0, last))
    return dict(model=run.model, method=run.method, lr=run.lr, seed=run.seed,
                greedy_before=before["greedy"].mean(), greedy=after["greedy"].mean(),
                sampled_before=before["sampled"].mean(), sampled=after["sampled"].mean(),
                final_kl=float(train["kl"].tail(FINAL_STEPS).mean()),
                state_bytes=float(train["state_bytes"].iloc[-1]),
                step_seconds=float(train["seconds"].median()), steps=last,
                **{f"{task} greedy": value for task, value in result["extra"].items()})


def _execute(cfg: Config, runs: list[Run], desc: str, progress: bool
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run `runs` (each with its model and lr), longest first; their rows and problems."""
    if not runs:
        return pd.DataFrame(), pd.DataFrame()
    size = {model: i + 1 for i, model in enumerate(cfg.models)}  # later models: larger
    runs = sorted(runs, key=lambda r: -METHODS[r.method].cost * size[r.model] ** 2)
    jobs = [(run_job, (grpo_config(cfg, run), list(cfg.extra_eval_tasks))) for run in runs]
    results = run_jobs(jobs, cfg.workers, desc, progress)
    rows = pd.DataFrame([_run_row(run, result) for run, result in zip(runs, results, strict=True)])
    problems = []
    for run, result in zip(runs, results, strict=True):
        frame = result["problems"]
        last = frame["step"].max()
        keys = dict(model=run.model, method=run.method, lr=run.lr, seed=run.seed)
        problems.append(frame[frame["step"] == last].assign(**keys))
        if run.method == REFERENCE:  # the policy before RL: the same in every run
            problems.append(frame[frame["step"] == 0].assign(**{**keys, "method": BASE,
                                                                "lr": np.nan}))
    return rows, pd.concat(problems, ignore_index=True).drop(columns="step")


def run(cfg: Config, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sweep, then the seeds at the chosen learning rates (module docstring): the `runs`
    and `problems` frames, every run of both stages once."""
    grpo_runs.prepare_inputs(cfg.results_dir, list(cfg.models),
                             list(dict.fromkeys([grpo_config(cfg, Run(
                                 model=cfg.models[0], method=REFERENCE, seed=0)).task,
                                                 *cfg.extra_eval_tasks])))
    if reads_chosen(cfg):
        rows, problems = pd.DataFrame(), pd.DataFrame()
        done = set()
    else:
        sweep = [Run(study="sweep", model=model, method=m, lr=lr, seed=cfg.sweep_seed)
                 for model in cfg.models for m in cfg.methods for lr in cfg.lr_grid[m]]
        rows, problems = _execute(cfg, sweep, f"{EXPERIMENT} (lr sweep)", progress)
        done = {cfg.sweep_seed}
    chosen = choose(rows, cfg)
    seeds = [Run(study="seeds", model=model, method=m, lr=lr, seed=s)
             for (model, m), lr in chosen["lr"].items() for s in cfg.seeds if s not in done]
    more_rows, more_problems = _execute(cfg, seeds, f"{EXPERIMENT} (seeds)", progress)
    rows = pd.concat([rows, more_rows], ignore_index=True)
    problems = pd.concat([problems, more_problems], ignore_index=True)
    base = problems["method"] == BASE  # one copy of the policy before RL per model
    problems = pd.concat([problems[~base], problems[base].drop_duplicates(["model", "problem"])
                          .assign(seed=-1)], ignore_index=True)
    order = {m: i for i, m in enumerate([BASE, *cfg.methods])}
    rows = rows.sort_values(["model", "method", "lr", "seed"], key=lambda c: c.map(order)
                            if c.name == "method" else c, kind="stable", ignore_index=True)
    return rows, problems


# ---------------------------------------------------------------- the sweep


def choose(runs: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per (model, method): the chosen lr of the sweep at `sweep_seed` (the highest sampled
    pass@1, ties broken by greedy), whether it is bracketed (grid ends excluded) and the grid's
    size."""
    rows = []
    if reads_chosen(cfg):
        return read_chosen(cfg)
    swept = runs[runs["seed"] == cfg.sweep_seed]
    for model in cfg.models:
        for method in cfg.methods:
            grid = sorted(cfg.lr_grid[method])
            points = swept[(swept["model"] == model) & (swept["method"] == method)
                           & swept["lr"].isin(grid)]
            best = points.sort_values(["sampled", "greedy"], ascending=False,
                                      kind="stable").iloc[0]
            rows.append(dict(model=model, method=method, lr=float(best["lr"]),
                             grid=len(grid), bracketed=grid[0] < best["lr"] < grid[-1]))
    return pd.DataFrame(rows).set_index(["model", "method"])


# the marks of `comparison_report.sweep_table`'s "lr choice" column
CHOICES = ("chosen", "chosen, at the grid's end", "not swept")


def read_chosen(cfg: Config) -> pd.DataFrame:
    """`choose`'s frame read from the sweep table at `chosen_lrs` (the columns of
    `comparison_report.sweep_table`): per (model, method) of `cfg` the lr marked in `CHOICES`,
    the size of its grid there and whether it was bracketed. Raises ValueError naming the file
    and every (model, method) it has no chosen lr for."""
    path = chosen_lrs_path(cfg)
    table = pd.read_csv(path)
    need = {"model", "method", "lr", "lr choice"}
    if not need <= set(table.columns):
        raise ValueError(f"chosen_lrs: {path} is not a sweep table (comparison_sweep.csv); it "
                         f"lacks columns {sorted(need - set(table.columns))}")
    rows, missing = [], []
    for model in cfg.models:
        for method in cfg.methods:
            mine = table[(table["model"] == model_name(model))
                         & (table["method"] == METHODS[method].label)]
            pick = mine[mine["lr choice"].isin(CHOICES)]
            if len(pick) != 1:
                missing.append(f"{model_name(model)}/{method}")
                continue
            if float(pick["lr"].iloc[0]) not in cfg.lr_grid[method]:
                raise ValueError(f"chosen_lrs: {path} chose lr {pick['lr'].iloc[0]:g} for "
                                 f"{method}, outside its lr_grid {cfg.lr_grid[method]}: the "
                                 f"table is another sweep's")
            rows.append(dict(model=model, method=method, lr=float(pick["lr"].iloc[0]),
                             grid=len(mine), bracketed=pick["lr choice"].iloc[0] == "chosen"))
    if missing:
        raise ValueError(f"chosen_lrs: {path} has no single chosen lr for {missing}; give a "
                         f"table that has them, or sweep (`--scale full`)")
    return pd.DataFrame(rows).set_index(["model", "method"])


def at_chosen(runs: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The runs at each method's chosen lr, every seed of `seeds`."""
    chosen = choose(runs, cfg)["lr"]
    keep = [chosen.get((m, meth)) == lr and s in cfg.seeds
            for m, meth, lr, s in zip(runs["model"], runs["method"], runs["lr"], runs["seed"],
                                      strict=True)]
    return runs[keep].reset_index(drop=True)


def trajectories(runs: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The step records (`records.csv`) of the runs at each method's chosen lr, tidy, with
    model, method, lr and seed columns (training steps only)."""
    frames = []
    for r in at_chosen(runs, cfg).itertuples():
        run = Run(model=r.model, method=r.method, seed=r.seed, lr=r.lr)
        directory = grpo.run_dir(grpo_config(cfg, run))
        records = pd.read_csv(directory / runner.RECORDS_FILE)
        frames.append(records[records["step"] >= 1].assign(model=r.model, method=r.method,
                                                            lr=r.lr, seed=r.seed))
    return pd.concat(frames, ignore_index=True)


def model_name(model: str) -> str:
    """A model's name in the tables: the last part of its path or hub id."""
    return Path(model).name
