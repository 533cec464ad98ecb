"""Notebook 06's tables, figures and verdict (C10), from the rows `logra.experiments.rare_tokens`
measures: the rare signal's survival in each rule's state (`survival_table`), the steps each takes
to fix a planted rare token (`fix_table`), and `c10_claim` by the rule in its docstring.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from logra.experiments.plots import line_with_band, rank_axis
from logra.experiments.rare_tokens import (
    LOGRA_RULES,
    RULES,
    Config,
)
from logra.experiments.report import ClaimRow
from logra.experiments.sketch_error_plots import method_labels

C10_REPORTED = ("rare but important tokens (minus signs, decimal points) whose gradient mass is "
                "small lose their signal in the sketch (\"subspace blindness\")")


# ---------------------------------------------------------------- tables and the verdict


def survival_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean survival over seeds: a row per sketched rule and rank, a column per share."""
    sel = frame[(frame.experiment == "survival") & (frame.metric == "survival")
                & (frame.method != "adamw")]
    table = sel.pivot_table(index=["method", "rank"], columns="share", values="value",
                            aggfunc="mean", sort=False)
    table.columns = [f"share {s:g}" for s in table.columns]
    table = table.reset_index().rename(columns={"method": "rule"})
    return table.sort_values(["rule", "rank"], key=lambda s: s.map(RULES.index)
                             if s.name == "rule" else s).reset_index(drop=True)


def fix_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Steps to fix per rule: per seed, median, and the median's ratio to AdamW's."""
    steps = frame[(frame.experiment == "fix") & (frame.metric == "steps_to_fix")]
    medians = _median_steps(frame, cfg)
    rows = []
    for rule in RULES:
        sel = steps[steps.method == rule].sort_values("seed")
        per_seed = ", ".join(_steps_text(v, cfg) for v in sel.value)
        rows.append({"rule": rule, "rank": int(sel["rank"].iloc[0]),
                     "steps to fix, per seed": per_seed,
                     "median": _steps_text(medians[rule], cfg),
                     "ratio to AdamW": medians[rule] / medians["adamw"]})
    return pd.DataFrame(rows)


def _steps_text(value: float, cfg: Config) -> str:
    return f"> {cfg.max_fix_steps}" if math.isinf(value) or math.isnan(value) else f"{value:g}"


def _median_steps(frame: pd.DataFrame, cfg: Config) -> dict[str, float]:
    """Median steps to fix per rule over seeds; a run that never fixed it counts as ∞."""
    steps = frame[(frame.experiment == "fix") & (frame.metric == "steps_to_fix")]
    return {rule: float(np.median(steps[steps.method == rule].value.fillna(math.inf)))
            for rule in steps.method.unique()}


def _survival_at(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Mean survival over seeds at `rank`: index rule, columns share."""
    sel = frame[(frame.experiment == "survival") & (frame.metric == "survival")
                & (frame["rank"] == rank)]
    return sel.pivot_table(index="method", columns="share", values="value", aggfunc="mean")


def c10_claim(frame: pd.DataFrame, cfg: Config) -> ClaimRow:
    """Claim C10, judged by a fixed rule from both measurements at the reported rank.

    With r = `fix_rank` (16, the reported rank), s_min the smallest share tested, and for each
    LoGRA reconstruction X ("gain", the default, and "nystrom"):

        blind(X)  survival of X at (r, s_min), mean over seeds, < `c10_survival` (0.5): the sketch
                  gives the rare rows less than half the share of the step AdamW gives them
        slow(X)   median steps to fix the planted rare token with X > `c10_slowdown` (2) × AdamW's
                  median (a seed that never fixed it within `max_fix_steps` counts as ∞)

        reproduced      blind(gain) and slow(gain): the default LoGRA loses the rare signal and
                        pays for it in training
        partly          blind or slow for gain or for nystrom, but not both for gain
        not reproduced  neither for either reconstruction

    Raises ValueError if the reported rank was not measured in (a).
    """
    rank = cfg.fix_rank
    table = _survival_at(frame, rank)
    if table.empty:
        raise ValueError(f"C10 needs the survival at rank {rank}; ranks {cfg.ranks}")
    s_min = min(table.columns)
    medians = _median_steps(frame, cfg)
    blind = {x: bool(table.at[x, s_min] < cfg.c10_survival) for x in LOGRA_RULES}
    slow = {x: bool(medians[x] > cfg.c10_slowdown * medians["adamw"]) for x in LOGRA_RULES}
    if blind["logra_gain"] and slow["logra_gain"]:
        verdict = "reproduced"
    elif any(blind.values()) or any(slow.values()):
        verdict = "partly"
    else:
        verdict = "not reproduced"
    share = _rare_share(frame)
    parts = [
        f"(a) share of the step on the rare rows relative to AdamW at r={rank}, rare mass "
        f"{s_min:g}: gain {table.at['logra_gain', s_min]:.2f}, Nyström "
        f"{table.at['logra_nystrom', s_min]:.2f}, naive projection "
        f"{table.at['naive_projection', s_min]:.2f} (gain's survival ∝ mass^"
        f"{survival_exponent(frame, 'logra_gain', rank):.2f})",
        f"(b) steps to fix a planted rare token (rare positions {share:.1%} of gradient mass), "
        f"median: AdamW {_steps_text(medians['adamw'], cfg)}, gain "
        f"{_steps_text(medians['logra_gain'], cfg)}, Nyström "
        f"{_steps_text(medians['logra_nystrom'], cfg)}",
        f"blind (< {cfg.c10_survival:g}): {_which(blind)}; "
        f"slow (> {cfg.c10_slowdown:g}× AdamW): {_which(slow)}",
    ]
    m, n = cfg.vocab_shape
    scale = (f"{cfg.scale} ({m}×{n} embedding-shaped stream; {cfg.lm_vocab}-token LM, "
             f"hidden {cfg.lm_hidden}; {len(cfg.seeds)} seed(s))")
    return ClaimRow(claim="C10", reported=C10_REPORTED, reproduced="; ".join(parts),
                    scale=scale, verdict=verdict)


def survival_exponent(frame: pd.DataFrame, rule: str, rank: int) -> float:
    """The least-squares slope of log survival against log share (mean over seeds) at `rank`:
    survival ∝ share^slope. NaN if a survival is ≤ 0 or fewer than two shares were measured."""
    row = _survival_at(frame, rank).loc[rule]
    if len(row) < 2 or (row <= 0).any():
        return math.nan
    return float(np.polyfit(np.log(row.index.to_numpy(float)), np.log(row.to_numpy()), 1)[0])


def _rare_share(frame: pd.DataFrame) -> float:
    return float(frame[frame.metric == "rare_grad_share"].value.median())


def _which(flags: dict[str, bool]) -> str:
    names = [name.removeprefix("logra_") for name, flag in flags.items() if flag]
    return ", ".join(names) if names else "neither"


# ---------------------------------------------------------------- figures


STYLE = {
    "adamw": dict(color="black", linestyle="-", marker=""),
    "logra_gain": dict(color=plt.get_cmap("tab10").colors[2], linestyle="-", marker="o"),
    "logra_nystrom": dict(color=plt.get_cmap("tab10").colors[0], linestyle="--", marker="s"),
    "naive_projection": dict(color=plt.get_cmap("tab10").colors[7], linestyle="-.", marker="x"),
}


LABELS = method_labels()


def _band(ax: plt.Axes, sel: pd.DataFrame, x: str, rule: str, marker: bool = True) -> None:
    """Mean line with a min–max band over seeds."""
    style = STYLE[rule] if marker else {**STYLE[rule], "marker": ""}
    line_with_band(ax, sel, x, "value", band=sel.seed.nunique() > 1, label=LABELS[rule], **style)


def plot_survival(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """(a) Survival against rank at `rank_plot_share`, and survival and alignment against the
    rare part's share of gradient mass at the reported rank; bands: min–max over seeds."""
    sel = frame[frame.experiment == "survival"]
    rank, share = cfg.fix_rank, cfg.rank_plot_share
    fig, axes = plt.subplots(1, 3, figsize=(14.5, 4.2))
    panels = (
        (axes[0], "survival", "rank", sel.share == share,
         f"survival vs rank (rare mass {share:g})"),
        (axes[1], "survival", "share", sel["rank"].isin([rank, -1]),
         f"survival vs rare mass (r = {rank})"),
        (axes[2], "alignment", "share", sel["rank"].isin([rank, -1]),
         f"alignment vs rare mass (r = {rank})"),
    )
    for ax, metric, x, keep, title in panels:
        for rule in RULES:
            part = sel[keep & (sel.metric == metric) & (sel.method == rule)]
            if rule == "adamw" and x == "rank":
                ax.axhline(1.0, label=LABELS[rule], **{**STYLE[rule], "marker": None})
                continue
            if not part.empty:
                _band(ax, part, x, rule)
        if x == "rank":
            rank_axis(ax, sorted(sel.loc[sel["rank"] > 0, "rank"].unique()))
            ax.set_xlabel("sketch rank r")
        else:
            ax.set_xscale("log")
            ax.set_xlabel("rare part's share of gradient mass")
        if metric == "survival":
            ax.axhline(cfg.c10_survival, color="0.6", linestyle=":", linewidth=1,
                       label=f"blind below {cfg.c10_survival:g}")
            ax.set_ylabel("rare share of the step ÷ AdamW's")
        else:
            ax.set_ylabel("cos(rare rows' displacement, rare gradient)")
        ax.axhline(0.0, color="0.8", linewidth=0.8, zorder=0)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    m, n = cfg.vocab_shape
    fig.suptitle(f"(a) How much of a rare token's gradient survives: {m}×{n} embedding-shaped "
                 f"stream, {cfg.rare_rows} rare rows, {cfg.stream_steps} steps "
                 f"(AdamW = 1)", fontsize=11)
    fig.tight_layout()
    return fig


def plot_fix(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """(b) p(correct rare token | trigger) and greedy accuracy against fix step, per rule;
    bands: min–max over seeds."""
    sel = frame[frame.experiment == "fix"]
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.2), sharex=True)
    medians = _median_steps(frame, cfg)
    for ax, metric, ylabel in ((axes[0], "p_correct", "p(\"−\" | context ending in trigger)"),
                               (axes[1], "accuracy", "share of contexts emitting \"−\" (greedy)")):
        for rule in RULES:
            part = sel[(sel.metric == metric) & (sel.method == rule)]
            _band(ax, part, "step", rule, marker=False)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("fix step")
        ax.grid(True, alpha=0.3)
    axes[1].axhline(cfg.fixed_fraction, color="0.6", linestyle=":", linewidth=1,
                    label=f"fixed at {cfg.fixed_fraction:g}")
    handles, labels = axes[1].get_legend_handles_labels()
    labels = [f"{label} (median {_steps_text(medians[rule], cfg)} steps)"
              if rule in medians else label
              for label, rule in zip(labels, [*RULES, ""], strict=False)]
    axes[1].legend(handles, labels, fontsize=8)
    fig.suptitle(f"(b) Fixing a planted rare-token error (r = {cfg.fix_rank}, lr "
                 f"{cfg.fix_lr:g}, rare positions {_rare_share(frame):.1%} of gradient mass)",
                 fontsize=11)
    fig.tight_layout()
    return fig


FIGURES = {"rare_tokens_survival": plot_survival, "rare_tokens_fix": plot_fix}

