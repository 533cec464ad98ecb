"""LoGRA: Adam moments of two-sided gradient sketches, with predicted-KL step control.

For each matrix parameter W ∈ R^{m×n} with gradient G (a tensor of more dims is viewed as
shape[0] × rest) and seeded orthonormal projections P ∈ R^{m×k}, Q ∈ R^{n×r} (k = r + oversample):

    L_t = Pᵀ G_t                      R_t = G_t Q                              sketches
    m_L ← β₁ m_L + (1−β₁) L_t         v_L ← β₂ v_L + (1−β₂) L_t²               k×n each
    m_R ← β₁ m_R + (1−β₁) R_t         v_R ← β₂ v_R + (1−β₂) R_t²               m×r each

Hats denote AdamW's bias corrections (m̂ = m / (1−β₁ᵗ), v̂ = v / (1−β₂ᵗ)). The direction U is
rebuilt from the sketches by one of two rules (`reconstruction=`):

    "gain"     U = diag(√s) G diag(√c),  c_j = ‖u_L[:,j]‖/‖L[:,j]‖,  s_i = ‖u_R[i,:]‖/‖R[i,:]‖,
               with u = m̂/(√v̂+ε) in sketch space (two-sided APOLLO-style channel scaling)
    "nystrom"  U = M̂ / (√V̂ + ε),  M̂ = m̂_R (Pᵀ m̂_R)^† m̂_L  (truncated pseudo-inverse, `rtol`),
               V̂_ij = ρ_i κ_j / Σρ from the sketches' second moments (see `sketch.energies`)

and the tentative update is Δ = −lr·(U + λ·W) (decoupled weight decay λ). Parameters that are
1-D, in a group with `sketch=False`, or too small for a sketch to save memory get AdamW's exact
update instead. Before any weight changes, the whole step is scaled once:

    KL̂ = ½ Δᵀ F Δ,    γ = min(1, √(δ / KL̂)),    W ← W + γ Δ

(TRPO's step rescaling, and ACKTR's KL clipping of Wu et al. 2017, applied to an Adam-like
direction). F is either the diagonal empirical Fisher V̂ (`kl_estimator="diag"`, free, but for a
batch-mean RL gradient not a KL in absolute units: scale it with `kl_calibration`) or the exact
Fisher of a categorical policy through one forward-mode JVP (`kl_estimator="jvp"`, needs the batch:
`attach(model)` or `set_kl_batch(...)`).

Persistent state per sketched matrix: 2·r·(m+n) fp32 numbers (+2·oversample·n). P and Q are
regenerated from (seed, parameter key, refresh epoch) every step and never stored, unless
`cache_projections=True`. The gradient buffer is free once sketched, so it holds Δ between the
two passes: after `step()`, `p.grad` contains the unscaled update Δ, not the gradient.

Why "gain" is the default: it is a positive row/column rescaling of the current gradient, hence
always a descent direction, and keeps full rank every step. The literal Nyström reading is an
oblique projection that is exact only while the momentum has rank ≤ r; above that it can point
uphill. The acceptance tests measure both on a least-squares problem, a classifier and a tiny
causal LM (tests/test_optim_training.py), and the sketch-error notebook shows the gap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.optimizer import ParamsT

from logra.optim import sketch as sk
from logra.optim.kl import BatchRecorder, predicted_kl_jvp

RECONSTRUCTIONS = ("gain", "nystrom")
KL_ESTIMATORS = ("diag", "jvp")


def sketch_shapes(
    shape: tuple[int, ...] | torch.Size, rank: int, oversample: int = 0
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Shapes ((k, n), (m, r)) of the left and right sketches of a parameter, or None.

    None means the parameter gets dense AdamW: it is 1-D (or 0-D), or sketching would not store
    fewer numbers than the parameter has (k·n + m·r ≥ m·n, which includes rank ≥ min(m, n)).
    The memory accountant uses this same rule, so counted and allocated state agree.
    """
    if len(shape) < 2:
        return None
    m, n = shape[0], math.prod(shape[1:])
    k = rank + oversample
    if k > m or rank > n or k * n + m * rank >= m * n:
        return None
    return (k, n), (m, rank)


@dataclass
class _Slot:
    """One parameter with a gradient in this step."""

    group: dict[str, Any]
    param: Tensor
    key: int  # position in the optimizer's parameter order: the stable key of its projections
    name: str


class LoGRA(Optimizer):
    """Drop-in replacement for `torch.optim.AdamW` keeping Adam moments of gradient sketches.

    Args:
        params: parameters or param groups, as for AdamW (named parameters work too). A group may
            set its own `rank`, `oversample`, `reconstruction`, `rtol`, or `sketch=False`
            (dense AdamW for that group, e.g. for embeddings that want more than low rank).
        lr, betas, eps, weight_decay: as for AdamW (weight decay decoupled).
        rank: sketch rank r of every matrix in the group.
        predicted_kl_threshold: δ of the step control; None turns the control off.
        seed: seed of the projections; the same on every rank.
        cache_projections: keep P and Q between steps (memory for speed) instead of regenerating.
        reconstruction: "gain" (default) or "nystrom"; see the module docstring.
        kl_estimator: "diag" or "jvp".
        kl_calibration: multiplies the diagonal estimate (measured KL / predicted, see the
            KL-trajectory notebook); ignored by "jvp", which is exact to second order.
        rtol: relative cutoff of the Nyström core's pseudo-inverse.
        oversample: extra columns of P (generalized Nyström oversampling of the left sketch).
        refresh_every: draw new projections every this many steps (moments are re-sketched into
            the new ones); None keeps them fixed.
        maximize: ascend instead of descend, as in AdamW.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float | Tensor = 1e-6,
        rank: int = 16,
        predicted_kl_threshold: float | None = 0.02,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        *,
        seed: int = 0,
        cache_projections: bool = False,
        reconstruction: str = "gain",
        kl_estimator: str = "diag",
        kl_calibration: float = 1.0,
        rtol: float = 0.05,
        oversample: int = 0,
        refresh_every: int | None = None,
        sketch: bool = True,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        for flag, value in (("amsgrad", amsgrad), ("capturable", capturable),
                            ("differentiable", differentiable), ("fused", fused)):
            if value:
                raise ValueError(f"LoGRA does not support {flag}=True")
        if predicted_kl_threshold is not None and not predicted_kl_threshold > 0:
            raise ValueError(
                f"predicted_kl_threshold must be > 0 or None, got {predicted_kl_threshold}"
            )
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
        if not kl_calibration > 0:
            raise ValueError(f"kl_calibration must be > 0, got {kl_calibration}")
        if refresh_every is not None and (not isinstance(refresh_every, int) or refresh_every < 1):
            raise ValueError(f"refresh_every must be a positive int or None, got {refresh_every}")
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        defaults = dict(
            lr=lr, rank=rank, betas=betas, eps=eps, weight_decay=weight_decay,
            reconstruction=reconstruction, rtol=rtol, oversample=oversample, sketch=sketch,
            maximize=maximize, seed=seed, foreach=foreach,
        )
        self.predicted_kl_threshold = predicted_kl_threshold
        self.kl_estimator = kl_estimator
        self.kl_calibration = float(kl_calibration)
        self.cache_projections = cache_projections
        self.refresh_every = refresh_every
        self.skipped_steps = 0
        self.last_step: dict[str, Any] = {}
        self._projection_cache: dict[int, tuple[int, Tensor, Tensor]] = {}
        self._recorder: BatchRecorder | None = None
        self._kl_model: nn.Module | None = None
        self._kl_batch: tuple[tuple, dict, Tensor | None] | None = None
        super().__init__(params, defaults)

    # ------------------------------------------------------------------ configuration

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Validate a group's hyperparameters and parameters before it joins the optimizer."""
        merged = {**self.defaults, **param_group}
        _validate_group(merged)
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)  # may be a generator
        param_group = {**param_group, "params": params}
        for i, p in enumerate(params):
            p = p[1] if isinstance(p, tuple) else p
            if isinstance(p, Tensor) and p.is_complex():
                raise TypeError(f"LoGRA does not support complex parameters (parameter {i})")
        super().add_param_group(param_group)

    def attach(
        self,
        model: nn.Module,
        token_mask_fn: Callable[[tuple, dict], Tensor | None] | None = None,
    ) -> None:
        """Let `kl_estimator="jvp"` replay the last batch `model` saw (a forward pre-hook)."""
        self.detach()
        self._kl_model = model
        self._recorder = BatchRecorder(model, token_mask_fn)

    def detach(self) -> None:
        """Remove the hook installed by `attach`."""
        if self._recorder is not None:
            self._recorder.remove()
        self._recorder = None

    def set_kl_batch(
        self, model: nn.Module, *args: Any, token_mask: Tensor | None = None, **kwargs: Any
    ) -> None:
        """Give the JVP estimator the batch to predict the KL on: `model(*args, **kwargs)`."""
        self._kl_model = model
        self._kl_batch = (args, kwargs, token_mask)

    # ------------------------------------------------------------------ the step

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One LoGRA step: sketch, update moments, reconstruct Δ, bound KL̂, apply γΔ."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        slots = self._slots_with_grad()
        control = self.predicted_kl_threshold is not None
        if control and self.kl_estimator == "jvp":
            kl_inputs = self._kl_inputs(slots)  # fails before any state changes
        if not all(bool(torch.isfinite(s.param.grad).all()) for s in slots):
            self.skipped_steps += 1
            self.last_step = dict(predicted_kl=math.nan, applied_kl=math.nan, gamma=0.0,
                                  clipped=False, skipped=True, skipped_steps=self.skipped_steps)
            return loss

        want_diag = control and self.kl_estimator == "diag"
        diag_kl = torch.zeros((), dtype=torch.float32)
        for slot in slots:
            if sk_shapes := self._sketch_shapes(slot):
                fisher_term = self._sketched_delta(slot, sk_shapes, want_diag)
            else:
                fisher_term = self._dense_delta(slot, want_diag)
            if fisher_term is not None:
                diag_kl = diag_kl + fisher_term.cpu()

        if not control:
            predicted = math.nan
        elif self.kl_estimator == "diag":
            predicted = 0.5 * self.kl_calibration * float(diag_kl)
        else:
            predicted = float(self._jvp_kl(slots, *kl_inputs))
        gamma = 1.0
        if control and predicted > self.predicted_kl_threshold:
            gamma = math.sqrt(self.predicted_kl_threshold / predicted)
        skipped = not math.isfinite(gamma) or (control and not math.isfinite(predicted))
        if skipped:  # Δ overflowed although the gradients were finite: keep the weights
            self.skipped_steps += 1
        else:
            for slot in slots:
                slot.param.add_(slot.param.grad.view_as(slot.param), alpha=gamma)
        self.last_step = dict(
            predicted_kl=predicted,
            applied_kl=gamma**2 * predicted if control else math.nan,
            gamma=0.0 if skipped else gamma,
            clipped=gamma < 1.0,
            skipped=skipped,
            skipped_steps=self.skipped_steps,
        )
        return loss

    def _slots_with_grad(self) -> list[_Slot]:
        """Parameters with gradients, checked (sparse, complex) before any state changes."""
        slots, key = [], 0
        for group_index, group in enumerate(self.param_groups):
            names = group.get("param_names")
            for i, p in enumerate(group["params"]):
                name = names[i] if names else f"group {group_index} parameter {i}"
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise TypeError(f"LoGRA does not support sparse gradients ({name})")
                    if p.grad.is_complex():
                        raise TypeError(f"LoGRA does not support complex gradients ({name})")
                    slots.append(_Slot(group, p, key, name))
                key += 1
        return slots

    def _sketch_shapes(self, slot: _Slot):
        group = slot.group
        if not group["sketch"]:
            return None
        return sketch_shapes(slot.param.shape, group["rank"], group["oversample"])

    def _projections(
        self, slot: _Slot, m: int, n: int, epoch: int
    ) -> tuple[Tensor, Tensor]:
        """P (m×k) and Q (n×r) of a parameter at a refresh epoch, regenerated or cached."""
        cached = self._projection_cache.get(slot.key)
        if cached is not None and cached[0] == epoch:
            return cached[1], cached[2]
        P, Q = _draw_projections(slot, m, n, epoch)
        if self.cache_projections:
            self._projection_cache[slot.key] = (epoch, P, Q)
        return P, Q

    def _sketched_delta(self, slot: _Slot, shapes, want_diag: bool) -> Tensor | None:
        """Write Δ of a sketched matrix into its gradient buffer; return its Σ V̂Δ² if wanted."""
        group, p = slot.group, slot.param
        (k, n), (m, r) = shapes
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["epoch"] = 0
            for name, shape in (("L", (k, n)), ("R", (m, r))):
                state[f"exp_avg_{name}"] = torch.zeros(shape, dtype=torch.float32, device=p.device)
                state[f"exp_avg_sq_{name}"] = torch.zeros_like(state[f"exp_avg_{name}"])
        state["step"] += 1
        step = int(state["step"].item())
        epoch = 0 if self.refresh_every is None else (step - 1) // self.refresh_every
        P, Q = self._projections(slot, m, n, epoch)
        if epoch != state["epoch"]:
            self._resketch_moments(slot, state, P, Q, m, n)

        if not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        grad = p.grad.view(m, n)
        if group["maximize"]:
            grad.neg_()
        L, R = sk.sketch(grad, P, Q)
        m_L, v_L = state["exp_avg_L"], state["exp_avg_sq_L"]
        m_R, v_R = state["exp_avg_R"], state["exp_avg_sq_R"]
        m_L.lerp_(L, 1 - beta1)
        m_R.lerp_(R, 1 - beta1)
        v_L.mul_(beta2).addcmul_(L, L, value=1 - beta2)
        v_R.mul_(beta2).addcmul_(R, R, value=1 - beta2)

        bias1, bias2 = 1 - beta1**step, 1 - beta2**step
        rho, kappa = sk.energies(v_R / bias2, v_L / bias2)
        if group["reconstruction"] == "gain":
            u_L = (m_L / bias1).div_((v_L / bias2).sqrt_().add_(group["eps"]))
            u_R = (m_R / bias1).div_((v_R / bias2).sqrt_().add_(group["eps"]))
            sk.gain_scale_(grad, L, R, u_L, u_R)
        else:
            sk.nystrom_into(grad, m_R / bias1, m_L / bias1, P, group["rtol"])
            sk.normalize_by_rank1_(grad, rho, kappa, group["eps"])
        _finish_delta(grad, p.view(m, n), group)
        if not want_diag:
            return None
        return sk.weighted_sq_norm(grad, rho / rho.sum().clamp_min(1e-30), kappa)

    def _resketch_moments(self, slot: _Slot, state: dict, P: Tensor, Q: Tensor, m: int, n: int):
        """Carry the moments from the previous epoch's projections into P, Q."""
        P_old, _ = _draw_projections(slot, m, n, state["epoch"])
        state["exp_avg_L"], state["exp_avg_R"] = sk.transport_first_moment(
            state["exp_avg_R"], state["exp_avg_L"], P_old, P, Q, slot.group["rtol"]
        )
        state["exp_avg_sq_L"], state["exp_avg_sq_R"] = sk.transport_second_moment(
            state["exp_avg_sq_R"], state["exp_avg_sq_L"], P, Q
        )
        state["epoch"] = (int(state["step"].item()) - 1) // self.refresh_every

    def _dense_delta(self, slot: _Slot, want_diag: bool) -> Tensor | None:
        """AdamW's update of a 1-D, small or unsketched parameter, written into its gradient."""
        group, p = slot.group, slot.param
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        state["step"] += 1
        step = int(state["step"].item())
        grad = p.grad
        if group["maximize"]:
            grad.neg_()
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        grad.copy_(adam_direction(grad, exp_avg, exp_avg_sq, step, beta1, beta2, group["eps"]))
        _finish_delta(grad, p, group)
        if not want_diag:
            return None
        bias2 = 1 - beta2**step
        return torch.dot(grad.float().square().flatten(), exp_avg_sq.flatten()) / bias2

    def _kl_inputs(self, slots: list[_Slot]) -> tuple[nn.Module, tuple, dict, Tensor | None]:
        """The model and batch the JVP estimator predicts on: explicit first, else recorded."""
        if self._kl_batch is not None:
            inputs = (self._kl_model, *self._kl_batch)
        elif self._recorder is not None and self._recorder.has_batch:
            recorder = self._recorder
            inputs = (self._kl_model, recorder.args, recorder.kwargs, recorder.token_mask())
        else:
            raise RuntimeError(
                "kl_estimator='jvp' needs a batch: call optimizer.attach(model) and run a "
                "forward pass, or optimizer.set_kl_batch(model, ...) before step()"
            )
        in_model = {id(p) for p in inputs[0].parameters()}
        missing = [s.name for s in slots if id(s.param) not in in_model]
        if missing:
            raise RuntimeError(f"parameters the KL model does not have: {missing[:5]}")
        return inputs

    def _jvp_kl(
        self, slots: list[_Slot], model: nn.Module, args: tuple, kwargs: dict,
        token_mask: Tensor | None,
    ) -> Tensor:
        """½ΔᵀFΔ by one forward-mode JVP of `model`'s logits on the batch."""
        names = {id(p): name for name, p in model.named_parameters()}
        delta = {names[id(s.param)]: s.param.grad.view_as(s.param) for s in slots}
        return predicted_kl_jvp(model, delta, args, kwargs, token_mask)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """AdamW's layout plus the skipped-step count; tensors and ints only, never P or Q."""
        state = super().state_dict()
        state["skipped_steps"] = self.skipped_steps
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load as AdamW does, but keep the moments fp32 (torch casts them to the param dtype).

        `Optimizer.load_state_dict` casts every floating state tensor to its parameter's dtype,
        which would round the fp32 moments of bf16 parameters to bf16; the saved fp32 tensors
        are put back afterwards, moved to the parameter's device.
        """
        state_dict = dict(state_dict)
        self.skipped_steps = int(state_dict.pop("skipped_steps", 0))
        self._projection_cache.clear()
        super().load_state_dict(state_dict)
        saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        current = chain.from_iterable(g["params"] for g in self.param_groups)
        param_of = dict(zip(saved_ids, current, strict=True))
        for saved_id, saved in state_dict["state"].items():
            p = param_of[saved_id]
            for key, value in saved.items():
                if isinstance(value, Tensor) and key != "step":
                    self.state[p][key] = value.to(p.device, torch.float32, copy=True)


def adam_direction(
    grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, beta1: float, beta2: float,
    eps: float,
) -> Tensor:
    """Update Adam's fp32 moments in place with `grad`; return m̂ / (√v̂ + ε) (a new tensor).

    The operations and their order follow `torch.optim.AdamW` (single-tensor path), so a dense
    LoGRA group reproduces AdamW to round-off.
    """
    g = grad.float()
    exp_avg.lerp_(g, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    denom = (exp_avg_sq.sqrt() / math.sqrt(bias2)).add_(eps)
    return exp_avg.div(denom).mul_(1 / bias1)


def _draw_projections(slot: _Slot, m: int, n: int, epoch: int) -> tuple[Tensor, Tensor]:
    group = slot.group
    seed, rank, k = group["seed"], group["rank"], group["rank"] + group["oversample"]
    P = sk.orthonormal_projection(m, k, sk.seed_for(seed, slot.key, epoch, 0), slot.param.device)
    Q = sk.orthonormal_projection(n, rank, sk.seed_for(seed, slot.key, epoch, 1), slot.param.device)
    return P, Q


def _finish_delta(delta: Tensor, param: Tensor, group: dict[str, Any]) -> None:
    """Δ ← −lr·(U + λ·W): the learning rate and decoupled weight decay, in place."""
    lr = float(group["lr"])
    delta.mul_(-lr)
    if group["weight_decay"] != 0:
        delta.add_(param, alpha=-lr * group["weight_decay"])


def _validate_group(group: dict[str, Any]) -> None:
    """Clear errors naming the hyperparameter, raised before a group is added."""
    lr = group["lr"]
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("lr as a Tensor must have one element")
    if not float(lr) >= 0:
        raise ValueError(f"Invalid learning rate (lr): {float(lr)}")
    betas = group["betas"]
    if len(betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in betas):
        raise ValueError(f"Invalid betas: {betas} (each must lie in [0, 1))")
    if not group["eps"] > 0:
        raise ValueError(f"Invalid eps: {group['eps']} (must be > 0)")
    if not group["weight_decay"] >= 0:
        raise ValueError(f"Invalid weight_decay: {group['weight_decay']}")
    rank = group["rank"]
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"Invalid rank: {rank!r} (must be an int ≥ 1)")
    oversample = group["oversample"]
    if isinstance(oversample, bool) or not isinstance(oversample, int) or oversample < 0:
        raise ValueError(f"Invalid oversample: {oversample!r} (must be an int ≥ 0)")
    if group["reconstruction"] not in RECONSTRUCTIONS:
        raise ValueError(
            f"Invalid reconstruction: {group['reconstruction']!r} (one of {RECONSTRUCTIONS})"
        )
    if not 0 <= group["rtol"] < 1:
        raise ValueError(f"Invalid rtol: {group['rtol']} (must lie in [0, 1))")
    if not isinstance(group["sketch"], bool):
        raise TypeError(f"sketch must be a bool, got {group['sketch']!r}")
