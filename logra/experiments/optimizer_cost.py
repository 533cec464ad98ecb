"""What an optimizer step costs: wall time and state bytes, LoGRA against the field.

Every figure is measured in one process, in one run, with the optimizers interleaved: each round
steps every optimizer once on the same parameters and gradients, and the reported time is the
median over the rounds after warm-up. The machine is shared and noisy, so the results are read
as ratios to `torch.optim.AdamW(foreach=True)` from the same rounds, not as absolute times.

Cases (`cases` in experiments/optimizer_cost.yaml):

    square-N      one N×N matrix (a Linear weight)
    2048x8192     one 2048×8192 matrix
    qwen2.5-1.5b-layer   one Qwen2.5-1.5B decoder layer (hidden 1536, MLP 8960, 12/2 heads)
    proxy-16m     a proxy policy of the ladder (any proxy scale name), randomly initialised
                  (timing does not depend on the weights)

Optimizers: LoGRA at each rank of `logra_ranks` (gain reconstruction, δ = 0.02 with the
calibrated estimate, which without a batch or a reported KL does not clip, projections cached
between steps), the same at `baseline_rank` regenerating its projections
every step ("-regenerate": `cache_projections=False`), AdamW foreach and fused (both
baselines of every table), torch.optim.Adafactor, the naive random projection, and GaLore /
APOLLO where their packages are installed (rank `baseline_rank`; built by `logra.optimizers`,
as in the RL runs). GaLore recomputes an SVD every `update_proj_gap` steps; its time is
amortized over that gap: t = t_step + (t_first − t_step)/gap, with t_first the timed first step
(SVD included). `control_estimators` adds LoGRA at `baseline_rank` with the KL control off
("none") or with one estimator each ("diag", "calibrated", "jvp"; the last two probe a random
batch of `kl_batch` = [sequences, tokens] and run on the proxy policies only): the control's
extra cost per step is the difference to "none".

Device and dtype (`device`, `dtype`): the parameters and gradients live there in that dtype
(optimizer state as each optimizer keeps it: LoGRA's moments fp32, AdamW's in the parameters'
dtype). On CUDA a step is timed by CUDA events around it (the queue drained before), and the
table adds, per optimizer, the memory allocated between steps (`allocated_bytes`: weights,
gradients, state, LoGRA's projection cache), what the accountant predicts for it
(`predicted_bytes`: weights + gradients + `logra.memory.counted_state_bytes`, AdamW and LoGRA
only) and the step's own peak above it (`step_peak_bytes`, from `torch.cuda.max_memory_allocated`).

AdamW's memory-traffic bound: a step must read p, g, m, v and write p, m, v, i.e. 28 bytes per
fp32 parameter (14 in bf16); at the copy bandwidth B measured in the same run on the same device
the bound is 28·numel/B.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

import matplotlib.pyplot as plt
import pandas as pd
import torch
from pydantic import Field
from torch import nn
from torch.optim import Optimizer

from logra.config import TypedConfig, typed
from logra.experiments.typed import Count, Counts, NonNegativeInt, Shape
from logra.memory import counted_state_bytes
from logra.memory.state import as_dtype
from logra.optim import LoGRA, RandomProjectionAdam
from logra.optim.hyperparameters import KL_ESTIMATORS
from logra.optimizers import PROJECTION_GAP, REGISTRY, build_optimizer, measured_state_bytes

BASELINE = "adamw"
FUSED = "adamw-fused"
CONTROL_ESTIMATORS = ("none", *KL_ESTIMATORS)  # "none": the KL control off
ControlEstimator = Literal[CONTROL_ESTIMATORS]


@typed
class Config(TypedConfig):
    """experiments/optimizer_cost.yaml's keys (its comments say what each holds)."""

    EXPERIMENT: ClassVar[str] = "optimizer_cost"
    scale: str
    cases: Annotated[list[str], Field(min_length=1)]  # checked by `_case_model`
    sweep_sizes: list[Count]
    table_cases: list[str]
    logra_ranks: Counts
    baseline_rank: Count
    optimizers: list[str]  # empty: every installed one (checked by `_wanted`)
    rounds: Count
    warmup_rounds: NonNegativeInt
    threads: Count
    device: str  # a torch device: cpu, cuda, cuda:1
    dtype: Literal["float32", "bfloat16", "float16"]
    control_estimators: list[ControlEstimator]
    kl_batch: Shape  # [sequences, tokens]


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/optimizer_cost.yaml at `scale`, with `overrides` on top, checked."""
    return Config.load(scale, **overrides)


# ---------------------------------------------------------------- cases


def build_case(name: str, device: str = "cpu", dtype: str = "float32") -> nn.Module:
    """The model whose parameters a case steps, randomly initialised, on `device` in `dtype`."""
    return _case_model(name).to(device=torch.device(device), dtype=as_dtype(dtype))


def _case_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name.startswith("square-"):
        size = int(name.removeprefix("square-"))
        return nn.Linear(size, size, bias=False)
    if name == "2048x8192":
        return nn.Linear(8192, 2048, bias=False)
    if name == "qwen2.5-1.5b-layer":
        from transformers import Qwen2Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

        config = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                             num_key_value_heads=2)
        return Qwen2DecoderLayer(config, layer_idx=0)
    from logra.models.ladder import SCALES

    if name in SCALES and SCALES[name].is_proxy:
        from transformers import Qwen2ForCausalLM

        from logra.models.build import qwen2_config
        from logra.models.tokenizer import char_tokenizer

        return Qwen2ForCausalLM(qwen2_config(SCALES[name], char_tokenizer()))
    proxies = [n for n, spec in SCALES.items() if spec.is_proxy]
    raise ValueError(f"unknown case {name!r}; valid: square-N, 2048x8192, "
                     f"qwen2.5-1.5b-layer, or a proxy scale {proxies}")


def optimizer_builders(
    cfg: Config, language_model: bool = False
) -> list[tuple[str, Callable[[nn.Module], Optimizer]]]:
    """(name, builder) of every optimizer of the comparison that is installed and wanted.

    `language_model`: the case's model returns logits, so the JVP estimators can probe it.
    """
    lr = 1e-4
    builders: dict[str, Callable[[nn.Module], Optimizer]] = {
        "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=lr, foreach=True),
        "adamw-fused": lambda m: torch.optim.AdamW(m.parameters(), lr=lr, fused=True),
    }
    for rank in cfg.logra_ranks:
        builders[f"logra-r{rank}"] = lambda m, r=rank: LoGRA(m.parameters(), lr=lr, rank=r,
                                                             predicted_kl_threshold=0.02)
    rank = cfg.baseline_rank
    for estimator in cfg.control_estimators:
        if estimator in ("calibrated", "jvp") and not language_model:
            continue
        builders[f"logra-r{rank}-{estimator}"] = (
            lambda m, e=estimator: logra_with_control(m, lr, rank, e, cfg.kl_batch))
    builders[f"logra-r{rank}-regenerate"] = lambda m: LoGRA(m.parameters(), lr=lr, rank=rank,
                                                          cache_projections=False,
                                                          predicted_kl_threshold=0.02)
    builders[f"naive-r{rank}"] = lambda m: RandomProjectionAdam(m.parameters(), lr=lr, rank=rank)
    builders["adafactor"] = lambda m: torch.optim.Adafactor(m.parameters(), lr=lr)
    settings = dict(lr=lr, weight_decay=0.0, rank=rank, seed=0)
    for name in ("galore", "apollo"):
        if _installed(REGISTRY[name].package[0]):
            builders[f"{name}-r{rank}"] = lambda m, n=name: build_optimizer(n, m, settings)
    # the two AdamWs are measured whatever `optimizers` says: every ratio is to them
    return [(name, builders[name]) for name in builders
            if name in (BASELINE, FUSED) or _wanted(name, cfg.optimizers)]


def logra_with_control(model: nn.Module, lr: float, rank: int, estimator: str,
                        kl_batch: list[int]) -> LoGRA:
    """LoGRA with the KL control off ("none") or on with `estimator`, probing a random batch."""
    if estimator == "none":
        return LoGRA(model.parameters(), lr=lr, rank=rank, predicted_kl_threshold=None)
    optimizer = LoGRA(model.parameters(), lr=lr, rank=rank, kl_estimator=estimator,
                      predicted_kl_threshold=0.02)
    if estimator != "diag":
        device = next(model.parameters()).device
        ids = torch.randint(1, model.config.vocab_size, tuple(kl_batch), device=device,
                            generator=torch.Generator(device).manual_seed(2))
        optimizer.set_kl_batch(model, input_ids=ids)
    return optimizer


def _installed(module: str) -> bool:
    """`module` imports here: present, and so are its own imports (galore-torch's package
    imports bitsandbytes, which a machine may lack)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _wanted(name: str, wanted: list[str]) -> bool:
    return not wanted or name.split("-r")[0] in wanted or name in wanted


# ---------------------------------------------------------------- measurement


def copy_bandwidth(numel: int = 1 << 24, repeats: int = 5, device: str = "cpu") -> float:
    """Bytes per second of an fp32 copy (read + write) on `device`, median of `repeats`."""
    src = torch.empty(numel, device=device).normal_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats):
        times.append(timed(lambda: dst.copy_(src), torch.device(device)))
    return 2 * 4 * numel / statistics.median(times)


def measure_case(case: str, cfg: Config) -> pd.DataFrame:
    """Median step time and state bytes of every optimizer on one case, interleaved."""
    device, dtype = torch.device(cfg.device), as_dtype(cfg.dtype)
    template = build_case(case, cfg.device, cfg.dtype)
    builders = optimizer_builders(cfg, language_model=hasattr(template, "config")
                                  and hasattr(template, "lm_head"))
    models, optimizers = {}, {}
    generator = torch.Generator().manual_seed(1)
    grad_values = [(torch.randn(p.shape, generator=generator) * 1e-3).to(device, dtype)
                   for p in template.parameters()]
    cuda = device.type == "cuda"
    first_step: dict[str, float] = {}
    allocated: dict[str, int] = {}
    for name, build in builders:  # each optimizer's own bytes: the device's growth as it builds
        base = torch.cuda.memory_allocated(device) if cuda else 0
        model = build_case(case, cfg.device, cfg.dtype)
        optimizers[name] = build(model)
        models[name] = model
        first_step[name] = _timed_step(model, optimizers[name], grad_values)
        allocated[name] = torch.cuda.memory_allocated(device) - base if cuda else 0
    times: dict[str, list[float]] = {name: [] for name, _ in builders}
    peaks: dict[str, int] = dict.fromkeys(times, 0)
    for round_ in range(cfg.warmup_rounds + cfg.rounds):
        for name, _ in builders:
            set_grads(models[name], grad_values)
            if cuda:  # the timed step's own peak above what was allocated before it
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            elapsed = timed(optimizers[name].step, device)
            if cuda:
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated(device) - before)
            if round_ >= cfg.warmup_rounds:
                times[name].append(elapsed)
    numel = sum(p.numel() for p in template.parameters())
    rows = []
    for name, _ in builders:
        median = statistics.median(times[name])
        if name.startswith("galore"):  # one SVD every gap steps, the first step included one
            median += max(first_step[name] - median, 0.0) / PROJECTION_GAP
        optimizer = optimizers[name]
        row = dict(case=case, numel=numel, optimizer=name, step_ms=1e3 * median,
                   state_bytes=measured_state_bytes(optimizer),
                   cache_bytes=projection_cache_bytes(optimizer))
        if device.type == "cuda":
            row.update(allocated_bytes=allocated[name], step_peak_bytes=peaks[name],
                       predicted_bytes=predicted_bytes(template, name, cfg))
        rows.append(row)
    frame = pd.DataFrame(rows)
    base = frame.set_index("optimizer")
    frame["time_ratio"] = frame["step_ms"] / base.loc[BASELINE, "step_ms"]
    frame["fused_ratio"] = frame["step_ms"] / base.loc[FUSED, "step_ms"]
    frame["state_ratio"] = frame["state_bytes"] / base.loc[BASELINE, "state_bytes"]
    return frame


def projection_cache_bytes(optimizer: Optimizer) -> int:
    """Bytes of the projections P, Q LoGRA keeps between steps (0 for other optimizers)."""
    return optimizer.projection_bank.nbytes if isinstance(optimizer, LoGRA) else 0


def predicted_bytes(model: nn.Module, name: str, cfg: Config) -> float:
    """What the accountant predicts is allocated between steps: weights, gradients (both in the
    parameters' dtype) and `logra.memory.counted_state_bytes` (AdamW and LoGRA; NaN for the
    others)."""
    weights = sum(p.nbytes for p in model.parameters())
    if name.startswith("adamw"):
        state = counted_state_bytes(model, "adamw")
    elif name.startswith("logra-r"):
        rank = int(name.removeprefix("logra-r").split("-")[0])
        state = counted_state_bytes(model, "logra", rank=rank, embedding_rank=rank)
    else:
        return math.nan
    return 2 * weights + state


def projection_cost(case: str, rank: int, cfg: Config, repeats: int = 5) -> dict:
    """Regenerate or cache LoGRA's projections on a case: the cache's bytes (every distinct
    shape's P and Q) and the time to draw and QR-factor all of them again, as one step without
    the cache does (median of `repeats`, moved to `device` included)."""
    model = build_case(case, cfg.device, cfg.dtype)
    optimizer = LoGRA(model.parameters(), lr=1e-4, rank=rank, cache_projections=True,
                      predicted_kl_threshold=None)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    device = torch.device(cfg.device)
    keys = list(optimizer.projection_bank.cached)

    def regenerate() -> None:
        for key in keys:
            optimizer.projection_bank.draw(key.seed, key.side, key.dim, key.cols, key.epoch, device)

    seconds = statistics.median(timed(regenerate, device) for _ in range(repeats))
    return dict(case=case, rank=rank, projections=len(keys),
                cache_bytes=projection_cache_bytes(optimizer), regenerate_ms=1e3 * seconds)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds `fn` takes: CUDA events around it on a GPU (the queue drained before), else the
    host clock."""
    if device.type != "cuda":
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def set_grads(model: nn.Module, grads: list[torch.Tensor]) -> None:
    """Give `model`'s parameters, in order, copies of `grads` as their gradients (every
    optimizer of a case steps on the same gradients)."""
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()


def _timed_step(model: nn.Module, optimizer: Optimizer, grads: list[torch.Tensor]) -> float:
    set_grads(model, grads)
    return timed(optimizer.step, next(model.parameters()).device)


def run(cfg: Config) -> pd.DataFrame:
    """All cases and the matrix-size sweep; one row per (case, optimizer)."""
    torch.set_num_threads(cfg.threads)
    bandwidth = copy_bandwidth(device=cfg.device)
    cases = [*cfg.cases, *(f"square-{n}" for n in cfg.sweep_sizes)]
    frames = [measure_case(case, cfg) for case in dict.fromkeys(cases)]
    frame = pd.concat(frames, ignore_index=True)
    # p, g, m, v read and p, m, v written, all in the parameters' dtype (as AdamW keeps them)
    frame["bound_bytes_per_param"] = 7 * as_dtype(cfg.dtype).itemsize
    frame["adamw_bound_ms"] = 1e3 * frame["bound_bytes_per_param"] * frame["numel"] / bandwidth
    frame["bandwidth_gb_s"] = bandwidth / 1e9
    return frame


# ---------------------------------------------------------------- reporting


def ratio_table(frame: pd.DataFrame, cases: list[str]) -> pd.DataFrame:
    """Per case and optimizer: ms per step, ratios to AdamW foreach and fused, state bytes
    (`measured_state_bytes`: LoGRA's kept projections, `cache_bytes`, included) and ratio, and
    on CUDA the measured memory beside the accountant's prediction."""
    columns = ["case", "optimizer", "step_ms", "time_ratio", "fused_ratio", "state_bytes",
               "state_ratio", "cache_bytes"]
    columns += [c for c in ("allocated_bytes", "predicted_bytes", "step_peak_bytes")
                if c in frame]
    table = frame[frame["case"].isin(cases)][columns]
    return table.reset_index(drop=True)


def plot_sweep(frame: pd.DataFrame, sizes: list[int]) -> plt.Figure:
    """Step time and state bytes against matrix size, log-log, with AdamW's traffic bound."""
    sweep = frame[frame["case"].isin([f"square-{n}" for n in sizes])]
    fig, (ax_time, ax_state) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rows in sweep.groupby("optimizer", sort=False):
        rows = rows.sort_values("numel")  # cases run in config order, not by size
        style = dict(marker="o", lw=2) if name.startswith("logra") else dict(marker=".", lw=1)
        ax_time.plot(rows["numel"], rows["step_ms"], label=name, **style)
        ax_state.plot(rows["numel"], rows["state_bytes"], label=name, **style)
    bound = sweep.drop_duplicates("numel").sort_values("numel")
    ax_time.plot(bound["numel"], bound["adamw_bound_ms"], "k--", lw=1,
                 label=f"AdamW traffic bound ({bound['bound_bytes_per_param'].iloc[0]} B/param at "
                       f"{bound['bandwidth_gb_s'].iloc[0]:.0f} GB/s)")
    for ax, label in ((ax_time, "time per step (ms)"), (ax_state, "optimizer state (bytes)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameters in the matrix (N×N)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    ax_time.set_title("step time (median, interleaved rounds)")
    ax_state.set_title("persistent optimizer state")
    ax_state.legend(fontsize=7, loc="upper left")
    ax_time.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig
