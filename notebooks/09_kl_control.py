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
# # 09 · What the predicted-KL control buys where GRPO learns
#
# LoGRA scales every step by γ = min(1, √(δ / KL̂)), KL̂ the predicted KL(π_before ‖ π_after)
# of the step in nats per token. A control that keeps the policy near the reference is worth
# something only if it keeps more reward per nat of drift than the obvious alternative, a
# smaller learning rate. So this notebook draws held-out pass@1 against the final
# KL(π_θ ‖ π_ref), one point per run, as the RLHF literature draws reward against KL (Gao et
# al. 2022; the DPO paper's Fig. 2), in the regime of notebook 11 where dense AdamW GRPO learns
# (proxy-1m, gsm-synth, 8 prompts × 16 samples, 100 steps; the runs with notebook 04's settings
# are notebook 04's runs):
#
# * **frontier**: each method's runs without the control, one per lr, are its **lr cut**; each
#   controlled run is set against the lr cut at the same KL (interpolated in log KL) and, by
#   paired per-problem tests, against the lr-cut run nearest in KL and the uncontrolled run at
#   its own lr;
# * **stress** at the largest lr: does the naive projection run away (C5), does the control
#   prevent a runaway (C6)?
# * **bands**: the points the verdict turns on, again at three seeds;
# * **naive sweep**: the naive projection at its own learning rates, up to where it learns and
#   beyond, so that C5 is read where its steps move the policy;
# * **drift budget** (beyond the report): a bound on KL(π_θ ‖ π_ref) against GRPO's β·KL
#   penalty, fixed and adaptive, at the stress lr where each of them binds;
# * **cost**: seconds per step with and without the control.
#
# All logic lives in `logra.experiments.kl_control` (the runs) and `kl_control_report` (tables,
# figures, claims).

# %%
# %matplotlib inline
import time

from logra import paths
from logra.experiments import grpo_runs, report
from logra.experiments import kl_control as kc
from logra.experiments import kl_control_report as kcr
from logra.experiments.jobs import worker_count

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
seeds = None  # e.g. [0, 1, 2]; None: the scale's
steps = None  # GRPO steps per run; None: the scale's
results_dir = None  # where runs are cached; None: the scale's (results/)
studies = None  # which parts run, of "frontier", "bands", "naive_sweep", "budget", "cost";
# None: the scale's

# %%
figures_dir = figures_dir or paths.figures_dir(scale, results_dir)
cfg = kc.config(scale, seeds=seeds, steps=steps, results_dir=results_dir, studies=studies)
runs = kc.plan(cfg)
print(f"scale {scale!r}, studies {cfg.studies}: {len(runs)} runs")
if runs:
    example = kc.grpo_config(cfg, runs[0])
    print(f"{example.model}, {example.prompts_per_step} prompts × {example.group_size} samples "
          f"per step, greedy pass@1 on {cfg.eval_prompts:,} held-out problems, "
          f"{worker_count(cfg.workers)} worker(s)")
    print("one of the runs:", grpo_runs.command(example))
    start = time.perf_counter()
    frame, problems = kc.run(cfg)
    print(f"{len(frame):,} step records in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 1 · The frontier: held-out pass@1 against the drift from the reference
#
# Circles joined by a line: a method without the control, one run per lr (larger lr, more
# drift). Other markers: the controlled runs, one marker per δ, each with an arrow from the
# same lr without the control. A controlled point above its family's line keeps more pass@1 at
# the same KL than the lr cut; below it, less.

# %%
if "frontier" in cfg.studies:
    report.show_figure(kcr.plot_frontier(frame, problems, cfg), "kl_control_frontier",
                       figures_dir)
    report.show_table(kcr.frontier_table(frame, problems, cfg), "kl_control_frontier",
                      figures_dir)

# %% [markdown]
# The lr-matched baseline, per controlled point and measure: the lr cut's pass@1 at the same
# final KL ("NaN" where the KL lies outside the cut's range: no extrapolation), and paired
# per-problem tests against the lr-cut run nearest in KL and the uncontrolled run at the same
# lr (Holm's correction over the table; significant where p < `alpha`).

# %%
if "frontier" in cfg.studies:
    report.show_table(kcr.lr_matched_table(frame, problems, cfg), "kl_control_lr_matched",
                      figures_dir)

# %% [markdown]
# ## 2 · Stress: the largest learning rate

# %%
if "frontier" in cfg.studies:
    report.show_figure(kcr.plot_runs(frame, cfg), "kl_control_stress", figures_dir)
    report.show_table(kcr.stress_table(frame, problems, cfg), "kl_control_stress", figures_dir)

# %% [markdown]
# ## 3 · Seed bands where the verdict turns
#
# The frontier is one seed per point. The points the verdict above turns on (`band_points`: the
# best controlled point, its lr without the control, and the lr cut around it in KL) again at
# every seed of `band_seeds`: the same tables on seed means, bars over the seeds' range, paired
# tests on per-problem means over seeds, and C6 on all seeds. Seed 0 is the frontier's run.

# %%
if "bands" in cfg.studies:
    report.show_figure(kcr.plot_frontier(frame, problems, cfg, study="bands"),
                       "kl_control_bands", figures_dir)
    report.show_table(kcr.bands_table(frame, problems, cfg), "kl_control_bands", figures_dir)
    report.show_table(kcr.lr_matched_table(frame, problems, cfg, study="bands"),
                      "kl_control_bands_lr_matched", figures_dir)
    report.show_claims(kcr.bands_claims(frame, problems, cfg), "kl_control_bands", figures_dir)

# %% [markdown]
# ## 4 · The naive projection at its own learning rates
#
# At the stress lr the naive projection's median step KL is about 190× smaller than LoGRA's and
# its greedy pass@1 ends where it started (its sampled pass@1 gains 4 points): that it does not
# run away there is weak evidence on C5. So its lr is raised (`naive_lrs`, at `seeds`) past the
# point where it learns, and C5 is read at its best lr, the one with the highest held-out
# sampled pass@1 (greedy where sampled is not measured): does its KL to the reference run away
# there within the claim's window? The verdict is undecided where the sweep is no test: the
# best lr at an end of the sweep, or no significant rise at it. The paired columns test each
# lr's gain over the policy before RL (two-sided, Holm's correction over the table).

# %%
if "naive_sweep" in cfg.studies:
    report.show_figure(kcr.plot_naive_sweep(frame, problems, cfg), "kl_control_naive_sweep",
                       figures_dir)
    report.show_table(kcr.naive_sweep_table(frame, problems, cfg), "kl_control_naive_sweep",
                      figures_dir)
    report.show_claims(kcr.naive_sweep_claims(frame, problems, cfg), "kl_control_naive_sweep",
                       figures_dir)

# %% [markdown]
# ## 5 · A budget on the drift from the reference, against the soft controls
#
# LoGRA without a per-step δ in every run; only the control of the drift differs. The budget is
# enforced on the KL measured on each step's sampled batch before the step (the largest of the
# last few), or fed by the **drift probe** (the KL to the reference on the same held-out
# completions' seeds every few steps, the dots: its changes are the policy's, not the draw's).
# LoGRA at lr 1e-3, where without control it drifts to ~0.09 nats and loses greedy pass@1 (the
# stress point above), so each control binds; each aims at ~0.03 nats, the final KL of the lr
# cut at 3e-4 and of δ = 0.005 at 1e-3 in the frontier, so all can be read at one KL. The
# paired columns compare each setting with "no control", problem by problem. The default runs
# three seeds; `--scale full` adds the probe-fed budget, `--scale small-batch` runs the earlier
# regime.

# %%
if "budget" in cfg.studies and cfg.budget_runs:
    report.show_figure(kcr.plot_budget(frame, problems, cfg), "kl_control_budget", figures_dir)
    report.show_table(kcr.budget_table(frame, problems, cfg), "kl_control_budget", figures_dir)

# %% [markdown]
# ## 6 · What the control costs
#
# Seconds per GRPO step (sampling, update, measurements) of dense AdamW, LoGRA without control,
# LoGRA with the default estimate (a JVP probe on 1 in 4 sequences of the batch, every step) and
# with the probe on the whole batch, timed in turns in one process on one thread at the runs' batch.

# %%
if "cost" in cfg.studies:
    report.show_table(kc.control_cost(cfg), "kl_control_cost", figures_dir)

# %% [markdown]
# ## Claims at proxy scale
#
# Rules (`kl_control_report.c5_stress_claim` and `c6_stress_claim`; thresholds in
# experiments/kl_control.yaml):
# **C5** — a naive-projection seed runs away when its smoothed KL to the reference exceeds
# `runaway_kl` within the claim's window, and counts only if uncontrolled dense AdamW has not run
# away as early. **C6** — the control prevents a runaway when the uncontrolled run exceeds
# `runaway_kl`, the controlled one never does, and its greedy pass@1 is no lower. **C5 (naive
# lr sweep, section 4; `c5_sweep_claim`)** — every seed at the naive projection's best lr runs
# away within the window; no dense comparator there, since each method is read at its own best
# lr (the frontier shows dense AdamW's and LoGRA's); undecided when that lr is at an end of the
# sweep or its gain is not a significant rise.

# %%
if "frontier" in cfg.studies:
    print({k: cfg[k] for k in ("smooth_steps", "final_steps", "runaway_kl", "c5_window",
                               "c6_factor")})
    report.show_claims(kcr.claims(frame, problems, cfg), "kl_control", figures_dir)
