"""Sketch error: how much of a gradient a rank-r sketch keeps, and how close each rule is to Adam.

Everything here feeds notebooks/01_sketch_error. `run(config)` returns one tidy DataFrame, one row
per number, with columns

    experiment  "reconstruction" | "direction" | "aspect" | "training"
    input       the matrix family or problem ("rank 8", "power law α=1", "qwen2 layers", ...)
    matrix      the individual matrix (a parameter name for the Qwen2 gradients, else = input)
    m, n        its shape (m×n; a Linear weight is out×in); aspect = m/n
    rank        sketch rank r
    method      reconstruction method or update rule
    seed        sketch seed (reconstruction, aspect); -1 where not applicable
    step        optimizer step (direction, training); -1 where not applicable
    metric      "rel_error" | "cosine" | "loss" | "accuracy"
    value       the number

The four experiments:

reconstruction  For M ∈ R^{m×n} and seeded orthonormal P ∈ R^{m×k}, Q ∈ R^{n×r} (the optimizer's
    own `sketch.orthonormal_projection`), with L = PᵀM and R = MQ (`sketch.sketch`):
        nystrom_rtol0        M̂ = R (PᵀR)^† L, pseudo-inverse with no cutoff (rtol = 0), k = r
        nystrom_truncated    the same with LoGRA's default cutoff rtol (`default_rtol()`)
        nystrom_oversampled  the same with rtol, left sketch k = r + round(oversample_ratio·r)
        projection           one-sided P Pᵀ M (M Q Qᵀ when m < n): the naive ablation's subspace
        svd                  the best rank-r approximation (Eckart–Young), from singular values
    metrics: relative error ‖M − M̂‖_F / ‖M‖_F and cosine ⟨M, M̂⟩_F / (‖M‖_F ‖M̂‖_F).
    Inputs: exact low rank (equal singular values), power-law spectra σ_i = i^-α, and the
    gradients of a tiny random Qwen2 causal LM (every 2-D weight; the layers are summarised by
    their median, embed_tokens and lm_head shown on their own).
direction  Dense AdamW, LoGRA "nystrom", LoGRA "gain" and RandomProjectionAdam run on identical
    gradient streams (weights start at 0, weight decay 0, so the updates do not depend on the
    weights); metric: cosine between each rule's applied update W_t − W_{t−1} and AdamW's.
    predicted_kl_threshold=None: there is no policy here.
aspect  Claim C9: at fixed numel, m/n from 1 to 64, a synthetic embedding gradient (few non-zero
    rows, Zipfian token counts) and a power-law control; relative error of every method.
training  Loss curves of a least-squares regression and a Gaussian-cluster MLP classifier
    trained with AdamW, LoGRA gain, LoGRA nystrom and RandomProjectionAdam (same lr per
    problem, weight decay 0, predicted_kl_threshold=None: these are not policies).

A rank is measured on a matrix only where LoGRA would sketch it (`sketch_shapes(shape, r)` is not
None, i.e. r·(m+n) < m·n); elsewhere the optimizer falls back to dense AdamW and there is
nothing to measure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from torch import Tensor

from logra.config import load_config
from logra.experiments.plots import rank_axis
from logra.experiments.report import ClaimRow
from logra.experiments.sketch_error_inputs import (
    embedding_gradient,
    low_rank_matrix,
    power_law_matrix,
    qwen2_gradient_stream,
    synthetic_inputs,
    synthetic_stream,
)
from logra.experiments.sketch_error_measures import (
    METHODS,
    RULES,
    default_rtol,
    direction_rows,
    reconstruction_rows,
)
from logra.experiments.sketch_error_training import training_rows

COLUMNS = ("experiment", "input", "matrix", "m", "n", "rank", "method", "seed", "step", "metric",
           "value")
QWEN_LAYERS = "qwen2 layers"
EMBEDDING = "embedding gradient"
C9_RANK = 64  # the report: embeddings "need r ≥ 64"
C9_REPORTED = ("embedding matrices with extreme aspect ratio (e.g. 151,936×4,096) need r ≥ 64 "
               "to avoid rank starvation")
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


def config(scale: str = "default", **overrides: Any) -> dict[str, Any]:
    """experiments/sketch_error.yaml at `scale`, with `overrides` on top."""
    return load_config("sketch_error", scale, **overrides)


# ---------------------------------------------------------------- the experiment


def aspect_shape(numel: int, aspect: int) -> tuple[int, int]:
    """(m, n) with m·n = numel and m/n = aspect (both must come out integral)."""
    n = math.isqrt(numel // aspect)
    if n * n * aspect != numel:
        raise ValueError(f"aspect_numel {numel} is not aspect·n² for aspect {aspect}")
    return aspect * n, n


def aspect_rows(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every method on the embedding gradient and the power-law control, at every aspect ratio."""
    rows = []
    for aspect in cfg["aspect_ratios"]:
        m, n = aspect_shape(cfg["aspect_numel"], aspect)
        inputs = {
            EMBEDDING: embedding_gradient(m, n, cfg["aspect_tokens"], cfg["aspect_zipf"],
                                          cfg["seed"]),
            f"power law α={cfg['aspect_alpha']:g}": power_law_matrix(m, n, cfg["aspect_alpha"],
                                                                     cfg["seed"]),
        }
        for name, M in inputs.items():
            label = f"{name} {m}×{n}"
            rows += reconstruction_rows("aspect", label, label, M, cfg["aspect_ranks"],
                                        cfg["sketch_seeds"], cfg["oversample_ratio"])
    return rows


def run(cfg: dict[str, Any]) -> pd.DataFrame:
    """All four experiments (module docstring) as one tidy DataFrame with COLUMNS."""
    ranks, seeds, ratio = cfg["ranks"], cfg["sketch_seeds"], cfg["oversample_ratio"]
    betas, lr = tuple(cfg["betas"]), cfg["direction_lr"]
    m, n = cfg["synthetic_shape"]
    rows: list[dict[str, Any]] = []

    families: dict[str, Callable[[int], Tensor]] = {}
    for k in cfg["low_ranks"]:
        families[f"rank {k}"] = lambda t, k=k: low_rank_matrix(m, n, k, cfg["seed"] + 10_000 + t)
    for alpha in cfg["power_law_alphas"]:
        families[f"power law α={alpha:g}"] = (
            lambda t, a=alpha: power_law_matrix(m, n, a, cfg["seed"] + 10_000 + t))
    for name, M in synthetic_inputs(cfg).items():
        rows += reconstruction_rows("reconstruction", name, name, M, ranks, seeds, ratio)
        stream = synthetic_stream(M, families[name], cfg["stream_steps"], cfg["stream_noise"])
        rows += direction_rows(name, {name: stream}, ranks, lr, betas)

    qwen = qwen2_gradient_stream(cfg)
    for matrix, grads in qwen.items():
        rows += reconstruction_rows("reconstruction", _qwen_input(matrix), matrix, grads[0],
                                    ranks, seeds, ratio)
    groups: dict[str, dict[str, list[Tensor]]] = {}
    for matrix, grads in qwen.items():
        groups.setdefault(_qwen_input(matrix), {})[matrix] = grads
    for name, streams in groups.items():
        rows += direction_rows(name, streams, ranks, lr, betas)

    rows += aspect_rows(cfg)
    rows += training_rows(cfg)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _qwen_input(parameter_name: str) -> str:
    """The input a Qwen2 weight is reported under: its own name for embed/lm_head, else layers."""
    if "embed_tokens" in parameter_name:
        return "qwen2 embed_tokens"
    if "lm_head" in parameter_name:
        return "qwen2 lm_head"
    return QWEN_LAYERS


# ---------------------------------------------------------------- summaries


def summarize(frame: pd.DataFrame, experiment: str, metric: str) -> pd.DataFrame:
    """Mean over seeds and steps per matrix, then median over the matrices of an input.

    Returns columns input, m, n, method, rank, value (m, n of the first matrix of the input).
    """
    sel = frame[(frame.experiment == experiment) & (frame.metric == metric)]
    per_matrix = sel.groupby(["input", "matrix", "method", "rank"], sort=False).agg(
        m=("m", "first"), n=("n", "first"), value=("value", "mean")).reset_index()
    return per_matrix.groupby(["input", "method", "rank"], sort=False).agg(
        m=("m", "first"), n=("n", "first"), value=("value", "median")).reset_index()


def error_table(frame: pd.DataFrame, ranks: Iterable[int]) -> pd.DataFrame:
    """Relative error and cosine with the truth per input and method at `ranks` (wide)."""
    ranks = list(ranks)
    parts = []
    for metric, label in (("rel_error", "error"), ("cosine", "cosine")):
        s = summarize(frame, "reconstruction", metric)
        s = s[s["rank"].isin(ranks)]
        wide = s.pivot_table(index=["input", "method"], columns="rank", values="value",
                             sort=False)
        wide.columns = [f"{label} r={r}" for r in wide.columns]
        parts.append(wide)
    table = pd.concat(parts, axis=1).reset_index()
    table = table.reindex(columns=["input", "method",
                                   *[f"{lab} r={r}" for lab in ("error", "cosine") for r in ranks]])
    return _sorted(table, frame)


def direction_table(frame: pd.DataFrame, ranks: Iterable[int]) -> pd.DataFrame:
    """Mean cosine of each rule's update with AdamW's per input at `ranks` (wide)."""
    ranks = list(ranks)
    s = summarize(frame, "direction", "cosine")
    s = s[s["rank"].isin(ranks)]
    wide = s.pivot_table(index=["input", "method"], columns="rank", values="value", sort=False)
    wide.columns = [f"cos vs AdamW r={r}" for r in wide.columns]
    return _sorted(wide.reset_index(), frame)


def aspect_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Relative error per family, method, m×n and rank of the aspect sweep (wide in rank)."""
    s = summarize(frame, "aspect", "rel_error")
    s = s.assign(shape=[f"{m}×{n}" for m, n in zip(s.m, s.n, strict=True)], aspect=s.m // s.n)
    s["input"] = s["input"].str.replace(r" \d+×\d+$", "", regex=True)
    wide = s.pivot_table(index=["input", "method", "aspect", "shape"], columns="rank",
                         values="value", sort=False)
    wide.columns = [f"error r={r}" for r in wide.columns]
    return _sorted(wide.reset_index(), frame[frame.experiment == "aspect"],
                   by=("input", "method", "aspect"))


def training_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Final loss per problem and rule, and the classifier's test accuracy."""
    sel = frame[frame.experiment == "training"]
    loss = sel[sel.metric == "loss"]
    final = loss[loss.step == loss.step.max()].pivot_table(index="method", columns="input",
                                                           values="value", sort=False)
    final.columns = [f"final loss, {c}" for c in final.columns]
    accuracy = sel[sel.metric == "accuracy"].set_index("method")["value"]
    final["test accuracy, mlp classifier"] = accuracy
    return final.reset_index().rename(columns={"method": "rule"})


def _sorted(table: pd.DataFrame, frame: pd.DataFrame, by: tuple[str, ...] = ("input", "method")
            ) -> pd.DataFrame:
    """Rows by input in the order measured (family order for the aspect sweep), then by method
    in the order of METHODS and RULES, then by any further columns of `by`."""
    families = frame["input"].str.replace(r" \d+×\d+$", "", regex=True).drop_duplicates()
    ranks = {"input": list(families), "method": [*METHODS, *RULES]}

    def key(column: pd.Series) -> pd.Series:
        return column.map(ranks[column.name].index) if column.name in ranks else column

    return table.sort_values(list(by), key=key).reset_index(drop=True)


# ---------------------------------------------------------------- claim C9


def c9_claim(frame: pd.DataFrame, cfg: dict[str, Any], threshold: float | None = None
             ) -> ClaimRow:
    """Claim C9, judged from the aspect sweep by a fixed rule.

    Let e(a, r) be the relative error, capped at 1 and then averaged over sketch seeds, of the
    optimizer's own reconstruction — Nyström with the default truncation rtol — of the synthetic
    embedding gradient at aspect a = m/n (numel fixed) and rank r. (An error of 1 is what M̂ = 0
    achieves: beyond it nothing is left to starve, and the oblique projection's blow-ups would
    otherwise decide the verdict.) The aspect penalty at r is
        Δ(r) = e(a_max, r) − e(a_min, r)
    (a_max the most extreme aspect tested, ≥ 37 like 151,936/4,096 at default scale; a_min = 1),
    and the extreme matrix is "starved" at r when Δ(r) > τ (τ = config c9_threshold, 0.1).
    Then, over the tested ranks below and at-or-above C9_RANK = 64:
        reproduced      starved at the largest r < 64 and starved at no r ≥ 64
        partly          starved at some r < 64, but the above fails (r ≥ 64 does not cure it)
        not reproduced  starved at no r < 64: extreme aspect costs no more than a square matrix
    The claim is about the aspect ratio, so the square matrix of the same numel and token batch
    is the baseline; an error that is large at every aspect is not "rank starvation of
    embeddings". Raises ValueError if the sweep has no rank on one side of 64.
    """
    tau = cfg["c9_threshold"] if threshold is None else threshold
    err = _aspect_errors(frame, "nystrom_truncated", cap=1.0)
    opt = _aspect_errors(frame, "svd")
    a_min, a_max = min(err.columns), max(err.columns)
    ranks = sorted(err.index)
    low, high = [r for r in ranks if r < C9_RANK], [r for r in ranks if r >= C9_RANK]
    if not low or not high:
        raise ValueError(f"C9 needs aspect_ranks on both sides of {C9_RANK}, got {ranks}")
    penalty = err[a_max] - err[a_min]
    starved = penalty > tau
    if not starved[low].any():
        verdict = "not reproduced"
    elif starved[max(low)] and not starved[high].any():
        verdict = "reproduced"
    else:
        verdict = "partly"
    m, n = aspect_shape(cfg["aspect_numel"], a_max)
    m1, n1 = aspect_shape(cfg["aspect_numel"], a_min)
    shown = [max(low), min(high)]
    detail = "; ".join(
        f"r={r}: {err.at[r, a_max]:.2f} vs {err.at[r, a_min]:.2f} "
        f"(SVD optimum {opt.at[r, a_max]:.2f} vs {opt.at[r, a_min]:.2f})" for r in shown)
    starved_at = [int(r) for r in ranks if starved[r]]
    reproduced = (
        f"relative error (capped at 1) of truncated Nyström (rtol={default_rtol():g}) on an "
        f"embedding gradient of {cfg['aspect_tokens']} Zipfian tokens, {m}×{n} vs {m1}×{n1}: "
        f"{detail}; the extreme aspect is worse by more than {tau:g} at "
        + (f"r ∈ {starved_at}" if starved_at else "no tested rank")
    )
    return ClaimRow(claim="C9", reported=C9_REPORTED, reproduced=reproduced,
                    scale=f"{cfg['scale']} (numel {cfg['aspect_numel']:,}, aspect ≤ {a_max}:1)",
                    verdict=verdict)


def _aspect_errors(frame: pd.DataFrame, method: str, cap: float = math.inf) -> pd.DataFrame:
    """Relative error of `method` on the embedding gradient: index rank, columns aspect m/n.

    Each measurement is capped at `cap` before the mean over seeds.
    """
    s = summarize(frame.assign(value=frame.value.clip(upper=cap)), "aspect", "rel_error")
    s = s[s["input"].str.startswith(EMBEDDING) & (s["method"] == method)]
    s = s.assign(aspect=s.m // s.n)
    return s.pivot_table(index="rank", columns="aspect", values="value")


# ---------------------------------------------------------------- figures


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

    `reference` = (y, label) draws a labelled horizontal line on every panel.
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


def plot_error_vs_rank(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """The main figure: ‖M − M̂‖_F/‖M‖_F against r for every input and method."""
    return plot_vs_rank(frame, "reconstruction", "rel_error", METHODS,
                        "relative error ‖M−M̂‖_F / ‖M‖_F", True,
                        f"Reconstruction error of rank-r sketches (mean of "
                        f"{len(cfg['sketch_seeds'])} sketch seeds; errors of 0 drawn at {FLOOR:g})",
                        method_labels(cfg["oversample_ratio"]), reference=(1.0, "M̂ = 0"))


def plot_cosine_vs_rank(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Cosine ⟨M, M̂⟩/(‖M‖‖M̂‖) against r for every input and method."""
    return plot_vs_rank(frame, "reconstruction", "cosine", METHODS, "cosine(M̂, M)", False,
                        "Cosine of the reconstruction with the true matrix",
                        method_labels(cfg["oversample_ratio"]))


def plot_direction_vs_rank(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Cosine between each sketched rule's update and AdamW's, mean over the stream."""
    return plot_vs_rank(frame, "direction", "cosine", RULES[1:], "cosine(update, AdamW update)",
                        False, f"Update direction against dense AdamW on the same gradients "
                        f"(mean over {cfg['stream_steps']} steps)", method_labels())


def plot_aspect(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Relative error against aspect ratio m/n at fixed numel, one line per rank.

    Rows: the embedding gradient and the power-law control; columns: the SVD optimum, the
    optimizer's truncated Nyström, and Nyström with an oversampled left sketch.
    """
    s = summarize(frame, "aspect", "rel_error")
    s = s.assign(aspect=s.m // s.n, family=s["input"].str.replace(r" \d+×\d+$", "", regex=True))
    families = list(s.family.drop_duplicates())
    methods = ("svd", "nystrom_truncated", "nystrom_oversampled")
    labels = method_labels(cfg["oversample_ratio"])
    fig, axes = plt.subplots(len(families), len(methods), figsize=(4.3 * len(methods),
                             3.4 * len(families)), squeeze=False, sharex=True, sharey="row")
    ranks = sorted(s["rank"].unique())
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(ranks)))
    for row, family in zip(axes, families, strict=True):
        for ax, method in zip(row, methods, strict=True):
            for colour, r in zip(colours, ranks, strict=True):
                line = s[(s.family == family) & (s.method == method) & (s["rank"] == r)]
                line = line.sort_values("aspect")
                ax.plot(line.aspect, line.value.clip(lower=FLOOR), marker="o", color=colour,
                        label=f"r = {r}")
            ax.axhline(1.0, color="0.55", linewidth=0.9, linestyle=(0, (5, 3)), zorder=0)
            rank_axis(ax, s.aspect.unique())
            ax.set_yscale("log")
            ax.set_title(f"{family}: {labels[method]}", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
        row[0].set_ylabel("relative error ‖M−M̂‖_F / ‖M‖_F")
    for ax in axes[-1]:
        ax.set_xlabel("aspect ratio m/n")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False,
               title="sketch rank")
    fig.suptitle(f"Claim C9: error against aspect ratio at fixed size m·n = "
                 f"{cfg['aspect_numel']:,} (dashed: error of M̂ = 0)")
    fig.tight_layout()
    return fig


def plot_training(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Training loss against step for each problem and rule (log loss axis)."""
    sel = frame[(frame.experiment == "training") & (frame.metric == "loss")]
    problems = list(sel.input.drop_duplicates())
    fig, axes = plt.subplots(1, len(problems), figsize=(5.4 * len(problems), 4.0), squeeze=False)
    style, labels = _style(), method_labels()
    ylabels = {"least squares": "full-batch MSE", "mlp classifier": "training cross-entropy (nats)"}
    lrs = {"least squares": cfg["lstsq_lr"], "mlp classifier": cfg["mlp_lr"]}
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
                     f"r={cfg['train_rank']})", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Training with sketched optimizers (no KL control, weight decay 0)")
    fig.tight_layout()
    return fig


FIGURES: dict[str, Callable[[pd.DataFrame, dict[str, Any]], plt.Figure]] = {
    "sketch_error": plot_error_vs_rank,
    "sketch_error_cosine": plot_cosine_vs_rank,
    "sketch_error_direction": plot_direction_vs_rank,
    "sketch_error_aspect": plot_aspect,
    "sketch_error_training": plot_training,
}
