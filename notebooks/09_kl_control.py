# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · The predicted-KL control where it acts
#
# LoGRA scales every step by γ = min(1, √(δ / KL̂)), KL̂ the predicted KL(π_before ‖ π_after)
# of the step in nats per token. On the proxies a GRPO step moves the policy by 10⁻⁴–10⁻³
# nats/token, so the report's δ = 0.02 never binds (notebook 03) and says nothing about the
# mechanism. This notebook chooses δ where it acts:
#
# * **δ sweep** at the default learning rate: LoGRA and dense AdamW with the same control
#   (LoGRA with `sketch=False`), for each δ, over seeds. How often does the control cut, and
#   what does it cost or buy in KL to the reference and in held-out accuracy?
# * **stress test** at a learning rate where dense AdamW's KL runs away: does the control
#   prevent the runaway, for AdamW and for LoGRA, and does the naive random projection run away
#   (the proxy analogue of claims C5 and C6)?
# * **drift budget** (beyond the report): a per-step δ bounds each step, not the drift from the
#   reference. A budget B on KL(π_θ ‖ π_ref) shrinks each step's budget to (√B − √K)² as the
#   measured drift K nears B; it is compared with GRPO's β·KL penalty, fixed and steered by
#   Ziegler et al.'s adaptive controller (as in TRL and verl).
#
# KL̂ comes from the default `kl_estimator="calibrated"` (the diagonal estimate refitted to nats
# by an exact JVP probe every few steps; notebook 03 measures how well it predicts).
# All logic lives in `logra.experiments.kl_control`.

# %%
# %matplotlib inline
import time

from logra import paths
from logra.experiments import kl_control as kc
from logra.experiments import report
from logra.experiments.jobs import worker_count

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
seeds = None  # e.g. [0, 1, 2]; None: the scale's
steps = None  # GRPO steps per run; None: the scale's
results_dir = None  # where runs are cached; None: the scale's (results/)

# %%
figures_dir = figures_dir or paths.figures_dir(scale, results_dir)
cfg = kc.config(scale, seeds=seeds, steps=steps, results_dir=results_dir)
runs = kc.plan(cfg)
example = kc.grpo_config(cfg, runs[0])
print(f"scale {scale!r}: {len(runs)} runs of {cfg['steps']} steps on {example['model']} "
      f"({example['prompts_per_step']} prompts × {example['group_size']} samples per step), "
      f"accuracy on {cfg['eval_prompts']:,} held-out problems, "
      f"{worker_count(cfg['workers'])} worker(s)")
start = time.perf_counter()
frame = kc.run(cfg)
print(f"{len(frame):,} step records in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 1 · The δ sweep: drift from the reference against accuracy
#
# Each point is one (optimizer, δ) at the seed mean, with bars over the seeds; "off" is the same
# optimizer without the control. Right: the share of steps on which γ < 1.

# %%
report.show_figure(kc.plot_tradeoff(frame, cfg), "kl_control_tradeoff", figures_dir)
report.show_table(kc.sweep_table(frame, cfg), "kl_control_sweep", figures_dir)

# %%
report.show_figure(kc.FIGURES["kl_control_sweep"](frame, cfg), "kl_control_sweep", figures_dir)

# %% [markdown]
# ## 2 · Stress: a learning rate at which the uncontrolled policy runs away

# %%
report.show_figure(kc.FIGURES["kl_control_stress"](frame, cfg), "kl_control_stress", figures_dir)
report.show_table(kc.stress_table(frame, cfg), "kl_control_stress", figures_dir)

# %% [markdown]
# ## 3 · A budget on the drift from the reference, against the soft controls
#
# LoGRA without a per-step δ in every run; only the control of the drift differs. The budget is
# enforced on the KL measured on each step's sampled batch before the step (the largest of the
# last few). A batch's KL is B fresh completions, so it spreads from batch to batch even while
# the policy stands still; whether the budget holds is judged on the **drift probe**: the KL to
# the reference on the same held-out completions' seeds every few steps (the dots), whose
# changes are the policy's, not the draw's. "B on the probe" feeds the controller the probe
# itself, plus the KL each step since applied (`kl_drift_source: probe`).

# %%
report.show_figure(kc.plot_budget(frame, cfg), "kl_control_budget", figures_dir)
report.show_table(kc.budget_table(frame, cfg), "kl_control_budget", figures_dir)

# %% [markdown]
# ## 4 · What the control costs
#
# Seconds per GRPO step (sampling, update, measurements) of dense AdamW, LoGRA without control,
# LoGRA with the default estimate (an exact JVP probe on every 4th sequence) and with the probe
# on the whole batch, timed in turns in one process on one thread, at the batch of the runs
# above and at experiments/grpo.yaml's 8 × 8.

# %%
report.show_table(kc.control_cost(cfg), "kl_control_cost", figures_dir)

# %% [markdown]
# ## Claims at proxy scale
#
# Rules (`kc.c5_stress_claim`, `kc.c6_stress_claim`; thresholds in experiments/kl_control.yaml):
# **C5** — a naive-projection seed runs away when its smoothed KL to the reference exceeds
# `runaway_kl` within the claim's window, and counts only if uncontrolled dense AdamW has not run
# away as early. **C6** — the control prevents a runaway when the uncontrolled run exceeds
# `runaway_kl`, the controlled one never does, and its accuracy is no lower.

# %%
print({k: cfg[k] for k in ("smooth_steps", "final_steps", "runaway_kl", "c5_window", "c6_factor")})
report.show_claims(kc.claims(frame, cfg), "kl_control", figures_dir)
