"""Communication (claim C12): what LoGRA's sketch hook all-reduces, and which parallelisms work.

The report says LoGRA is "compatible with DDP, FSDP and Megatron tensor parallelism" and that
"sketches shrink the all-reduce volume". `logra.optim.comm_hook` all-reduces, for every matrix
with the Nyström reconstruction, the fp32 sketches L = PᵀG (k×n) and R = GQ (m×r) instead of G
(m×n); gain matrices (the default reconstruction, which reads G itself) and dense-AdamW parameters
(1-D, small) travel in full (docs/distributed.md). Per step, for the parameters θ of a model:

    dense  = Σ_θ numel(θ) · b                          b = bytes of a gradient element (4 or 2)
    sketch = Σ_{θ compressed} 4·(k·n + m·r) + Σ_{θ other} numel(θ) · b

with θ compressed iff its group has reconstruction "nystrom" and `sketch_shapes(θ.shape, r)` is
not None (the optimizer's own rule, which `LoGRA.sketch_only_projections` applies); r = `rank`,
embeddings and the output head at `embedding_rank` (`logra.memory.logra_param_groups`).

counted   Those sums from shapes alone, for the proxies of the ladder and the real 1.5B/7B/27B
          architectures built on the meta device (`logra.memory.ARCHITECTURES`), for both
          reconstructions and gradients in fp32 and bf16.
measured  Two CPU ranks with gloo (`torch.multiprocessing.spawn`), `measured_model` randomly
          initialised, every group Nyström, `measured_steps` steps of a next-token loss on random
          tokens, each rank half of the global batch:
            * the bytes actually passed to `torch.distributed.all_reduce` during backward (the
              function is wrapped by a counter), for DDP with PyTorch's default all-reduce hook
              (dense) and with the sketch hook, and the hook's own `SketchHookState` count;
            * max |Δw| of DDP against one process with the global batch, of the sketch hook
              against DDP's dense all-reduce, and of FSDP2 (`fully_shard` per decoder layer and
              the root) against one process;
            * tensor parallelism: a two-layer MLP split by `parallelize_module` (PyTorch's
              Megatron-style ColwiseParallel then RowwiseParallel); whether LoGRA's step refuses
              it, and its message. (Megatron-LM itself is not installed; its layouts are the same
              row/column splits.)

`run(config)` returns a tidy frame, one row per number:

    section         "counted" | "measured"
    model           a proxy scale or architecture name
    reconstruction  "gain" | "nystrom" ("" for the equivalence checks)
    grad_dtype      "fp32" | "bf16" ("" where not applicable)
    metric          counted: params, dense_bytes, sent_bytes, ratio
                    measured: dense_bytes, sent_bytes, hook_sent_bytes, predicted_dense_bytes,
                    predicted_sent_bytes, ratio (per step), ddp_vs_single, hook_vs_dense,
                    fsdp2_vs_single (max |Δw|), tp_refused (1 or 0)
    value
    note            tp_refused: the error LoGRA raised; else ""
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pandas as pd
import torch
import torch.distributed as dist
from pydantic import Field
from torch import Tensor, nn

from logra.config import TypedConfig, typed
from logra.experiments.typed import Count, ModelScale, Positive, Share
from logra.memory import ARCHITECTURES, logra_param_groups
from logra.optim import LoGRA, sketch_shapes

COLUMNS = ("section", "model", "reconstruction", "grad_dtype", "metric", "value", "note")
RECONSTRUCTIONS = ("gain", "nystrom")
GRAD_BYTES = {"fp32": 4, "bf16": 2}
SKETCH_BYTES = 4  # the hook sends fp32 sketches
WORLD = 2


Architecture = Literal[tuple(ARCHITECTURES)]


@typed
class Config(TypedConfig):
    """experiments/communication.yaml's keys (its comments say what each holds)."""

    EXPERIMENT: ClassVar[str] = "communication"
    scale: str
    seed: int
    proxies: list[ModelScale]
    architectures: list[Architecture]
    rank: Count
    embedding_rank: Count
    measured_model: ModelScale
    measured_rank: Count
    measured_embedding_rank: Count
    measured_steps: Count
    batch_size: Annotated[int, Field(ge=2)]  # split over the two ranks
    seq_len: Count
    lr: Positive
    tolerance: Positive
    c12_shrink: Share


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/communication.yaml at `scale`, with `overrides` on top, checked."""
    return Config.load(scale, **overrides)


# ---------------------------------------------------------------- models and byte counts


def build(name: str, device: str = "meta") -> nn.Module:
    """A proxy scale (randomly initialised from its config) or a real architecture (meta only)."""
    if name in ARCHITECTURES:
        if device != "meta":
            raise ValueError(f"{name} is built on the meta device only")
        return ARCHITECTURES[name].build()
    from transformers import Qwen2ForCausalLM

    from logra.models.build import qwen2_config
    from logra.models.ladder import SCALES
    from logra.models.tokenizer import char_tokenizer

    if name not in SCALES or not SCALES[name].is_proxy:
        proxies = [n for n, s in SCALES.items() if s.is_proxy]
        raise ValueError(f"unknown model {name!r}; valid: {proxies + list(ARCHITECTURES)}")
    with torch.device(device):
        return Qwen2ForCausalLM(qwen2_config(SCALES[name], char_tokenizer()))


def groups(model: nn.Module, rank: int, embedding_rank: int, reconstruction: str
           ) -> list[dict[str, Any]]:
    """`logra_param_groups` with `reconstruction` set on every group."""
    return [{**g, "reconstruction": reconstruction}
            for g in logra_param_groups(model, rank, embedding_rank)]


def allreduce_bytes(param_groups: list[dict[str, Any]], grad_bytes: int) -> tuple[int, int]:
    """(dense, sketch hook) bytes all-reduced per step for these LoGRA param groups.

    A parameter is compressed iff its group is Nyström and LoGRA sketches it at the group's rank
    (module docstring); the rest travels at `grad_bytes` per element.
    """
    dense = sent = 0
    for group in param_groups:
        for p in group["params"]:
            numel = p.numel()
            dense += numel * grad_bytes
            shapes = (sketch_shapes(p.shape, group["rank"])
                      if group["reconstruction"] == "nystrom" else None)
            if shapes is None:
                sent += numel * grad_bytes
            else:
                (k, n), (m, r) = shapes
                sent += (k * n + m * r) * SKETCH_BYTES
    return dense, sent


def counted_rows(cfg: Config) -> list[dict[str, Any]]:
    """Bytes per step of every model, reconstruction and gradient dtype (from shapes)."""
    rows = []
    for name in [*cfg.proxies, *cfg.architectures]:
        model = build(name)
        params = sum(p.numel() for p in model.parameters())
        for rec in RECONSTRUCTIONS:
            param_groups = groups(model, cfg.rank, cfg.embedding_rank, rec)
            for dtype, size in GRAD_BYTES.items():
                dense, sent = allreduce_bytes(param_groups, size)
                base = dict(section="counted", model=name, reconstruction=rec, grad_dtype=dtype,
                            note="")
                rows += [dict(base, metric=k, value=float(v)) for k, v in
                         (("params", params), ("dense_bytes", dense), ("sent_bytes", sent),
                          ("ratio", sent / dense))]
    return rows


# ---------------------------------------------------------------- the measured run (2 ranks)


def token_batch(cfg: Config, vocab: int, step: int, rank: int | None) -> Tensor:
    """The global batch of `step` (batch_size × seq_len random tokens), or rank's half."""
    g = torch.Generator().manual_seed(cfg.seed * 1000 + step)
    ids = torch.randint(vocab, (cfg.batch_size, cfg.seq_len), generator=g)
    return ids if rank is None else ids.chunk(WORLD)[rank]


def measured_model(cfg: Config) -> nn.Module:
    """`measured_model`, randomly initialised from `seed` (built in the parent process)."""
    torch.manual_seed(cfg.seed)
    return build(cfg.measured_model, device="cpu")


def copy_model(model_config: Any, state: dict[str, Tensor]) -> nn.Module:
    """A Qwen2 causal LM from its config and weights: how the ranks get the parent's model
    without importing `logra.models` (and `datasets`), which would double their start-up."""
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM(model_config)
    model.load_state_dict(state)
    return model


def measured_optimizer(cfg: Config, model: nn.Module) -> LoGRA:
    """LoGRA with every group Nyström (so the hook compresses what it can), seed fixed."""
    return LoGRA(groups(model, cfg.measured_rank, cfg.measured_embedding_rank, "nystrom"),
                 lr=cfg.lr, seed=cfg.seed, predicted_kl_threshold=0.02)


def train(cfg: Config, model: nn.Module, inner: nn.Module, opt: LoGRA,
          rank: int | None) -> None:
    """`measured_steps` steps of next-token loss; `inner` is the unwrapped model (its vocab)."""
    vocab = inner.config.vocab_size
    for step in range(cfg.measured_steps):
        ids = token_batch(cfg, vocab, step, rank)
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()


def weights(model: nn.Module) -> dict[str, Tensor]:
    """Full weights by name (DTensors gathered)."""
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for n, p in model.named_parameters()}


def max_diff(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    if a.keys() != b.keys():
        raise ValueError(f"different parameters: {sorted(a.keys() ^ b.keys())[:5]}")
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@contextmanager
def counting_all_reduce() -> Iterator[list[int]]:
    """Count the bytes of every tensor passed to `torch.distributed.all_reduce` meanwhile."""
    counter = [0]
    original = dist.all_reduce

    def counted(tensor: Tensor, *args: Any, **kwargs: Any) -> Any:
        counter[0] += tensor.numel() * tensor.element_size()
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counted
    try:
        yield counter
    finally:
        dist.all_reduce = original


def ddp_run(cfg: Config, rank: int, hook: bool, model: nn.Module) -> dict[str, Any]:
    """DDP with the default all-reduce hook (dense) or the sketch hook; weights and bytes."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from logra.optim.comm_hook import register_sketch_hook

    ddp = nn.parallel.DistributedDataParallel(model)
    opt = measured_optimizer(cfg, model)
    state = None
    if hook:
        state = register_sketch_hook(ddp, opt)
    else:
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    with counting_all_reduce() as counter:
        train(cfg, ddp, model, opt, rank)
    steps = cfg.measured_steps
    return dict(weights=weights(model), bytes=counter[0] / steps,
                hook_bytes=state.sent_bytes / steps if state else math.nan)


def fsdp2_run(cfg: Config, rank: int, model: nn.Module) -> dict[str, Tensor]:
    """FSDP2: `fully_shard` on every decoder layer and the root; full weights after training."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = measured_optimizer(cfg, model)
    train(cfg, model, model, opt, rank)
    return weights(model)


def tensor_parallel_refusal() -> str:
    """The error LoGRA raises for a Megatron-style tensor-parallel MLP ("" if it steps)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (WORLD,))
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = LoGRA(mlp.parameters(), lr=1e-6, rank=2, predicted_kl_threshold=0.02)
    mlp(torch.randn(4, 16)).square().mean().backward()
    try:
        opt.step()
    except NotImplementedError as err:
        return str(err)
    return ""


def rank_checks(rank: int, cfg: Config, model_config: Any, state: dict[str, Tensor]
                ) -> dict[str, Any]:
    """Everything one rank measures (run inside the spawned process), each run on a fresh
    copy of the parent's model."""
    return dict(dense=ddp_run(cfg, rank, False, copy_model(model_config, state)),
                hook=ddp_run(cfg, rank, True, copy_model(model_config, state)),
                fsdp2=fsdp2_run(cfg, rank, copy_model(model_config, state)),
                tp=tensor_parallel_refusal())


def _rank_main(rank: int, out: str, cfg: Config, model_config: Any,
               state: dict[str, Tensor]) -> None:
    torch.set_num_threads(1)
    # a file rendezvous in this run's own directory: no port is picked, then taken by another
    # process before the ranks bind it
    dist.init_process_group("gloo", init_method=f"file://{Path(out) / 'rendezvous'}", rank=rank,
                            world_size=WORLD)
    try:
        torch.save(rank_checks(rank, cfg, model_config, state), Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def on_two_ranks(cfg: Config, model: nn.Module) -> list[dict[str, Any]]:
    """`rank_checks` of `model` on two gloo ranks (one thread each: `_rank_main` sets it, and
    this process's environment stays as it was); what each returned.

    The ranks are forked, so they start with everything this process imported (spawned ranks
    spend most of their time importing torch and transformers again).
    """
    import torch.multiprocessing as mp

    args = (cfg, model.config, {k: v.clone() for k, v in model.state_dict().items()})
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank_main, args=(out, *args), nprocs=WORLD, join=True,
                           start_method="fork")
        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def measured_rows(cfg: Config) -> list[dict[str, Any]]:
    """The 2-rank run against one process with the global batch, and the predicted bytes."""
    model = measured_model(cfg)
    ranks = on_two_ranks(cfg, model)
    train(cfg, model, model, measured_optimizer(cfg, model), None)
    single = weights(model)
    dense, hook = ranks[0]["dense"], ranks[0]["hook"]
    for r in range(1, WORLD):
        if max_diff(ranks[r]["hook"]["weights"], hook["weights"]) != 0:
            raise RuntimeError("the ranks of the sketch-hook run hold different weights")
    predicted_dense, predicted_sent = allreduce_bytes(
        groups(model, cfg.measured_rank, cfg.measured_embedding_rank, "nystrom"),
        GRAD_BYTES["fp32"])
    base = dict(section="measured", model=cfg.measured_model, note="")
    tp = ranks[0]["tp"]
    counts = dict(reconstruction="nystrom", grad_dtype="fp32")
    checks = dict(reconstruction="", grad_dtype="")
    return [
        dict(base, **counts, metric="dense_bytes", value=dense["bytes"]),
        dict(base, **counts, metric="sent_bytes", value=hook["bytes"]),
        dict(base, **counts, metric="hook_sent_bytes", value=hook["hook_bytes"]),
        dict(base, **counts, metric="predicted_dense_bytes", value=float(predicted_dense)),
        dict(base, **counts, metric="predicted_sent_bytes", value=float(predicted_sent)),
        dict(base, **counts, metric="ratio", value=hook["bytes"] / dense["bytes"]),
        dict(base, **checks, metric="ddp_vs_single", value=max_diff(dense["weights"], single)),
        dict(base, **checks, metric="hook_vs_dense",
             value=max_diff(hook["weights"], dense["weights"])),
        dict(base, **checks, metric="fsdp2_vs_single", value=max_diff(ranks[0]["fsdp2"], single)),
        dict(base, **{**checks, "note": tp}, metric="tp_refused", value=float(bool(tp))),
    ]


def run(cfg: Config) -> pd.DataFrame:
    """Counted bytes for every model, then the measured 2-rank run."""
    return pd.DataFrame(counted_rows(cfg) + measured_rows(cfg), columns=list(COLUMNS))
