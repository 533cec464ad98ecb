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
# # 03 · KL trajectories: does compression make the policy run away from the reference?
#
# The report says that compressing Adam's moments by a *naive* random projection makes
# KL(π_θ ‖ π_ref) explode within 50–100 GRPO steps (claim C5), and that LoGRA's predicted-KL
# step control prevents this, its KL curves matching dense Adam's over 1,100 steps (C6).
#
# Here every optimizer runs the same GRPO loop (`logra.rl`: the same prompts, samples and
# rewards per seed and step) from the same warmed-up proxy policy, in the regime of notebook 11
# where dense AdamW GRPO learns (proxy-1m, gsm-synth, 8 prompts × 16 samples, 100 steps), and we
# log the exact mean per-token KL(π_θ ‖ π_ref) from full softmaxes at every step:
#
# | method | what it is | lr |
# |---|---|---|
# | dense AdamW | `torch.optim.AdamW`, no control | 1e-4, its best in notebook 04's sweep |
# | LoGRA gain + KL control | the default LoGRA: gain reconstruction, δ = 0.02 | 3e-4, its best |
# | LoGRA gain, no control | the sketches alone | 3e-4 |
# | naive random projection | one-sided fixed random P, Adam in the projected space | 3e-4 |
#
# The last three differ only in the update rule. The `full` scale adds dense AdamW + KL control
# (LoGRA with `sketch=False`: AdamW's update and the control) and LoGRA Nyström (the literal
# "pseudo-inverse coupling" reading), over 3 seeds. The runs with notebook 04's method, lr and
# seed are notebook 04's runs (one cache).
#
# The control scales the whole step by γ = min(1, √(δ / KL̂)) with KL̂ = ½ΔᵀFΔ. The second
# part sets the estimates of KL̂ (the default's JVP probe on a subsample of the batch, the free
# diagonal one, the JVP on the whole batch) against the KL each step actually caused. All
# logic lives in `logra.experiments.kl_trajectories` (the runs; the methods are
# `logra.experiments.grpo_runs`') and `kl_trajectories_report` (tables, figures, claims).

# %%
# %matplotlib inline
import time

from logra import paths
from logra.experiments import grpo_runs, report
from logra.experiments import kl_trajectories as kt
from logra.experiments import kl_trajectories_report as ktr
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
cfg = kt.config(scale, **overrides)
example = kt.grpo_config(cfg, "logra", cfg.seeds[0])
print(f"scale {scale!r}: {len(cfg.methods)} methods × {len(cfg.seeds)} seeds × "
      f"{cfg.steps} steps on {example.model} ({example.prompts_per_step} prompts × "
      f"{example.group_size} samples per step, lr {example.lr:g}), "
      f"{worker_count(cfg.workers)} worker(s)")
print("one of the runs:", grpo_runs.command(example))
start = time.perf_counter()
frame = kt.run(cfg)
print(f"{len(frame):,} step records in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 1 · KL to the reference, step by step
#
# Top left is the quantity of the claims. Top right is the KL of each update alone (the
# controlled methods keep it near or under δ, dotted); bottom left is the control's step scale γ
# (1: the step was not cut); bottom right the training reward. Lines are means over seeds, bands
# run from the lowest to the highest seed.

# %%
report.show_plot(ktr.FIGURES, "kl_trajectories", frame, cfg, figures_dir)
report.show_table(ktr.trajectory_table(frame, cfg), "kl_trajectories", figures_dir)
print(ktr.summary(frame, cfg))

# %% [markdown]
# How to read it:
# * A dashed curve lying on a solid one of a related colour (dense AdamW ± control, LoGRA gain ±
#   control) means the control never changed that run's steps: it acts only when a step's
#   predicted KL exceeds δ (the dotted line, top right), and the line above says how often γ < 1.
#   Where it does not act, what separates the curves is the update rule, not the control.
# * The KL to the reference is the accumulated drift; a step's own KL can be large while the
#   drift stays small (steps in directions that do not add up), and the reverse.
# * The naive projection keeps only a random r-dimensional subspace of one side of every
#   gradient: its steps are far smaller than Adam's at the same learning rate.
# * The `high-lr` scale of this notebook (every method at lr 1e-3, notebook 09's stress runs;
#   `logra-repro reproduce --scale high-lr --only 03_kl_trajectories`) is the same experiment
#   where the steps are largest.

# %% [markdown]
# ## 2 · Calibration: predicted against measured KL of each step
#
# A separate LoGRA run (gain, at a smaller batch of 2 prompts × 4 samples and lr 1e-4, since
# every step is also probed by the JVP on the whole batch; `calibration_keys`) predicts the KL
# of every step with the **default estimate** (`kl_estimator="calibrated"`) but never clips.
# With its defaults (`kl_probe_every=1`, `kl_probe_stride=4`) it probes every step: the JVP
# quadratic ½·ΔᵀFΔ at the pre-step weights on 1 in 4 sequences of the batch (2 of the 8 at
# the default scale), and that probe is the step's prediction. The free diagonal estimate
# ½·Δᵀdiag(V̂)Δ, times a factor refitted from the probes, predicts only the steps without a
# probe: none in this run (the table's second row), more at a longer `kl_probe_every` (the
# replay below). Each
# step is also probed by the **JVP on the whole batch**, and every prediction is set against the
# KL(π_before ‖ π_after) measured on the step's batch after the step. δ means nats per token per
# step only if the first panel's points lie on the diagonal; the second shows why the raw
# diagonal estimate cannot be used alone.

# %%
report.show_plot(ktr.FIGURES, "kl_calibration", frame, cfg, figures_dir)
calibration = ktr.calibration_table(frame)
report.show_table(calibration, "kl_calibration", figures_dir)
print(f"raw diagonal estimate: measured/predicted c = {ktr.diagonal_calibration(frame):.3g}")

# %% [markdown]
# The same run replayed offline for other probe intervals and windows of the calibration, with
# either probe (the default's subsample, or the whole batch), and for a trainer that reports each
# step's measured KL instead (`optimizer.observe_kl(kl)`): the evidence for probing every step,
# the default. The window (`kl_calibration_window`, 8) acts only on the steps without a probe.
# "probes per step" counts forward-mode passes over what is probed: the default's cost a quarter
# of the whole batch's.

# %%
report.show_table(ktr.schedule_table(frame), "kl_calibration_schedule", figures_dir)

# %% [markdown]
# ## Claims
#
# Rules (in `kl_trajectories_report.c5_claim` and `c6_claim`; thresholds from
# experiments/kl_trajectories.yaml, printed below): **C5** — a naive-projection seed explodes when
# its KL (rolling mean) within the claim's window exceeds both `c5_factor` × dense AdamW's highest
# peak and `c5_min_kl` nats/token; every seed: reproduced, some: partly, none: not reproduced.
# **C6** — controlled LoGRA's final KL (mean of the last `final_steps` steps, mean over seeds)
# inside dense AdamW's seed band: reproduced; within a factor `c6_factor` of it: partly. The
# report's 1,100 steps need a GPU: the last row says how to run them.

# %%
print({k: cfg[k] for k in ("smooth_steps", "c5_window", "c5_factor", "c5_min_kl", "final_steps",
                           "c6_factor")})
report.show_claims(ktr.claims(frame, cfg), "kl_trajectories", figures_dir)
