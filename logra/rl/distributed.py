"""Data parallelism for the GRPO loop: torchrun ranks, shards of the batch, global records.

Under `torchrun --nproc_per_node=N` (gloo on CPU, NCCL on GPU) every rank draws the same step
batch of prompts, samples and scores its contiguous share of them, and runs the policy's
gradient forward through `DistributedDataParallel`. One process with the same global batch
takes the same steps:

- sampling is per row (`rollout.sample` seeds each row by its index in the step's batch);
- GRPO normalizes over every response token of the batch, so rank i's loss is scaled by
  N·nᵢ / n (nᵢ its tokens, n all ranks'): DDP's mean of the gradients is then the gradient of
  the global token mean;
- LoGRA with the JVP estimator averages its KL prediction over the group (`process_group`);
- the records are those of the global batch: token means are weighted by token counts,
  per-completion statistics computed on the gathered completions, evaluations summed.

Without a process group (`world == 1`) every method is the identity.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the ranks of the default process group."""

    rank: int = 0
    world: int = 1

    @classmethod
    def from_environment(cls, device: torch.device) -> DataParallel:
        """The default group, initialized from torchrun's environment if not yet (gloo on the
        CPU, NCCL on CUDA); a single process otherwise."""
        if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if not dist.is_initialized():
            return cls()
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def group(self) -> dist.ProcessGroup | None:
        return dist.group.WORLD if self.world > 1 else None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """A CUDA device becomes this rank's (LOCAL_RANK) under more than one rank, and a bare
        "cuda" the current one in a single process: an indexed device, as
        `torch.cuda.set_device` needs (torch 2.11 refuses a bare "cuda")."""
        if device.type != "cuda":
            return device
        if self.world > 1:
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return device if device.index is not None else torch.device(
            "cuda", torch.cuda.current_device())

    def shard(self, n: int, name: str) -> slice:
        """This rank's contiguous, equal share of n items (n must divide evenly)."""
        if n % self.world:
            raise ValueError(f"{name}={n} must be a multiple of the {self.world} ranks")
        size = n // self.world
        return slice(self.rank * size, (self.rank + 1) * size)

    def split(self, n: int) -> slice:
        """This rank's contiguous share of n items, sizes differing by at most one."""
        base, extra = divmod(n, self.world)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (self.rank < extra))

    def wrap(self, model: nn.Module) -> nn.Module:
        """`DistributedDataParallel(model)` under more than one rank, else `model`."""
        if self.world == 1:
            return model
        device = next(model.parameters()).device
        return nn.parallel.DistributedDataParallel(
            model, device_ids=[device] if device.type == "cuda" else None)

    def sum(self, *values: float) -> list[float]:
        """Each value summed over the ranks (one all-reduce)."""
        if self.world == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self._device())
        dist.all_reduce(tensor)
        return tensor.tolist()

    def token_mean(self, means: dict[str, float], tokens: float) -> dict[str, float]:
        """Means over this rank's `tokens` tokens → means over every rank's tokens."""
        if self.world == 1:
            return means
        *sums, total = self.sum(*(m * tokens for m in means.values()), tokens)
        return {key: s / max(total, 1.0) for key, s in zip(means, sums, strict=True)}

    def gather(self, tensor: Tensor) -> Tensor:
        """Every rank's `tensor` (same shape on all), concatenated in rank order on dim 0."""
        if self.world == 1:
            return tensor
        parts = [torch.empty_like(tensor, device=self._device()) for _ in range(self.world)]
        dist.all_gather(parts, tensor.to(self._device()))
        return torch.cat(parts).to(tensor.device)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (building a proxy, caching data), the others after it."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def _device(self) -> torch.device:
        """Where collectives run: this rank's GPU under NCCL, else the CPU."""
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
