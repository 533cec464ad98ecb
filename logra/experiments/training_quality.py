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
              (at most `max_extensions` times), so no chosen rate is an edge. With
              `chosen_lrs` (the directory of a sweeping scale's sweep and rank tables) every
              rate is read from those tables instead and nothing is swept (`read_chosen`)
    seeds     every optimizer at its chosen rate on each of `seeds` (init and data order)
    ranks     the rank-sized optimizers of `rank_methods` at `ranks` (`sweep_seed`), each rank
              at three rates: the base rank's choice and one `lr_step` either side (GaLore's
              and APOLLO's step grows with the rank, LoGRA's does not), extended as the sweep
              is until its best is not at an edge; the best on validation
    refresh   GaLore, APOLLO and Fira refresh their projections `projection_refreshes` times a
              run, as their recipes do (200 of 10,000 steps), whatever the run's length

Per run: validation loss every `eval_every` steps, test loss at the end (nats per byte, on fixed
windows), the bytes the optimizer keeps between steps (`logra.optimizers.measured_state_bytes`:
its state and LoGRA's kept projections),
and the median step time. Runs are cached under <results_dir>/training_quality/ by their settings
and the fingerprint of the code that trains them (`logra.provenance`: this module, the data and
every optimizer), written atomically, so a rerun or an added optimizer redoes only what is
missing and a change to the code trains again.

The tables and figures (paired by seed, Holm-corrected verdicts) are in
`logra.experiments.training_quality_report`, outside the cache key.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pandas as pd
import torch
from pydantic import Field

from logra import io, paths
from logra.config import ConfigError, TypedConfig, load_config, typed
from logra.data import TASKS as DATA_TASKS
from logra.experiments.jobs import run_jobs, worker_count
from logra.experiments.quality_data import SFT_KEYS, TASKS, TEXT_KEYS, benchmark
from logra.experiments.typed import (
    Count,
    Counts,
    ModelScale,
    NonNegative,
    NonNegativeInt,
    PathText,
    Positive,
    Seeds,
    Workers,
)
from logra.models.warmup import warmup_cosine
from logra.optimizers import REGISTRY, build_optimizer, measured_state_bytes, spec, wrap_model
from logra.provenance import fingerprint

EXPERIMENT = "training_quality"
NOTEBOOK = "10_training_quality"
REFERENCE = "adamw"
DataTask = Literal[tuple(DATA_TASKS)]  # a task of `logra.data`


@dataclass(frozen=True)
class Run:
    """One training run: a method (key of `methods`) at a learning rate, seed and rank."""

    method: str
    lr: float
    seed: int
    rank: int
    # "sweep", "seeds" or "ranks" (the rank study: its rates at the sweep seed, then the chosen
    # one at the other `rank_seeds`)
    study: str


@typed
class Config(TypedConfig):
    """experiments/training_quality.yaml's keys (its comments say what each holds)."""

    EXPERIMENT: ClassVar[str] = "training_quality"
    scale: str
    task: Literal[tuple(TASKS)]
    corpus: str
    heldout: dict[Literal["validation", "test"], Annotated[list[str], Field(min_length=1)]]
    hidden_size: Count
    intermediate_size: Count
    layers: Count
    heads: Count
    context: Count
    batch_size: Count
    steps: Count
    warmup_steps: NonNegativeInt
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)]
    clip: Positive
    weight_decay: NonNegative
    eval_every: Count
    validation_windows: Count
    test_windows: Count
    sft_model: ModelScale
    sft_base_task: DataTask
    sft_base_steps: Count
    sft_base_lr: Positive
    sft_base_per_seed: bool
    sft_validation_rows: Count
    sft_test_rows: Count
    data_dir: str | None
    sft_overrides: dict[str, Any]  # keys of this config, for the sft task (checked in `config`)
    projection_refreshes: Count
    rank: Count
    # name -> {optimizer, lrs, label?, color?, and OptimizerSettings keys}: checked in `config`
    # and, when a run builds it, by OptimizerSettings
    methods: dict[str, dict[str, Any]]
    lr_step: Annotated[float, Field(gt=1)]
    max_extensions: NonNegativeInt
    sweep_seed: int
    seeds: Seeds
    chosen_lrs: PathText | None  # a directory of a sweep's tables to read the rates from
    headline: str
    recipe_reference: str
    recipe_ladder: list[str]
    rank_methods: Annotated[list[str], Field(min_length=1)]
    ranks: Counts
    rank_seeds: Seeds  # of `seeds`: the rank study at every rank (the equal-bytes seed spread)
    goal_ratio: Positive
    goal_state: Positive
    results_dir: str
    workers: Workers
    threads: Count


def config(scale: str = "default", only: list[str] | None = None, **overrides: Any) -> Config:
    """experiments/training_quality.yaml at `scale` (for the sft task, its `sft_overrides` on
    top, then the caller's), checked before any compute: the types, then the rules between
    keys, then the chosen-rate tables if a directory of them is named. `only`: keep just these
    of its methods, with the two every table is read against (AdamW and `headline`), e.g. to
    sweep again the methods whose code changed (`merge_chosen` then puts their rows into the
    committed tables)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    values = load_config(EXPERIMENT, scale, **given)
    known = [*values["methods"], *values["sft_overrides"].get("methods", {})]
    unknown = sorted(set(only or ()) - set(known))
    if unknown:  # a name of either task's methods is fine: a notebook runs both
        raise ConfigError(f"only: {unknown} are not methods of this scale "
                          f"({list(dict.fromkeys(known))})")
    if values["task"] == "sft":  # the SFT benchmark's own schedule, then the caller's overrides
        unknown = sorted(set(values["sft_overrides"]) - set(values))
        if unknown:
            raise ConfigError(f"sft_overrides: unknown keys {unknown}")
        values = {**values, **values["sft_overrides"], **{k: values[k] for k in given}}
    if only is not None:
        values = _only(values, only)
    cfg = Config.from_mapping(values)
    methods = cfg.methods
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
    unknown = sorted(set(cfg.rank_methods) - set(methods))
    if unknown:
        raise ConfigError(f"rank_methods {unknown} are not in methods {list(methods)}")
    unranked = [m for m in cfg.rank_methods if not REGISTRY[methods[m]["optimizer"]].ranked]
    if unranked:
        raise ConfigError(f"rank_methods {unranked}: their state does not depend on a rank")
    if cfg.headline not in cfg.rank_methods:
        raise ConfigError(f"headline {cfg.headline!r} must be one of rank_methods "
                          f"{cfg.rank_methods} (the loss at equal bytes is read there)")
    if cfg.task == "sft" and cfg.sft_base_task == "gsm-synth":
        raise ConfigError("sft_base_task must be a task other than gsm-synth (the one "
                          "fine-tuned on)")
    if cfg.sweep_seed not in cfg.seeds:
        raise ConfigError(f"sweep_seed {cfg.sweep_seed} must be one of seeds {cfg.seeds}")
    outside = sorted(set(cfg.rank_seeds) - set(cfg.seeds))
    if outside:  # their base-rank runs are the seeds study's
        raise ConfigError(f"rank_seeds {outside} must be among seeds {cfg.seeds}")
    if cfg.chosen_lrs is not None:
        absent = [str(path) for path in chosen_tables(cfg).values() if not path.is_file()]
        if absent:
            print(f"chosen_lrs: {', '.join(absent)} not found; sweeping the learning rates")
            cfg = cfg.replace(chosen_lrs=None)
        else:
            read_chosen(cfg)  # a table without a method or a rank fails here, before any run
    return cfg


def _only(values: dict[str, Any], only: list[str]) -> dict[str, Any]:
    """`values` with its methods cut to `only`, AdamW and `headline` (`config`)."""
    keep = {REFERENCE, values["headline"], *only}
    return {**values, "methods": {m: e for m, e in values["methods"].items() if m in keep},
            "rank_methods": [m for m in values["rank_methods"] if m in keep],
            "recipe_ladder": [m for m in values["recipe_ladder"] if m in keep]}


def merge_chosen(source: Path, target: Path) -> list[Path]:
    """Put the rows of the chosen-rate tables in directory `source` (a sweep of some methods,
    `config(only=...)`) into those of the same name in `target`: each optimizer of `source`
    replaces its rows where it had them and is added at the end where not; every other row is
    kept as it is. Returns the tables rewritten (each written atomically)."""
    pairs = [(path, target / path.name) for suffix in ("sweep", "ranks")
             for path in sorted(source.glob(f"{EXPERIMENT}*_{suffix}.csv"))]
    if not pairs:
        raise ConfigError(f"merge_chosen: {source} holds no {EXPERIMENT} sweep or rank table")
    tables = []
    for path, into in pairs:  # every table checked before any is written
        if not into.is_file():
            raise ConfigError(f"merge_chosen: {into} does not exist to merge {path} into")
        new, old = pd.read_csv(path), pd.read_csv(into)
        if list(new.columns) != list(old.columns):
            raise ConfigError(f"merge_chosen: {path} and {into} have different columns")
        tables.append((into, new, old))
    for into, new, old in tables:
        order = list(dict.fromkeys([*old["optimizer"], *new["optimizer"]]))
        merged = pd.concat([old[~old["optimizer"].isin(new["optimizer"])], new])
        merged = merged.assign(order=merged["optimizer"].map(order.index)).sort_values(
            "order", kind="stable").drop(columns="order")
        io.write_frame(into, merged)
    return [into for into, _, _ in tables]


def reads_chosen(cfg: Config) -> bool:
    """Whether the rates come from a sweep's tables instead of a sweep (`config` sets
    `chosen_lrs` to None where its tables do not exist)."""
    return cfg.chosen_lrs is not None


def chosen_tables(cfg: Config) -> dict[str, Path]:
    """The sweep table and the rank table (`training_quality_report.sweep_table`, `rank_table`)
    of `cfg`'s task in the directory `chosen_lrs` (relative paths under the project root)."""
    directory = paths.project_path(cfg.chosen_lrs)
    return {name: directory / f"{output_name(cfg, name)}.csv" for name in ("sweep", "ranks")}


def read_chosen(cfg: Config) -> pd.DataFrame:
    """Each method's chosen rate at the base rank, and each rank-study method's at its other
    ranks, read from `chosen_tables`: one row per (method, rank) with `lr` and `at_edge` (the
    rate is the smallest or largest its sweep tried). The tables print rates to four decimals;
    each is read as the rate of the sweep's ladder nearest it (`_ladder`). Raises ConfigError
    naming the file and every method (and rank) it lacks, or a method whose grid it did not
    sweep."""
    tables = chosen_tables(cfg)
    sweep_rows = pd.read_csv(tables["sweep"])
    rank_rows = pd.read_csv(tables["ranks"])
    rows, missing = [], []
    for method, entry in cfg.methods.items():
        mine = sweep_rows[sweep_rows["optimizer"] == label(cfg, method)]
        pick = mine[mine["chosen"].astype(bool)]
        if len(pick) != 1:
            missing.append(method)
            continue
        ladder = _ladder(entry["lrs"], cfg)
        tried = {_snap(lr, ladder, tables["sweep"], method) for lr in mine["lr"]}
        if not set(map(float, entry["lrs"])) <= tried:
            raise ConfigError(f"chosen_lrs: {tables['sweep']} did not try {method}'s lrs "
                              f"{entry['lrs']}: it is another sweep's table")
        lr = _snap(float(pick["lr"].iloc[0]), ladder, tables["sweep"], method)
        rows.append(dict(method=method, rank=cfg.rank, lr=lr,
                         at_edge=lr in (min(tried), max(tried))))
    base = {r["method"]: r["lr"] for r in rows}
    for method in cfg.rank_methods:
        for rank in cfg.ranks:
            if rank == cfg.rank or method not in base:
                continue
            pick = rank_rows[(rank_rows["optimizer"] == label(cfg, method))
                             & (rank_rows["rank"] == rank)]
            if len(pick) != 1:
                missing.append(f"{method} at rank {rank}")
                continue
            ladder = _ladder(_around(base[method], cfg), cfg)
            rows.append(dict(method=method, rank=rank,
                             lr=_snap(float(pick["best lr"].iloc[0]), ladder, tables["ranks"],
                                      method),
                             at_edge=bool(pick["lr at edge"].iloc[0])))
    if missing:
        raise ConfigError(f"chosen_lrs: {paths.project_path(cfg.chosen_lrs)} has no chosen "
                          f"rate for {missing}; give the tables of a sweep that ran them, or "
                          f"sweep (chosen_lrs: null, the `sweep` scale)")
    return pd.DataFrame(rows).set_index(["method", "rank"])


def _ladder(lrs: list[float], cfg: Config) -> list[float]:
    """The rates a sweep can try from `lrs`: them, and up to `max_extensions` rates beyond
    either end, each float computed as `sweep` and `_bracket_ranks` compute it (`_below`,
    `_above`), so that a read rate names the very run the sweep trained."""
    below, above = [min(lrs)], [max(lrs)]
    for _ in range(cfg.max_extensions):
        below.append(_below(below[-1], cfg))
        above.append(_above(above[-1], cfg))
    return below[:0:-1] + sorted(map(float, lrs)) + above[1:]


def _below(lr: float, cfg: Config) -> float:
    """The rate a sweep adds below its smallest, `lr`."""
    return lr / cfg.lr_step


def _above(lr: float, cfg: Config) -> float:
    """The rate a sweep adds above its largest, `lr`."""
    return lr * cfg.lr_step


def _around(lr: float, cfg: Config) -> list[float]:
    """The rates a rank of the rank study starts from: the base rank's choice `lr` and one
    `lr_step` either side."""
    return [lr * f for f in (1 / cfg.lr_step, 1.0, cfg.lr_step)]


def _snap(printed: float, ladder: list[float], path: Path, method: str) -> float:
    """The rate of `ladder` that `printed` (a table's rounded rate) stands for: the nearest in
    log, which must round to it."""
    if printed > 0:
        nearest = min(ladder, key=lambda lr: abs(math.log(lr / printed)))
        if round(nearest, 4) == round(printed, 4):
            return nearest
    raise ConfigError(f"chosen_lrs: {path} gives {method} the rate {printed!r}, which no sweep "
                      f"of its grid tries")


def output_name(cfg: Config, suffix: str = "") -> str:
    """figures/ name of a table or figure: training_quality[_sft][_suffix]."""
    task = "" if cfg.task == "text" else f"_{cfg.task}"
    return f"{EXPERIMENT}{task}{'_' + suffix if suffix else ''}"


def describe(cfg: Config) -> str:
    """One line: the benchmark, the model, the token budget and the seeds."""
    if cfg.task == "text":
        what = (f"text: Llama {cfg.layers}×{cfg.hidden_size} on bytes, "
                f"{cfg.steps} steps × {cfg.batch_size} windows of {cfg.context} bytes")
    else:
        what = (f"sft: {cfg.sft_model} architecture on gsm-synth solutions, "
                f"{cfg.steps} steps × {cfg.batch_size} sequences")
    rates = (f"rates read from {chosen_tables(cfg)['sweep'].parent}" if reads_chosen(cfg)
             else "rates swept")
    return (f"{what}; {len(cfg.methods)} optimizers, {rates}, seeds {cfg.seeds}, "
            f"{worker_count(cfg.workers)} worker(s)")


def label(cfg: Config, method: str) -> str:
    """The method's name in figures: its `label`, else the registry's label with its LoGRA rule
    if any."""
    entry = cfg.methods[method]
    if "label" in entry:
        return entry["label"]
    details = [entry["reconstruction"]] if "reconstruction" in entry else []
    details += ["dense embeddings"] if entry.get("dense_embeddings") else []
    return REGISTRY[entry["optimizer"]].label + (f" ({', '.join(details)})" if details else "")


PRESENTATION = ("label", "color")  # method keys that name and colour it, outside the cache key


# ------------------------------------------------------------------------------ one run

# this benchmark's own code, beside `logra.provenance.TRAINING_CODE`, in its runs' cache key
# (whole modules: a change to the tables below trains again too)
CODE = ("experiments/training_quality.py", "experiments/quality_data.py")


def settings(cfg: Config, run: Run) -> dict[str, Any]:
    """What determines a run's result (its cache key)."""
    schedule = ("batch_size", "steps", "warmup_steps", "min_lr_ratio", "clip", "weight_decay",
                "eval_every")
    data = TEXT_KEYS if cfg.task == "text" else ("task", *SFT_KEYS)
    method = {k: v for k, v in cfg.methods[run.method].items() if k not in PRESENTATION}
    key = dict(code=fingerprint(*CODE), method=method, lr=run.lr, seed=run.seed,
               rank=run.rank, **{k: cfg[k] for k in sorted({*schedule, *data})})
    if REGISTRY[method["optimizer"]].projected or method.get("refresh_projections"):
        key["projection_gap"] = projection_gap(cfg)
    return key


def projection_gap(cfg: Config) -> int:
    """Steps between GaLore's, APOLLO's and Fira's projection refreshes (and LoGRA's, with
    `refresh_projections`): their recipes refresh
    50 times a run (every 200 of 10,000 steps), so this run refreshes `projection_refreshes`
    times too, not once or twice."""
    return max(1, cfg.steps // cfg.projection_refreshes)


def run_path(cfg: Config, run: Run) -> Path:
    digest = hashlib.sha256(json.dumps(settings(cfg, run), sort_keys=True).encode()).hexdigest()
    prefix = "" if cfg.task == "text" else f"{cfg.task}-"
    return Path(cfg.results_dir) / EXPERIMENT / f"{prefix}{run.method}-{digest[:16]}.json"


def train(cfg: Config, run: Run) -> dict[str, Any]:
    """Train one run (or read its cached result): its curves, test loss, bytes and step time."""
    path = run_path(cfg, run)
    if path.exists():  # the run as asked now (the study and label are not in the cache key)
        return {**json.loads(path.read_text()), **asdict(run), "label": label(cfg, run.method)}
    torch.set_num_threads(cfg.threads)
    data = benchmark(cfg)
    method = dict(cfg.methods[run.method])
    name = method.pop("optimizer")
    for key in ("lrs", *PRESENTATION):
        method.pop(key, None)
    options = dict(lr=run.lr, weight_decay=cfg.weight_decay, seed=run.seed, rank=run.rank,
                   lora_rank=run.rank, lora_alpha=2 * run.rank,
                   projection_gap=projection_gap(cfg), **method)
    model = wrap_model(name, data.model(run.seed), options)
    optimizer = build_optimizer(name, model, options)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio))
    trainable = [p for p in model.parameters() if p.requires_grad]

    def evaluate(split: str) -> float:
        return data.heldout_loss(model, split)

    curve = [dict(step=0, train_loss=math.nan, validation_loss=evaluate("validation"))]
    seconds, losses = [], []
    for step in range(1, cfg.steps + 1):
        batch = data.batch(run.seed, step - 1)
        start = time.perf_counter()
        loss = data.loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, cfg.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
        if step % cfg.eval_every == 0 or step == cfg.steps:
            curve.append(dict(step=step, train_loss=statistics.fmean(losses[-cfg.eval_every:]),
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
        threads=cfg.threads,
    )
    io.write_json(path, result)
    return result


# ------------------------------------------------------------------------------ the plan

def _jobs(cfg: Config, runs: list[Run], progress: bool, desc: str) -> list[dict]:
    return run_jobs([(train, (cfg, r)) for r in runs], cfg.workers, desc, progress=progress)


def _best(results: list[dict], method: str, study: str = "sweep",
          rank: int | None = None) -> dict:
    """The run of `method` in `study` (at `rank`, if given) with the lowest validation loss
    (a non-finite loss never wins; ties go to the smaller rate)."""
    mine = [r for r in results if r["method"] == method and r["study"] == study
            and (rank is None or r["rank"] == rank)]
    return min(mine, key=lambda r: (_finite_or_inf(r["validation_loss"]), r["lr"]))


def _finite_or_inf(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def sweep(cfg: Config, progress: bool = True) -> list[dict]:
    """Every method's learning-rate sweep at `sweep_seed`, extended past any edge optimum."""
    seed, rank = cfg.sweep_seed, cfg.rank
    benchmark(cfg)  # data generated and cached here, before workers start (none writes it twice)
    runs = [Run(m, float(lr), seed, rank, "sweep") for m, e in cfg.methods.items()
            for lr in e["lrs"]]
    results = _jobs(cfg, runs, progress, f"{EXPERIMENT} sweep")
    for _ in range(cfg.max_extensions):
        extra = []
        for method in cfg.methods:
            lrs = sorted(r["lr"] for r in results if r["method"] == method)
            best = _best(results, method)["lr"]
            if best == lrs[0] and len(lrs) > 1:
                extra.append(Run(method, _below(lrs[0], cfg), seed, rank, "sweep"))
            elif best == lrs[-1] and len(lrs) > 1:
                extra.append(Run(method, _above(lrs[-1], cfg), seed, rank, "sweep"))
        if not extra:
            break
        results += _jobs(cfg, extra, progress, f"{EXPERIMENT} sweep extension")
    return results


def run(cfg: Config, progress: bool = True) -> pd.DataFrame:
    """Sweep, then seeds and ranks at each method's chosen rate (each rank's own, found at the
    sweep seed, then run at the other `rank_seeds`): one row per run. With `reads_chosen`, only
    the seeds and ranks, at the rates of `read_chosen`."""
    if reads_chosen(cfg):
        return _run_chosen(cfg, progress)
    results = sweep(cfg, progress)
    chosen = {m: _best(results, m)["lr"] for m in cfg.methods}
    later = [Run(m, chosen[m], s, cfg.rank, "seeds") for m in cfg.methods
             for s in cfg.seeds if s != cfg.sweep_seed]
    later += [Run(m, lr, cfg.sweep_seed, r, "ranks") for m in cfg.rank_methods
              for r in cfg.ranks if r != cfg.rank for lr in _around(chosen[m], cfg)]
    results += _jobs(cfg, later, progress, f"{EXPERIMENT} seeds and ranks")
    results += _bracket_ranks(cfg, results, progress)
    at_rank = {(r["method"], r["rank"]): _best(results, r["method"], "ranks", r["rank"])["lr"]
               for r in results if r["study"] == "ranks"}
    spread = [Run(m, lr, s, r, "ranks") for (m, r), lr in at_rank.items()
              for s in cfg.rank_seeds if s != cfg.sweep_seed]
    results += _jobs(cfg, spread, progress, f"{EXPERIMENT} rank seeds")
    frame = pd.DataFrame(results)
    frame["chosen"] = [r["lr"] == (at_rank[r["method"], r["rank"]] if r["study"] == "ranks"
                                   else chosen[r["method"]]) for r in results]
    return frame


def _run_chosen(cfg: Config, progress: bool) -> pd.DataFrame:
    benchmark(cfg)  # data generated and cached here, before workers start
    chosen = read_chosen(cfg)["lr"]
    runs = [Run(m, chosen[m, cfg.rank], s, cfg.rank, "seeds") for m in cfg.methods
            for s in cfg.seeds]
    runs += [Run(m, chosen[m, r], s, r, "ranks") for m in cfg.rank_methods
             for r in cfg.ranks if r != cfg.rank
             for s in dict.fromkeys([cfg.sweep_seed, *cfg.rank_seeds])]
    frame = pd.DataFrame(_jobs(cfg, runs, progress, f"{EXPERIMENT} seeds and ranks"))
    frame["chosen"] = True
    return frame


def lr_choices(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per (method, rank) its chosen rate `lr` and `at_edge`: whether that is the smallest or
    largest rate tried; from the runs, or with `reads_chosen` from the tables they were read
    from."""
    if reads_chosen(cfg):
        return read_chosen(cfg)
    swept = frame[frame["study"] != "seeds"]
    chosen = swept[swept["chosen"]].groupby(["method", "rank"])["lr"].first()
    rows = [dict(method=method, rank=rank, lr=chosen[method, rank],
                 at_edge=chosen[method, rank] in (lrs.min(), lrs.max()))
            for (method, rank), lrs in swept.groupby(["method", "rank"])["lr"]]
    return pd.DataFrame(rows).set_index(["method", "rank"])


def _bracket_ranks(cfg: Config, results: list[dict], progress: bool) -> list[dict]:
    """Extra rank-study runs until no rank's best rate is at the edge of its rates (at most
    `max_extensions` rounds), as the sweep does for the base rank."""
    added: list[dict] = []
    for _ in range(cfg.max_extensions):
        extra = []
        for method, rank in sorted({(r["method"], r["rank"]) for r in results + added
                                    if r["study"] == "ranks"}):
            lrs = sorted(r["lr"] for r in results + added if r["study"] == "ranks"
                         and r["method"] == method and r["rank"] == rank)
            best = _best(results + added, method, "ranks", rank)["lr"]
            if best == lrs[0]:
                extra.append(Run(method, _below(lrs[0], cfg), cfg.sweep_seed, rank, "ranks"))
            elif best == lrs[-1]:
                extra.append(Run(method, _above(lrs[-1], cfg), cfg.sweep_seed, rank, "ranks"))
        if not extra:
            break
        added += _jobs(cfg, extra, progress, f"{EXPERIMENT} rank extension")
    return added


def final_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs at each method's chosen rate and the base rank, one per seed."""
    final = frame[frame["chosen"] & (frame["study"] != "ranks")]
    return final.drop_duplicates(["method", "seed"])
