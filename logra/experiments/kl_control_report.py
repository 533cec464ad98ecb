"""Notebook 09's tables, figures and claims (C5, C6 at proxy scale), from the runs
`logra.experiments.kl_control` plans and trains: one row per run (`per_run`), the frontier
against the lr cut (`frontier_table`, `lr_matched_table`), the stress test (`stress_table`,
`c5_stress_claim`, `c6_stress_claim`), the naive projection's lr sweep (`naive_sweep_table`,
`c5_sweep_claim`), the drift budget (`budget_table`) and the seed bands
(`bands_table`, and the frontier's tables and C6 read with `study="bands"`). Paired tests are
per problem (`comparison_report.paired`), Holm's correction over each table.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from logra.experiments.comparison_report import paired
from logra.experiments.grpo_runs import Run
from logra.experiments.kl_control import (
    BASE,
    FREE,
    KEYS,
    MEASURES,
    Config,
    family,
    grpo_config,
    measured,
    plan,
)
from logra.experiments.plots import KL_FLOOR, line_with_band
from logra.experiments.report import ClaimRow
from logra.methods import METHODS
from logra.stats import holm_cells

DELTA_MARKERS = ("^", "s", "D", "v", "P", "X")  # one per δ, in the order of `points`


# ---------------------------------------------------------------- summaries


def _runs(frame: pd.DataFrame, study: str) -> pd.DataFrame:
    return frame[frame["study"] == study]


def _study_problems(problems: pd.DataFrame, study: str) -> pd.DataFrame:
    """The evaluations of `study`'s runs and of the policy before RL (a band point at a
    frontier seed is evaluated once, but listed under both studies)."""
    return problems[(problems["study"] == study) | (problems["method"] == BASE)]


def per_run(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """One row per run: final KL to the reference (mean of the last `final_steps` steps), peak
    KL (rolling mean over `smooth_steps`), the first step above `runaway_kl`, share of clipped
    steps, median γ and step KL, reward over the last `final_steps`, the final β, held-out
    greedy and sampled pass@1 (0–1) after the last step and before RL, median s/step."""
    rows = []
    for key, r in frame.groupby(KEYS, dropna=False, sort=False):
        r = r.sort_values("step")
        train = r[r["step"] >= 1]
        smooth = train["kl"].rolling(cfg.smooth_steps, min_periods=1).mean()
        above = train["step"][smooth.to_numpy() > cfg.runaway_kl]
        keys = dict(zip(KEYS, key, strict=True))
        evaluated = problems[_match(problems, keys)]
        before = problems[(problems["method"] == BASE) & (problems["seed"] == keys["seed"])]
        rows.append(dict(
            keys,
            final_kl=train["kl"].tail(cfg.final_steps).mean(),
            peak_kl=float(smooth.max()),
            first_runaway_step=int(above.iloc[0]) if len(above) else math.nan,
            clipped=100 * train["clipped"].astype(float).mean(),
            median_gamma=train["gamma"].median(),
            median_step_kl=train["step_kl"].median(),
            reward=train["reward"].tail(cfg.final_steps).mean(),
            final_beta=float(train["beta"].iloc[-1]),
            **{m: evaluated[m].mean() for m in MEASURES},
            **{f"{m}_before": before[m].mean() for m in MEASURES},
            seconds=train["seconds"].median(),
        ))
    return pd.DataFrame(rows)


def _match(problems: pd.DataFrame, keys: dict[str, Any]) -> pd.Series:
    """The rows of `problems` of the run `keys` (NaN δ matches NaN)."""
    match = pd.Series(True, index=problems.index)
    for k, v in keys.items():
        column = problems[k]
        match &= column.isna() if isinstance(v, float) and math.isnan(v) else column == v
    return match


def _delta_text(delta: float) -> str:
    return "off" if math.isnan(delta) else f"{delta:g}"


def _point_groups(runs: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    return runs.groupby(["method", "lr", "delta"], dropna=False, sort=False)


def frontier_table(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config,
                   study: str = "frontier") -> pd.DataFrame:
    """One row per point (method, lr, δ) of `study`: seeds, steps the control cut, median step
    KL, final KL to the reference (seed mean) and peak KL (the highest seed's), held-out pass@1
    (%, seed mean) and its gain over the policy before RL (points), reward of the last steps,
    s/step."""
    runs = per_run(_runs(frame, study), problems, cfg)
    rows = []
    for (method, lr, delta), r in _point_groups(runs):
        rows.append({
            "method": METHODS[method].short, "lr": lr, "δ": _delta_text(delta),
            "seeds": len(r), "steps clipped (%)": r["clipped"].mean(),
            "median step KL": r["median_step_kl"].median(),
            "final KL to ref": r["final_kl"].mean(), "peak KL": r["peak_kl"].max(),
            **{f"{m} pass@1 (%)": 100 * r[m].mean() for m in measured(problems)},
            **{f"{m} gain (pts)": 100 * (r[m] - r[f"{m}_before"]).mean()
               for m in measured(problems)},
            "reward (last steps)": r["reward"].mean(), "s/step": r["seconds"].median()})
    return pd.DataFrame(rows)


def lr_cut(runs: pd.DataFrame, method: str) -> pd.DataFrame:
    """The lr cut of `method`'s family: its family's uncontrolled points (seed means of
    `per_run` rows), ordered by final KL."""
    free = runs[(runs["method"] == family(method)) & runs["delta"].isna()]
    return (free.groupby("lr")[["final_kl", *MEASURES]].mean().sort_values("final_kl")
            .reset_index())


def lr_matched(cut: pd.DataFrame, kl: float, measure: str) -> float:
    """The lr cut's `measure` at final KL `kl`: linear in log KL between the two lr-cut points
    around it; NaN outside the cut's range (no extrapolation)."""
    kls = np.log(cut["final_kl"].clip(lower=KL_FLOOR).to_numpy())
    x = math.log(max(kl, KL_FLOOR))
    if len(kls) < 2 or not kls[0] <= x <= kls[-1]:
        return math.nan
    return float(np.interp(x, kls, cut[measure].to_numpy()))


def _per_problem(problems: pd.DataFrame, method: str, lr: float, delta: float) -> pd.DataFrame:
    rows = problems[(problems["method"] == method) & (problems["lr"] == lr)
                    & (problems["delta"].isna() if math.isnan(delta)
                       else problems["delta"] == delta)]
    return _by_problem(rows)


def _by_problem(rows: pd.DataFrame) -> pd.DataFrame:
    """Per problem of `rows`: the mean over seeds and the count of each measure."""
    return rows.groupby("problem")[list(MEASURES)].agg(["mean", "count"])


def lr_matched_table(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config,
                     study: str = "frontier") -> pd.DataFrame:
    """Per controlled point of `study` and measure: its final KL and held-out pass@1 (%); the
    lr cut's pass@1 at the same KL (`lr_matched`, "NaN" outside the cut's range) and the
    difference; paired per-problem tests (`comparison_report.paired`, per-problem means over
    seeds) against the lr-cut run nearest in final KL (log distance) and against the
    uncontrolled run at the same lr, with Holm's correction over every test of the table."""
    problems = _study_problems(problems, study)
    runs = per_run(_runs(frame, study), problems, cfg)
    rows, tests = [], []
    for (method, lr, delta), r in _point_groups(runs):
        if math.isnan(delta):
            continue
        cut = lr_cut(runs, method)
        if cut.empty:
            continue
        kl = r["final_kl"].mean()
        nearest = cut.iloc[int(np.argmin(np.abs(np.log(cut["final_kl"].clip(lower=KL_FLOOR))
                                                - math.log(max(kl, KL_FLOOR)))))]
        mine = _per_problem(problems, method, lr, delta)
        free = family(method)
        for measure in measured(problems):
            row = {"method": METHODS[method].short, "lr": lr, "δ": delta, "measure": measure,
                   "steps clipped (%)": r["clipped"].mean(), "final KL": kl,
                   "pass@1 (%)": 100 * r[measure].mean()}
            matched = lr_matched(cut, kl, measure)
            row.update({"lr cut at this KL (%)": 100 * matched,
                        "control − lr cut (pts)": 100 * (r[measure].mean() - matched),
                        "nearest lr cut: lr": nearest["lr"],
                        "nearest lr cut: final KL": nearest["final_kl"]})
            versus = paired(_per_problem(problems, free, nearest["lr"], math.nan), mine, measure)
            row.update({"Δ vs nearest (pts)": 100 * versus.difference,
                        "Δ vs nearest, se": 100 * versus.stderr,
                        "Δ vs nearest, p (Holm)": math.nan,
                        "Δ vs no control at this lr (pts)": math.nan,
                        "Δ vs no control, p (Holm)": math.nan})
            tests.append((len(rows), "Δ vs nearest, p (Holm)", versus.p))
            same = _per_problem(problems, free, lr, math.nan)
            if not same.empty:
                versus = paired(same, mine, measure)
                row["Δ vs no control at this lr (pts)"] = 100 * versus.difference
                tests.append((len(rows), "Δ vs no control, p (Holm)", versus.p))
            rows.append(row)
    return holm_cells(pd.DataFrame(rows), tests)


def budget_table(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                 ) -> pd.DataFrame:
    """Per setting of the budget study: the KL to the reference at the end and at its highest,
    on the batches (noisy: each is B fresh completions) and on the drift probe (the same
    held-out completions' seeds every `budget_probe_every` steps: the budget holds when the
    highest probe stays under it), steps cut, the final β, reward, held-out pass@1, and paired
    per-problem differences (seeds averaged per problem): every setting against the first (the
    reference, "no control"), and each setting after the second against the second (the drift
    budget, against the soft controls that follow it), with Holm's correction over the table."""
    runs = _runs(frame, "budget")
    summary = per_run(runs, problems, cfg)
    settings = list(summary["setting"].drop_duplicates())
    evaluated = problems[problems["study"] == "budget"]
    per_problem = {s: _by_problem(evaluated[evaluated["setting"] == s]) for s in settings}
    references = settings[:2]  # each setting after a reference is compared with it
    rows, tests = [], []
    for setting, r in summary.groupby("setting", sort=False):
        mine = runs[runs["setting"] == setting]
        probes = mine.dropna(subset=["drift_kl"]).sort_values("step").groupby("seed")["drift_kl"]
        rows.append({
            "setting": setting, "seeds": len(r),
            "final KL to ref, mean": r["final_kl"].mean(),
            "final KL, seed min": r["final_kl"].min(), "final KL, seed max": r["final_kl"].max(),
            "highest KL of any batch": mine.groupby("seed")["kl"].max().max(),
            f"highest {cfg.smooth_steps}-step mean KL": r["peak_kl"].max(),
            "final probed KL, mean": probes.last().mean(),
            "highest probed KL": probes.max().max(),
            "steps cut (%)": r["clipped"].mean(), "final β": r["final_beta"].mean(),
            "reward (last steps)": r["reward"].mean(),
            **{f"{m} pass@1 (%)": 100 * r[m].mean() for m in measured(problems)},
            "greedy gain (pts)": 100 * (r["greedy"] - r["greedy_before"]).mean(),
        })
        for reference in references:
            for measure in measured(problems):
                column = f"{measure}: Δ vs {reference} (pts)"
                p_column = f"{measure} vs {reference}: p (Holm)"
                rows[-1][column] = rows[-1][p_column] = math.nan
                if settings.index(setting) > settings.index(reference):
                    versus = paired(per_problem[reference], per_problem[setting], measure)
                    rows[-1][column] = 100 * versus.difference
                    tests.append((len(rows) - 1, p_column, versus.p))
    return holm_cells(pd.DataFrame(rows), tests)


def stress_table(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                 ) -> pd.DataFrame:
    """The points at `stress_lr`: as `frontier_table`, plus the first step whose smoothed KL
    to the reference exceeds `runaway_kl` (per seed)."""
    stress = _stress_runs(frame, cfg)
    table = frontier_table(stress, problems, cfg)
    runs = per_run(stress, problems, cfg)
    first = _point_groups(runs)["first_runaway_step"]
    table.insert(len(table.columns) - 1, f"first step with KL > {cfg.runaway_kl:g}",
                 [_steps_text(s) for _, s in first])
    return table


def bands_table(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The band points: `frontier_table`'s columns on the bands study, with the seeds' lowest
    and highest final KL and pass@1 beside the means, and the first step each seed's smoothed
    KL exceeds `runaway_kl`."""
    runs = _runs(frame, "bands")
    table = frontier_table(runs, problems, cfg, study="bands")
    groups = _point_groups(per_run(runs, problems, cfg))
    for column, label, scale in [("final_kl", "final KL to ref", 1.0),
                                 *[(m, f"{m} pass@1 (%)", 100.0) for m in measured(problems)]]:
        at = table.columns.get_loc(label) + 1
        table.insert(at, f"{label}, seed max", [scale * r[column].max() for _, r in groups])
        table.insert(at, f"{label}, seed min", [scale * r[column].min() for _, r in groups])
    table.insert(len(table.columns) - 1, f"first step with KL > {cfg.runaway_kl:g}",
                 [_steps_text(s) for _, s in groups["first_runaway_step"]])
    return table


NAIVE_SWEEP = "naive_sweep"


def naive_sweep_table(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                      ) -> pd.DataFrame:
    """The naive projection at each lr of its sweep, in ascending lr: `frontier_table`'s
    columns on the naive_sweep study, the first step each seed's smoothed KL exceeds
    `runaway_kl`, and each measure's paired per-problem gain over the policy before RL
    (per-problem means over the sweep's seeds; two-sided tests, Holm's correction over every
    lr and measure of the table)."""
    runs = _runs(frame, NAIVE_SWEEP)
    table = frontier_table(runs, problems, cfg, study=NAIVE_SWEEP)
    groups = _point_groups(per_run(runs, problems, cfg))
    table.insert(len(table.columns) - 1, f"first step with KL > {cfg.runaway_kl:g}",
                 [_steps_text(s) for _, s in groups["first_runaway_step"]])
    table = table.sort_values("lr", ignore_index=True)
    evaluated = _study_problems(problems, NAIVE_SWEEP)
    evaluated = evaluated[evaluated["seed"].isin(runs["seed"].unique())]
    base = _by_problem(evaluated[evaluated["method"] == BASE])
    tests = []
    for measure in measured(evaluated):
        table[f"{measure} gain, p (Holm)"] = math.nan
        for i, lr in enumerate(table["lr"]):
            gain = paired(base, _per_problem(evaluated, "naive", lr, math.nan), measure)
            tests.append((i, f"{measure} gain, p (Holm)", gain.p))
    return holm_cells(table, tests)


def _stress_runs(frame: pd.DataFrame, cfg: Config, study: str = "frontier") -> pd.DataFrame:
    runs = _runs(frame, study)
    return runs[runs["lr"] == cfg.stress_lr]


def _steps_text(steps: pd.Series) -> str:
    values = [str(int(s)) if math.isfinite(s) else "never" for s in steps]
    return " / ".join(values)


# ---------------------------------------------------------------- claims


def _scale_text(frame: pd.DataFrame, cfg: Config, study: str = "frontier",
                lrs: str | None = None) -> str:
    """Where a claim row was measured: the scale, model, the stress lr (or `lrs`, a study
    across lrs), steps, batch and the number of seeds of `study`'s runs at that lr (or at
    all)."""
    example = grpo_config(cfg, plan(cfg)[0])
    runs = _stress_runs(frame, cfg, study) if lrs is None else _runs(frame, study)
    return (f"{cfg.scale}: {example.model}, {lrs or f'lr {cfg.stress_lr:g}'}, {cfg.steps} GRPO "
            f"steps ({example.prompts_per_step} × {example.group_size}), "
            f"{runs['seed'].nunique()} seed(s)")


def c5_stress_claim(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                    ) -> ClaimRow:
    """C5 at the stress learning rate. The naive projection *runs away* when its smoothed KL to
    the reference exceeds `runaway_kl` nats/token within `c5_window` steps. Every seed: reproduced
    — unless uncontrolled dense AdamW runs away as early, in which case the explosion is the
    learning rate's, not the compression's: not reproduced; some seeds: partly; none: not
    reproduced, or undecided when the runs are shorter than the window's start (a short run can
    show a runaway, not its absence)."""
    runs = per_run(_stress_runs(frame, cfg), problems, cfg)
    naive = runs[runs["method"] == "naive"]
    dense = runs[runs["method"] == "adamw"]
    if naive.empty or dense.empty:
        raise ValueError("C5 (stress) needs the naive and dense AdamW runs at stress_lr")
    window = cfg.c5_window[1]
    ran = naive["first_runaway_step"] <= window
    dense_first = dense["first_runaway_step"].min()
    text = (f"lr {cfg.stress_lr:g}: peak KL to the reference ({cfg.smooth_steps}-step "
            f"mean) naive projection {_span(naive['peak_kl'])}, dense AdamW "
            f"{_span(dense['peak_kl'])} nats/token; above {cfg.runaway_kl:g} within "
            f"{window} steps: naive {int(ran.sum())}/{len(naive)} seeds, dense AdamW from step "
            f"{_steps_text(dense['first_runaway_step'])}; greedy pass@1 after "
            f"{cfg.steps} steps: naive {_pct(naive['greedy'])}, dense AdamW "
            f"{_pct(dense['greedy'])} (start {_pct(dense['greedy_before'])})")
    if ran.all() and not dense_first <= naive["first_runaway_step"].max():
        verdict = "reproduced"
    elif ran.any() and not dense_first <= naive["first_runaway_step"].min():
        verdict = "partly"
    elif cfg.steps < cfg.c5_window[0] and not ran.any():
        verdict, text = "undecided", f"{text}; no test: {cfg.steps} steps, shorter than the window"
    else:
        verdict = "not reproduced"
    return ClaimRow("C5", "naive random projection makes KL(π_θ ‖ π_ref) explode within 50–100 "
                    "steps (proxy stress test)", text, _scale_text(frame, cfg), verdict)


def c6_stress_claim(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config,
                    study: str = "frontier") -> ClaimRow:
    """C6 at the stress learning rate, on `study`'s runs (the frontier's, or the seed bands'):
    does the control prevent a runaway? For each controlled method with its uncontrolled twin
    (`FREE`) at `stress_lr`: reproduced when every seed of the uncontrolled run has its smoothed
    KL exceed `runaway_kl` and no seed of the controlled one does, with held-out greedy pass@1
    no lower (seed mean); partly when some uncontrolled seed runs away and the control keeps
    every seed under the line or at least divides the peak KL by `c6_factor`; not reproduced
    otherwise, or when no uncontrolled seed runs away (nothing to prevent)."""
    runs = per_run(_stress_runs(frame, cfg, study), problems, cfg)
    parts, outcomes = [], []
    for method, free_method in FREE.items():
        free = runs[runs["method"] == free_method]
        for delta, held in runs[runs["method"] == method].groupby("delta", sort=True):
            if free.empty:
                continue
            ran_away = free["peak_kl"] > cfg.runaway_kl  # per seed
            contained = bool((held["peak_kl"] <= cfg.runaway_kl).all())
            better = held["greedy"].mean() >= free["greedy"].mean()
            shrink = free["peak_kl"].max() / max(held["peak_kl"].max(), KL_FLOOR)
            outcomes.append(
                "prevented" if ran_away.all() and contained and better else
                "reduced" if ran_away.any() and (contained or shrink >= cfg.c6_factor) else
                "no runaway" if not ran_away.any() else "not prevented")
            parts.append(f"{METHODS[method].short}: peak KL {_span(free['peak_kl'])} without "
                         f"control, {_span(held['peak_kl'])} with δ = {delta:g} (clipped "
                         f"{held['clipped'].mean():.0f} % of steps); greedy pass@1 "
                         f"{_pct(free['greedy'])} → {_pct(held['greedy'])}")
    if not outcomes:
        raise ValueError("C6 (stress) needs an uncontrolled and a controlled run of one method "
                         "at stress_lr")
    verdict = ("reproduced" if all(o == "prevented" for o in outcomes) else
               "partly" if any(o in ("prevented", "reduced") for o in outcomes) else
               "not reproduced")
    text = "; ".join(parts) + f" (runaway: KL > {cfg.runaway_kl:g}; outcome {outcomes})"
    where = "proxy stress test" if study == "frontier" else f"proxy stress test, {study} study"
    return ClaimRow("C6", f"predicted-KL step control prevents the KL collapse ({where})",
                    text, _scale_text(frame, cfg, study), verdict)


def c5_sweep_claim(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> ClaimRow:
    """C5 at the lr one would train the naive projection at: the lr of its sweep
    (`naive_sweep_table`) with the highest held-out sampled pass@1 (greedy where sampled is not
    measured). At that lr, every seed's smoothed KL to the reference above `runaway_kl` within
    `c5_window` steps: reproduced; some seeds: partly; none: not reproduced. Undecided when the
    sweep is no test: the best lr is the sweep's lowest or highest (not bracketed), its gain
    over the policy before RL is not a significant rise (Holm p ≥ `alpha`, or a loss), or the
    runs are shorter than the window's start and no seed ran away (a short run can show a
    runaway, not its absence). The rule has no dense comparator (as
    `c5_stress_claim` has at one lr): each method is read at its own best lr, where the frontier
    shows whether dense AdamW and LoGRA run away. Choosing the best lr by pass@1 leans towards
    "not reproduced" (a run that runs away seldom scores best), so the row also gives the lowest
    lr at which any seed runs away."""
    table = naive_sweep_table(frame, problems, cfg)
    if table.empty:
        raise ValueError("C5 (naive lr sweep) needs the naive_sweep study's runs")
    measure = "sampled" if "sampled gain, p (Holm)" in table else "greedy"  # the sweep measured
    scores = table[f"{measure} pass@1 (%)"]
    best = int(scores.idxmax())
    lr, gain, p = (float(table.loc[best, c]) for c in
                   ("lr", f"{measure} gain (pts)", f"{measure} gain, p (Holm)"))
    runs = per_run(_runs(frame, NAIVE_SWEEP), problems, cfg)
    at_best = runs[runs["lr"] == lr]
    window = cfg.c5_window[1]
    ran = at_best["first_runaway_step"] <= window
    away = runs.groupby("lr")["first_runaway_step"].min()
    away = away[away <= window]
    first = (f"lr {away.index.min():g} ({away.index.min() / lr:.3g}× the best)" if len(away)
             else "no lr of the sweep")
    steps = "; ".join(f"lr {r['lr']:g}: peak KL {r['peak KL']:.3g}, {measure} pass@1 "
                      f"{r[f'{measure} pass@1 (%)']:.1f} %" for r in table.to_dict("records"))
    text = (f"naive projection ({steps}); best lr {lr:g}: {measure} gain {gain:+.1f} points "
            f"(Holm p {p:.2g}), above {cfg.runaway_kl:g} within {window} steps on "
            f"{int(ran.sum())}/{len(at_best)} seeds; any seed runs away first at {first}")
    untested = ("the best lr is at an end of the sweep"
                if lr in (table["lr"].min(), table["lr"].max()) else
                "the best lr's gain is not a significant rise" if not (gain > 0 and p < cfg.alpha)
                else f"{cfg.steps} steps, shorter than the window"
                if cfg.steps < cfg.c5_window[0] and not ran.any() else "")
    if untested:
        verdict, text = "undecided", f"{text}; no test: {untested}"
    else:
        verdict = "reproduced" if ran.all() else "partly" if ran.any() else "not reproduced"
    scale = _scale_text(frame, cfg, NAIVE_SWEEP, "the naive projection's lr sweep")
    return ClaimRow("C5", "naive random projection makes KL(π_θ ‖ π_ref) explode within 50–100 "
                    "steps (proxy, at the naive projection's best lr)", text, scale, verdict)


def naive_sweep_claims(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                       ) -> list[ClaimRow]:
    return [c5_sweep_claim(frame, problems, cfg)]


def claims(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> list[ClaimRow]:
    return [c5_stress_claim(frame, problems, cfg), c6_stress_claim(frame, problems, cfg)]


def bands_claims(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> list[ClaimRow]:
    """C6 on the seed bands, where they hold a controlled point and its uncontrolled twin at
    `stress_lr`; none otherwise."""
    methods = set(_stress_runs(frame, cfg, "bands")["method"])
    if not any({method, free} <= methods for method, free in FREE.items()):
        return []
    return [c6_stress_claim(frame, problems, cfg, study="bands")]


def _span(values: pd.Series) -> str:
    return f"{values.min():.3g}–{values.max():.3g}" if len(values) > 1 else f"{values.iloc[0]:.3g}"


def _pct(values: pd.Series) -> str:
    return (f"{100 * values.mean():.1f} %" if len(values) == 1 else
            f"{100 * values.mean():.1f} % ({100 * values.min():.1f}–{100 * values.max():.1f})")


# ---------------------------------------------------------------- figures


def _errorbar(ax: plt.Axes, r: pd.DataFrame, measure: str, **style: Any) -> None:
    """One point at the seed means of final KL and `measure` (%), bars over the seed range."""
    kl = r["final_kl"].clip(lower=KL_FLOOR)
    y = 100 * r[measure]
    ax.errorbar([kl.mean()], [y.mean()], xerr=_extent(kl), yerr=_extent(y), capsize=3, **style)


def _extent(values: pd.Series) -> list[list[float]]:
    """The seeds' range around their mean, as errorbar wants it; equal seeds give 0, not the
    −1e-17 of a mean's round-off, which matplotlib refuses."""
    mean = values.mean()
    return [[max(mean - values.min(), 0.0)], [max(values.max() - mean, 0.0)]]


def plot_frontier(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config,
                  study: str = "frontier") -> plt.Figure:
    """Held-out pass@1 against final KL to the reference, one panel per measure: each family's
    lr cut (its uncontrolled runs of `study`, circles joined in lr order), each controlled point
    (a marker per δ) with a thin arrow from the uncontrolled run at its lr; seed means, bars over
    the seeds' range."""
    runs = per_run(_runs(frame, study), problems, cfg)
    measures = measured(problems)
    deltas = sorted(runs["delta"].dropna().unique(), reverse=True)
    # one legend for every panel: the policy before RL on each measure
    start = "before RL (" + ", ".join(f"{m} {100 * runs[f'{m}_before'].mean():.1f} %"
                                      for m in measures) + ")"
    fig, axes = plt.subplots(1, len(measures), figsize=(6.4 * len(measures), 5.0), squeeze=False)
    for ax, measure in zip(axes[0], measures, strict=True):
        free = runs[runs["delta"].isna()]
        for method, r in free.groupby("method", sort=False):
            spec = METHODS[method]
            means = r.groupby("lr")[["final_kl", measure]].mean().sort_index()
            lrs = f"lr {means.index.min():g}–{means.index.max():g}" if len(means) > 1 else \
                f"lr {means.index[0]:g}"
            ax.plot(means["final_kl"].clip(lower=KL_FLOOR), 100 * means[measure],
                    color=spec.color, ls=spec.style, lw=1.2, label=f"{spec.label} ({lrs})")
            for _, point in r.groupby("lr"):
                _errorbar(ax, point, measure, color=spec.color, marker="o", ms=5, lw=1)
        for (method, lr, delta), r in _point_groups(runs[runs["delta"].notna()]):
            spec = METHODS[method]
            marker = DELTA_MARKERS[deltas.index(delta) % len(DELTA_MARKERS)]
            _errorbar(ax, r, measure, color=spec.color, marker=marker, ms=7, lw=1, mec="black",
                      mew=0.5)
            twin = free[(free["method"] == family(method)) & (free["lr"] == lr)]
            if not twin.empty:
                ax.annotate("", xy=(max(r["final_kl"].mean(), KL_FLOOR), 100 * r[measure].mean()),
                            xytext=(max(twin["final_kl"].mean(), KL_FLOOR),
                                    100 * twin[measure].mean()),
                            arrowprops=dict(arrowstyle="->", color=spec.color, lw=0.8,
                                            alpha=0.7))
        for method in runs.loc[runs["delta"].notna(), "method"].unique():
            for delta in sorted(runs.loc[runs["method"] == method, "delta"].dropna().unique(),
                                reverse=True):
                lrs = runs.loc[(runs["method"] == method) & (runs["delta"] == delta), "lr"]
                ax.plot([], [], ls="", color=METHODS[method].color, mec="black", mew=0.5,
                        marker=DELTA_MARKERS[deltas.index(delta) % len(DELTA_MARKERS)], ms=7,
                        label=f"{METHODS[method].short} + control, δ {delta:g} (lr "
                              f"{', '.join(f'{lr:g}' for lr in sorted(lrs.unique()))})")
        ax.axhline(100 * runs[f"{measure}_before"].mean(), color="grey", ls=":", lw=1,
                   label=start)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on a short axis
        ax.set_xlabel(f"final KL(π_θ ‖ π_ref), nats/token (mean of the last "
                      f"{cfg.final_steps} steps)")
        ax.set_ylabel(f"held-out {measure} pass@1 (%)")
        ax.set_title(f"{measure} pass@1 against the drift from the reference\n(arrows: from the "
                     "same lr without control to with it)", fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.035 * math.ceil(len(labels) / 2)))
    fig.tight_layout()
    return fig


def plot_runs(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """The runs at `stress_lr`: KL to the reference per step (log) and the control's γ, one
    line per (method, δ): the seed mean, with the seed range as a band."""
    runs = _stress_runs(frame, cfg)
    runs = runs[runs["step"] >= 2]  # step 1 samples from π_ref: KL 0
    fig, (ax_kl, ax_gamma) = plt.subplots(1, 2, figsize=(12, 4.6))
    for (method, delta), r in runs.groupby(["method", "delta"], dropna=False, sort=False):
        spec = METHODS[method]
        label = Run(method=method, seed=0, delta=None if math.isnan(delta) else delta).label
        r = r.assign(kl=r["kl"].clip(lower=KL_FLOOR))
        for ax, column in ((ax_kl, "kl"), (ax_gamma, "gamma")):
            if column == "gamma" and math.isnan(delta):
                continue
            line_with_band(ax, r, "step", column, band=r["seed"].nunique() > 1,
                           color=spec.color, ls=spec.style, lw=1.4,
                           label=label if column == "kl" else None)
    ax_kl.set_yscale("log")
    ax_kl.axhline(cfg.runaway_kl, color="grey", ls=":", lw=1)
    ax_kl.set_ylabel("KL(π_θ ‖ π_ref) (nats/token)")
    ax_gamma.set_ylabel("step scale γ")
    ax_gamma.set_ylim(0, 1.05)
    ax_kl.set_title(f"KL to the reference at lr {cfg.stress_lr:g} (dotted: "
                    f"{cfg.runaway_kl:g})", fontsize=10)
    ax_gamma.set_title("γ = min(1, √(δ / KL̂)) of the controlled runs", fontsize=10)
    for ax in (ax_kl, ax_gamma):
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    return fig


def plot_naive_sweep(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config) -> plt.Figure:
    """The naive projection's lr sweep: KL to the reference per step, one line per lr (seed
    mean, band over the seeds; dotted: `runaway_kl`), and held-out pass@1 after training
    against the lr (seed means, bars over the seeds' range; dotted: before RL)."""
    runs = _runs(frame, NAIVE_SWEEP)
    summary = per_run(runs, problems, cfg)
    lrs = sorted(runs["lr"].unique())
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(lrs)))
    fig, (ax_kl, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.6))
    trained = runs[runs["step"] >= 2]  # step 1 samples from π_ref: KL 0
    for lr, color in zip(lrs, colors, strict=True):
        r = trained[trained["lr"] == lr]
        line_with_band(ax_kl, r.assign(kl=r["kl"].clip(lower=KL_FLOOR)), "step", "kl",
                       band=r["seed"].nunique() > 1, color=color, lw=1.4, label=f"lr {lr:g}")
    ax_kl.axhline(cfg.runaway_kl, color="grey", ls=":", lw=1)
    ax_kl.set(yscale="log", xlabel="GRPO step", ylabel="KL(π_θ ‖ π_ref) (nats/token)")
    ax_kl.set_title(f"naive projection: KL to the reference (dotted: {cfg.runaway_kl:g})",
                    fontsize=10)
    ax_kl.legend(fontsize=8)
    for measure, marker in zip(measured(_study_problems(problems, NAIVE_SWEEP)), ("o", "s"),
                               strict=False):
        means = summary.groupby("lr")[measure]
        y = 100 * means.mean()
        ax_acc.errorbar(y.index, y, yerr=[y - 100 * means.min(), 100 * means.max() - y],
                        marker=marker, capsize=3, color=METHODS["naive"].color,
                        ls="-" if measure == "greedy" else "--", label=f"{measure} pass@1")
        ax_acc.axhline(100 * summary[f"{measure}_before"].mean(), color="grey",
                       ls=":" if measure == "greedy" else "-.", lw=1,
                       label=f"{measure}, before RL")
    ax_acc.set(xscale="log", xlabel="learning rate", ylabel="held-out pass@1 (%)")
    ax_acc.set_title(f"after {cfg.steps} steps", fontsize=10)
    ax_acc.legend(fontsize=8)
    for ax in (ax_kl, ax_acc):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_budget(frame: pd.DataFrame, problems: pd.DataFrame, cfg: Config
                ) -> plt.Figure:
    """Budget study: KL to the reference per step for each setting (the batches' KL: seed mean,
    band over the seeds; dots: the highest drift probe over the seeds; dotted: the drift
    budgets), and greedy pass@1 against final KL."""
    runs = _runs(frame, "budget")
    summary = per_run(runs, problems, cfg)
    runs = runs[runs["step"] >= 2]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (ax_kl, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.6))
    for i, (setting, r) in enumerate(runs.groupby("setting", sort=False)):
        color = colors[i % len(colors)]
        line_with_band(ax_kl, r.assign(kl=r["kl"].clip(lower=KL_FLOOR)), "step", "kl",
                       color=color, lw=1.4, label=setting)
        probes = r.pivot_table(index="step", columns="seed", values="drift_kl")
        if not probes.empty:
            ax_kl.plot(probes.index, probes.max(axis=1).clip(lower=KL_FLOOR), color=color, lw=0,
                       marker="o", ms=3.5, mec="black", mew=0.4)
        _errorbar(ax_acc, summary[summary["setting"] == setting], "greedy", color=color,
                  marker="o", label=setting)
    for keys in cfg.budget_runs.values():
        if keys.get("kl_drift_budget"):
            ax_kl.axhline(keys["kl_drift_budget"], color="grey", ls=":", lw=1)
    start = 100 * summary["greedy_before"].mean()
    ax_acc.axhline(start, color="grey", ls=":", lw=1, label=f"before RL ({start:.1f} %)")
    ax_kl.set_yscale("log")
    ax_kl.set_ylim(bottom=max(KL_FLOOR, 0.01 * float(runs["kl"].median())))
    ax_kl.set_xlabel("GRPO step")
    ax_kl.set_ylabel("KL(π_θ ‖ π_ref) (nats/token)")
    ax_kl.set_title("drift from the reference (lines: batches; dots: highest probe over seeds;"
                    "\ndotted: the budget)", fontsize=10)
    ax_acc.set_xscale("log")
    ax_acc.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 0.02, 0.05, 0.1, 0.2: a short
    ax_acc.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))  # axis, readable
    ax_acc.xaxis.set_minor_formatter(NullFormatter())  # (minor labels overlap)
    ax_acc.set_xlabel(f"final KL to the reference (mean of the last {cfg.final_steps} steps)")
    ax_acc.set_ylabel(f"greedy pass@1 on {cfg.eval_prompts:,} held-out problems (%)")
    ax_acc.set_title("accuracy at the KL each control ends at (bars: seed range)", fontsize=10)
    for ax in (ax_kl, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


FIGURES = {
    "kl_control_frontier": plot_frontier,
    "kl_control_stress": lambda frame, problems, cfg: plot_runs(frame, cfg),
    "kl_control_budget": plot_budget,
    "kl_control_bands": lambda frame, problems, cfg: plot_frontier(frame, problems, cfg,
                                                                   study="bands"),
    "kl_control_naive_sweep": plot_naive_sweep,
}

