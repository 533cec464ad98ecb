"""Optimizer comparison: held-out pass@1 after GRPO with each optimizer, at each model size
(notebooks/04_optimizer_comparison; claims C7, C8).

The runs are built by `logra.experiments.grpo_runs.grpo_config`, as the KL notebook's — the
same method definitions (`grpo_runs.METHODS`) and GRPO keys — so with equal settings the adamw
and logra runs of the KL notebook are the same runs (same config hash, same run directory) and
are read back instead of rerun. Each run trains on `task`; its final policy is then evaluated
greedily on the first `heldout_prompts` test problems of every task of `eval_tasks`, from the
run's final checkpoint through the runner's own evaluation (cached in <results_dir>/heldout/;
the runner's evaluation at the last step is reused when it covered the same problems). The
policy before RL ("base") is evaluated the same way.

`run(cfg)` returns one tidy frame, one row per (model, method, seed, eval task):

    model, method, seed, task, accuracy    greedy pass@1 (0–1)
    final_kl        exact mean per-token KL(π_θ ‖ π_ref) at the last step (mean of the last
                    `final_steps`=5 steps)
    state_bytes     bytes of the optimizer's state at the last step
                    (`logra.optimizers.measured_state_bytes`)
    step_seconds    median wall time of a GRPO step (evaluation excluded)
    steps           GRPO steps of the run

Rules of the verdicts are in `c7_claim` and `c8_claim`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch

from logra import io
from logra.config import load_config
from logra.data import get_task
from logra.experiments import grpo_runs
from logra.experiments.jobs import run_jobs
from logra.experiments.report import ClaimRow
from logra.methods import METHODS, palette
from logra.models import SCALES
from logra.rl import config as grpo
from logra.rl import run_grpo, runner

EXPERIMENT = "comparison"
NOTEBOOK = "04_optimizer_comparison"
FINAL_STEPS = 5
# The report's numbers (docs/claims.md): C7 gives none at 1.5B/7B, C8 these at 27B, by family.
REPORTED_27B = {"logra": {"gsm": 84.2, "math": 51.7},
                "lora": {"gsm": round(84.2 - 7.6, 1), "math": round(51.7 - 7.3, 1)}}
C7_REPORTED = "at 1.5B and 7B, LoGRA matches or slightly exceeds dense Adam on GSM8K and MATH"
C8_REPORTED = ("27B on 8×80 GB: LoGRA 84.2 % pass@1 on GSM8K, 51.7 % on MATH; LoRA −7.6 / −7.3 "
               "points")


def config(scale: str = "default", **overrides: Any) -> dict[str, Any]:
    """experiments/comparison.yaml at `scale`, with `overrides` on top."""
    cfg = load_config(EXPERIMENT, scale, **overrides)
    if not cfg["models"] or not cfg["eval_tasks"]:
        raise ValueError("models and eval_tasks must be non-empty")
    return grpo_runs.check_runs(cfg)


def grpo_config(cfg: dict[str, Any], model: str, method: str, seed: int) -> dict[str, Any]:
    """The resolved GRPO config of one run (`grpo_runs.grpo_config` with `model`)."""
    values = {"model": model}
    if cfg["task"] is not None:
        values["task"] = cfg["task"]
    return grpo_runs.grpo_config(cfg, method, seed, **values)


# ---------------------------------------------------------------- held-out evaluation


ALL = 10**9  # heldout_prompts: null means every test problem


def heldout_prompts(cfg: dict[str, Any]) -> int:
    """Test problems per eval task (`heldout_prompts`; null: all of them)."""
    return ALL if cfg["heldout_prompts"] is None else cfg["heldout_prompts"]


def _checkpoint_accuracy(config: dict[str, Any], task: str, prompts: int, trained: bool
                         ) -> float:
    """Greedy pass@1 on the first `prompts` test problems of `task`, of the run's final policy
    (`trained`) or of the policy before RL, through the runner's own Trainer and evaluation."""
    trainer = runner.Trainer({**config, "task": task, "eval_prompts": prompts}, progress=False)
    if trained:
        step, _ = trainer.load(grpo.run_dir(config) / runner.CHECKPOINT_FILE)
        if step != config["steps"]:
            raise RuntimeError(f"{grpo.run_dir(config)}: checkpoint at step {step}, not at "
                               f"{config['steps']}; rerun it with steps={config['steps']}")
    return trainer.evaluate()[0]["eval_accuracy"]


def heldout_job(config: dict[str, Any], tasks: list[str], prompts: int) -> dict[str, Any]:
    """Run (or read back) one GRPO run, then its final policy's accuracy on the first `prompts`
    test problems of every task.

    Accuracies are cached in <results_dir>/heldout/<run name>.json under
    "<task>/<steps>/<prompts>/<max_new_tokens>". The runner's own evaluation at the last step is
    reused for the training task when it covered the same problems.
    """
    records = run_grpo(config, progress=False)
    path = Path(config["results_dir"]) / "heldout" / f"{grpo.run_dir(config).name}.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    accuracy = {}
    final = records[records["step"] == config["steps"]]
    for task in tasks:
        key = f"{task}/{config['steps']}/{prompts}/{config['max_new_tokens']}"
        if key not in saved:
            if (task == config["task"] and config["eval_prompts"] == prompts
                    and final["eval_accuracy"].notna().any()):
                saved[key] = float(final["eval_accuracy"].iloc[0])
            else:
                saved[key] = _checkpoint_accuracy(config, task, prompts, trained=True)
            io.write_json(path, saved)
        accuracy[task] = saved[key]
    return dict(records=records, accuracy=accuracy)


def base_job(config: dict[str, Any], tasks: list[str], prompts: int) -> dict[str, float]:
    """Accuracy of the policy before RL on every task (not cached: one evaluation per task)."""
    return {task: _checkpoint_accuracy(config, task, prompts, trained=False) for task in tasks}


# ---------------------------------------------------------------- running


def run(cfg: dict[str, Any], progress: bool = True) -> pd.DataFrame:
    """Every (model, method, seed) run of `cfg` and the base policies, evaluated on every
    eval task; the tidy frame of the module docstring."""
    configs = {(model, m, s): grpo_config(cfg, model, m, s)
               for model in cfg["models"] for m in cfg["methods"] for s in cfg["seeds"]}
    first = next(iter(configs.values()))
    grpo_runs.prepare_inputs(cfg, list(cfg["models"]),
                             list(dict.fromkeys([first["task"], *cfg["eval_tasks"]])))
    tasks, prompts = list(cfg["eval_tasks"]), heldout_prompts(cfg)
    jobs = [((model, m, s), heldout_job, (c, tasks, prompts))
            for (model, m, s), c in configs.items()]
    size = {model: i + 1 for i, model in enumerate(cfg["models"])}  # later models: larger
    jobs.sort(key=lambda job: -METHODS[job[0][1]].cost * size[job[0][0]] ** 2)
    jobs += [((model, "base", -1), base_job,
              (configs[(model, cfg["methods"][0], cfg["seeds"][0])], tasks, prompts))
             for model in cfg["models"]]
    results = run_jobs([(fn, args) for _, fn, args in jobs], cfg["workers"], EXPERIMENT,
                          progress)
    rows = []
    for ((model, method, seed), _, _), result in zip(jobs, results, strict=True):
        if method == "base":
            for task, accuracy in result.items():
                rows.append(dict(model=model, method="base", seed=seed, task=task,
                                 accuracy=accuracy, final_kl=0.0, state_bytes=math.nan,
                                 step_seconds=math.nan, steps=0))
            continue
        records = result["records"]
        train = records[records["step"] >= 1]
        summary = dict(final_kl=float(train["kl"].tail(FINAL_STEPS).mean()),
                       state_bytes=float(train["state_bytes"].iloc[-1]),
                       step_seconds=float(train["seconds"].median()),
                       steps=int(train["step"].max()))
        for task, accuracy in result["accuracy"].items():
            rows.append(dict(model=model, method=method, seed=seed, task=task,
                             accuracy=accuracy, **summary))
    frame = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(["base", *cfg["methods"]])}
    models = {m: i for i, m in enumerate(cfg["models"])}
    tasks_order = {t: i for i, t in enumerate(tasks)}
    return frame.sort_values(
        ["model", "method", "task", "seed"], kind="stable",
        key=lambda c: c.map({"model": models, "method": order, "task": tasks_order}[c.name])
        if c.name in ("model", "method", "task") else c).reset_index(drop=True)


# ---------------------------------------------------------------- tables


def _label(method: str) -> str:
    return "policy before RL" if method == "base" else METHODS[method].label


def _model_name(model: str) -> str:
    return Path(model).name


def _column(model: str, task: str) -> str:
    return f"{_model_name(model)} {get_task(task).label} ({task}), %"


def accuracy_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation and count of accuracy (in %) per (model, method, task)."""
    return (frame.assign(accuracy=100 * frame["accuracy"])
            .groupby(["model", "method", "task"], sort=False)["accuracy"]
            .agg(["mean", "std", "count"]).reset_index())


def _reported(method: str, what: str) -> str:
    if what == "1.5b/7b":
        return {"logra": "≥ dense Adam (no numbers)", "adamw": "the reference"}.get(method, "—")
    value = REPORTED_27B.get(method, {}).get(what)
    return "—" if value is None else f"{value:.1f}"


def comparison_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """The paper's shape: one row per method; per model and eval task the held-out pass@1
    (mean ± std over seeds, %), the reported numbers beside, then state, step time and KL."""
    summary = accuracy_summary(frame).set_index(["model", "method", "task"])
    runs = frame.drop_duplicates(["model", "method", "seed"])
    rows = []
    for method in ["base", *cfg["methods"]]:
        row: dict[str, Any] = {"method": _label(method)}
        for model in cfg["models"]:
            for task in cfg["eval_tasks"]:
                s = summary.loc[(model, method, task)]
                row[_column(model, task)] = (f"{s['mean']:.1f}" if method == "base" or
                                             s["count"] < 2 else
                                             f"{s['mean']:.1f} ± {s['std']:.1f}")
        row["reported 1.5B / 7B"] = _reported(method, "1.5b/7b")
        row["reported 27B GSM8K, %"] = _reported(method, "gsm")
        row["reported 27B MATH, %"] = _reported(method, "math")
        for model in cfg["models"]:
            r = runs[(runs["model"] == model) & (runs["method"] == method)]
            name = _model_name(model)
            row[f"{name} optimizer state, MB"] = ("—" if method == "base"
                                                  else f"{r['state_bytes'].mean() / 1e6:.3g}")
            row[f"{name} s/step"] = ("—" if method == "base"
                                     else f"{r['step_seconds'].median():.2f}")
            row[f"{name} final KL to ref"] = ("—" if method == "base"
                                              else f"{r['final_kl'].mean():.3g}")
        rows.append(row)
    return pd.DataFrame(rows)


def runs_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run with every number (accuracy per task as columns, in %)."""
    wide = frame.pivot_table(index=["model", "method", "seed"], columns="task",
                             values="accuracy", sort=False).mul(100)
    wide.columns = [f"{task} pass@1, %" for task in wide.columns]
    extra = frame.drop_duplicates(["model", "method", "seed"]).set_index(
        ["model", "method", "seed"])[["final_kl", "state_bytes", "step_seconds", "steps"]]
    return wide.join(extra).reset_index()


# ---------------------------------------------------------------- claims


def _difference(summary: pd.DataFrame, model: str, task: str, a: str, b: str, margin: float
                ) -> tuple[float, float]:
    """(mean of a − mean of b in points, the margin max(`margin`, 2 standard errors))."""
    sa, sb = summary.loc[(model, a, task)], summary.loc[(model, b, task)]
    se = math.sqrt(np.nan_to_num(sa["std"]) ** 2 / sa["count"]
                   + np.nan_to_num(sb["std"]) ** 2 / sb["count"])
    return sa["mean"] - sb["mean"], max(margin, 2 * se)


def _scale_text(frame: pd.DataFrame, cfg: dict[str, Any]) -> str:
    runs = frame[frame["method"] != "base"]
    models = ", ".join(_model_name(m) for m in cfg["models"])
    return (f"{cfg['scale']}: {models}, {int(runs['steps'].max())} GRPO steps on "
            f"{runs_task(cfg)}, {runs['seed'].nunique()} seeds")


def runs_task(cfg: dict[str, Any]) -> str:
    return grpo_config(cfg, cfg["models"][0], cfg["methods"][0], cfg["seeds"][0])["task"]


def _base_note(summary: pd.DataFrame, cfg: dict[str, Any]) -> str:
    """The policy before RL, and which methods beat it by more than the margin."""
    notes = []
    for model in cfg["models"]:
        for task in cfg["eval_tasks"]:
            if (model, "base", task) not in summary.index:
                continue
            base = summary.loc[(model, "base", task), "mean"]
            better = [METHODS[m].label for m in cfg["methods"]
                      if summary.loc[(model, m, task), "mean"] - base > cfg["c7_margin"]]
            notes.append(f"{_model_name(model)} {task} {base:.1f} % "
                         f"({', '.join(better) if better else 'no method'} above it by more "
                         f"than {cfg['c7_margin']:g} points)")
    return "; before RL: " + "; ".join(notes) if notes else ""


def c7_pairs(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """C7's comparison on every (model, eval task) run: one row each with the mean pass@1 (%)
    of the policy before RL ("base", NaN when not evaluated), dense AdamW and LoGRA, LoGRA's
    difference to AdamW and its margin max(c7_margin, 2·SE) in points, whether LoGRA "matches
    or exceeds" (difference ≥ −margin), and whether dense AdamW beat the policy before RL by
    more than c7_margin ("adamw_learned")."""
    return _c7_pairs(accuracy_summary(frame).set_index(["model", "method", "task"]), cfg)


def _c7_pairs(summary: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for model in cfg["models"]:
        for task in cfg["eval_tasks"]:
            diff, margin = _difference(summary, model, task, "logra", "adamw", cfg["c7_margin"])
            adamw = summary.loc[(model, "adamw", task), "mean"]
            base = (summary.loc[(model, "base", task), "mean"]
                    if (model, "base", task) in summary.index else math.nan)
            rows.append({"model": model, "task": task, "base": base, "adamw": adamw,
                         "logra": summary.loc[(model, "logra", task), "mean"],
                         "difference": diff, "margin": margin, "matches": diff >= -margin,
                         "adamw_learned": adamw - base > cfg["c7_margin"]})
    return pd.DataFrame(rows)


def c7_claim(frame: pd.DataFrame, cfg: dict[str, Any]) -> ClaimRow:
    """C7 by rule, on the models run (`c7_pairs`). For every (model, eval task): LoGRA "matches
    or exceeds" dense AdamW when mean(LoGRA) − mean(AdamW) ≥ −max(c7_margin, 2·SE), SE from the
    seeds' spread. Every pair: reproduced; some: partly; none: not reproduced. Matching a dense
    run that learned nothing says nothing, so when dense AdamW beats the policy before RL by
    more than c7_margin on no pair, "reproduced" is capped at "partly"."""
    summary = accuracy_summary(frame).set_index(["model", "method", "task"])
    pairs = _c7_pairs(summary, cfg)
    parts = [f"{_model_name(p.model)} {p.task}: LoGRA {p.logra:.1f} vs AdamW {p.adamw:.1f} % "
             f"(Δ {p.difference:+.1f}, margin {p.margin:.1f})" for p in pairs.itertuples()]
    ok, n = int(pairs["matches"].sum()), len(pairs)
    verdict = "reproduced" if ok == n else "partly" if ok else "not reproduced"
    text = "; ".join(parts) + f"; matches or exceeds in {ok}/{n}"
    if verdict == "reproduced" and not pairs["adamw_learned"].any():
        verdict = "partly"
        text += "; capped at partly: dense AdamW did not improve on the policy before RL"
    if not any(grpo_runs.is_real_scale(cfg, m) for m in cfg["models"]):
        text += " (proxy analogue of the claim)"
    text += _base_note(summary, cfg)
    return ClaimRow("C7", C7_REPORTED, text, _scale_text(frame, cfg), verdict)


def c8_claim(frame: pd.DataFrame, cfg: dict[str, Any]) -> ClaimRow:
    """C8 by rule. At 27B (Gemma-3-27B among the models): LoGRA's pass@1 and LoRA's gap to it
    each within `c8_tolerance` points of the report on GSM8K and MATH — all four: reproduced;
    some: partly; none: not reproduced. Elsewhere only the direction can be compared: LoRA
    below LoGRA by more than max(c7_margin, 2·SE) on every (model, task): reproduced (the row
    says it is the direction at proxy scale); on some: partly; on none: not reproduced."""
    summary = accuracy_summary(frame).set_index(["model", "method", "task"])
    big = SCALES["27b"].hub_id
    parts, hits, total = [], 0, 0
    if big in cfg["models"]:
        tol = cfg["c8_tolerance"]
        for task in cfg["eval_tasks"]:
            family = get_task(task).family.name
            want = REPORTED_27B["logra"][family]
            got = summary.loc[(big, "logra", task), "mean"]
            gap = summary.loc[(big, "lora", task), "mean"] - got
            want_gap = REPORTED_27B["lora"][family] - want
            hits += int(abs(got - want) <= tol) + int(abs(gap - want_gap) <= tol)
            total += 2
            parts.append(f"{task}: LoGRA {got:.1f} % (reported {want:.1f}), LoRA {gap:+.1f} "
                         f"points (reported {want_gap:+.1f})")
        scale = _scale_text(frame, cfg)
    else:
        for model in cfg["models"]:
            for task in cfg["eval_tasks"]:
                diff, margin = _difference(summary, model, task, "lora", "logra",
                                           cfg["c7_margin"])
                hits += int(diff < -margin)
                total += 1
                parts.append(f"{_model_name(model)} {task}: LoRA − LoGRA {diff:+.1f} points "
                             f"(margin {margin:.1f})")
        parts.append(f"LoRA below LoGRA in {hits}/{total}{_base_note(summary, cfg)}")
        scale = _scale_text(frame, cfg) + " (direction of the LoRA gap only)"
    verdict = "reproduced" if hits == total else "partly" if hits else "not reproduced"
    return ClaimRow("C8", C8_REPORTED, "; ".join(parts), scale, verdict)


def gpu_rows(cfg: dict[str, Any]) -> list[ClaimRow]:
    """"needs GPU scale" rows, with the commands, for the reported scales not run here."""
    rows = []
    for scale in ("1.5b", "7b"):
        if SCALES[scale].hub_id not in cfg["models"]:
            rows.append(ClaimRow("C7", C7_REPORTED, _gpu_text(scale), scale.upper(),
                                 "needs GPU scale"))
    if SCALES["27b"].hub_id not in cfg["models"]:
        text = (_gpu_text("27b") + "; LoGRA alone on one 8×80 GB node (TRL + FSDP2): "
                "`accelerate launch --config_file experiments/launch/accelerate_fsdp2_8gpu.yaml "
                "scripts/trl_grpo.py --config experiments/launch/trl_grpo_27b.yaml`")
        rows.append(ClaimRow("C8", C8_REPORTED, text, "27B, 8×80 GB", "needs GPU scale"))
    return rows


def _gpu_text(scale: str) -> str:
    gpu = config(scale)
    example = grpo_runs.command(grpo_config(gpu, gpu["models"][0], "logra", 0))
    return (f"not run here (CPU proxies only). Command: `logra-repro reproduce --scale {scale} "
            f"--only {NOTEBOOK}` (every method × {len(gpu['seeds'])} seeds, "
            f"{gpu['steps']:,} steps, evaluated on {' and '.join(gpu['eval_tasks'])}; "
            f"one run: `{example}`)")


def claims(frame: pd.DataFrame, cfg: dict[str, Any]) -> list[ClaimRow]:
    """C7 and C8 on the runs here, then the reported scales that were not run."""
    return [c7_claim(frame, cfg), c8_claim(frame, cfg), *gpu_rows(cfg)]


# ---------------------------------------------------------------- figures


def plot_accuracy(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Held-out pass@1 per method, one facet per model and eval task: bars = mean over seeds,
    dots = seeds (seaborn's barplot and swarmplot), dashed = before RL."""
    models, tasks, methods = cfg["models"], cfg["eval_tasks"], cfg["methods"]
    labels = [METHODS[m].label for m in methods]
    colors = palette(methods)
    runs = frame[frame["method"].isin(methods)]
    runs = runs.assign(label=runs["method"].map(lambda m: METHODS[m].label),
                       percent=100 * runs["accuracy"])
    grid = sns.FacetGrid(runs, row="model", col="task", row_order=models, col_order=tasks,
                         height=3.8, aspect=5.5 / 3.8, sharex=False, sharey=False, despine=False)
    by_method = dict(x="label", y="percent", hue="label", order=labels, hue_order=labels,
                     palette=colors, legend=False)
    grid.map_dataframe(sns.barplot, **by_method, errorbar=None, saturation=1, alpha=0.35)
    # swarmplot, not stripplot: its dots sit side by side only where they would overlap, the
    # same on every run (stripplot's jitter draws from numpy's global random state)
    grid.map_dataframe(sns.swarmplot, **by_method, size=4, zorder=3)
    for (model, task), ax in grid.axes_dict.items():
        for bar in ax.patches:  # outlined in its own colour, as the dots are
            bar.set_edgecolor(bar.get_facecolor())
        base = frame[(frame["model"] == model) & (frame["task"] == task)
                     & (frame["method"] == "base")]["accuracy"]
        if len(base):
            ax.axhline(100 * base.mean(), color="grey", ls="--", lw=1.2,
                       label="policy before RL")
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
        ax.set(xlabel="", ylabel="held-out greedy pass@1 (%)")
        ax.set_title(f"{_model_name(model)}: {get_task(task).label} ({task})", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    bars = [Patch(facecolor=colors[label], edgecolor=colors[label], alpha=0.35, label=label)
            for label in labels]
    handles, names = grid.axes[0, 0].get_legend_handles_labels()
    grid.figure.legend([*bars, *handles], [*labels, *names], loc="lower center", ncol=4,
                       fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.08))
    grid.figure.suptitle(f"After {int(frame['steps'].max())} GRPO steps on {runs_task(cfg)} "
                         "(bars: mean over seeds; dots: seeds)", fontsize=11)
    grid.figure.tight_layout()
    return grid.figure


def plot_cost(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Optimizer-state bytes and median step time per method (one bar per model)."""
    runs = frame[frame["method"] != "base"].drop_duplicates(["model", "method", "seed"])
    methods, models = cfg["methods"], cfg["models"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(methods) * len(models) + 1.8))
    height = 0.8 / len(models)
    hatches = ["", "//", "..", "xx"]
    for k, model in enumerate(models):
        data = runs[runs["model"] == model].groupby("method")
        state = data["state_bytes"].mean().reindex(methods) / 1e6
        seconds = data["step_seconds"].median().reindex(methods)
        y = np.arange(len(methods)) + (k - (len(models) - 1) / 2) * height
        colors = [METHODS[m].color for m in methods]
        for ax, values, fmt in ((axes[0], state, "{:.3g} MB"), (axes[1], seconds, "{:.2f} s")):
            ax.barh(y, values, height=height, color=colors, alpha=0.6,
                    hatch=hatches[k % len(hatches)], edgecolor="black", lw=0.4,
                    label=_model_name(model))
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


FIGURES: dict[str, Callable[[pd.DataFrame, dict[str, Any]], plt.Figure]] = {
    "comparison_accuracy": plot_accuracy,
    "comparison_cost": plot_cost,
}
