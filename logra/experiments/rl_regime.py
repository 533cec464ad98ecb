"""Does GRPO learn here? Dense AdamW GRPO in the kit's RL regime, decided by paired tests.

Every RL comparison of the kit (notebooks 03, 04, 09) means something only where the reference,
dense AdamW GRPO, itself improves the policy beyond its noise. This experiment runs it in the
chosen regime (`experiments/rl_regime.yaml`: task, group size, prompts per step, lr, steps),
`seeds` times per task, and evaluates the policy before and after RL on the same held-out
problems (`logra.rl.evaluation`): greedy pass@1 on `eval_prompts` problems, sampled pass@1
(temperature 1, `eval_samples` completions each) on the first `eval_sampled_prompts`.

A run passes when both differences reach their thresholds (`min_sampled_gain`,
`min_greedy_gain` points) and both are significant in a paired per-problem test (`logra.stats`:
McNemar for greedy, paired t for sampled) at `alpha` after Holm's correction over every test
of the table. The regime passes on a task when every seed does.

Beside it: the policy-improvement probe of the policy before RL (`logra.rl.probe`): one batch's
gradient, and steps along it and along Adam's first step (its sign), each graded on paired fresh
completions; and TRL's GRPOTrainer on the same config (`logra.experiments.trl_check`), its
training reward against the kit's over the first `trl_steps` steps of `trl_seeds`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import matplotlib.pyplot as plt
import pandas as pd
from pydantic import Field

from logra import io
from logra.config import typed
from logra.experiments import grpo_runs, trl_check
from logra.experiments.jobs import run_jobs
from logra.experiments.plots import line_with_band
from logra.experiments.typed import (
    Count,
    Level,
    Method,
    Positive,
    Task,
)
from logra.rl import config as grpo
from logra.rl import runner
from logra.rl.probe import COLUMNS as PROBE_COLUMNS
from logra.rl.probe import NoRewardSpread, improvement_probe
from logra.stats import holm, mcnemar, paired_t

EXPERIMENT = "rl_regime"
NOTEBOOK = "11_rl_regime"


@typed
class Config(grpo_runs.GRPOExperiment):
    """experiments/rl_regime.yaml's keys (its comments say what each holds):
    those of every RL experiment, and its own."""

    EXPERIMENT: ClassVar[str] = "rl_regime"
    method: Method
    tasks: Annotated[list[Task], Field(min_length=1)]
    model: str
    lr: Positive
    min_sampled_gain: float
    min_greedy_gain: float
    alpha: Level
    smooth_steps: Count
    probe_prompts: Count
    probe_fresh: Count
    probe_norms: Annotated[list[float], Field(min_length=1)]
    trl_seeds: list[int]
    trl_steps: Count


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/rl_regime.yaml at `scale`, with the overrides that are not None on top,
    checked."""
    return Config.load(scale, **{k: v for k, v in overrides.items() if v is not None})


def grpo_config(cfg: Config, task: str, seed: int) -> grpo.GRPOConfig:
    """The resolved GRPO config of the run on `task` at `seed`: evaluated before and after."""
    return grpo_runs.grpo_config(cfg, grpo_runs.Run(method=cfg.method, seed=seed, task=task,
                                                    eval_every=cfg.steps))


def run(cfg: Config, progress: bool = True) -> pd.DataFrame:
    """Every (task, seed) run (cached runs are read back): their step records, tidy, with
    `task` and `seed` columns."""
    configs = [(task, seed, grpo_config(cfg, task, seed))
               for task in cfg.tasks for seed in cfg.seeds]
    grpo_runs.prepare_inputs(cfg.results_dir, [configs[0][2].model], list(cfg.tasks))
    results = run_jobs([(grpo_runs.grpo_job, (c,)) for _, _, c in configs], cfg.workers,
                       EXPERIMENT, progress=progress)
    return pd.concat([records.assign(task=task, seed=seed)
                      for (task, seed, _), records in zip(configs, results, strict=True)],
                     ignore_index=True)


def problems(cfg: Config) -> pd.DataFrame:
    """Every run's per-problem evaluations (`runner.PROBLEMS_FILE`) with task and seed."""
    frames = []
    for task in cfg.tasks:
        for seed in cfg.seeds:
            directory = grpo.run_dir(grpo_config(cfg, task, seed))
            frames.append(pd.read_csv(directory / runner.PROBLEMS_FILE)
                          .assign(task=task, seed=seed))
    return pd.concat(frames, ignore_index=True)


def learning_table(evaluated: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per task and seed: greedy and sampled pass@1 before and after RL (%), their paired
    differences with Holm-adjusted p-values over the whole table, and whether the run passes."""
    rows = []
    for (task, seed), runs in evaluated.groupby(["task", "seed"], sort=False):
        before = runs[runs["step"] == 0].set_index("problem")
        after = runs[runs["step"] == runs["step"].max()].set_index("problem").loc[before.index]
        sampled = before["sampled"].notna() & after["sampled"].notna()
        greedy = mcnemar(before["greedy"], after["greedy"])
        drawn = paired_t(before.loc[sampled, "sampled"], after.loc[sampled, "sampled"])
        rows.append(dict(task=task, seed=seed, steps=int(runs["step"].max()),
                         greedy_problems=greedy.n, greedy_before=100 * greedy.a,
                         greedy_after=100 * greedy.b, greedy_gain=100 * greedy.difference,
                         greedy_p=greedy.p, sampled_problems=drawn.n,
                         sampled_before=100 * drawn.a, sampled_after=100 * drawn.b,
                         sampled_gain=100 * drawn.difference, sampled_p=drawn.p))
    table = pd.DataFrame(rows)
    adjusted = holm([*table["greedy_p"], *table["sampled_p"]])
    table["greedy_p_holm"] = adjusted[:len(table)]
    table["sampled_p_holm"] = adjusted[len(table):]
    table["passes"] = ((table["greedy_gain"] >= cfg.min_greedy_gain)
                       & (table["greedy_p_holm"] < cfg.alpha)
                       & (table["sampled_gain"] >= cfg.min_sampled_gain)
                       & (table["sampled_p_holm"] < cfg.alpha))
    return table


def verdict(table: pd.DataFrame, cfg: Config) -> str:
    """One sentence per task: whether every seed passes, with the range of the gains."""
    parts = []
    for task, rows in table.groupby("task", sort=False):
        gains = (f"greedy {rows['greedy_gain'].min():+.1f} to {rows['greedy_gain'].max():+.1f}, "
                 f"sampled {rows['sampled_gain'].min():+.1f} to "
                 f"{rows['sampled_gain'].max():+.1f} points")
        passed = int(rows["passes"].sum())
        outcome = ("learns" if passed == len(rows)
                   else f"does not learn ({passed}/{len(rows)} seeds)")
        parts.append(f"{task}: dense AdamW GRPO {outcome} by the rule (sampled ≥ "
                     f"+{cfg.min_sampled_gain:g}, greedy ≥ +{cfg.min_greedy_gain:g} points, "
                     f"each Holm p < {cfg.alpha:g}); {gains} over {rows['steps'].iloc[0]} "
                     "steps.")
    return " ".join(parts)


def probe(cfg: Config) -> pd.DataFrame:
    """The policy-improvement probe of the policy before RL on the first task's training
    prompts (`logra.rl.probe.improvement_probe`), cached in the results directory; no rows
    when the batch has no reward spread (nothing to step along)."""
    config = grpo_config(cfg, cfg.tasks[0], cfg.seeds[0])
    path = grpo.data_dir(config).parent / "probes" / f"{EXPERIMENT}-{grpo.config_hash(config)}.csv"
    if path.exists():
        return pd.read_csv(path)
    trainer = runner.Trainer(config, progress=False)
    rows = trainer.train_prompts.select(range(cfg.probe_prompts))
    try:
        table = improvement_probe(trainer.policy, trainer.tokenizer, list(rows["prompt"]),
                                  list(rows["gold"]), group_size=config.group_size,
                                  fresh=cfg.probe_fresh,
                                  max_new_tokens=config.max_new_tokens,
                                  norms=cfg.probe_norms)
    except NoRewardSpread:  # a policy that solves nothing (the smoke scale): no direction
        table = pd.DataFrame(columns=list(PROBE_COLUMNS))
    io.write_frame(path, table)
    return table


def trl_runs(cfg: Config, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The kit's and TRL's training reward per step and seed on the first task, over the first
    `trl_steps` steps of the seeds `trl_seeds` (the kit's from its runs' records, TRL's from
    `trl_check.trl_run`, cached as CSV in the results directory)."""
    configs = {seed: grpo_config(cfg, cfg.tasks[0], seed).replace(steps=cfg.trl_steps)
               for seed in cfg.trl_seeds}
    paths = {seed: grpo.data_dir(c).parent / "trl" / f"{EXPERIMENT}-{grpo.config_hash(c)}-"
             f"{c.steps}.csv" for seed, c in configs.items()}
    missing = [seed for seed, path in paths.items() if not path.exists()]
    frames = run_jobs([(trl_check.trl_run, (configs[seed],)) for seed in missing], cfg.workers,
                      f"{EXPERIMENT} (TRL)", progress=progress)
    for seed, frame in zip(missing, frames, strict=True):
        io.write_frame(paths[seed], frame)
    theirs = pd.concat([pd.read_csv(paths[seed]).assign(seed=seed) for seed in configs],
                       ignore_index=True)
    ours = pd.concat([grpo_runs.grpo_job(c).assign(seed=seed) for seed, c in configs.items()],
                     ignore_index=True)
    return ours[ours["step"] <= cfg.trl_steps], theirs


def plot_trl(ours: pd.DataFrame, theirs: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Training reward per step, the kit's GRPO and TRL's, rolling means over `smooth_steps`
    (lines: mean over seeds; bands: lowest to highest seed)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
    smooth = trl_check.curves(ours, theirs, cfg.smooth_steps)
    for source, color in (("kit", "black"), ("TRL", "tab:orange")):
        line_with_band(ax, smooth[smooth["source"] == source], "step", "reward", color=color,
                       lw=1.3, label=f"{source} ({len(cfg.trl_seeds)} seeds)")
    ax.set(xlabel="GRPO step", ylabel="training reward (rolling mean)",
           title=f"The kit's GRPO and TRL's GRPOTrainer: {cfg.tasks[0]}, the same config")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_training(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Per task (rows): training reward (rolling mean over `smooth_steps`), the share of groups
    with no reward spread and with a correct completion, completion length, and KL(π_θ ‖ π_ref);
    lines are means over seeds, bands the lowest to the highest seed."""
    panels = (("reward", "training reward (rolling mean)"),
              ("zero_std_groups", "groups without reward spread"),
              ("solved_groups", "groups with a correct completion"),
              ("completion_tokens", "completion length (tokens)"),
              ("kl", "KL(π_θ ‖ π_ref) per token"))
    tasks = list(cfg.tasks)
    fig, axes = plt.subplots(len(tasks), len(panels), figsize=(3.4 * len(panels), 3 * len(tasks)),
                             squeeze=False, layout="constrained")
    steps = frame[frame["step"] > 0]
    for row, task in enumerate(tasks):
        runs = steps[steps["task"] == task].sort_values(["seed", "step"])
        for col, (column, title) in enumerate(panels):
            smoothed = runs.assign(**{column: runs.groupby("seed")[column].transform(
                lambda s: s.rolling(cfg.smooth_steps, min_periods=1).mean())})
            ax = axes[row, col]
            line_with_band(ax, smoothed, "step", column, color="black", lw=1.3)
            ax.set(title=f"{task}: {title}" if col == 0 else title, xlabel="GRPO step")
            ax.grid(alpha=0.3)
    fig.suptitle(f"Dense AdamW GRPO, {len(cfg.seeds)} seeds (rolling means over "
                 f"{cfg.smooth_steps} steps; band: lowest to highest seed)", fontsize=10)
    return fig


def plot_probe(table: pd.DataFrame) -> plt.Figure:
    """Paired reward change against step norm, along the gradient and along Adam's first step."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    if table.empty:
        ax.text(0.5, 0.5, "no reward spread in the probe's batch:\nno direction to step along",
                ha="center", va="center", transform=ax.transAxes)
    for direction, color, label in (("gradient", "tab:blue", "along the GRPO gradient"),
                                    ("adam", "tab:red", "along Adam's first step (sign)")):
        rows = table[table["direction"] == direction].sort_values("norm")
        ax.errorbar(rows["norm"], rows["change"], yerr=2 * rows["stderr"], color=color,
                    marker="o", capsize=3, label=label)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="step norm (negative: the opposite way)",
           ylabel="paired change of mean reward (± 2 s.e.)",
           title="One step from the policy before RL")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
