"""The "naive random projection" ablation that the report blames for KL collapse.

One fixed random projection per matrix, Adam run entirely in the projected space, the update
mapped back, and no step control (compare GaLore, Zhao et al. 2024, with a random instead of an
SVD basis and no periodic refresh). For W ∈ R^{m×n} with m ≥ n and P ∈ R^{m×r} orthonormal:

    S = Pᵀ G  (r×n),   m ← β₁ m + (1−β₁) S,   v ← β₂ v + (1−β₂) S²,
    W ← W − lr·(P · m̂/(√v̂+ε) + λ W)

and symmetrically, S = G Q (m×r) with Q ∈ R^{n×r} and update (m̂/(√v̂+ε))·Qᵀ, when m < n: the
larger side is compressed. Every update lies in the fixed r-dimensional column (or row) space of
P (or Q), which is what the ablation is meant to expose. Parameters that are 1-D or too small
for the projection to save memory get plain AdamW.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.optimizer import ParamsT

from logra.optim import sketch as sk
from logra.optim.hyperparameters import (
    check_adamw,
    check_int,
    check_saved_groups,
    check_saved_shapes,
)
from logra.optim.updates import adam_direction


def projected_shape(shape: tuple[int, ...] | torch.Size, rank: int) -> tuple[int, int] | None:
    """Shape of the projected gradient (and of each moment), or None for dense AdamW."""
    if len(shape) < 2:
        return None
    m, n = shape[0], math.prod(shape[1:])
    if rank >= min(m, n):
        return None
    return (rank, n) if m >= n else (m, rank)


class RandomProjectionAdam(Optimizer):
    """Adam in a fixed one-sided random subspace per matrix; see the module docstring.

    The positional arguments are AdamW's (params, lr, betas, eps, weight_decay, amsgrad), with
    amsgrad unsupported; `rank` (r, which a group may set) and `seed` are keyword-only.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float | Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        *,
        rank: int = 16,
        seed: int = 0,
    ) -> None:
        if amsgrad:
            raise ValueError("RandomProjectionAdam does not support amsgrad=True")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {type(seed).__name__}")
        defaults = dict(lr=lr, rank=rank, betas=betas, eps=eps, weight_decay=weight_decay,
                        seed=seed)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """Validate a group's hyperparameters before it joins the optimizer."""
        merged = {**self.defaults, **param_group}
        check_adamw(merged)
        check_int("rank", merged["rank"], 1)
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict: dict) -> None:
        """As torch does, after refusing another optimizer's state (its dense moments are not
        the projected ones this optimizer keeps) and a state saved at another rank."""
        check_saved_groups(state_dict.get("param_groups", []), self.defaults,
                           "RandomProjectionAdam", "the moments of its projected gradients")
        check_saved_shapes(state_dict.get("param_groups", []), self.param_groups, ("rank",))
        super().load_state_dict(state_dict)

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        key = 0
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                key += 1
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise TypeError("RandomProjectionAdam does not support sparse gradients")
                shape = projected_shape(p.shape, group["rank"])
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    moment_shape = shape if shape is not None else p.shape
                    state["exp_avg"] = torch.zeros(moment_shape, dtype=torch.float32,
                                                   device=p.device)
                    state["exp_avg_sq"] = torch.zeros_like(state["exp_avg"])
                state["step"] += 1
                step = int(state["step"].item())
                lr, wd = float(group["lr"]), group["weight_decay"]
                if wd != 0:
                    p.mul_(1 - lr * wd)
                if shape is None:
                    direction = adam_direction(p.grad, state["exp_avg"], state["exp_avg_sq"],
                                               step, beta1, beta2, group["eps"])
                    p.add_(direction.to(p.dtype), alpha=-lr)
                    continue
                m, n = p.shape[0], p.numel() // p.shape[0]
                seed = sk.seed_for(group["seed"], key - 1, 0, 0)
                grad = p.grad.reshape(m, n).float()
                if m >= n:
                    P = sk.orthonormal_projection(m, group["rank"], seed, p.device)
                    low = adam_direction(P.T @ grad, state["exp_avg"], state["exp_avg_sq"],
                                         step, beta1, beta2, group["eps"])
                    update = P @ low
                else:
                    Q = sk.orthonormal_projection(n, group["rank"], seed, p.device)
                    low = adam_direction(grad @ Q, state["exp_avg"], state["exp_avg_sq"],
                                         step, beta1, beta2, group["eps"])
                    update = low @ Q.T
                p.add_(update.view_as(p).to(p.dtype), alpha=-lr)
        return loss
