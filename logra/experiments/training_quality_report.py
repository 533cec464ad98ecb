"""Notebook 10's tables and figures, from the runs `logra.experiments.training_quality` trains.

Kept apart from the training code so that a change here redraws the tables without training
again (a run's cache key covers `training_quality.py` and `quality_data.py`, not this module).

Every comparison is paired by seed: a method's test loss minus the reference's on the same
seed, with a 95 % t interval over the seeds and the paired t-test's p-value, adjusted by Holm
over the tests of one table (`logra.stats.holm`); a verdict is "lower" or "higher" where the
adjusted p < 0.05, else "no difference". Where the runs were made on several floating-point
paths (`logra.experiments.floating_point`), a table shows the first path's numbers and prints a
verdict that differs between the paths as a tie (`across_paths`, `path_verdicts`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from logra.experiments import floating_point
from logra.experiments.training_quality import (
    REFERENCE,
    Config,
    chosen_tables,
    final_runs,
    label,
    lr_choices,
    reads_chosen,
)
from logra.optimizers import REGISTRY
from logra.stats import holm, paired_t

T_95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}  # two-sided 95 %
# Student t quantiles by degrees of freedom; between entries the next smaller df is used


RULE_COLORS = {"gain": "tab:red", "nystrom": "lightcoral", "blend": "darkred",
               "subspace": "tab:pink", "channel": "teal"}


def color(cfg: Config, method: str) -> str:
    """The method's `color`, else the registry's colour: a shade of LoGRA's red per rule, gold
    with dense embeddings."""
    entry = cfg.methods[method]
    if "color" in entry:
        return entry["color"]
    if entry.get("dense_embeddings"):
        return "gold"
    return RULE_COLORS.get(entry.get("reconstruction"), REGISTRY[entry["optimizer"]].color)


# ------------------------------------------------------------------------------ tables

def _interval(differences: np.ndarray) -> tuple[float, float]:
    """Mean and 95 % t half-width of paired differences (nan half-width for one seed)."""
    n = len(differences)
    if n < 2:
        return float(differences.mean()), math.nan
    t = T_95[max(df for df in T_95 if df <= n - 1)]
    return float(differences.mean()), t * float(differences.std(ddof=1)) / math.sqrt(n)


def _delta_text(mean: float, half: float) -> str:
    """A paired difference and its 95 % half-width ("+0.0123 ± 0.0045"; no ± with one seed)."""
    return f"{mean:+.4f}" if math.isnan(half) else f"{mean:+.4f} ± {half:.4f}"


def _verdict(mean: float, p_holm: float, reference: str = "AdamW", alpha: float = 0.05) -> str:
    """"lower/higher than `reference`" where the Holm-adjusted p-value is below `alpha`, else
    "no difference" (nan p: a single seed, no test)."""
    if math.isnan(p_holm):
        return "one seed: no test"
    if p_holm >= alpha:
        return "no difference"
    return f"lower than {reference}" if mean < 0 else f"higher than {reference}"


def _paired(final: pd.DataFrame, method: str, reference: str
            ) -> tuple[float, float, float, float]:
    """(mean ratio, mean difference, 95 % t half-width, two-sided paired-t p) of `method`'s test
    loss against `reference`'s on the seeds both ran (nan half-width and p below two seeds)."""
    mine = final[final["method"] == method].set_index("seed")["test_loss"]
    theirs = final[final["method"] == reference].set_index("seed")["test_loss"]
    seeds = mine.index.intersection(theirs.index)
    mean, half = _interval((mine[seeds] - theirs[seeds]).to_numpy())
    ratio = float((mine[seeds] / theirs[seeds]).mean())
    if len(seeds) < 2 or method == reference:
        return ratio, mean, half, math.nan
    return ratio, mean, half, paired_t(theirs[seeds].to_numpy(), mine[seeds].to_numpy()).p


def _holm_column(pvalues: list[float]) -> list[float]:
    """Holm's adjustment over the tests of one table (`logra.stats.holm`); nan stays nan."""
    tested = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    adjusted = holm([pvalues[i] for i in tested]) if tested else []
    out = [math.nan] * len(pvalues)
    for i, p in zip(tested, adjusted, strict=True):
        out[i] = p
    return out


def rules_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Every LoGRA method paired by seed against `headline` (LoGRA's default rule)."""
    methods = [m for m, e in cfg.methods.items()
               if e["optimizer"] == "logra" and m != cfg.headline]
    return paired_table(frame, cfg, methods, cfg.headline, "rule")


def recipe_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The `recipe_ladder` methods present (LoGRA with APOLLO's recipe added a piece at a
    time) paired by seed against `recipe_reference`: which piece closes the gap (empty when
    the reference is not among the methods)."""
    if cfg.recipe_reference not in cfg.methods:
        return pd.DataFrame()
    methods = [m for m in cfg.recipe_ladder if m in cfg.methods]
    return paired_table(frame, cfg, methods, cfg.recipe_reference, "optimizer")


def paired_table(frame: pd.DataFrame, cfg: Config, methods: list[str],
                 reference: str, name: str) -> pd.DataFrame:
    """Each of `methods` at its chosen rate against `reference`, paired by seed: the mean loss
    ratio, the mean difference with its 95 % t interval, the paired-t p-value adjusted by Holm
    over the table's tests, and the verdict at p < 0.05."""
    final = final_runs(frame)
    base = label(cfg, reference)
    tests = [_paired(final, method, reference) for method in methods]
    adjusted = _holm_column([p for *_, p in tests])
    rows = []
    for method, (ratio, mean, half, _), p in zip(methods, tests, adjusted, strict=True):
        rows.append({name: label(cfg, method), f"loss / {base}": ratio,
                     f"Δ vs {base} (95 % CI)": _delta_text(mean, half), "p (Holm)": p,
                     "verdict": _verdict(mean, p, base)})
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """One row per method at its chosen rate: test loss over seeds, paired against AdamW's
    (Holm's correction over the table's tests)."""
    final = final_runs(frame)
    reference = final[final["method"] == REFERENCE].set_index("seed")
    choices = lr_choices(frame, cfg)
    tests = {method: _paired(final, method, REFERENCE) for method in cfg.methods}
    adjusted = dict(zip(tests, _holm_column([p for *_, p in tests.values()]), strict=True))
    rows = []
    for method, (ratio, mean_diff, half, _) in tests.items():
        mine = final[final["method"] == method].set_index("seed")
        rows.append({
            "optimizer": label(cfg, method),
            "best lr": float(mine["lr"].iloc[0]),
            "lr at grid edge": bool(choices.loc[(method, cfg.rank), "at_edge"]),
            "test loss": mine["test_loss"].mean(),
            "± sd": mine["test_loss"].std(ddof=1) if len(mine) > 1 else math.nan,
            "seeds": len(mine),
            "loss / AdamW": ratio,
            "Δ vs AdamW (95 % CI)": _delta_text(mean_diff, half),
            "p (Holm)": adjusted[method],
            "verdict": ("reference" if method == REFERENCE
                        else _verdict(mean_diff, adjusted[method])),
            "state MB": mine["state_bytes"].mean() / 1e6,
            "state / AdamW": mine["state_bytes"].mean() / reference["state_bytes"].mean(),
            "step ms": mine["step_ms"].median(),
            "time / AdamW": mine["step_ms"].median() / reference["step_ms"].median(),
        })
    return pd.DataFrame(rows)


def sweep_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Every learning rate tried, at the sweep seed; with `reads_chosen`, the rows of the sweep
    table the rates were read from for `cfg`'s methods, as they are."""
    if reads_chosen(cfg):
        table = pd.read_csv(chosen_tables(cfg)["sweep"])
        labels = [label(cfg, method) for method in cfg.methods]
        return table[table["optimizer"].isin(labels)].reset_index(drop=True)
    runs = frame[frame["study"] == "sweep"].sort_values(["method", "lr"])
    table = runs[["label", "lr", "validation_loss", "test_loss", "diverged", "chosen"]]
    order = {m: i for i, m in enumerate(cfg.methods)}
    table = table.assign(order=runs["method"].map(order)).sort_values(["order", "lr"])
    return table.drop(columns="order").rename(columns={
        "label": "optimizer", "validation_loss": "validation loss", "test_loss": "test loss"})


def rank_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The rank-sized optimizers at every rank (chosen rate, sweep seed)."""
    rows = frame[frame["method"].isin(cfg.rank_methods) & frame["chosen"]
                 & (frame["seed"] == cfg.sweep_seed)].drop_duplicates(["method", "rank"])
    rows = rows.sort_values(["method", "rank"])
    reference = frame[(frame["method"] == REFERENCE) & frame["chosen"]
                      & (frame["seed"] == cfg.sweep_seed)].iloc[0]
    at_edge = lr_choices(frame, cfg)["at_edge"]
    return pd.DataFrame({
        "optimizer": rows["label"], "rank": rows["rank"], "best lr": rows["lr"],
        "lr at edge": [bool(at_edge[r["method"], r["rank"]]) for r in rows.to_dict("records")],
        "state MB": rows["state_bytes"] / 1e6,
        "state / AdamW": rows["state_bytes"] / reference["state_bytes"],
        "test loss": rows["test_loss"], "loss / AdamW": rows["test_loss"] / reference["test_loss"],
    })


def _rank_runs(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The rank-sized optimizers' runs at each rank's chosen rate, one per (method, rank, seed)
    of `rank_seeds` (the base rank's are the seeds study's)."""
    runs = frame[frame["method"].isin(cfg.rank_methods) & frame["chosen"]
                 & frame["seed"].isin(cfg.rank_seeds)]
    return runs.drop_duplicates(["method", "rank", "seed"])


def rank_spread(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per rank-sized optimizer and rank: state MB, and the test loss's mean, lowest and
    highest over `rank_seeds`."""
    runs = _rank_runs(frame, cfg).assign(state_mb=lambda r: r["state_bytes"] / 1e6)
    spread = runs.groupby(["method", "rank"]).agg(
        state_mb=("state_mb", "mean"), mean=("test_loss", "mean"), low=("test_loss", "min"),
        high=("test_loss", "max"), seeds=("seed", "nunique"))
    return spread.reset_index()


def losses_at_bytes(frame: pd.DataFrame, cfg: Config) -> tuple[float, pd.DataFrame]:
    """(target, losses): the target is `headline`'s state MB at the base rank; `losses` has one
    row per rank-sized method and seed of `rank_seeds` with its test and validation loss
    interpolated at the target, linearly in log bytes between its ranks at that seed (a method
    whose ranks do not span the target has no row)."""
    runs = _rank_runs(frame, cfg)
    at_base = runs[(runs["method"] == cfg.headline) & (runs["rank"] == cfg.rank)]
    target = float(at_base["state_bytes"].mean()) / 1e6
    rows = []
    for (method, seed), of in runs.groupby(["method", "seed"], sort=False):
        of = of.sort_values("state_bytes")
        x = np.log(of["state_bytes"].to_numpy() / 1e6)
        if not x.min() <= math.log(target) <= x.max():
            continue
        rows.append({"method": method, "seed": seed, **{
            column: float(np.interp(math.log(target), x, of[column].to_numpy()))
            for column in ("test_loss", "validation_loss")}})
    return target, pd.DataFrame(rows, columns=["method", "seed", "test_loss", "validation_loss"])


def equal_bytes(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Each rank-sized optimizer's test loss at `headline`'s state bytes (`losses_at_bytes`):
    mean, sd and range over `rank_seeds`, and paired by seed against LoGRA's best there (the
    LoGRA method with the lowest mean *validation* loss at those bytes: chosen on one split,
    reported on the other), Holm over the table's tests, verdict at p < 0.05."""
    target, losses = losses_at_bytes(frame, cfg)
    present = [m for m in cfg.rank_methods if m in set(losses["method"])]
    validation = losses.groupby("method")["validation_loss"].mean()
    logra = [m for m in present if cfg.methods[m]["optimizer"] == "logra"]
    best = min(logra or [cfg.headline], key=lambda m: validation[m])
    others = [m for m in present if m != best]
    tests = {m: _paired(losses, m, best) for m in others}
    adjusted = dict(zip(others, _holm_column([p for *_, p in tests.values()]), strict=True))
    base = label(cfg, best)
    rows = []
    for method in present:
        mine = losses.loc[losses["method"] == method, "test_loss"]
        row = {"optimizer": label(cfg, method), f"test loss at {target:.3g} MB": mine.mean(),
               "± sd": mine.std(ddof=1) if len(mine) > 1 else math.nan,
               "seed range": f"{mine.min():.4f}–{mine.max():.4f}", "seeds": len(mine)}
        if method == best:
            row.update({f"Δ vs {base} (95 % CI)": "", "p (Holm)": math.nan,
                        "verdict": "reference: LoGRA's best here (by validation loss)"})
        else:
            _, mean, half, _ = tests[method]
            row.update({f"Δ vs {base} (95 % CI)": _delta_text(mean, half),
                        "p (Holm)": adjusted[method],
                        "verdict": _verdict(mean, adjusted[method], base)})
        rows.append(row)
    return pd.DataFrame(rows)


Table = Callable[[pd.DataFrame, Config], pd.DataFrame]


def across_paths(make: Table, runs: Mapping[str, pd.DataFrame], cfg: Config) -> pd.DataFrame:
    """`make(frame, cfg)` of the first path's runs, its verdicts kept where the runs of every
    path of `runs` (path -> runs) give the same and a tie where they differ
    (`floating_point.verdicts`)."""
    return floating_point.verdicts({path: make(frame, cfg) for path, frame in runs.items()})


def path_verdicts(runs: Mapping[str, pd.DataFrame], cfg: Config) -> pd.DataFrame:
    """Every verdict of the paired tables (the summary against AdamW, the rules, the recipe
    ladder, equal bytes) under each path of `runs`, and the one printed
    (`floating_point.verdict_table`)."""
    tables: dict[str, Table] = {"summary": summary, "rules": rules_table,
                                "recipe": recipe_table, "equal bytes": equal_bytes}
    return floating_point.verdict_table(
        {name: {path: make(frame, cfg) for path, frame in runs.items()}
         for name, make in tables.items()})


def ranking_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Each method's validation loss at its chosen rate (mean over seeds, and their sd at the
    last) at the last two evaluations, and its place in the ranking at each: a run long enough
    to rank the methods ranks them the same at both (`ranking_verdict`). A seed that diverged
    by an evaluation (no finite loss there) makes its method's mean infinite there: it ranks
    last, rather than leaving the mean to the seeds that survived."""
    final = final_runs(frame)
    reference = pd.DataFrame(final.loc[final["method"] == REFERENCE, "curve"].iloc[0])
    before, last = reference["step"].iloc[-2], reference["step"].iloc[-1]
    rows = {}
    for method in cfg.methods:
        curves = final.loc[final["method"] == method, "curve"]
        # seed x step; a seed that diverged before a step has no loss there (nan)
        losses = pd.DataFrame([{p["step"]: p["validation_loss"] for p in c} for c in curves])
        at = losses.reindex(columns=[before, last])
        finite = at.map(math.isfinite).all()  # a diverged seed makes its method's mean inf
        mean = at.mean().where(finite, math.inf)
        sd = at[last].std(ddof=1) if finite[last] else math.nan
        rows[label(cfg, method)] = [mean[before], mean[last], sd]
    table = pd.DataFrame(rows, index=[f"loss at step {before}", f"loss at step {last}",
                                      f"seed sd at step {last}"]).T
    table[f"place at step {before}"] = table.iloc[:, 0].rank(method="min").astype(int)
    table[f"place at step {last}"] = table.iloc[:, 1].rank(method="min").astype(int)
    changed, _ = _swaps(table.iloc[:, 0].tolist(), table.iloc[:, 1].tolist(),
                        table.iloc[:, 2].fillna(0.0).tolist())
    table[SWAPS_BEYOND_SD] = [sum(i in pair for pair in changed) for i in range(len(table))]
    return table.rename_axis("optimizer").reset_index()


SWAPS_BEYOND_SD = "swaps beyond the seed sd"  # per optimizer: what a regeneration must keep


def _swaps(before: list[float], last: list[float], sd: list[float]
           ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The pairs (i, j) whose order differs between the two evaluations, split into changes
    (at the last their mean losses differ by more than the larger of their seed sds) and ties
    changing order (within it). A loss that is not finite (a diverged run) ranks last; two of
    them are a tie."""
    before = [x if math.isfinite(x) else math.inf for x in before]
    last = [x if math.isfinite(x) else math.inf for x in last]
    swaps = [(i, j) for i in range(len(before)) for j in range(i + 1, len(before))
             if (before[i] - before[j]) * (last[i] - last[j]) < 0]
    beyond = [(i, j) for i, j in swaps if abs(last[i] - last[j]) > max(sd[i], sd[j])]
    return beyond, [pair for pair in swaps if pair not in beyond]


def ranking_verdict(table: pd.DataFrame) -> str:
    """Whether `ranking_table`'s ranking is the same at its last two evaluations.

    A pair that swaps places counts as a change when, at the last evaluation, their mean losses
    differ by more than the larger of their seed sds; a swap inside that is a tie changing
    order. Returns the verdict, Kendall's τ between the two rankings and the swaps of each kind.
    """
    from scipy.stats import kendalltau

    names = table["optimizer"].tolist()
    a, b = table.iloc[:, 1].tolist(), table.iloc[:, 2].tolist()
    steps = " → ".join(c.removeprefix("loss at ") for c in table.columns[1:3])
    beyond, within = _swaps(a, b, table.iloc[:, 3].fillna(0.0).tolist())
    changed = [f"{names[i]} ↔ {names[j]}" for i, j in beyond]
    ties = [f"{names[i]} ↔ {names[j]}" for i, j in within]
    if not changed and not ties:
        return f"ranking stable ({steps}): no two optimizers swap places"
    tau = kendalltau(a, b).statistic
    verdict = "ranking not yet stable" if changed else "ranking stable up to ties"
    return (f"{verdict} ({steps}, Kendall τ {tau:.3f}): {len(changed)} swap(s) beyond the seed "
            f"sd{': ' + '; '.join(changed) if changed else ''}; {len(ties)} within it"
            f"{': ' + '; '.join(ties) if ties else ''}")


def goal(frame: pd.DataFrame, cfg: Config, method: str | None = None) -> str:
    """The issue's goal, checked for `method` (default `headline`): within `goal_ratio` of
    AdamW's test loss with at most `goal_state` of its state, and ahead of GaLore and APOLLO
    at equal bytes (the headline's bytes at the base rank; `method` must be in rank_methods)."""
    method = method or cfg.headline
    table = summary(frame, cfg).set_index("optimizer")
    row = table.loc[label(cfg, method)]
    close = row["loss / AdamW"] <= 1 + cfg.goal_ratio
    small = row["state / AdamW"] <= cfg.goal_state
    at_bytes = equal_bytes(frame, cfg).set_index("optimizer").iloc[:, 0]
    mine = at_bytes.get(label(cfg, method), math.nan)
    others = {k: v for k, v in at_bytes.items()
              if k in (REGISTRY["galore"].label, REGISTRY["apollo"].label)}
    compared = [v for v in others.values() if not math.isnan(v)]
    ahead = bool(compared) and not math.isnan(mine) and all(mine < v for v in compared)
    return (f"{label(cfg, method)}: loss/AdamW {row['loss / AdamW']:.4f} "
            f"({'within' if close else 'outside'} {cfg.goal_ratio:.0%}), state/AdamW "
            f"{row['state / AdamW']:.3f} ({'≤' if small else '>'} {cfg.goal_state:.0%}); "
            f"at equal bytes {mine:.4f} vs "
            + ", ".join(f"{k} {v:.4f}" for k, v in others.items())
            + f" ({'ahead' if ahead else 'not ahead'}, one seed)")


# ------------------------------------------------------------------------------ figures

def _unit(cfg: Config) -> str:
    return "byte" if cfg.task == "text" else "completion token"


def plot_curves(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Validation loss against step at each method's chosen rate: the mean over seeds, and
    their range shaded."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    final = final_runs(frame)
    for method in cfg.methods:
        curves = [pd.DataFrame(c) for c in final.loc[final["method"] == method, "curve"]]
        by_step = pd.concat(curves).groupby("step")["validation_loss"]
        mean = by_step.mean()
        ax.plot(mean.index, mean.to_numpy(), label=label(cfg, method), color=color(cfg, method),
                lw=2 if method in (REFERENCE, cfg.headline) else 1.2)
        ax.fill_between(mean.index, by_step.min().to_numpy(), by_step.max().to_numpy(),
                        color=color(cfg, method), alpha=0.15, lw=0)
    reference = final_runs(frame).query("method == @REFERENCE")["test_loss"].mean()
    ax.set_ylim(reference - 0.1, reference + 1.2)
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation loss (nats / {_unit(cfg)})")
    what = "Byte-level LM on Shakespeare" if cfg.task == "text" else "SFT on gsm-synth"
    ax.set_title(f"{what}, {cfg.steps} steps, each at its best lr")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_pareto(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Test loss against optimizer-state bytes: every method (seed mean ± sd) and the
    rank-sized ones at every rank (mean and range over `rank_seeds`)."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    table = summary(frame, cfg)
    reference = table.loc[table["optimizer"] == label(cfg, REFERENCE), "test loss"].iloc[0]
    top = reference + 0.6
    for method, row in zip(cfg.methods, table.to_dict("records"), strict=True):
        loss = row["test loss"]
        if loss > top:  # off the chart: drawn at its edge, with its value
            ax.plot(row["state MB"], top, "^", color=color(cfg, method), label=row["optimizer"])
            ax.annotate(f"{loss:.2f}", (row["state MB"], top), fontsize=6, xytext=(3, -8),
                        textcoords="offset points")
            continue
        ax.errorbar(row["state MB"], loss, yerr=0 if math.isnan(row["± sd"]) else row["± sd"],
                    fmt="o", color=color(cfg, method), label=row["optimizer"], capsize=3)
    spread = rank_spread(frame, cfg)
    for method in cfg.rank_methods:
        rows = spread[spread["method"] == method].sort_values("state_mb")
        ax.plot(rows["state_mb"], rows["mean"], "--", color=color(cfg, method), lw=1)
        ax.fill_between(rows["state_mb"], rows["low"], rows["high"], color=color(cfg, method),
                        alpha=0.12, lw=0)
    ranks = spread.rename(columns={"state_mb": "state MB", "high": "test loss"})
    for rank, x, y in _rank_labels(ranks):
        ax.annotate(f"r{rank}", (x, y), fontsize=6, xytext=(0, 4), textcoords="offset points",
                    ha="center")
    ax.set_xscale("log")
    ax.set_xlabel("optimizer state (MB, measured)")
    ax.set_ylabel(f"test loss (nats / {_unit(cfg)})")
    lowest = min(table["test loss"].min(), spread["low"].min())
    ax.set_ylim(lowest - 0.03, top + 0.02)
    seeds = int(spread["seeds"].max())
    ax.set_title("Held-out loss against optimizer memory (dashed: rank sweeps, mean and range "
                 f"over {seeds} seed{'s' * (seeds > 1)}; ▲ off the chart)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def _rank_labels(ranks: pd.DataFrame, apart: float = 0.15) -> list[tuple[int, float, float]]:
    """One (rank, state MB, test loss) label per group of `rank_table` rows of one rank whose
    state bytes lie within a factor e^`apart` of the group's first (GaLore, APOLLO and Fira keep
    the same bytes at a rank): at the group's first bytes, above its highest loss."""
    labels: list[tuple[int, float, float]] = []
    for rank, rows in ranks.sort_values("state MB").groupby("rank"):
        start = None
        for x in rows["state MB"]:
            if start is None or math.log(x / start) > apart:
                start = x
                near = rows[np.log(rows["state MB"] / start).between(0, apart)]
                labels.append((int(rank), float(start), float(near["test loss"].max())))
    return labels


def plot_sweep(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Validation loss against learning rate for every method (sweep seed); a loss above the
    axes (a rate far from the best, or diverged) is drawn at its top edge."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    runs = sweep_table(frame, cfg)
    best = runs.groupby("optimizer")["validation loss"].min()
    top = best.max() + 0.5  # every method's best point inside the axes
    for method in cfg.methods:
        rows = runs[runs["optimizer"] == label(cfg, method)].sort_values("lr")
        ax.plot(rows["lr"], rows["validation loss"].fillna(np.inf).clip(upper=top - 0.02), "o-",
                ms=3, color=color(cfg, method), label=label(cfg, method))
    ax.set_xscale("log")
    ax.set_ylim(best.min() - 0.05, top)
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel(f"validation loss (nats / {_unit(cfg)})")
    ax.set_title("Each optimizer's own learning-rate sweep")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
