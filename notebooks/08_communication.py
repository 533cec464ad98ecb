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
# # 08 · Communication: all-reduce volume and parallelism (claim C12)
#
# The report says LoGRA is "compatible with DDP, FSDP and Megatron tensor parallelism" and that
# "sketches shrink the all-reduce volume". Sketches are linear, so all-reducing `L = PᵀG` and
# `R = GQ` gives every rank the sketches of the mean gradient; `logra.optim.comm_hook` does that
# for matrices with the Nyström reconstruction. The default reconstruction, `gain`, also reads G
# itself, so the hook sends gain matrices in full (docs/distributed.md).
#
# 1. **Counted**: bytes all-reduced per step, dense DDP against the hook, from parameter shapes,
#    for the proxies and the real Qwen2.5-1.5B, Qwen2.5-7B and Gemma-3-27B architectures (built
#    on the meta device), for both reconstructions and fp32 or bf16 gradients.
# 2. **Measured**: two CPU ranks (gloo). The bytes actually passed to `all_reduce` with dense
#    DDP and with the hook; DDP, the hook and FSDP2 against one process with the global batch;
#    and what LoGRA does with a tensor-parallel (Colwise/Rowwise) model.
#
# All logic lives in `logra.experiments.communication` (the counts and the measured run) and
# `communication_report` (the tables, figure and verdict).

# %%
# %matplotlib inline
import time

from IPython.display import Markdown, display

from logra import paths
from logra.experiments import communication, communication_report, report

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures

# %%
figures_dir = figures_dir or paths.figures_dir(scale)
cfg = communication.config(scale)
start = time.perf_counter()
frame = communication.run(cfg)
print(f"{time.perf_counter() - start:.0f} s (scale={scale!r})")

# %% [markdown]
# ## Bytes per step
#
# At the reported rank r = 16 (embeddings and the output head at 64). Matrices too small for a
# sketch to save memory stay dense in LoGRA and travel in full; the hook's sketches are fp32,
# so with bf16 gradients the saving halves, and on the smallest proxy the hook can send more
# than dense DDP.

# %%
fig = communication_report.plot_bytes(frame, cfg)
display(fig)
report.save_figure(fig, "communication", figures_dir)
bytes_table = communication_report.bytes_table(frame)
report.save_table(bytes_table, "communication", figures_dir)
display(Markdown(report.to_markdown(bytes_table)))

# %% [markdown]
# ## What the two-rank run checked

# %%
checks = communication_report.checks_table(frame, cfg)
report.save_table(checks, "communication_checks", figures_dir)
report.save_table(communication_report.measured_table(frame), "communication_measured", figures_dir)
display(Markdown(report.to_markdown(checks)))

# %% [markdown]
# ## Claim
#
# The verdict follows the rule in `communication_report.c12_claim` (see its docstring): DDP, FSDP2,
# tensor parallelism and a shrinking all-reduce must all hold for "reproduced".

# %%
claims = [communication_report.c12_claim(frame, cfg)]
report.save_claims(claims, "communication", figures_dir)
display(Markdown(report.to_markdown(report.claims_frame(claims))))
