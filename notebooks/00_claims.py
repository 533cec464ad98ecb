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
# # 00 · The claims ledger
#
# Every claim of the report (`docs/claims.md`, C1–C12) beside what this kit measured, as
# written by the notebook that tests it (`figures/claims_*.csv`). Verdicts come from the numbers
# by rules in `logra.experiments.*`; this notebook only collects them. It runs last in
# `logra-repro reproduce`.

# %%
from logra import paths
from logra.experiments import claims, report

# %% tags=["parameters"]
scale = "default"
figures_dir = None  # None: figures/ at the default scale, else results/<scale>/figures
readme = None  # whose claims block the ledger rewrites; None: the project's README.md; "": none
rewrite_readme = False  # the README follows the default scale only; True: this scale too
committed_claims = None  # where the claim files figures_dir lacks are read (a partial --check)

# %%
figures_dir = figures_dir or paths.figures_dir(scale)
readme = paths.project_root() / "README.md" if readme is None else readme
table = claims.ledger(claims.collect(figures_dir, committed_claims))
report.show_table(table, "claims", figures_dir)
if readme and (scale == paths.FIGURES_SCALE or rewrite_readme):
    claims.update_readme(table, readme, scale, figures_dir)

# %%
counts = table.groupby("verdict").size().rename("claim rows").reset_index()
report.show_table(counts, "verdict_counts", figures_dir)
