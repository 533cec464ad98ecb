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

Optimizers: LoGRA at each rank of `logra_ranks` (defaults otherwise: gain reconstruction,
δ = 0.02 with the diagonal estimate, projections regenerated every step), AdamW foreach and
fused, torch.optim.Adafactor, the naive random projection, and GaLore / APOLLO where their
packages are installed (rank `baseline_rank`; built by `logra.optimizers`, as in the RL runs).
GaLore recomputes an SVD every `update_proj_gap` steps; its time is amortized over that gap:
t = t_step + (t_first − t_step)/gap, with t_first the timed first step (SVD included).

AdamW's memory-traffic bound: a step must read p, g, m, v and write p, m, v, i.e. 28 bytes per
fp32 parameter; at the copy bandwidth B measured in the same run the bound is 28·numel/B.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn
from torch.optim import Optimizer

from logra.experiments.config import load_config
from logra.optim import LoGRA, RandomProjectionAdam
from logra.optimizers import PROJECTION_GAP, REGISTRY, build_optimizer, state_bytes

BASELINE = "adamw"


def config(scale: str = "default", **overrides: Any) -> dict[str, Any]:
    """experiments/optimizer_cost.yaml at `scale`, with `overrides` on top."""
    return load_config("optimizer_cost", scale, **overrides)


# ---------------------------------------------------------------- cases


def build_case(name: str) -> nn.Module:
    """The model whose parameters a case steps (fp32, on the CPU, randomly initialised)."""
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


def optimizer_builders(cfg: dict[str, Any]) -> list[tuple[str, Callable[[nn.Module], Optimizer]]]:
    """(name, builder) of every optimizer of the comparison that is installed and wanted."""
    lr = 1e-4
    builders: dict[str, Callable[[nn.Module], Optimizer]] = {
        "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=lr, foreach=True),
        "adamw-fused": lambda m: torch.optim.AdamW(m.parameters(), lr=lr, fused=True),
    }
    for rank in cfg["logra_ranks"]:
        builders[f"logra-r{rank}"] = lambda m, r=rank: LoGRA(m.parameters(), lr=lr, rank=r)
    rank = cfg["baseline_rank"]
    builders[f"naive-r{rank}"] = lambda m: RandomProjectionAdam(m.parameters(), lr=lr, rank=rank)
    builders["adafactor"] = lambda m: torch.optim.Adafactor(m.parameters(), lr=lr)
    settings = dict(lr=lr, weight_decay=0.0, rank=rank, seed=0)
    for name in ("galore", "apollo"):
        if _installed(REGISTRY[name].package[0]):
            builders[f"{name}-r{rank}"] = lambda m, n=name: build_optimizer(n, m, settings)
    return [(name, builders[name]) for name in builders if _wanted(name, cfg["optimizers"])]


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _wanted(name: str, wanted: list[str]) -> bool:
    return not wanted or name.split("-r")[0] in wanted or name in wanted


# ---------------------------------------------------------------- measurement


def copy_bandwidth(numel: int = 1 << 24, repeats: int = 5) -> float:
    """Bytes per second of an fp32 copy (read + write), median of `repeats`."""
    src, dst = torch.empty(numel).normal_(), torch.empty(numel)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * 4 * numel / statistics.median(times)


def measure_case(case: str, cfg: dict[str, Any]) -> pd.DataFrame:
    """Median step time and state bytes of every optimizer on one case, interleaved."""
    builders = optimizer_builders(cfg)
    models, optimizers, grads = {}, {}, {}
    template = build_case(case)
    generator = torch.Generator().manual_seed(1)
    grad_values = [torch.randn(p.shape, generator=generator) * 1e-3
                   for p in template.parameters()]
    first_step: dict[str, float] = {}
    for name, build in builders:
        model = build_case(case)
        optimizers[name] = build(model)
        models[name] = model
        grads[name] = grad_values
        first_step[name] = _timed_step(model, optimizers[name], grad_values)
    times: dict[str, list[float]] = {name: [] for name, _ in builders}
    for round_ in range(cfg["warmup_rounds"] + cfg["rounds"]):
        for name, _ in builders:
            elapsed = _timed_step(models[name], optimizers[name], grads[name])
            if round_ >= cfg["warmup_rounds"]:
                times[name].append(elapsed)
    numel = sum(p.numel() for p in template.parameters())
    rows = []
    for name, _ in builders:
        median = statistics.median(times[name])
        if name.startswith("galore"):  # one SVD every gap steps, the first step included one
            median += max(first_step[name] - median, 0.0) / PROJECTION_GAP
        rows.append(dict(case=case, numel=numel, optimizer=name, step_ms=1e3 * median,
                         state_bytes=state_bytes(optimizers[name])))
    frame = pd.DataFrame(rows)
    base = frame.set_index("optimizer").loc[BASELINE]
    frame["time_ratio"] = frame["step_ms"] / base["step_ms"]
    frame["state_ratio"] = frame["state_bytes"] / base["state_bytes"]
    return frame


def _timed_step(model: nn.Module, optimizer: Optimizer, grads: list[torch.Tensor]) -> float:
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()
    start = time.perf_counter()
    optimizer.step()
    return time.perf_counter() - start


def run(cfg: dict[str, Any]) -> pd.DataFrame:
    """All cases and the matrix-size sweep; one row per (case, optimizer)."""
    torch.set_num_threads(cfg["threads"])
    bandwidth = copy_bandwidth()
    cases = [*cfg["cases"], *(f"square-{n}" for n in cfg["sweep_sizes"])]
    frames = [measure_case(case, cfg) for case in dict.fromkeys(cases)]
    frame = pd.concat(frames, ignore_index=True)
    frame["adamw_bound_ms"] = 1e3 * 28 * frame["numel"] / bandwidth
    frame["bandwidth_gb_s"] = bandwidth / 1e9
    return frame


# ---------------------------------------------------------------- reporting


def ratio_table(frame: pd.DataFrame, cases: list[str]) -> pd.DataFrame:
    """Per case and optimizer: ms per step, ratio to AdamW(foreach), state bytes and ratio."""
    table = frame[frame["case"].isin(cases)][
        ["case", "optimizer", "step_ms", "time_ratio", "state_bytes", "state_ratio"]]
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
                 label=f"AdamW traffic bound (28 B/param at "
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
