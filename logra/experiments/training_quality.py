"""Training quality: byte-level language-model pretraining on real text with every optimizer.

The question a researcher asks of a memory-efficient optimizer first: at equal optimizer-state
memory, how close to AdamW's held-out loss does it get? The protocol, the same for every
optimizer of `methods` (each an entry of `logra.optimizers` with its settings):

    model     a `transformers` Llama causal LM with the config's width and depth, bytes in and
              out (vocabulary 256), initialized from the seed
    data      `logra.data.text`: Shakespeare's plays as UTF-8 bytes; whole plays held out for
              validation (choosing the learning rate) and for test (the reported loss)
    schedule  `steps` AdamW-style steps on `batch_size` random windows of `context` bytes, linear
              warm-up then cosine decay to `min_lr_ratio`·lr, gradients clipped to norm `clip`;
              the same windows in the same order for every optimizer of a seed
    sweep     each optimizer's `lrs` at `sweep_seed`, the best on the validation plays chosen;
              a best at the edge of the grid extends the grid by one factor-`lr_step` value
              (at most `max_extensions` times), so no chosen rate is an edge
    seeds     every optimizer at its chosen rate on each of `seeds` (init and data order)
    ranks     the rank-sized optimizers of `rank_methods` at `ranks` (`sweep_seed`), each rank
              at three rates: the base rank's choice and one `lr_step` either side (GaLore's
              and APOLLO's step grows with the rank, LoGRA's does not); the best on validation
    refresh   GaLore, APOLLO and Fira refresh their projections `projection_refreshes` times a
              run, as their recipes do (200 of 10,000 steps), whatever the run's length

Per run: validation loss every `eval_every` steps, test loss at the end (nats per byte, on fixed
windows), the bytes of tensors in the optimizer's state (`logra.optimizers.measured_state_bytes`),
and the median step time. Runs are cached under <results_dir>/training_quality/ by their settings
and the fingerprint of the code that trains them (`logra.provenance`: this module, the data and
every optimizer), written atomically, so a rerun or an added optimizer redoes only what is
missing and a change to the code trains again.

The comparison with AdamW is paired by seed: each optimizer's test loss minus AdamW's on the same
seed, with a 95 % t interval over the seeds; an interval that holds 0 is "no difference".
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from logra import io
from logra.config import ConfigError, load_config
from logra.experiments.jobs import run_jobs, worker_count
from logra.experiments.quality_data import SFT_KEYS, TASKS, TEXT_KEYS, benchmark
from logra.models.warmup import warmup_cosine
from logra.optimizers import REGISTRY, build_optimizer, measured_state_bytes, spec, wrap_model
from logra.provenance import fingerprint

EXPERIMENT = "training_quality"
NOTEBOOK = "10_training_quality"
REFERENCE = "adamw"
T_95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}  # two-sided 95 %
# Student t quantiles by degrees of freedom; between entries the next smaller df is used


@dataclass(frozen=True)
class Run:
    """One training run: a method (key of `methods`) at a learning rate, seed and rank."""

    method: str
    lr: float
    seed: int
    rank: int
    study: str  # "sweep", "seeds" or "ranks"


def config(scale: str = "default", **overrides: Any) -> dict[str, Any]:
    """experiments/training_quality.yaml at `scale`, checked before any compute."""
    given = {k: v for k, v in overrides.items() if v is not None}
    cfg = load_config(EXPERIMENT, scale, **given)
    if cfg["task"] not in TASKS:
        raise ConfigError(f"task must be one of {list(TASKS)}, got {cfg['task']!r}")
    if cfg["task"] == "sft":  # the SFT benchmark's own schedule, then the caller's overrides
        unknown = sorted(set(cfg["sft_overrides"]) - set(cfg))
        if unknown:
            raise ConfigError(f"sft_overrides: unknown keys {unknown}")
        checked = {k: cfg[k] for k in given}  # as load_config coerced them
        cfg.update(cfg["sft_overrides"])
        cfg.update(checked)
    methods = cfg["methods"]
    if REFERENCE not in methods:
        raise ConfigError(f"methods must include {REFERENCE!r}, the reference")
    for name, method in methods.items():
        if method.get("optimizer") not in REGISTRY:
            raise ConfigError(f"method {name!r}: optimizer must be one of {list(REGISTRY)}, "
                              f"got {method.get('optimizer')!r}")
        spec(method["optimizer"])  # the package is installed
        lrs = method.get("lrs")
        if not lrs or not all(isinstance(lr, int | float) and lr > 0 for lr in lrs):
            raise ConfigError(f"method {name!r}: lrs must be a list of positive numbers")
    unknown = sorted(set(cfg["rank_methods"]) - set(methods))
    if unknown:
        raise ConfigError(f"rank_methods {unknown} are not in methods {list(methods)}")
    unranked = [m for m in cfg["rank_methods"] if not REGISTRY[methods[m]["optimizer"]].ranked]
    if unranked:
        raise ConfigError(f"rank_methods {unranked}: their state does not depend on a rank")
    if cfg["headline"] not in cfg["rank_methods"]:
        raise ConfigError(f"headline {cfg['headline']!r} must be one of rank_methods "
                          f"{cfg['rank_methods']} (the loss at equal bytes is read there)")
    if cfg["sweep_seed"] not in cfg["seeds"]:
        raise ConfigError(f"sweep_seed {cfg['sweep_seed']} must be one of seeds {cfg['seeds']}")
    return cfg


def output_name(cfg: dict[str, Any], suffix: str = "") -> str:
    """figures/ name of a table or figure: training_quality[_sft][_suffix]."""
    task = "" if cfg["task"] == "text" else f"_{cfg['task']}"
    return f"{EXPERIMENT}{task}{'_' + suffix if suffix else ''}"


def describe(cfg: dict[str, Any]) -> str:
    """One line: the benchmark, the model, the token budget and the seeds."""
    if cfg["task"] == "text":
        what = (f"text: Llama {cfg['layers']}×{cfg['hidden_size']} on bytes, "
                f"{cfg['steps']} steps × {cfg['batch_size']} windows of {cfg['context']} bytes")
    else:
        what = (f"sft: {cfg['sft_model']} architecture on gsm-synth solutions, "
                f"{cfg['steps']} steps × {cfg['batch_size']} sequences")
    return (f"{what}; {len(cfg['methods'])} optimizers, seeds {cfg['seeds']}, "
            f"{worker_count(cfg['workers'])} worker(s)")


def label(cfg: dict[str, Any], method: str) -> str:
    """The method's name in figures: its `label`, else the registry's label with its LoGRA rule
    if any."""
    entry = cfg["methods"][method]
    if "label" in entry:
        return entry["label"]
    details = [entry["reconstruction"]] if "reconstruction" in entry else []
    details += ["dense embeddings"] if entry.get("dense_embeddings") else []
    return REGISTRY[entry["optimizer"]].label + (f" ({', '.join(details)})" if details else "")


RULE_COLORS = {"gain": "tab:red", "nystrom": "lightcoral", "blend": "darkred",
               "subspace": "tab:pink", "channel": "teal"}
PRESENTATION = ("label", "color")  # method keys that name and colour it, outside the cache key


def color(cfg: dict[str, Any], method: str) -> str:
    """The method's `color`, else the registry's colour: a shade of LoGRA's red per rule, gold
    with dense embeddings."""
    entry = cfg["methods"][method]
    if "color" in entry:
        return entry["color"]
    if entry.get("dense_embeddings"):
        return "gold"
    return RULE_COLORS.get(entry.get("reconstruction"), REGISTRY[entry["optimizer"]].color)


# ------------------------------------------------------------------------------ one run

# this benchmark's own code, beside `logra.provenance.TRAINING_CODE`, in its runs' cache key
# (whole modules: a change to the tables below trains again too)
CODE = ("experiments/training_quality.py", "experiments/quality_data.py")


def settings(cfg: dict[str, Any], run: Run) -> dict[str, Any]:
    """What determines a run's result (its cache key)."""
    schedule = ("batch_size", "steps", "warmup_steps", "min_lr_ratio", "clip", "weight_decay",
                "eval_every")
    data = TEXT_KEYS if cfg["task"] == "text" else ("task", *SFT_KEYS)
    method = {k: v for k, v in cfg["methods"][run.method].items() if k not in PRESENTATION}
    key = dict(code=fingerprint(*CODE), method=method, lr=run.lr, seed=run.seed,
               rank=run.rank, **{k: cfg[k] for k in sorted({*schedule, *data})})
    if REGISTRY[method["optimizer"]].projected or method.get("refresh_projections"):
        key["projection_gap"] = projection_gap(cfg)
    return key


def projection_gap(cfg: dict[str, Any]) -> int:
    """Steps between GaLore's, APOLLO's and Fira's projection refreshes (and LoGRA's, with
    `refresh_projections`): their recipes refresh
    50 times a run (every 200 of 10,000 steps), so this run refreshes `projection_refreshes`
    times too, not once or twice."""
    return max(1, cfg["steps"] // cfg["projection_refreshes"])


def run_path(cfg: dict[str, Any], run: Run) -> Path:
    digest = hashlib.sha256(json.dumps(settings(cfg, run), sort_keys=True).encode()).hexdigest()
    prefix = "" if cfg["task"] == "text" else f"{cfg['task']}-"
    return Path(cfg["results_dir"]) / EXPERIMENT / f"{prefix}{run.method}-{digest[:16]}.json"


def train(cfg: dict[str, Any], run: Run) -> dict[str, Any]:
    """Train one run (or read its cached result): its curves, test loss, bytes and step time."""
    path = run_path(cfg, run)
    if path.exists():  # the run as asked now (the study and label are not in the cache key)
        return {**json.loads(path.read_text()), **asdict(run), "label": label(cfg, run.method)}
    torch.set_num_threads(cfg["threads"])
    data = benchmark(cfg)
    method = dict(cfg["methods"][run.method])
    name = method.pop("optimizer")
    for key in ("lrs", *PRESENTATION):
        method.pop(key, None)
    options = dict(lr=run.lr, weight_decay=cfg["weight_decay"], seed=run.seed, rank=run.rank,
                   lora_rank=run.rank, lora_alpha=2 * run.rank,
                   projection_gap=projection_gap(cfg), **method)
    model = wrap_model(name, data.model(run.seed), options)
    optimizer = build_optimizer(name, model, options)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(cfg["warmup_steps"], cfg["steps"], cfg["min_lr_ratio"]))
    trainable = [p for p in model.parameters() if p.requires_grad]

    def evaluate(split: str) -> float:
        return data.heldout_loss(model, split)

    curve = [dict(step=0, train_loss=math.nan, validation_loss=evaluate("validation"))]
    seconds, losses = [], []
    for step in range(1, cfg["steps"] + 1):
        batch = data.batch(run.seed, step - 1)
        start = time.perf_counter()
        loss = data.loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, cfg["clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
        if step % cfg["eval_every"] == 0 or step == cfg["steps"]:
            curve.append(dict(step=step, train_loss=statistics.fmean(losses[-cfg["eval_every"]:]),
                              validation_loss=evaluate("validation")))
    test_loss = evaluate("test") if math.isfinite(losses[-1]) else math.inf
    diverged = not all(math.isfinite(x) for x in
                       (losses[-1], curve[-1]["validation_loss"], test_loss))
    result = dict(
        **asdict(run), label=label(cfg, run.method), diverged=diverged, curve=curve,
        validation_loss=math.inf if diverged else curve[-1]["validation_loss"],
        test_loss=math.inf if diverged else test_loss,
        state_bytes=measured_state_bytes(optimizer),
        trainable=sum(p.numel() for p in trainable),
        step_ms=1000 * statistics.median(seconds[min(5, len(seconds) - 1):]),
        threads=cfg["threads"],
    )
    io.write_json(path, result)
    return result


# ------------------------------------------------------------------------------ the plan

def _jobs(cfg: dict[str, Any], runs: list[Run], progress: bool, desc: str) -> list[dict]:
    return run_jobs([(train, (cfg, r)) for r in runs], cfg["workers"], desc, progress=progress)


def _best(results: list[dict], method: str, study: str = "sweep",
          rank: int | None = None) -> dict:
    """The run of `method` in `study` (at `rank`, if given) with the lowest validation loss
    (a non-finite loss never wins; ties go to the smaller rate)."""
    mine = [r for r in results if r["method"] == method and r["study"] == study
            and (rank is None or r["rank"] == rank)]
    return min(mine, key=lambda r: (_finite_or_inf(r["validation_loss"]), r["lr"]))


def _finite_or_inf(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def sweep(cfg: dict[str, Any], progress: bool = True) -> list[dict]:
    """Every method's learning-rate sweep at `sweep_seed`, extended past any edge optimum."""
    seed, rank = cfg["sweep_seed"], cfg["rank"]
    benchmark(cfg)  # data generated and cached here, before workers start (none writes it twice)
    runs = [Run(m, float(lr), seed, rank, "sweep") for m, e in cfg["methods"].items()
            for lr in e["lrs"]]
    results = _jobs(cfg, runs, progress, f"{EXPERIMENT} sweep")
    for _ in range(cfg["max_extensions"]):
        extra = []
        for method in cfg["methods"]:
            lrs = sorted(r["lr"] for r in results if r["method"] == method)
            best = _best(results, method)["lr"]
            if best == lrs[0] and len(lrs) > 1:
                extra.append(Run(method, lrs[0] / cfg["lr_step"], seed, rank, "sweep"))
            elif best == lrs[-1] and len(lrs) > 1:
                extra.append(Run(method, lrs[-1] * cfg["lr_step"], seed, rank, "sweep"))
        if not extra:
            break
        results += _jobs(cfg, extra, progress, f"{EXPERIMENT} sweep extension")
    return results


def run(cfg: dict[str, Any], progress: bool = True) -> pd.DataFrame:
    """Sweep, then seeds and ranks at each method's chosen rate: one row per run."""
    results = sweep(cfg, progress)
    chosen = {m: _best(results, m)["lr"] for m in cfg["methods"]}
    later = [Run(m, chosen[m], s, cfg["rank"], "seeds") for m in cfg["methods"]
             for s in cfg["seeds"] if s != cfg["sweep_seed"]]
    step = cfg["lr_step"]  # each rank its own rates around the base rank's choice
    later += [Run(m, chosen[m] * f, cfg["sweep_seed"], r, "ranks") for m in cfg["rank_methods"]
              for r in cfg["ranks"] if r != cfg["rank"] for f in (1 / step, 1.0, step)]
    results += _jobs(cfg, later, progress, f"{EXPERIMENT} seeds and ranks")
    at_rank = {(r.method, r.rank): _best(results, r.method, "ranks", r.rank)["lr"]
               for r in later if r.study == "ranks"}
    frame = pd.DataFrame(results)
    frame["chosen"] = [r["lr"] == (at_rank[r["method"], r["rank"]] if r["study"] == "ranks"
                                   else chosen[r["method"]]) for r in results]
    return frame


def final_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs at each method's chosen rate and the base rank, one per seed."""
    base_rank = frame.loc[frame["study"] == "sweep", "rank"].iloc[0]
    final = frame[frame["chosen"] & (frame["rank"] == base_rank)]
    return final.drop_duplicates(["method", "seed"])


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


def _verdict(mean: float, half: float, reference: str = "AdamW") -> str:
    if math.isnan(half):
        return "one seed: no test"
    if abs(mean) <= half:
        return "no difference"
    return f"lower than {reference}" if mean < 0 else f"higher than {reference}"


def _paired(final: pd.DataFrame, method: str, reference: str) -> tuple[float, float, float]:
    """(mean ratio, mean difference, 95 % half-width) of `method`'s test loss against
    `reference`'s on the seeds both ran."""
    mine = final[final["method"] == method].set_index("seed")["test_loss"]
    theirs = final[final["method"] == reference].set_index("seed")["test_loss"]
    seeds = mine.index.intersection(theirs.index)
    mean, half = _interval((mine[seeds] - theirs[seeds]).to_numpy())
    return float((mine[seeds] / theirs[seeds]).mean()), mean, half


def rules_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """Every LoGRA method paired by seed against `headline` (LoGRA's default rule)."""
    methods = [m for m, e in cfg["methods"].items()
               if e["optimizer"] == "logra" and m != cfg["headline"]]
    return paired_table(frame, cfg, methods, cfg["headline"], "rule")


def recipe_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """The `recipe_ladder` methods present (LoGRA with APOLLO's recipe added a piece at a
    time) paired by seed against `recipe_reference`: which piece closes the gap (empty when
    the reference is not among the methods)."""
    if cfg["recipe_reference"] not in cfg["methods"]:
        return pd.DataFrame()
    methods = [m for m in cfg["recipe_ladder"] if m in cfg["methods"]]
    return paired_table(frame, cfg, methods, cfg["recipe_reference"], "optimizer")


def paired_table(frame: pd.DataFrame, cfg: dict[str, Any], methods: list[str],
                 reference: str, name: str) -> pd.DataFrame:
    """Each of `methods` at its chosen rate against `reference`, paired by seed: the mean loss
    ratio, the mean difference with its 95 % t interval, and the verdict."""
    final = final_runs(frame)
    base = label(cfg, reference)
    rows = []
    for method in methods:
        ratio, mean, half = _paired(final, method, reference)
        rows.append({name: label(cfg, method), f"loss / {base}": ratio,
                     f"Δ vs {base} (95 % CI)": _delta_text(mean, half),
                     "verdict": _verdict(mean, half, base)})
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """One row per method at its chosen rate: test loss over seeds, paired against AdamW's."""
    final = final_runs(frame)
    reference = final[final["method"] == REFERENCE].set_index("seed")
    sweep_runs = frame[frame["study"] == "sweep"]
    rows = []
    for method in cfg["methods"]:
        mine = final[final["method"] == method].set_index("seed")
        ratio, mean_diff, half = _paired(final, method, REFERENCE)
        lrs = sorted(sweep_runs.loc[sweep_runs["method"] == method, "lr"])
        lr = float(mine["lr"].iloc[0])
        rows.append({
            "optimizer": label(cfg, method),
            "best lr": lr,
            "lr at grid edge": lr in (lrs[0], lrs[-1]),
            "test loss": mine["test_loss"].mean(),
            "± sd": mine["test_loss"].std(ddof=1) if len(mine) > 1 else math.nan,
            "seeds": len(mine),
            "loss / AdamW": ratio,
            "Δ vs AdamW (95 % CI)": _delta_text(mean_diff, half),
            "verdict": "reference" if method == REFERENCE else _verdict(mean_diff, half),
            "state MB": mine["state_bytes"].mean() / 1e6,
            "state / AdamW": mine["state_bytes"].mean() / reference["state_bytes"].mean(),
            "step ms": mine["step_ms"].median(),
            "time / AdamW": mine["step_ms"].median() / reference["step_ms"].median(),
        })
    return pd.DataFrame(rows)


def sweep_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """Every learning rate tried, at the sweep seed."""
    runs = frame[frame["study"] == "sweep"].sort_values(["method", "lr"])
    table = runs[["label", "lr", "validation_loss", "test_loss", "diverged", "chosen"]]
    order = {m: i for i, m in enumerate(cfg["methods"])}
    table = table.assign(order=runs["method"].map(order)).sort_values(["order", "lr"])
    return table.drop(columns="order").rename(columns={
        "label": "optimizer", "validation_loss": "validation loss", "test_loss": "test loss"})


def rank_table(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """The rank-sized optimizers at every rank (chosen rate, sweep seed)."""
    rows = frame[frame["method"].isin(cfg["rank_methods"]) & frame["chosen"]
                 & (frame["seed"] == cfg["sweep_seed"])].drop_duplicates(["method", "rank"])
    rows = rows.sort_values(["method", "rank"])
    reference = frame[(frame["method"] == REFERENCE) & frame["chosen"]
                      & (frame["seed"] == cfg["sweep_seed"])].iloc[0]
    return pd.DataFrame({
        "optimizer": rows["label"], "rank": rows["rank"], "best lr": rows["lr"],
        "state MB": rows["state_bytes"] / 1e6,
        "state / AdamW": rows["state_bytes"] / reference["state_bytes"],
        "test loss": rows["test_loss"], "loss / AdamW": rows["test_loss"] / reference["test_loss"],
    })


def equal_bytes(frame: pd.DataFrame, cfg: dict[str, Any]) -> pd.DataFrame:
    """Each rank-sized optimizer's test loss at the state bytes of `headline` at the base rank,
    interpolated in log bytes between its ranks (nan outside the ranks it ran)."""
    ranks = rank_table(frame, cfg)
    headline = label(cfg, cfg["headline"])
    target = ranks.loc[(ranks["optimizer"] == headline) & (ranks["rank"] == cfg["rank"]),
                       "state MB"].iloc[0]
    rows = []
    for name, rows_of in ranks.groupby("optimizer", sort=False):
        x, y = np.log(rows_of["state MB"].to_numpy()), rows_of["test loss"].to_numpy()
        order = np.argsort(x)
        inside = x.min() <= math.log(target) <= x.max()
        loss = float(np.interp(math.log(target), x[order], y[order])) if inside else math.nan
        rows.append({"optimizer": name, f"test loss at {target:.3g} MB": loss})
    return pd.DataFrame(rows)


def goal(frame: pd.DataFrame, cfg: dict[str, Any], method: str | None = None) -> str:
    """The issue's goal, checked for `method` (default `headline`): within `goal_ratio` of
    AdamW's test loss with at most `goal_state` of its state, and ahead of GaLore and APOLLO
    at equal bytes (the headline's bytes at the base rank; `method` must be in rank_methods)."""
    method = method or cfg["headline"]
    table = summary(frame, cfg).set_index("optimizer")
    row = table.loc[label(cfg, method)]
    close = row["loss / AdamW"] <= 1 + cfg["goal_ratio"]
    small = row["state / AdamW"] <= cfg["goal_state"]
    at_bytes = equal_bytes(frame, cfg).set_index("optimizer").iloc[:, 0]
    mine = at_bytes.get(label(cfg, method), math.nan)
    others = {k: v for k, v in at_bytes.items()
              if k in (REGISTRY["galore"].label, REGISTRY["apollo"].label)}
    compared = [v for v in others.values() if not math.isnan(v)]
    ahead = bool(compared) and not math.isnan(mine) and all(mine < v for v in compared)
    return (f"{label(cfg, method)}: loss/AdamW {row['loss / AdamW']:.4f} "
            f"({'within' if close else 'outside'} {cfg['goal_ratio']:.0%}), state/AdamW "
            f"{row['state / AdamW']:.3f} ({'≤' if small else '>'} {cfg['goal_state']:.0%}); "
            f"at equal bytes {mine:.4f} vs "
            + ", ".join(f"{k} {v:.4f}" for k, v in others.items())
            + f" ({'ahead' if ahead else 'not ahead'}, one seed)")


# ------------------------------------------------------------------------------ figures

def _unit(cfg: dict[str, Any]) -> str:
    return "byte" if cfg["task"] == "text" else "completion token"


def plot_curves(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Validation loss against step at each method's chosen rate (mean over seeds)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    final = final_runs(frame)
    for method in cfg["methods"]:
        curves = [pd.DataFrame(c) for c in final.loc[final["method"] == method, "curve"]]
        mean = pd.concat(curves).groupby("step")["validation_loss"].mean()
        ax.plot(mean.index, mean.to_numpy(), label=label(cfg, method), color=color(cfg, method),
                lw=2 if method in (REFERENCE, cfg["headline"]) else 1.2)
    reference = final_runs(frame).query("method == @REFERENCE")["test_loss"].mean()
    ax.set_ylim(reference - 0.1, reference + 1.2)
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation loss (nats / {_unit(cfg)})")
    what = "Byte-level LM on Shakespeare" if cfg["task"] == "text" else "SFT on gsm-synth"
    ax.set_title(f"{what}, {cfg['steps']} steps, each at its best lr")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_pareto(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Test loss against optimizer-state bytes: every method (seed mean ± sd) and the
    rank-sized ones at every rank."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    table = summary(frame, cfg)
    reference = table.loc[table["optimizer"] == label(cfg, REFERENCE), "test loss"].iloc[0]
    top = reference + 0.6
    for method, row in zip(cfg["methods"], table.to_dict("records"), strict=True):
        loss = row["test loss"]
        if loss > top:  # off the chart: drawn at its edge, with its value
            ax.plot(row["state MB"], top, "^", color=color(cfg, method), label=row["optimizer"])
            ax.annotate(f"{loss:.2f}", (row["state MB"], top), fontsize=6, xytext=(3, -8),
                        textcoords="offset points")
            continue
        ax.errorbar(row["state MB"], loss, yerr=0 if math.isnan(row["± sd"]) else row["± sd"],
                    fmt="o", color=color(cfg, method), label=row["optimizer"], capsize=3)
    ranks = rank_table(frame, cfg)
    for method in cfg["rank_methods"]:
        rows = ranks[ranks["optimizer"] == label(cfg, method)]
        ax.plot(rows["state MB"], rows["test loss"], "--", color=color(cfg, method), lw=1)
        for r in rows.to_dict("records"):
            ax.annotate(f"r{r['rank']}", (r["state MB"], r["test loss"]), fontsize=6,
                        xytext=(2, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("optimizer state (MB, measured)")
    ax.set_ylabel(f"test loss (nats / {_unit(cfg)})")
    lowest = min(table["test loss"].min(), ranks["test loss"].min())
    ax.set_ylim(lowest - 0.03, top + 0.02)
    ax.set_title("Held-out loss against optimizer memory (dashed: rank sweeps; ▲ off the chart)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def plot_sweep(frame: pd.DataFrame, cfg: dict[str, Any]) -> plt.Figure:
    """Validation loss against learning rate for every method (sweep seed)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    runs = frame[frame["study"] == "sweep"]
    for method in cfg["methods"]:
        rows = runs[runs["method"] == method].sort_values("lr")
        ax.plot(rows["lr"], rows["validation_loss"].clip(upper=10), "o-", ms=3,
                color=color(cfg, method), label=label(cfg, method))
    ax.set_xscale("log")
    reference = runs.loc[runs["method"] == REFERENCE, "validation_loss"].min()
    ax.set_ylim(reference - 0.1, reference + 1.5)
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel(f"validation loss (nats / {_unit(cfg)})")
    ax.set_title("Each optimizer's own learning-rate sweep")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
