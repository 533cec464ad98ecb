"""Notebook 04's paired tests, tables, figures and claims (C7, C8), from the runs
`logra.experiments.comparison` plans and trains.

Tests (`paired_table`): each method at its chosen lr against dense AdamW at its own, and every
method against the policy before RL, on the per-problem means over seeds (`logra.stats`:
McNemar for one seed's greedy 0/1 outcomes, else the paired t-test), Holm's correction over the
whole table. The rules of the verdicts are in `c7_claim` and `c8_claim`.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch

from logra.data import get_task
from logra.experiments import grpo_runs
from logra.experiments.comparison import (
    BASE,
    MEASURES,
    NOTEBOOK,
    REFERENCE,
    Config,
    at_chosen,
    choose,
    chosen_lrs_path,
    config,
    grpo_config,
    measured,
    model_name,
    reads_chosen,
    trajectories,
)
from logra.experiments.grpo_runs import Run
from logra.experiments.plots import KL_FLOOR, line_with_band
from logra.experiments.report import ClaimRow, Plot
from logra.methods import METHODS, palette
from logra.models import SCALES
from logra.stats import Paired, holm, holm_cells, mcnemar, paired_t

# The report's numbers (docs/claims.md): C7 gives none at 1.5B/7B, C8 these at 27B, by family.
REPORTED_27B = {"logra": {"gsm": 84.2, "math": 51.7},
                "lora": {"gsm": round(84.2 - 7.6, 1), "math": round(51.7 - 7.3, 1)}}
C7_REPORTED = "at 1.5B and 7B, LoGRA matches or slightly exceeds dense Adam on GSM8K and MATH"
C8_REPORTED = ("27B on 8×80 GB: LoGRA 84.2 % pass@1 on GSM8K, 51.7 % on MATH; LoRA −7.6 / −7.3 "
               "points")


# ---------------------------------------------------------------- the sweep


def sweep_table(runs: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Every run of the sweep: pass@1 before and after (%), final KL, and which lr was chosen
    (`CHOICES`: "chosen", "chosen, at the grid's end" or "not swept"). With `reads_chosen` the
    rows of the table the lrs were read from for `cfg`'s models and methods, as they are."""
    if reads_chosen(cfg):
        table = pd.read_csv(chosen_lrs_path(cfg))
        keep = (table["model"].isin([model_name(m) for m in cfg.models])
                & table["method"].isin([METHODS[m].label for m in cfg.methods]))
        return table[keep].reset_index(drop=True)
    chosen = choose(runs, cfg)
    swept = runs[runs["seed"] == cfg.sweep_seed]
    rows = []
    for r in swept.itertuples():
        if (r.model, r.method) not in chosen.index or r.lr not in cfg.lr_grid[r.method]:
            continue
        pick = chosen.loc[(r.model, r.method)]
        mark = ("" if r.lr != pick["lr"] else "not swept" if pick["grid"] == 1
                else "chosen" if pick["bracketed"] else "chosen, at the grid's end")
        rows.append({"model": model_name(r.model), "method": METHODS[r.method].label,
                     "lr": r.lr, "seed": r.seed, "greedy, %": 100 * r.greedy,
                     "sampled, %": 100 * r.sampled, "final KL": r.final_kl, "lr choice": mark})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- paired tests


def _per_problem(problems: pd.DataFrame, model: str, method: str, lr: float | None
                 ) -> pd.DataFrame:
    """Per problem: the mean over seeds of greedy and sampled pass@1 of one method's runs."""
    rows = problems[(problems["model"] == model) & (problems["method"] == method)]
    if lr is not None:
        rows = rows[rows["lr"] == lr]
    return rows.groupby("problem")[list(MEASURES)].agg(["mean", "count"])


def paired(a: pd.DataFrame, b: pd.DataFrame, measure: str) -> Paired:
    """b − a on the problems both evaluated with `measure` (`_per_problem` frames): McNemar's
    test on one seed's greedy 0/1 outcomes, else the paired t-test of the per-problem means."""
    both = a[measure]["mean"].notna() & b[measure]["mean"].reindex(a.index).notna()
    x, y = a.loc[both, (measure, "mean")], b[measure]["mean"].reindex(a.index)[both]
    one_seed = a.loc[both, (measure, "count")].max() == 1 and b[measure]["count"].max() == 1
    test = mcnemar if measure == "greedy" and one_seed else paired_t
    return test(x.to_numpy(), y.to_numpy())


def paired_table(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                 ) -> pd.DataFrame:
    """Per model and method at its chosen lr: greedy and sampled pass@1 (%, mean over seeds
    and problems), the paired difference to dense AdamW (points; NaN for AdamW itself) and to
    the policy before RL, with Holm-adjusted p-values over every test of the table."""
    chosen = choose(runs, cfg)["lr"]
    rows, tests = [], []
    for model in cfg.models:
        base = _per_problem(problems, model, BASE, None)
        reference = _per_problem(problems, model, REFERENCE, chosen[(model, REFERENCE)])
        for method in cfg.methods:
            lr = chosen[(model, method)]
            mine = _per_problem(problems, model, method, lr)
            row: dict[str, Any] = dict(model=model, method=method, lr=lr,
                                       seeds=int(mine["greedy"]["count"].max()))
            for measure in measured(problems):
                gain = paired(base, mine, measure)
                row.update({f"{measure}_before": 100 * gain.a, measure: 100 * gain.b,
                            f"{measure}_gain": 100 * gain.difference})
                tests.append((len(rows), f"{measure}_gain_p", gain.p))
                if method != REFERENCE:
                    versus = paired(reference, mine, measure)
                    row[f"{measure}_vs_dense"] = 100 * versus.difference
                    row[f"{measure}_vs_dense_se"] = 100 * versus.stderr
                    tests.append((len(rows), f"{measure}_vs_dense_p", versus.p))
                else:
                    row[f"{measure}_vs_dense"] = row[f"{measure}_vs_dense_se"] = np.nan
                    row[f"{measure}_vs_dense_p"] = np.nan
            rows.append(row)
    return holm_cells(pd.DataFrame(rows), tests)


def significant(p: float, cfg: Config) -> bool:
    return bool(p < cfg.alpha)


# ---------------------------------------------------------------- tables


def _label(method: str) -> str:
    return "policy before RL" if method == BASE else METHODS[method].label


def _difference_text(value: float, p: float, cfg: Config) -> str:
    if np.isnan(value):
        return "the reference"
    return f"{value:+.1f}" + (" *" if significant(p, cfg) else "")


def _mean_sd(values: pd.Series) -> str:
    values = 100 * values
    return (f"{values.mean():.1f}" if len(values) < 2
            else f"{values.mean():.1f} ± {values.std():.1f}")


def comparison_table(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                     ) -> pd.DataFrame:
    """The paper's shape: one row per method (per model) at its chosen lr: held-out greedy and
    sampled pass@1 (mean ± std over seeds, %), the paired difference to dense AdamW (points;
    * where Holm p < alpha), the reported 27B numbers, state, step time and final KL."""
    tests = paired_table(runs, problems, cfg).set_index(["model", "method"])
    grid = choose(runs, cfg)["grid"]
    final = at_chosen(runs, cfg)
    rows = []
    for model in cfg.models:
        first = tests.loc[(model, REFERENCE)]
        before = {"model": model_name(model), "method": _label(BASE), "lr": "—",
                  **{f"{m} pass@1, %": f"{first[f'{m}_before']:.1f}"
                     for m in measured(problems)}}
        rows.append(before)
        for method in cfg.methods:
            t = tests.loc[(model, method)]
            r = final[(final["model"] == model) & (final["method"] == method)]
            rows.append({
                "model": model_name(model), "method": _label(method),
                "lr": f"{t['lr']:g}" + ("" if grid[(model, method)] > 1 else " (not swept)"),
                **{f"{m} pass@1, %": _mean_sd(r[m]) for m in measured(problems)},
                **{f"{m} vs dense, pts": _difference_text(t[f"{m}_vs_dense"],
                                                          t[f"{m}_vs_dense_p"], cfg)
                   for m in measured(problems)},
                **{f"{task} greedy, %": _mean_sd(r[f"{task} greedy"])
                   for task in cfg.extra_eval_tasks},
                "reported 27B GSM8K, %": _reported(method, "gsm"),
                "reported 27B MATH, %": _reported(method, "math"),
                "optimizer state, MB": f"{r['state_bytes'].mean() / 1e6:.3g}",
                "s/step": f"{r['step_seconds'].median():.2f}",
                "final KL to ref": f"{r['final_kl'].mean():.3g}"})
    return pd.DataFrame(rows).fillna("—")


def _reported(method: str, family: str) -> str:
    value = REPORTED_27B.get(method, {}).get(family)
    return "—" if value is None else f"{value:.1f}"


def tests_table(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                ) -> pd.DataFrame:
    """`paired_table` for the record: every difference (points), its standard error over
    problems and its Holm-adjusted p-value."""
    table = paired_table(runs, problems, cfg)
    table.insert(1, "label", table.pop("method").map(_label))
    table["model"] = table["model"].map(model_name)
    return table


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run with every number (pass@1 in %)."""
    table = runs.copy()
    percent = [c for c in table.columns if c.startswith(("greedy", "sampled"))
               or c.endswith(" greedy")]
    table[percent] = 100 * table[percent]
    table["model"] = table["model"].map(model_name)
    return table


# ---------------------------------------------------------------- claims


def _scale_text(runs: pd.DataFrame, cfg: Config) -> str:
    models = ", ".join(model_name(m) for m in cfg.models)
    config = grpo_config(cfg, Run(model=cfg.models[0], method=REFERENCE,
                                  seed=cfg.seeds[0]))
    source = (f"lrs of the sweep in {cfg.chosen_lrs}" if reads_chosen(cfg)
              else "lrs swept here")
    return (f"{cfg.scale}: {models}, {int(runs['steps'].max())} GRPO steps on "
            f"{config.task} ({config.prompts_per_step} × {config.group_size}), "
            f"{len(cfg.seeds)} seed(s) at each method's chosen lr ({source})")


def _dense_learned(t: pd.Series, cfg: Config) -> bool:
    return any(t[f"{m}_gain"] > 0 and significant(t[f"{m}_gain_p"], cfg)
               for m in MEASURES if f"{m}_gain" in t)


def c7_pairs(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """C7's comparison per (model, measure): pass@1 (%) before RL, of dense AdamW and of LoGRA,
    LoGRA's paired difference to AdamW and its Holm p-value, whether LoGRA "matches or exceeds"
    (not significantly below AdamW), "exceeds" (significantly above), and whether dense AdamW
    learned (significantly above the policy before RL on some measure)."""
    tests = paired_table(runs, problems, cfg).set_index(["model", "method"])
    rows = []
    for model in cfg.models:
        dense, logra = tests.loc[(model, REFERENCE)], tests.loc[(model, "logra")]
        for m in measured(problems):
            diff, p = logra[f"{m}_vs_dense"], logra[f"{m}_vs_dense_p"]
            rows.append(dict(model=model, measure=m, base=dense[f"{m}_before"],
                             adamw=dense[m], logra=logra[m], difference=diff, p=p,
                             matches=not (diff < 0 and significant(p, cfg)),
                             exceeds=diff > 0 and significant(p, cfg),
                             adamw_learned=_dense_learned(dense, cfg)))
    return pd.DataFrame(rows)


def c7_claim(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> ClaimRow:
    """C7 by rule, on the models run (`c7_pairs`). LoGRA "matches or exceeds" dense AdamW on a
    measure when it is not significantly below it (paired test, Holm p < alpha). On every
    (model, measure): reproduced; on some: partly; on none: not reproduced. Matching a dense
    run that did not learn says nothing, so without a significant gain of dense AdamW over the
    policy before RL "reproduced" is capped at "partly"."""
    pairs = c7_pairs(runs, problems, cfg)
    parts = [f"{model_name(p.model)} {p.measure} pass@1: LoGRA {p.logra:.1f} vs dense AdamW "
             f"{p.adamw:.1f} % (Δ {p.difference:+.1f} points, Holm p {p.p:.2g}; before RL "
             f"{p.base:.1f})" for p in pairs.itertuples()]
    ok, n = int(pairs["matches"].sum()), len(pairs)
    verdict = "reproduced" if ok == n else "partly" if ok else "not reproduced"
    text = "; ".join(parts) + f"; not significantly below in {ok}/{n}"
    if pairs["exceeds"].any():
        text += f", significantly above in {int(pairs['exceeds'].sum())}/{n}"
    if verdict == "reproduced" and not pairs["adamw_learned"].all():
        verdict = "partly"
        text += "; capped at partly: dense AdamW did not improve on the policy before RL"
    if len(cfg.seeds) == 1:
        text += " (one seed: the tests cover the problems drawn, not the seed)"
    if not any(grpo_runs.is_real_scale(cfg, m) for m in cfg.models):
        text += "; proxy analogue of the claim"
    return ClaimRow("C7", C7_REPORTED, text, _scale_text(runs, cfg), verdict)


def c8_claim(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> ClaimRow:
    """C8 by rule. At 27B (Gemma-3-27B among the models): LoGRA's greedy pass@1 and LoRA's gap to
    it within `c8_tolerance` points of the report, on GSM8K (the run's task) and MATH (an extra
    eval task): all: reproduced; some: partly; none: not reproduced. Elsewhere only the
    direction: LoRA significantly below LoGRA (paired test, Holm over the measures) on every
    (model, measure): reproduced (the scale says it is the direction); some: partly; none: not
    reproduced."""
    chosen = choose(runs, cfg)["lr"]
    big = SCALES["27b"].hub_id
    parts, hits, total = [], 0, 0
    if big in cfg.models:
        final = at_chosen(runs, cfg)
        tol = cfg.c8_tolerance
        columns = {"greedy": grpo_config(cfg, Run(model=big, method="logra", seed=0)).task,
                   **{f"{t} greedy": t for t in cfg.extra_eval_tasks}}
        for column, task in columns.items():
            family = get_task(task).family.name
            if family not in REPORTED_27B["logra"]:
                continue
            mean = {m: 100 * final[(final["model"] == big) & (final["method"] == m)][column]
                    .mean() for m in ("logra", "lora")}
            want, want_gap = (REPORTED_27B["logra"][family],
                              REPORTED_27B["lora"][family] - REPORTED_27B["logra"][family])
            gap = mean["lora"] - mean["logra"]
            hits += int(abs(mean["logra"] - want) <= tol) + int(abs(gap - want_gap) <= tol)
            total += 2
            parts.append(f"{task}: LoGRA {mean['logra']:.1f} % (reported {want:.1f}), LoRA "
                         f"{gap:+.1f} points (reported {want_gap:+.1f})")
        scale = _scale_text(runs, cfg)
    else:
        tests = []
        for model in cfg.models:
            logra = _per_problem(problems, model, "logra", chosen[(model, "logra")])
            lora = _per_problem(problems, model, "lora", chosen[(model, "lora")])
            tests += [(model, m, paired(logra, lora, m)) for m in measured(problems)]
        for (model, m, test), p in zip(tests, holm([t[2].p for t in tests]), strict=True):
            below = test.difference < 0 and significant(p, cfg)
            hits += int(below)
            total += 1
            parts.append(f"{model_name(model)} {m}: LoRA − LoGRA {100 * test.difference:+.1f} "
                         f"points (Holm p {p:.2g})")
        parts.append(f"LoRA significantly below LoGRA in {hits}/{total}")
        scale = _scale_text(runs, cfg) + " (direction of the LoRA gap only)"
    verdict = "reproduced" if hits == total else "partly" if hits else "not reproduced"
    return ClaimRow("C8", C8_REPORTED, "; ".join(parts), scale, verdict)


def gpu_rows(cfg: Config) -> list[ClaimRow]:
    """"needs GPU scale" rows, with the commands, for the reported scales not run here."""
    rows = []
    for scale in ("1.5b", "7b"):
        if SCALES[scale].hub_id not in cfg.models:
            rows.append(ClaimRow("C7", C7_REPORTED, _gpu_text(scale), scale.upper(),
                                 "needs GPU scale"))
    if SCALES["27b"].hub_id not in cfg.models:
        text = (_gpu_text("27b") + "; LoGRA alone on one 8×80 GB node (TRL + FSDP2): "
                "`accelerate launch --config_file experiments/launch/accelerate_fsdp2_8gpu.yaml "
                "scripts/trl_grpo.py --config experiments/launch/trl_grpo_27b.yaml`")
        rows.append(ClaimRow("C8", C8_REPORTED, text, "27B, 8×80 GB", "needs GPU scale"))
    return rows


def _gpu_text(scale: str) -> str:
    gpu = config(scale)
    run = Run(model=gpu["models"][0], method="logra", seed=0)
    example = grpo_runs.command(grpo_config(gpu, run))
    sweeps = sum(len(gpu["lr_grid"][m]) for m in gpu["methods"])
    return (f"not run here (CPU proxies only). Command: `logra-repro reproduce --scale {scale} "
            f"--only {NOTEBOOK}` ({sweeps} sweep runs, then {len(gpu['seeds'])} seeds of each "
            f"method at its chosen lr, {gpu['steps']:,} steps, evaluated on {gpu['task']} and "
            f"{' and '.join(gpu['extra_eval_tasks'])}; one run: `{example}`)")


def claims(runs: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> list[ClaimRow]:
    """C7 and C8 on the runs here, then the reported scales that were not run."""
    return [c7_claim(runs, problems, cfg), c8_claim(runs, problems, cfg), *gpu_rows(cfg)]


# ---------------------------------------------------------------- figures


def plot_sweep(runs: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Held-out pass@1 after RL against lr at `sweep_seed`, a line per method (its registry
    colour), the chosen lr ringed, the policy before RL dashed; a row per model, a column per
    measure."""
    models = cfg.models
    fig, axes = plt.subplots(len(models), len(measured(runs)), figsize=(11, 3.8 * len(models)),
                             squeeze=False, layout="constrained")
    chosen = choose(runs, cfg)["lr"]
    swept = runs[runs["seed"] == cfg.sweep_seed]
    for row, model in enumerate(models):
        for col, measure in enumerate(measured(runs)):
            ax = axes[row, col]
            for method in cfg.methods:
                points = swept[(swept["model"] == model) & (swept["method"] == method)
                               & swept["lr"].isin(cfg.lr_grid[method])].sort_values("lr")
                color = METHODS[method].color
                ax.plot(points["lr"], 100 * points[measure], marker="o", color=color,
                        ls=METHODS[method].style, label=METHODS[method].label)
                best = points[points["lr"] == chosen[(model, method)]]
                ax.scatter(best["lr"], 100 * best[measure], s=160, facecolors="none",
                           edgecolors=color, linewidths=1.5, zorder=3)
            before = 100 * swept[swept["model"] == model][f"{measure}_before"].iloc[0]
            ax.axhline(before, color="grey", ls="--", lw=1, label="policy before RL")
            ax.set_xscale("log")
            ax.set(xlabel="learning rate", ylabel=f"held-out {measure} pass@1 (%)",
                   title=f"{model_name(model)}: {measure} pass@1 after "
                         f"{int(swept['steps'].max())} steps")
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"The lr sweep, seed {cfg.sweep_seed} (ringed: the chosen lr)", fontsize=11)
    return fig


def plot_accuracy(runs: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Held-out greedy and sampled pass@1 per method at its chosen lr: bars = mean over seeds,
    dots = seeds (seaborn's barplot and swarmplot), dashed = before RL; a row per model."""
    final = at_chosen(runs, cfg)
    methods, models = cfg.methods, cfg.models
    labels = [METHODS[m].label for m in methods]
    colors = palette(methods)
    long = final.melt(id_vars=["model", "method", "seed"], value_vars=measured(final),
                      var_name="measure", value_name="accuracy")
    long = long.assign(label=long["method"].map(lambda m: METHODS[m].label),
                       percent=100 * long["accuracy"])
    grid = sns.FacetGrid(long, row="model", col="measure", row_order=models,
                         col_order=measured(final), height=3.8, aspect=5.5 / 3.8, sharex=False,
                         sharey=False, despine=False)
    by_method = dict(x="label", y="percent", hue="label", order=labels, hue_order=labels,
                     palette=colors, legend=False)
    grid.map_dataframe(sns.barplot, **by_method, errorbar=None, saturation=1, alpha=0.35)
    # swarmplot, not stripplot: its dots sit side by side only where they would overlap, the
    # same on every run (stripplot's jitter draws from numpy's global random state)
    grid.map_dataframe(sns.swarmplot, **by_method, size=4, zorder=3)
    for (model, measure), ax in grid.axes_dict.items():
        for bar in ax.patches:  # outlined in its own colour, as the dots are
            bar.set_edgecolor(bar.get_facecolor())
        before = final[final["model"] == model][f"{measure}_before"]
        if len(before):
            ax.axhline(100 * before.iloc[0], color="grey", ls="--", lw=1.2,
                       label="policy before RL")
        values = long[(long["model"] == model) & (long["measure"] == measure)]["percent"]
        low = min(values.min(), 100 * before.min()) if len(before) else values.min()
        ax.set_ylim(max(0, low - 5), values.max() + 3)
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
        ax.set(xlabel="", ylabel=f"held-out {measure} pass@1 (%)")
        ax.set_title(f"{model_name(model)}: {measure} pass@1", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    bars = [Patch(facecolor=colors[label], edgecolor=colors[label], alpha=0.35, label=label)
            for label in labels]
    handles, names = grid.axes[0, 0].get_legend_handles_labels()
    grid.figure.legend([*bars, *handles], [*labels, *names], loc="lower center", ncol=4,
                       fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.08))
    grid.figure.suptitle(f"After {int(final['steps'].max())} GRPO steps, each method at its "
                         "chosen lr (bars: mean over seeds; dots: seeds)", fontsize=11)
    grid.figure.tight_layout()
    return grid.figure


def plot_cost(runs: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Optimizer-state bytes and median step time per method at its chosen lr (a bar per
    model)."""
    final = at_chosen(runs, cfg)
    methods, models = cfg.methods, cfg.models
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(methods) * len(models) + 1.8))
    height = 0.8 / len(models)
    hatches = ["", "//", "..", "xx"]
    for k, model in enumerate(models):
        data = final[final["model"] == model].groupby("method")
        state = data["state_bytes"].mean().reindex(methods) / 1e6
        seconds = data["step_seconds"].median().reindex(methods)
        y = np.arange(len(methods)) + (k - (len(models) - 1) / 2) * height
        colors = [METHODS[m].color for m in methods]
        for ax, values, fmt in ((axes[0], state, "{:.3g} MB"), (axes[1], seconds, "{:.2f} s")):
            ax.barh(y, values, height=height, color=colors, alpha=0.6,
                    hatch=hatches[k % len(hatches)], edgecolor="black", lw=0.4,
                    label=model_name(model))
            for yi, value in zip(y, values, strict=True):
                ax.annotate(fmt.format(value), (value, yi), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=8)
    for ax in axes:
        ax.set_yticks(range(len(methods)))
        ax.set_yticklabels([METHODS[m].label for m in methods])
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("optimizer state (MB, log)")
    axes[1].set_xlabel("GRPO step time, median (s, one CPU thread; runs at different times\n"
                       "on a shared machine: notebook 07 times the optimizers side by side)")
    for ax in axes:
        ax.set_xlim(right=ax.get_xlim()[1] * (3 if ax is axes[0] else 1.2))
    axes[1].set_yticklabels([])
    if len(models) > 1:
        axes[0].legend(fontsize=8)
    fig.suptitle("What each optimizer keeps and costs in these runs", fontsize=11)
    fig.tight_layout()
    return fig


SMOOTH_STEPS = 10  # rolling mean of the training reward in `plot_training`


def plot_training(runs: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Per step, each method at its chosen lr: KL(π_θ ‖ π_ref) per token (log) and the training
    reward (rolling mean over `SMOOTH_STEPS`); lines are means over seeds, bands the lowest to
    the highest seed; a row per model."""
    steps = trajectories(runs, cfg)
    steps = steps.sort_values(["model", "method", "seed", "step"])
    steps["reward"] = steps.groupby(["model", "method", "seed"])["reward"].transform(
        lambda r: r.rolling(SMOOTH_STEPS, min_periods=1).mean())
    steps = steps[steps["step"] > 1]  # step 1 samples from π_ref: KL 0
    steps = steps.assign(kl=steps["kl"].clip(lower=KL_FLOOR))  # a policy that never moved
    models = cfg.models
    fig, axes = plt.subplots(len(models), 2, figsize=(11, 3.8 * len(models)), squeeze=False,
                             layout="constrained")
    for row, model in enumerate(models):
        for col, (column, title) in enumerate(
                (("kl", "KL(π_θ ‖ π_ref) per token"),
                 ("reward", f"training reward ({SMOOTH_STEPS}-step mean)"))):
            ax = axes[row, col]
            for method in cfg.methods:
                data = steps[(steps["model"] == model) & (steps["method"] == method)]
                spec = METHODS[method]
                line_with_band(ax, data, "step", column, band=data["seed"].nunique() > 1,
                               color=spec.color, ls=spec.style, lw=1.4, label=spec.label)
            if column == "kl":
                ax.set_yscale("log")
            ax.set(xlabel="GRPO step", ylabel=title, title=f"{model_name(model)}: {title}")
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Each method at its chosen lr (line: mean over seeds; band: seed range)",
                 fontsize=11)
    return fig


FIGURES: dict[str, Plot] = {
    "comparison_sweep": plot_sweep,
    "comparison_accuracy": plot_accuracy,
    "comparison_cost": plot_cost,
    "comparison_training": plot_training,
}

