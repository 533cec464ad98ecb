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
# # 05 · Long horizon: does the sketched momentum drift? (claim C11)
#
# The report says that "beyond 10,000 steps, accumulated sketch error drifts the momentum; runs
# of 1,000–2,500 steps are safe". We train the smallest policy of the ladder (the smoke proxy)
# for more than 10,000 steps with LoGRA on a next-token loss over task text, and at every step
# a shadow `torch.optim.AdamW` and a LoGRA with periodic projection refresh step on the *same*
# gradient from the *same* weights. At measurement steps we compare LoGRA's Nyström first moment
# `M̂ = m_R (Pᵀm_R)^† m_L`, rebuilt from its own state, with the shadow's dense `exp_avg` M, and
# the updates each optimizer applies.
#
# The point is to separate two things the claim could mean:
#
# * **constant sketch error** — a rank-r sketch of M cannot hold all of it. A *fresh* sketch of
#   the same M (`M̂_fresh`, dotted lines) has this error too; it changes when M changes, not with
#   the step count;
# * **accumulated drift** — error held in LoGRA's *state* (`m_L ≠ PᵀM`, `m_R ≠ MQ`) that builds
#   up over steps. The moments are linear in the gradients, so with fixed projections
#   `m_L = PᵀM` exactly; only a refresh (which carries the moments into new projections through
#   the rank-r reconstruction) can put error in the state, and the EMA then forgets it at the
#   rate β₁ᵗ.
#
# All logic lives in `logra.experiments.long_horizon` (the runs; its docstring has the
# definitions) and `long_horizon_report` (the table, figure and verdict).

# %%
# %matplotlib inline
import time

from IPython.display import Markdown, display

from logra import paths
from logra.experiments import long_horizon, long_horizon_report, report

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
results_dir = None  # where the proxy and its data are built; None: the scale's (results/)

# %%
figures_dir = figures_dir or paths.figures_dir(scale, results_dir)
cfg = long_horizon.config(scale, **({} if results_dir is None else {"results_dir": results_dir}))
start = time.perf_counter()
frame = long_horizon.run(cfg)
print(f"{cfg.steps:,} steps, {frame.step.nunique()} measurement steps, "
      f"{time.perf_counter() - start:.0f} s (scale={scale!r})")

# %% [markdown]
# ## Drift against step
#
# Lines are medians in log-spaced bins of steps, bands the min–max in each bin. Solid: from
# LoGRA's state; dotted: a fresh sketch of the same dense momentum with the same projections.
# With fixed projections the two coincide to round-off, and the state drift (top right) is
# fp32 round-off (~10⁻⁷) at every step. With refresh, the band of the state drift shows the
# error put into the state at each refresh, and how fast the EMA forgets it.

# %%
fig = long_horizon_report.plot_drift(frame, cfg)
display(fig)
report.save_figure(fig, "long_horizon", figures_dir)

# %% [markdown]
# ## Medians per window
#
# Early, "safe" (1,000–2,500 steps) and "beyond 10,000" windows; `(state)` rows are the state
# metrics, the others the cosine of each reconstruction's applied update with AdamW's.

# %%
table = long_horizon_report.drift_table(frame, cfg)
report.save_table(table, "long_horizon", figures_dir)
display(Markdown(report.to_markdown(table)))

# %% [markdown]
# ## Claim
#
# The verdict follows the rule in `long_horizon_report.c11_claim` (see its docstring): the claim is
# about *accumulated* error, so it turns on whether LoGRA's state drifted further from the
# sketches of the true momentum between the safe window and beyond 10,000 steps.

# %%
claims = [long_horizon_report.c11_claim(frame, cfg)]
report.save_claims(claims, "long_horizon", figures_dir)
display(Markdown(report.to_markdown(report.claims_frame(claims))))
