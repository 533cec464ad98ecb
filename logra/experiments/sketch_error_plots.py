"""Figures of the sketch-error experiment (notebooks/01_sketch_error), from the tidy frame of
`sketch_error.run`.

FIGURES maps each figure's name to its function (frame, config) -> Figure, as the notebook reads
it: `report.show_plot(sketch_error_plots.FIGURES, NAME, frame, cfg, figures_dir)`.
`method_labels` names the reconstruction methods and update rules in legends (notebook 06 too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from logra.experiments.plots import rank_axis
from logra.experiments.report import Plot
from logra.experiments.sketch_error import QWEN_LAYERS, Config, summarize
from logra.experiments.sketch_error_measures import METHODS, RULES, default_rtol

FLOOR = 1e-7  # plotted in place of an error of exactly 0 on log axes


def method_labels(oversample_ratio: float = 1.0) -> dict[str, str]:
    """Legend labels of the reconstruction methods and update rules."""
    k = "2r" if oversample_ratio == 1.0 else f"r+{oversample_ratio:g}r"
    return {
        "nystrom_rtol0": "Nyström, rtol=0",
        "nystrom_truncated": f"Nyström, rtol={default_rtol():g}",
        "nystrom_oversampled": f"Nyström, k={k}, rtol={default_rtol():g}",
        "projection": "one-sided P Pᵀ M (naive)",
        "svd": "truncated SVD (optimum)",
        "adamw": "AdamW",
        "logra_gain": "LoGRA gain",
        "logra_nystrom": "LoGRA Nyström",
        "naive_projection": "naive random projection",
    }


def _style() -> dict[str, dict[str, Any]]:
    """Colour and line style per method/rule, shared by every figure."""
    colours = plt.get_cmap("tab10").colors
    return {
        "nystrom_rtol0": dict(color=colours[3], linestyle=":", marker="v"),
        "nystrom_truncated": dict(color=colours[0], linestyle="-", marker="o"),
        "nystrom_oversampled": dict(color=colours[9], linestyle="--", marker="s"),
        "projection": dict(color=colours[7], linestyle="-.", marker="x"),
        "svd": dict(color="black", linestyle="-", marker="", linewidth=2.2),
        "adamw": dict(color="black", linestyle="-"),
        "logra_gain": dict(color=colours[2], linestyle="-", marker="o"),
        "logra_nystrom": dict(color=colours[0], linestyle="--", marker="s"),
        "naive_projection": dict(color=colours[7], linestyle="-.", marker="x"),
    }


def _grid(n_panels: int, ncols: int = 3) -> tuple[plt.Figure, np.ndarray]:
    nrows = math.ceil(n_panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False,
                             sharex=True)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def _panel_title(summary: pd.DataFrame, name: str) -> str:
    row = summary[summary.input == name].iloc[0]
    if name == QWEN_LAYERS:
        return f"{name} (median of weights)"
    return f"{name} ({row.m}×{row.n})"


def plot_vs_rank(frame: pd.DataFrame, experiment: str, metric: str, methods: Iterable[str],
                 ylabel: str, log_y: bool, title: str, labels: dict[str, str],
                 reference: tuple[float, str] | None = None) -> plt.Figure:
    """One panel per input: `metric` against sketch rank (log₂ axis), one line per method.

    `reference` = (y, label) draws a labelled horizontal line on every panel. Drawn with
    matplotlib: seaborn's style mapping refuses to mix filled and line-art markers (o, x).
    """
    summary = summarize(frame, experiment, metric)
    inputs = list(summary.input.drop_duplicates())
    fig, axes = _grid(len(inputs))
    style = _style()
    for ax, name in zip(axes.flat, inputs, strict=False):
        panel = summary[summary.input == name]
        for method in methods:
            line = panel[panel.method == method].sort_values("rank")
            if line.empty:
                continue
            values = line.value.clip(lower=FLOOR) if log_y else line.value
            ax.plot(line["rank"], values, label=labels[method], **style[method])
        if reference is not None:
            ax.axhline(reference[0], color="0.55", linewidth=0.9, linestyle=(0, (5, 3)),
                       label=reference[1], zorder=0)
        rank_axis(ax, summary["rank"].unique())
        if log_y:
            ax.set_yscale("log")
        ax.set_title(_panel_title(summary, name), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("sketch rank r")
        ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=len(names), frameon=False,
               bbox_to_anchor=(0.5, 1.0), fontsize=9)
    fig.suptitle(title, y=1.04)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def plot_error_vs_rank(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """The main figure: ‖M − M̂‖_F/‖M‖_F against r for every input and method."""
    return plot_vs_rank(frame, "reconstruction", "rel_error", METHODS,
                        "relative error ‖M−M̂‖_F / ‖M‖_F", True,
                        f"Reconstruction error of rank-r sketches (mean of "
                        f"{len(cfg.sketch_seeds)} sketch seeds; errors of 0 drawn at {FLOOR:g})",
                        method_labels(cfg.oversample_ratio), reference=(1.0, "M̂ = 0"))


def plot_cosine_vs_rank(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Cosine ⟨M, M̂⟩/(‖M‖‖M̂‖) against r for every input and method."""
    return plot_vs_rank(frame, "reconstruction", "cosine", METHODS, "cosine(M̂, M)", False,
                        "Cosine of the reconstruction with the true matrix",
                        method_labels(cfg.oversample_ratio))


def plot_direction_vs_rank(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Cosine between each sketched rule's update and AdamW's, mean over the stream."""
    return plot_vs_rank(frame, "direction", "cosine", RULES[1:], "cosine(update, AdamW update)",
                        False, f"Update direction against dense AdamW on the same gradients "
                        f"(mean over {cfg.stream_steps} steps)", method_labels())


def plot_aspect(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Relative error against aspect ratio m/n at fixed numel, one line per rank.

    Rows: the embedding gradient and the power-law control; columns: the SVD optimum, the
    optimizer's truncated Nyström, and Nyström with an oversampled left sketch (seaborn's
    relplot, one facet per row and column).
    """
    methods = ("svd", "nystrom_truncated", "nystrom_oversampled")
    s = summarize(frame, "aspect", "rel_error")
    s = s[s.method.isin(methods)]
    s = s.assign(aspect=s.m // s.n, value=s.value.clip(lower=FLOOR),
                 family=s["input"].str.replace(r" \d+×\d+$", "", regex=True),
                 **{"sketch rank": s["rank"].map(lambda r: f"r = {r}")})
    ranks = [f"r = {r}" for r in sorted(s["rank"].unique())]
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(ranks)))
    labels = method_labels(cfg.oversample_ratio)
    grid = sns.relplot(s, kind="line", x="aspect", y="value", hue="sketch rank", hue_order=ranks,
                       palette=dict(zip(ranks, colours, strict=True)), row="family",
                       row_order=list(s.family.drop_duplicates()), col="method",
                       col_order=methods, errorbar=None, marker="o", markeredgecolor="auto",
                       height=3.4, aspect=4.3 / 3.4,
                       facet_kws=dict(sharex=True, sharey="row", despine=False))
    for (family, method), ax in grid.axes_dict.items():
        ax.axhline(1.0, color="0.55", linewidth=0.9, linestyle=(0, (5, 3)), zorder=0)
        rank_axis(ax, s.aspect.unique())
        ax.set_yscale("log")
        ax.set_title(f"{family}: {labels[method]}", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    grid.set_axis_labels("aspect ratio m/n", "relative error ‖M−M̂‖_F / ‖M‖_F")
    grid.figure.suptitle(f"Claim C9: error against aspect ratio at fixed size m·n = "
                         f"{cfg.aspect_numel:,} (dashed: error of M̂ = 0)")
    grid.tight_layout()
    return grid.figure


def plot_training(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Training loss against step for each problem and rule (log loss axis)."""
    sel = frame[(frame.experiment == "training") & (frame.metric == "loss")]
    problems = list(sel.input.drop_duplicates())
    fig, axes = plt.subplots(1, len(problems), figsize=(5.4 * len(problems), 4.0), squeeze=False)
    style, labels = _style(), method_labels()
    ylabels = {"least squares": "full-batch MSE", "mlp classifier": "training cross-entropy (nats)"}
    lrs = {"least squares": cfg.lstsq_lr, "mlp classifier": cfg.mlp_lr}
    accuracy = frame[(frame.experiment == "training") & (frame.metric == "accuracy")]
    accuracy = dict(zip(accuracy.method, accuracy.value, strict=True))
    for ax, problem in zip(axes[0], problems, strict=True):
        for rule in RULES:
            curve = sel[(sel.input == problem) & (sel.method == rule)].sort_values("step")
            label = labels[rule]
            if problem == "mlp classifier":
                label += f" (test accuracy {accuracy[rule]:.1%})"
            ax.plot(curve.step, curve.value, label=label, **{**style[rule], "marker": None})
        ax.set_yscale("log")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabels.get(problem, "loss"))
        ax.set_title(f"{problem} (lr={lrs.get(problem, float('nan')):g}, "
                     f"r={cfg.train_rank})", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Training with sketched optimizers (no KL control, weight decay 0)")
    fig.tight_layout()
    return fig


FIGURES: dict[str, Plot] = {
    "sketch_error": plot_error_vs_rank,
    "sketch_error_cosine": plot_cosine_vs_rank,
    "sketch_error_direction": plot_direction_vs_rank,
    "sketch_error_aspect": plot_aspect,
    "sketch_error_training": plot_training,
}
