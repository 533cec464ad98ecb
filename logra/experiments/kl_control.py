"""The predicted-KL step control where it acts: a δ sweep and a learning-rate stress test of GRPO
on a proxy policy (notebooks/09_kl_control; claims C5 and C6 at proxy scale).

At the proxy scale a GRPO step moves the policy by 10⁻⁴–10⁻³ nats per token, so the report's
δ = 0.02 never binds (notebook 03). Here δ is chosen where it does:

- **sweep**: at the default learning rate, LoGRA (gain) and dense AdamW with the same control
  (`adamw-kl`: LoGRA with `sketch=False`, AdamW's exact update) for each δ of `deltas` (null:
  no control), over `seeds`. Reported: the share of steps the control cut (γ < 1), KL(π_θ ‖ π_ref)
  over time and at the end, the training reward, and held-out greedy accuracy on `eval_prompts`
  problems after the last step; drawn as a trade-off of final KL against accuracy.
- **stress**: at `stress_lr`, where dense AdamW's KL runs away with these batches, each method of
  `stress_methods` (dense AdamW and LoGRA without control, both with the control at
  `stress_delta`, and the naive random projection). Does the control prevent the runaway, and
  does the naive projection run away (the proxy analogue of C5/C6)?

Every run is a `logra.rl` GRPO run of experiments/grpo.yaml at `grpo_scale` with the GRPO keys of
experiments/kl_control.yaml on top (same prompts, samples and evaluation problems per seed),
cached by config under <results_dir>/runs/ and resumed. The control uses the default KL
estimate (`kl_estimator="calibrated"`: the diagonal estimate in nats, refitted from an exact JVP
probe every few steps), so δ is a per-token KL per step.

`run(cfg)` returns one tidy frame: study, method, delta (NaN: no control), lr, seed, setting
(a budget run's name), then the runner's records (`logra.rl.COLUMNS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from logra.config import load_config
from logra.experiments.grpo_runs import grpo_job, prepare_inputs
from logra.experiments.jobs import run_jobs
from logra.experiments.plots import line_with_band
from logra.experiments.report import ClaimRow
from logra.methods import METHODS
from logra.rl import config as grpo
from logra.rl import runner

EXPERIMENT = "kl_control"
NOTEBOOK = "09_kl_control"
GRPO_KEYS = ("model", "task", "rank", "prompts_per_step", "group_size", "max_new_tokens",
             "eval_prompts", "eval_batch_size", "results_dir")
FLOOR = 1e-8  # KL values below this are drawn at FLOOR on log axes


@dataclass(frozen=True)
class Run:
    """One GRPO run of the experiment; delta None: no per-step control. A budget run also has
    a `setting` (its name in `budget_runs`) and the GRPO keys it sets."""

    study: str
    method: str
    delta: float | None
    lr: float
    seed: int
    setting: str = ""
    keys: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        if self.setting:
            return self.setting
        control = "no control" if self.delta is None else f"δ = {self.delta:g}"
        return f"{METHODS[self.method].short}, {control}"


def config(scale: str = "default", **overrides: Any) -> dict[str, Any]:
    """experiments/kl_control.yaml at `scale`, with the `overrides` that are not None on top
    (a notebook's parameters pass None for "the scale's value"), checked."""
    cfg = load_config(EXPERIMENT, scale, **{k: v for k, v in overrides.items() if v is not None})
    for key in ("sweep_methods", "stress_methods"):
        unknown = sorted({m for m, _ in _pairs(cfg[key])} - set(METHODS))
        if unknown:
            raise ValueError(f"{key}: unknown methods {unknown}; valid: {list(METHODS)}")
    for method in cfg["sweep_methods"]:
        if not METHODS[method].controllable:
            raise ValueError(f"sweep_methods: {method!r} has no KL control to sweep")
    if cfg["budget_method"] not in METHODS or not METHODS[cfg["budget_method"]].controllable:
        raise ValueError(f"budget_method must be one of "
                         f"{[m for m, spec in METHODS.items() if spec.controllable]}, "
                         f"got {cfg['budget_method']!r}")
    if any(d is not None and not d > 0 for d in cfg["deltas"]):
        raise ValueError(f"deltas must be positive or null, got {cfg['deltas']}")
    if not cfg["seeds"] or cfg["steps"] < 1:
        raise ValueError("seeds must be non-empty and steps >= 1")
    return cfg


def _pairs(entries: list[Any]) -> list[tuple[str, float | None]]:
    """Stress entries as (method, δ): "name" (no control) or {"name": δ}."""
    pairs = []
    for entry in entries:
        if isinstance(entry, dict):
            pairs.extend(entry.items())
        else:
            pairs.append((entry, None))
    return pairs


def plan(cfg: dict[str, Any]) -> list[Run]:
    """Every run of the sweep and the stress test."""
    runs = [Run("sweep", method, delta, cfg["lr"], seed)
            for method in cfg["sweep_methods"] for delta in cfg["deltas"]
            for seed in cfg["seeds"]]
    runs += [Run("stress", method, delta, cfg["stress_lr"], seed)
             for method, delta in _pairs(cfg["stress_methods"]) for seed in cfg["stress_seeds"]]
    runs += [Run("budget", cfg["budget_method"], None, cfg["lr"], seed, setting,
                 tuple(sorted((keys or {}).items())))
             for setting, keys in cfg["budget_runs"].items() for seed in cfg["budget_seeds"]]
    return runs


def grpo_config(cfg: dict[str, Any], run: Run) -> dict[str, Any]:
    """The resolved `logra.rl` config of one run."""
    overrides = {k: cfg[k] for k in GRPO_KEYS if cfg.get(k) is not None}
    steps = cfg["budget_steps"] if run.study == "budget" else cfg["steps"]
    method = METHODS[run.method]
    overrides.update(optimizer=method.optimizer, lr=run.lr, seed=run.seed, steps=steps,
                     eval_every=steps, predicted_kl_threshold=run.delta, **method.settings)
    if run.study == "budget":  # the budget is judged on the probe, not the noisy batch KL
        overrides.update(drift_probe_every=cfg["budget_probe_every"],
                         drift_probe_prompts=cfg["budget_probe_prompts"])
    overrides.update(run.keys)
    return grpo.resolve(scale=cfg["grpo_scale"], **overrides)


def run(cfg: dict[str, Any], progress: bool = True) -> pd.DataFrame:
    """Every run of `plan(cfg)` (cached runs are read back), as one tidy frame."""
    runs = plan(cfg)
    configs = [grpo_config(cfg, r) for r in runs]
    prepare_inputs(cfg, [configs[0]["model"]], [configs[0]["task"]])
    order = sorted(range(len(runs)), key=lambda i: runs[i].delta is None)  # controlled first
    results = run_jobs([(grpo_job, (configs[i],)) for i in order], cfg["workers"], EXPERIMENT,
                       progress)
    frames = [None] * len(runs)
    for i, records in zip(order, results, strict=True):
        r = runs[i]
        frames[i] = records.assign(study=r.study, method=r.method, lr=r.lr, seed=r.seed,
                                   delta=math.nan if r.delta is None else r.delta,
                                   setting=r.setting)
    frame = pd.concat(frames, ignore_index=True)
    return frame[["study", "method", "delta", "lr", "seed", "setting", *runner.COLUMNS]]


# ---------------------------------------------------------------- cost of the control

COST_SETTINGS: dict[str, dict[str, Any]] = {
    "dense AdamW (torch)": dict(optimizer="adamw"),
    "LoGRA, no control": dict(optimizer="logra", predicted_kl_threshold=None),
    "LoGRA + control (default estimate)": dict(optimizer="logra", predicted_kl_threshold=1e-3),
    "LoGRA + control (JVP on the whole batch)": dict(optimizer="logra",
                                                     predicted_kl_threshold=1e-3,
                                                     kl_estimator="jvp"),
}


def control_cost(cfg: dict[str, Any], progress: bool = True) -> pd.DataFrame:
    """Seconds per GRPO step (rollout, update, measurements) of each of `COST_SETTINGS`, for
    each batch (prompts, samples) of `cost_batches`: the trainers take `cost_rounds` rounds of
    `cost_steps` steps in turn, in one process on one thread, so that the machine's noise falls
    on all alike; the first round of each is a warm-up and not counted. Columns: batch,
    setting, s/step (median over counted steps), ratio to dense AdamW's, and the control's own
    share over LoGRA without it."""
    import torch
    from tqdm.auto import tqdm

    torch.set_num_threads(1)
    rows = []
    for prompts, samples in cfg["cost_batches"]:
        trainers = {}
        for name, keys in COST_SETTINGS.items():
            config = grpo.resolve(scale=cfg["grpo_scale"], model=cfg["model"], task=cfg["task"],
                                  lr=cfg["lr"], rank=cfg["rank"], prompts_per_step=prompts,
                                  group_size=samples, max_new_tokens=cfg["max_new_tokens"],
                                  results_dir=cfg["results_dir"], eval_prompts=8, **keys)
            trainers[name] = runner.Trainer(config, progress=False)
        seconds: dict[str, list[float]] = {name: [] for name in trainers}
        total = cfg["cost_rounds"] * len(trainers)
        bar = tqdm(total=total, desc=f"cost {prompts}x{samples}", disable=not progress)
        for round_ in range(cfg["cost_rounds"]):
            for name, trainer in trainers.items():
                for t in range(1, cfg["cost_steps"] + 1):
                    record = trainer.step(round_ * cfg["cost_steps"] + t)
                    if round_ > 0:
                        seconds[name].append(record["seconds"])
                bar.update()
        bar.close()
        adamw = float(np.median(seconds["dense AdamW (torch)"]))
        free = float(np.median(seconds["LoGRA, no control"]))
        for name, values in seconds.items():
            median = float(np.median(values))
            rows.append({"batch (prompts × samples)": f"{prompts} × {samples}",
                         "setting": name, "steps timed": len(values),
                         "s/step (median)": median, "÷ dense AdamW": median / adamw,
                         "÷ LoGRA without control": median / free})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- summaries


def _runs(frame: pd.DataFrame, study: str) -> pd.DataFrame:
    return frame[frame["study"] == study]


def _per_run(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """One row per run: final KL (mean of the last `final_steps` steps), peak KL (rolling mean
    over `smooth_steps`), share of clipped steps, median γ, reward over the last `final_steps`,
    held-out accuracy after the last step and at step 0."""
    rows = []
    keys = ["study", "method", "delta", "lr", "seed", "setting"]
    for key, r in frame.groupby(keys, dropna=False, sort=False):
        r = r.sort_values("step")
        train = r[r["step"] >= 1]
        smooth = train["kl"].rolling(cfg["smooth_steps"], min_periods=1).mean()
        above = train["step"][smooth.to_numpy() > cfg["runaway_kl"]]
        evals = r[r["eval_accuracy"].notna()]
        rows.append(dict(
            zip(keys, key, strict=True),
            final_kl=train["kl"].tail(cfg["final_steps"]).mean(),
            peak_kl=float(smooth.max()),
            first_runaway_step=int(above.iloc[0]) if len(above) else math.nan,
            clipped=100 * train["clipped"].astype(float).mean(),
            median_gamma=train["gamma"].median(),
            median_step_kl=train["step_kl"].median(),
            reward=train["reward"].tail(cfg["final_steps"]).mean(),
            final_beta=float(train["beta"].iloc[-1]),
            accuracy_start=float(evals["eval_accuracy"].iloc[0]),
            accuracy=float(evals["eval_accuracy"].iloc[-1]),
            seconds=train["seconds"].median(),
        ))
    return pd.DataFrame(rows)


def _delta_text(delta: float) -> str:
    return "off" if math.isnan(delta) else f"{delta:g}"


def _summarize(per_run: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (method, delta), r in per_run.groupby(["method", "delta"], dropna=False, sort=False):
        rows.append({
            "method": METHODS[method].short,
            "δ (nats/token/step)": _delta_text(delta), "seeds": len(r),
            "steps clipped (%)": r["clipped"].mean(), "median γ": r["median_gamma"].median(),
            "median step KL": r["median_step_kl"].median(),
            "final KL to ref, mean": r["final_kl"].mean(),
            "final KL, seed min": r["final_kl"].min(), "final KL, seed max": r["final_kl"].max(),
            "peak KL, max": r["peak_kl"].max(),
            "reward (last steps)": r["reward"].mean(),
            "accuracy %, mean": 100 * r["accuracy"].mean(),
            "accuracy %, seed min": 100 * r["accuracy"].min(),
            "accuracy %, seed max": 100 * r["accuracy"].max(),
            "gain over start (points)": 100 * (r["accuracy"] - r["accuracy_start"]).mean(),
            "s/step (median)": r["seconds"].median(),
        })
    return pd.DataFrame(rows)


def sweep_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """Per (method, δ) of the sweep: how often the control cut, where KL and accuracy ended
    (seed mean and range), and the step time."""
    return _summarize(_per_run(_runs(frame, "sweep"), cfg))


def stress_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """Per method of the stress test: as `sweep_table`, plus the first step whose smoothed KL
    to the reference exceeds `runaway_kl`."""
    per_run = _per_run(_runs(frame, "stress"), cfg)
    table = _summarize(per_run)
    first = per_run.groupby(["method", "delta"], dropna=False, sort=False)["first_runaway_step"]
    table.insert(len(table.columns) - 1, f"first step with KL > {cfg['runaway_kl']:g}",
                 [_steps_text(s) for _, s in first])
    return table


def budget_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """Per setting of the budget study: the KL to the reference at the end and at its highest,
    on the batches (noisy: each is B fresh completions) and on the drift probe (the same
    held-out completions' seeds every `budget_probe_every` steps: the budget holds when the
    highest probe stays under it), steps cut, the final β, reward and held-out accuracy (seed
    mean and range)."""
    per_run = _per_run(_runs(frame, "budget"), cfg)
    runs = _runs(frame, "budget")
    rows = []
    for setting, r in per_run.groupby("setting", sort=False):
        mine = runs[runs["setting"] == setting]
        probes = mine.dropna(subset=["drift_kl"]).sort_values("step").groupby("seed")["drift_kl"]
        rows.append({
            "setting": setting, "seeds": len(r),
            "final KL to ref, mean": r["final_kl"].mean(),
            "final KL, seed min": r["final_kl"].min(), "final KL, seed max": r["final_kl"].max(),
            "highest KL of any batch": mine.groupby("seed")["kl"].max().max(),
            f"highest {cfg['smooth_steps']}-step mean KL": r["peak_kl"].max(),
            "final probed KL, mean": probes.last().mean(),
            "highest probed KL": probes.max().max(),
            "steps cut (%)": r["clipped"].mean(), "final β": r["final_beta"].mean(),
            "reward (last steps)": r["reward"].mean(),
            "accuracy %, mean": 100 * r["accuracy"].mean(),
            "accuracy %, seed min": 100 * r["accuracy"].min(),
            "accuracy %, seed max": 100 * r["accuracy"].max(),
            "gain over start (points)": 100 * (r["accuracy"] - r["accuracy_start"]).mean(),
        })
    return pd.DataFrame(rows)


def _steps_text(steps: pd.Series) -> str:
    values = [str(int(s)) if math.isfinite(s) else "never" for s in steps]
    return " / ".join(values)


# ---------------------------------------------------------------- claims


def _stress_scale(frame: pd.DataFrame, cfg: dict[str, Any]) -> str:
    runs = _runs(frame, "stress")
    example = grpo_config(cfg, plan(cfg)[0])
    return (f"{cfg['scale']}: {example['model']}, lr {cfg['stress_lr']:g}, "
            f"{int(runs['step'].max())} GRPO steps, {runs['seed'].nunique()} seed(s)")


def c5_stress_claim(frame: pd.DataFrame, cfg: dict[str, Any]) -> ClaimRow:
    """C5 at the stress learning rate. The naive projection *runs away* when its smoothed KL to
    the reference exceeds `runaway_kl` nats/token within `c5_window` steps. Every seed: reproduced
    — unless uncontrolled dense AdamW runs away as early, in which case the explosion is the
    learning rate's, not the compression's: not reproduced; some seeds: partly; none: not
    reproduced."""
    per_run = _per_run(_runs(frame, "stress"), cfg)
    naive = per_run[per_run["method"] == "naive"]
    dense = per_run[(per_run["method"] == "adamw") & per_run["delta"].isna()]
    if naive.empty or dense.empty:
        raise ValueError("C5 (stress) needs the naive and dense AdamW stress runs")
    window = cfg["c5_window"][1]
    ran = naive["first_runaway_step"] <= window
    dense_first = dense["first_runaway_step"].min()
    text = (f"lr {cfg['stress_lr']:g}: peak KL to the reference ({cfg['smooth_steps']}-step "
            f"mean) naive projection {_span(naive['peak_kl'])}, dense AdamW "
            f"{_span(dense['peak_kl'])} nats/token; above {cfg['runaway_kl']:g} within "
            f"{window} steps: naive {int(ran.sum())}/{len(naive)} seeds, dense AdamW from step "
            f"{_steps_text(dense['first_runaway_step'])}; accuracy after "
            f"{cfg['steps']} steps: naive {_pct(naive['accuracy'])}, dense AdamW "
            f"{_pct(dense['accuracy'])} (start {_pct(dense['accuracy_start'])})")
    if ran.all() and not dense_first <= naive["first_runaway_step"].max():
        verdict = "reproduced"
    elif ran.any() and not dense_first <= naive["first_runaway_step"].min():
        verdict = "partly"
    else:
        verdict = "not reproduced"
    return ClaimRow("C5", "naive random projection makes KL(π_θ ‖ π_ref) explode within 50–100 "
                    "steps (proxy stress test)", text, _stress_scale(frame, cfg), verdict)


def c6_stress_claim(frame: pd.DataFrame, cfg: dict[str, Any]) -> ClaimRow:
    """C6 at the stress learning rate: does the control prevent a runaway? For each method with
    an uncontrolled and a controlled run (dense AdamW, LoGRA): reproduced when the uncontrolled
    run's smoothed KL exceeds `runaway_kl` and the controlled one's never does, with held-out
    accuracy no lower (seed mean); partly when the control at least divides the peak KL by
    `c6_factor`; not reproduced otherwise, or when no uncontrolled run runs away (nothing to
    prevent)."""
    per_run = _per_run(_runs(frame, "stress"), cfg)
    parts, outcomes = [], []
    for free_method, method in (("adamw", "adamw-kl"), ("logra", "logra")):
        free = per_run[(per_run["method"] == free_method) & per_run["delta"].isna()]
        held = per_run[(per_run["method"] == method) & per_run["delta"].notna()]
        if free.empty or held.empty:
            continue
        ran_away = bool((free["peak_kl"] > cfg["runaway_kl"]).any())
        contained = bool((held["peak_kl"] <= cfg["runaway_kl"]).all())
        better = held["accuracy"].mean() >= free["accuracy"].mean()
        shrink = free["peak_kl"].max() / max(held["peak_kl"].max(), FLOOR)
        outcomes.append("prevented" if ran_away and contained and better else
                        "reduced" if ran_away and shrink >= cfg["c6_factor"] else
                        "no runaway" if not ran_away else "not prevented")
        delta = held["delta"].iloc[0]
        parts.append(f"{METHODS[method].short}: peak KL "
                     f"{_span(free['peak_kl'])} without control, {_span(held['peak_kl'])} with "
                     f"δ = {delta:g} (clipped {held['clipped'].mean():.0f} % of steps); accuracy "
                     f"{_pct(free['accuracy'])} → {_pct(held['accuracy'])}")
    if not outcomes:
        raise ValueError("C6 (stress) needs an uncontrolled and a controlled run of one method")
    verdict = ("reproduced" if all(o == "prevented" for o in outcomes) else
               "partly" if any(o in ("prevented", "reduced") for o in outcomes) else
               "not reproduced")
    text = "; ".join(parts) + f" (runaway: KL > {cfg['runaway_kl']:g}; outcome {outcomes})"
    return ClaimRow("C6", "predicted-KL step control prevents the KL collapse (proxy stress test)",
                    text, _stress_scale(frame, cfg), verdict)


def claims(frame: pd.DataFrame, cfg: dict[str, Any]) -> list[ClaimRow]:
    return [c5_stress_claim(frame, cfg), c6_stress_claim(frame, cfg)]


def _span(values: pd.Series) -> str:
    return f"{values.min():.3g}–{values.max():.3g}" if len(values) > 1 else f"{values.iloc[0]:.3g}"


def _pct(values: pd.Series) -> str:
    return (f"{100 * values.mean():.1f} %" if len(values) == 1 else
            f"{100 * values.mean():.1f} % ({100 * values.min():.1f}–{100 * values.max():.1f})")


# ---------------------------------------------------------------- figures


def plot_tradeoff(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Sweep: final KL to the reference against held-out accuracy, one point per (method, δ)
    at the seed mean, bars from the lowest to the highest seed; the share of clipped steps."""
    per_run = _per_run(_runs(frame, "sweep"), cfg)
    fig, (ax, ax_clip) = plt.subplots(1, 2, figsize=(12, 4.8))
    for method, r in per_run.groupby("method", sort=False):
        spec = METHODS[method]
        stats = r.groupby("delta", dropna=False).agg(
            kl=("final_kl", "mean"), kl_lo=("final_kl", "min"), kl_hi=("final_kl", "max"),
            acc=("accuracy", "mean"), acc_lo=("accuracy", "min"), acc_hi=("accuracy", "max"),
            clipped=("clipped", "mean"))
        stats = stats.sort_index(na_position="last")
        # a KL of 0 (a policy that never moved: the smoke scale) has no place on a log axis
        stats[["kl", "kl_lo", "kl_hi"]] = stats[["kl", "kl_lo", "kl_hi"]].clip(lower=FLOOR)
        label = spec.short
        ax.errorbar(stats["kl"], 100 * stats["acc"],
                    xerr=[stats["kl"] - stats["kl_lo"], stats["kl_hi"] - stats["kl"]],
                    yerr=[100 * (stats["acc"] - stats["acc_lo"]),
                          100 * (stats["acc_hi"] - stats["acc"])],
                    color=spec.color, marker="o", capsize=3, lw=1.2, label=label)
        for delta, row in stats.iterrows():
            ax.annotate(_delta_text(delta), (row["kl"], 100 * row["acc"]), fontsize=8,
                        xytext=(4, 4), textcoords="offset points", color=spec.color)
        controlled = stats[stats.index.notna()]
        ax_clip.plot(controlled.index, controlled["clipped"], color=spec.color, marker="o",
                     label=label)
    start = 100 * per_run["accuracy_start"].mean()
    ax.axhline(start, color="grey", ls=":", lw=1, label=f"before GRPO ({start:.1f} %)")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on a short log axis
    ax.set_xlabel(f"final KL(π_θ ‖ π_ref) (nats/token, mean of the last {cfg['final_steps']} "
                  "steps)")
    ax.set_ylabel(f"greedy accuracy on {cfg['eval_prompts']:,} held-out problems (%)")
    ax.set_title("KL budget δ per step: drift from the reference against accuracy\n"
                 "(point: seed mean, bars: seed range; labels: δ)", fontsize=10)
    ax.legend(fontsize=8)
    ax_clip.set_xscale("log")
    ax_clip.set_xlabel("δ (nats/token per step)")
    ax_clip.set_ylabel("steps with γ < 1 (%)")
    ax_clip.set_ylim(-2, 102)
    ax_clip.set_title("how often the control cut the step", fontsize=10)
    for a in (ax, ax_clip):
        a.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_runs(frame: pd.DataFrame, cfg: dict[str, Any], study: str) -> plt.Figure:
    """KL to the reference per step (log) and the control's γ, one line per (method, δ):
    the seed mean, with the seed range as a band."""
    runs = _runs(frame, study)
    runs = runs[runs["step"] >= 2]  # step 1 samples from π_ref: KL 0
    groups = list(runs.groupby(["method", "delta"], dropna=False, sort=False))
    fig, (ax_kl, ax_gamma) = plt.subplots(1, 2, figsize=(12, 4.6))
    shades = np.linspace(0.35, 1.0, max(len(cfg["deltas"]), 2))
    for (method, delta), r in groups:
        spec = METHODS[method]
        rank = sorted({d for (m, d), _ in groups if m == method},
                      key=lambda d: -1 if math.isnan(d) else -d).index(delta)
        alpha = float(shades[min(rank, len(shades) - 1)]) if study == "sweep" else 1.0
        label = Run(study, method, None if math.isnan(delta) else delta, 0.0, 0).label
        style = "--" if math.isnan(delta) and METHODS[method].controllable else "-"
        r = r.assign(kl=r["kl"].clip(lower=FLOOR))
        for ax, column in ((ax_kl, "kl"), (ax_gamma, "gamma")):
            if column == "gamma" and math.isnan(delta):
                continue
            line_with_band(ax, r, "step", column, band=r["seed"].nunique() > 1,
                           band_alpha=0.12 * alpha, color=spec.color, alpha=alpha, ls=style, lw=1.4,
                           label=label if column == "kl" else None)
    ax_kl.set_yscale("log")
    ax_kl.axhline(cfg["runaway_kl"], color="grey", ls=":", lw=1)
    ax_kl.set_ylabel("KL(π_θ ‖ π_ref) (nats/token)")
    ax_gamma.set_ylabel("step scale γ")
    ax_gamma.set_ylim(0, 1.05)
    lr = cfg["lr"] if study == "sweep" else cfg["stress_lr"]
    ax_kl.set_title(f"{study}: KL to the reference (lr {lr:g}; dotted: {cfg['runaway_kl']:g})",
                    fontsize=10)
    ax_gamma.set_title("γ = min(1, √(δ / KL̂)) of the controlled runs", fontsize=10)
    for ax in (ax_kl, ax_gamma):
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncol=4, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    return fig


def plot_budget(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Budget study: KL to the reference per step for each setting (the batches' KL: seed mean,
    band over the seeds; dots: the highest drift probe over the seeds; dotted: the drift
    budgets), and accuracy against final KL."""
    runs = _runs(frame, "budget")
    runs = runs[runs["step"] >= 2]
    per_run = _per_run(_runs(frame, "budget"), cfg)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (ax_kl, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.6))
    for i, (setting, r) in enumerate(runs.groupby("setting", sort=False)):
        color = colors[i % len(colors)]
        line_with_band(ax_kl, r.assign(kl=r["kl"].clip(lower=FLOOR)), "step", "kl", color=color,
                       lw=1.4, label=setting)
        probes = r.pivot_table(index="step", columns="seed", values="drift_kl")
        if not probes.empty:
            ax_kl.plot(probes.index, probes.max(axis=1).clip(lower=FLOOR), color=color, lw=0,
                       marker="o", ms=3.5, mec="black", mew=0.4)
        p = per_run[per_run["setting"] == setting]
        ax_acc.errorbar(p["final_kl"].mean(), 100 * p["accuracy"].mean(),
                        xerr=[[p["final_kl"].mean() - p["final_kl"].min()],
                              [p["final_kl"].max() - p["final_kl"].mean()]],
                        yerr=[[100 * (p["accuracy"].mean() - p["accuracy"].min())],
                              [100 * (p["accuracy"].max() - p["accuracy"].mean())]],
                        color=color, marker="o", capsize=3, label=setting)
    for keys in cfg["budget_runs"].values():
        if keys and keys.get("kl_drift_budget"):
            ax_kl.axhline(keys["kl_drift_budget"], color="grey", ls=":", lw=1)
    start = 100 * per_run["accuracy_start"].mean()
    ax_acc.axhline(start, color="grey", ls=":", lw=1, label=f"before GRPO ({start:.1f} %)")
    ax_kl.set_yscale("log")
    ax_kl.set_ylim(bottom=max(FLOOR, 0.01 * float(runs["kl"].median())))
    ax_kl.set_xlabel("GRPO step")
    ax_kl.set_ylabel("KL(π_θ ‖ π_ref) (nats/token)")
    ax_kl.set_title("drift from the reference (lines: batches; dots: highest probe over seeds;"
                    "\ndotted: the budget)", fontsize=10)
    ax_acc.set_xlabel(f"final KL to the reference (mean of the last {cfg['final_steps']} steps)")
    ax_acc.set_ylabel(f"greedy accuracy on {cfg['eval_prompts']:,} held-out problems (%)")
    ax_acc.set_title("accuracy at the KL each control ends at (bars: seed range)", fontsize=10)
    for ax in (ax_kl, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


FIGURES = {
    "kl_control_tradeoff": plot_tradeoff,
    "kl_control_sweep": lambda frame, cfg: plot_runs(frame, cfg, "sweep"),
    "kl_control_stress": lambda frame, cfg: plot_runs(frame, cfg, "stress"),
    "kl_control_budget": plot_budget,
}
