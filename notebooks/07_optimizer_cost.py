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
# # 07 · What a step costs: LoGRA against AdamW and the field
#
# Step time and persistent state of LoGRA (r = 8…64) beside `torch.optim.AdamW` (foreach and
# fused), Adafactor, GaLore and APOLLO (where installed) and the naive random projection, on a
# 4096×4096 matrix, a 2048×8192 matrix, a Qwen2.5-1.5B decoder layer and two proxy policies
# (proxy-16m, and proxy-1m: many 128-wide matrices, where launches and Python dominate).
# Optimizers step in interleaved rounds on the same machine at the same time; the table reports
# each median as a ratio to AdamW(foreach) from the same rounds. Absolute times on this shared
# 2-core CPU are noisy; the ratios are what to read. GaLore's SVD is amortized over its
# projection gap (see `logra.experiments.optimizer_cost`).

# %%
# %matplotlib inline
from logra import paths
from logra.experiments import optimizer_cost, report

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
device = "cpu"  # cuda: CUDA-event timing and measured memory (scripts/gpu_checks.py runs it)
dtype = "float32"  # the parameters' dtype: float32 or bfloat16

# %%
figures_dir = figures_dir or paths.figures_dir(scale)
cfg = optimizer_cost.config(scale, device=device, dtype=dtype)
frame = optimizer_cost.run(cfg)
print(f"copy bandwidth {frame['bandwidth_gb_s'].iloc[0]:.1f} GB/s on {device}, "
      f"{cfg.threads} thread(s), {dtype} parameters")

# %% [markdown]
# ## Ratios to AdamW(foreach) and AdamW(fused)
#
# `logra-r16-none` steps without the KL control; `-diag`, `-calibrated` and `-jvp` with each
# estimator (the last two probe a random batch, proxies only): their difference to `-none` is the
# control's cost per step. `cache_bytes` are the projections LoGRA keeps between steps;
# `logra-r16-regenerate` keeps none (`cache_projections=False`) and draws them every step.

# %%
report.show_table(optimizer_cost.ratio_table(frame, cfg.table_cases), "optimizer_cost",
                  figures_dir)

# %% [markdown]
# ## Against matrix size
#
# The dashed line is AdamW's memory-traffic bound: 28 bytes per parameter (read p, g, m, v; write
# p, m, v) at the copy bandwidth measured in this run.

# %%
report.show_figure(optimizer_cost.plot_sweep(frame, cfg.sweep_sizes), "optimizer_cost",
                   figures_dir)
