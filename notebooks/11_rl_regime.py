# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Does GRPO learn here? The regime every RL comparison runs in
#
# A comparison of optimizers under RL means something only where RL itself pays: dense AdamW
# GRPO, the reference, must raise held-out accuracy well beyond its noise. This notebook runs it
# in the kit's RL regime (experiments/rl_regime.yaml) on each task and seed, and evaluates the
# policy before and after on the same held-out problems: **greedy pass@1** on many problems and
# **sampled pass@1** (temperature 1, several completions per problem), which shows RL's effect
# first. Differences are decided by paired per-problem tests (McNemar for greedy, paired t for
# sampled) with Holm's correction over the whole table. All logic lives in
# `logra.experiments.rl_regime`; the runs are `logra.rl` GRPO runs, cached and resumed.

# %%
# %matplotlib inline
import time

from logra import paths
from logra.experiments import grpo_runs, report
from logra.experiments import rl_regime as rr
from logra.experiments.jobs import worker_count

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
seeds = None  # e.g. [0, 1, 2]; None: the scale's
steps = None  # GRPO steps per run; None: the scale's
results_dir = None  # where runs are cached; None: the scale's (results/)

# %%
figures_dir = figures_dir or paths.figures_dir(scale, results_dir)
overrides = {k: v for k, v in dict(seeds=seeds, steps=steps, results_dir=results_dir).items()
             if v is not None}
cfg = rr.config(scale, **overrides)
example = rr.grpo_config(cfg, cfg.tasks[0], cfg.seeds[0])
print(f"scale {scale!r}: {len(cfg.tasks)} task(s) × {len(cfg.seeds)} seeds × "
      f"{cfg.steps} steps of {cfg.method} GRPO on {example.model} "
      f"({example.prompts_per_step} prompts × {example.group_size} samples per step, "
      f"lr {example.lr:g}), {worker_count(cfg.workers)} worker(s)")
print("one of the runs:", grpo_runs.command(example))
start = time.perf_counter()
frame = rr.run(cfg)
print(f"{len(frame):,} step records in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 1 · Before and after RL, problem by problem
#
# One row per task and seed. Gains are in points; p-values are paired per-problem tests,
# adjusted by Holm over every test of the table. A run passes when sampled pass@1 rises by at
# least `min_sampled_gain` and greedy pass@1 by at least `min_greedy_gain` points, each
# significant at `alpha`.

# %%
table = rr.learning_table(rr.problems(cfg), cfg)
report.show_table(table, "rl_regime", figures_dir)
print(rr.verdict(table, cfg))

# %% [markdown]
# ## 2 · How the runs train
#
# The training reward (the sampled completions of each step's prompts), the share of groups
# whose completions all got the same reward (no learning signal), the share with at least one
# correct completion (pass@G of the step's prompts: what a group can learn from), completion
# length, and the exact KL to the reference.

# %%
report.show_figure(rr.plot_training(frame, cfg), "rl_regime_training", figures_dir)

# %% [markdown]
# ## 3 · The policy-improvement probe
#
# From the policy before RL: one GRPO batch's gradient, then a single step of each norm along
# it, and along the direction of Adam's first step (the gradient's sign, which every coordinate
# follows with the same magnitude), each graded on fresh completions drawn with the same seeds
# before and after (paired). A harness with a wrong sign fails the first; the second shows what
# a normalized optimizer makes of one noisy batch.

# %%
probe = rr.probe(cfg)
report.show_table(probe, "rl_regime_probe", figures_dir)
report.show_figure(rr.plot_probe(probe), "rl_regime_probe", figures_dir)

# %% [markdown]
# ## 4 · The kit's GRPO against TRL's
#
# TRL's `GRPOTrainer` on the same policy, task, grader, group size, batch and learning rate, set
# to the kit's algorithm and optimizer (token-level loss, group advantages, no KL penalty, one
# update per batch; constant lr, no gradient clipping, fp32: `logra.experiments.trl_check`).
# Their random streams differ (prompt order, sampling noise), so the curves are compared over
# seeds, block by block: do the seed ranges meet?

# %%
ours, theirs = rr.trl_runs(cfg)
report.show_figure(rr.plot_trl(ours, theirs, cfg), "rl_regime_trl", figures_dir)
report.show_table(rr.trl_check.agreement(ours, theirs, block=max(1, cfg.trl_steps // 5)),
                  "rl_regime_trl", figures_dir)
