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
# # 02 · Memory: optimizer state at 1.5B / 7B / 27B and the single-node budget
#
# The report's memory claims:
#
# - **C1** a 4096×4096 layer keeps 134.2 MB of dense Adam moments but 1.05 MB of LoGRA sketch
#   moments at r = 16;
# - **C2** "optimizer VRAM" falls 45.7 % at 7B and 21.8 % at 1.5B (of what, it does not say);
# - **C3** dense Adam at 27B "demands an additional 108 GB" and also "12 to 16 bytes per
#   parameter … 324 GB to 432 GB";
# - **C4** on one 8×80 GB node, full-parameter RL of a 27B model with dense Adam runs out of
#   memory before step 80, LoGRA runs 1,100+ steps.
#
# Everything here is counted, not measured: the real architectures (Qwen2.5-1.5B, Qwen2.5-7B,
# Qwen3-8B, Gemma-3-27B) are built from their published configs on PyTorch's `meta` device (shapes,
# no storage), and `logra.memory.counted_state_bytes` counts each optimizer's state from the
# shapes with the rule the optimizer itself uses; the tests check the count against real
# optimizers to the byte.
# The per-GPU budget (`logra.memory.budget`) prices weights, gradients, master weights, optimizer
# state, the reference model, activations, logits and the rollout KV cache under named assumptions
# (`experiments/memory.yaml`, documented in `logra.memory.Assumptions`).

# %%
# %matplotlib inline
import dataclasses

import pandas as pd
from IPython.display import Markdown, display

from logra import paths
from logra.experiments import memory, memory_report, report
from logra.io import write_frame

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures

# %%
figures_dir = figures_dir or paths.figures_dir(scale)
cfg = memory.config(scale)
assumptions = memory.assumptions(cfg)
settings = pd.DataFrame(dataclasses.asdict(assumptions).items(), columns=["assumption", "value"])
display(Markdown("**Budget assumptions**\n\n" + report.to_markdown(settings)))

# %% [markdown]
# ## Parameter counts against the published sizes
# Tied embeddings (Qwen2.5-1.5B, Gemma-3-27B) count once. "Non-embedding" leaves out the input
# embedding and an untied output head.

# %%
counts = memory.param_counts(cfg)
report.save_table(counts, "memory_param_counts", figures_dir)
display(counts)

# %% [markdown]
# ## Optimizer-state bytes by optimizer × architecture
# GB = 10⁹ bytes. The state is counted as the optimizer sees the parameters under mixed precision
# (fp32 masters), except the "bf16 states" row. Ranks: r = 16 for every low-rank method, LoGRA's
# embeddings and head at r = 64 (or at r, or dense), LoRA r = 16 on every linear layer. GaLore and
# APOLLO leave embeddings and head dense, as their reference code does; APOLLO's reference code
# stores its random projection, the paper regenerates it from a seed (both rows). Flora is the
# paper's formula (no package).

# %%
state = memory.run(cfg)
table = memory_report.state_table(state)
report.save_table(table, "memory_state_bytes", figures_dir)
write_frame(f"{figures_dir}/memory_state_bytes_long.csv", state)
display(Markdown(report.to_markdown(table)))

# %% [markdown]
# ## Per-GPU budget at the start of the run
# For each scale, dense AdamW, LoRA and LoGRA: a training bar (static memory + activations +
# logits of one micro-batch) and a rollout bar (static memory + KV cache of the sequences decoded
# at once), at prompt + initial response length. The dashed line is the usable memory.

# %%
budget = memory.budget_frame(cfg)
wide = budget.pivot_table(index=["model", "optimizer"], columns="component", values="gib",
                          sort=False).reset_index()
report.save_table(wide, "memory_budget", figures_dir)
report.show_figure(memory_report.plot_budget(budget), "memory_budget", figures_dir)
display(Markdown(report.to_markdown(wide, digits=3)))

# %% [markdown]
# ## When does each optimizer run out of memory?
# The response length grows by a fixed number of tokens per step (R1-style RL). Left: peak per-GPU
# memory over the default run (× marks the first step out of memory). Right: the first step out of
# memory against the growth rate; ▲ means none within the simulated steps.

# %%
oom = memory_report.oom_table(cfg)
report.save_table(oom, "memory_oom", figures_dir)
run = memory.oom_run(cfg)
curve = memory.oom_curve(cfg)
report.save_table(curve, "memory_oom_curve", figures_dir)
report.show_figure(memory_report.plot_oom(run, curve, cfg), "memory_oom", figures_dir)
display(oom)

# %% [markdown]
# ## C2: which accounting gives −45.7 % at 7B and −21.8 % at 1.5B?
# Every combination of precision regime, LoGRA variant and scope (with or without activations,
# micro-batch, sequence length, sharding) is tried at both scales; the full grid is
# `memory_c2_search.csv`, the closest rows follow.

# %%
c2 = memory_report.c2_search(cfg)
write_frame(f"{figures_dir}/memory_c2_search.csv", c2)
closest = c2.sort_values("max_error").head(12)
report.save_table(closest, "memory_c2_closest", figures_dir)
alone = [f"{int(c2[f'match_{n}'].sum())} match {n} alone" for n in memory_report.C2_REPORTED]
print(f"{int(c2.match_both.sum())} of {len(c2)} accountings reproduce both numbers; "
      + ", ".join(alone))
display(closest)

# %% [markdown]
# ## C3: the two conventions for dense Adam at 27B

# %%
c3 = memory_report.c3_conventions("gemma-3-27b")
report.save_table(c3, "memory_c3", figures_dir)
display(c3)

# %% [markdown]
# ## C4 under the default assumptions and single changes to them
# The window is the range of response growth rates (tokens/step) at which dense Adam runs out
# between step 1 and step 79 while LoGRA lasts 1,100 steps; with linear growth it exists only if
# LoGRA's spare sequence length is ≳ 13.9× Adam's. Below, the same window against the number of
# sequences decoded at once per GPU, the assumption that moves Adam's spare length most.

# %%
c4 = memory_report.c4_table(cfg)
report.save_table(c4, "memory_c4", figures_dir)
display(c4)
c4_scan = memory_report.c4_rollout_scan(cfg)
report.save_table(c4_scan, "memory_c4_rollouts", figures_dir)
display(c4_scan.dropna(subset=["window_low"]))

# %% [markdown]
# ## Claims

# %%
rows = memory_report.claims(cfg, c2, c4, c4_scan)
report.save_claims(rows, "memory", figures_dir)
display(Markdown(report.to_markdown(report.claims_frame(rows))))
