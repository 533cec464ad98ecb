"""LoGRA's predicted-KL step control: how far, in nats, a step may move the policy.

Before any weight changes, LoGRA scales its whole tentative step Δ (every parameter) once:

    KL̂ = ½ Δᵀ F Δ,    γ = min(1, √(δ / KL̂)),    W ← W + γ Δ

(TRPO's step rescaling, and ACKTR's KL clipping of Wu et al. 2017, applied to an Adam-like
direction); δ is in nats per token per step. KL̂ is predicted in one of three ways
(`kl_estimator=`):

    "calibrated"  (default) the exact quadratic ½ ΔᵀFΔ of a categorical policy by one
                  forward-mode JVP of the logits on every `kl_probe_stride`-th sequence of the
                  step's batch (a rotating subsample: the cost is 1/stride of a full probe), every
                  `kl_probe_every` steps; on steps without a probe, the diagonal estimate
                  d = ½ Σ V̂ Δ² times a factor refitted from the probes (`logra.optim.calibration`)
    "jvp"         the exact quadratic on the whole batch, every step
    "diag"        `kl_calibration` · ½ Σ V̂ Δ², a constant the user supplies

(V̂ is each rule's diagonal Fisher weight, `logra.optim.updates`.) The diagonal estimate alone is
no KL: for a batch-mean RL gradient V̂ is not the Fisher (on the GRPO proxy d was millions of
times below the KL a step caused), and even refitted to nats it follows the step-to-step KL too
loosely to be the default (KL-trajectory notebook). A probe needs the batch: `attach(model)` (a
forward pre-hook remembers the last inputs) or `set_kl_batch(...)`. Where no batch can be
replayed (FSDP2's sharded parameters, a trainer whose forward hands back no logits), a trainer
that measures each step's KL can report it with `observe_kl(kl)`, which calibrates the diagonal
estimate instead. Without either the estimate has no unit: the step warns once, and the control
does not act.

With a drift budget B (`kl_drift_budget`) and K the largest of the last `kl_drift_window` KLs to
the reference the trainer reported (`observe_reference_kl`), a step's δ shrinks to

    δ_t = min(δ, (√B − √K)²)        (0 once K ≥ B)

In the Fisher metric a step of KL k moves the policy by about √(2k) and the reference sits √(2K)
away, so after any step within this budget the KL to the reference is at most
½(√(2K) + √(2k))² ≤ B, to second order.

Under DDP every rank predicts on its own batch and the JVP's token mean runs over the tokens of
every rank of `process_group` (one all-reduce), so γ and the calibration are the same on every
rank; the diagonal estimate reads only all-reduced gradients, and sums its row shards' terms
under FSDP2.

`KLControl` keeps what the control carries from step to step (the calibration, the probe
schedule, the KLs to the reference, the batch to probe on). Its settings, the param groups'
`KL_CONTROL_KEYS`, are passed to each method that reads them (`common_kl_control`): the groups
are the optimizer's, and a scheduler may change them between steps.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import Tensor, nn

from logra.optim.calibration import KLCalibration
from logra.optim.distributed import all_reduce_sum
from logra.optim.kl import (
    BatchRecorder,
    batch_rows,
    eager_module,
    fisher_quadratic,
    logits_jvp,
    predicted_kl_jvp,
    token_count,
)

# Frames between the uncalibrated warning and the code that called `LoGRA.step()`:
# `_warn_uncalibrated`, `KLControl.predict`, `LoGRA.step`, torch's no_grad and profile wrappers.
_CALLER_OF_STEP = 6
# A measured KL between two close policies can come out this far below 0 by fp32 round-off.
ROUND_OFF_KL = 1e-6
# Why an attached model's hook may have recorded nothing, and what to do.
_UNSEEN_BATCH = (
    "optimizer.attach(model) is in place, but its hook has recorded no forward pass of that "
    "module. If the training loop calls torch.compile(model), attach the compiled module "
    "(optimizer.attach(compiled)) or attach before its first call: dynamo does not run a hook "
    "added to a module it has already compiled. Or give the batch with "
    "optimizer.set_kl_batch(model, ...)."
)


class FisherTerm(Protocol):
    """An update rule's part of the diagonal estimate (`logra.optim.updates`)."""

    def predicted_fisher(self) -> Tensor:
        """Σ_ij F_ij Δ_ij² over its parameter(s), a device scalar."""


@runtime_checkable
class KLControlled(Protocol):
    """What a trainer tells an optimizer with the predicted-KL step control (LoGRA, and dense
    AdamW + control), without knowing its class: the data-parallel group its probe averages
    over, the batch to probe on when it wants one, and the KL to the reference for the drift
    budget."""

    process_group: dist.ProcessGroup | None
    kl_drift_budget: float | None

    def wants_kl_batch(self) -> bool:
        """Whether the coming step's control probes a batch (`set_kl_batch` before `step`)."""

    def set_kl_batch(self, model: nn.Module, *args: Any, token_mask: Tensor | None = None,
                     **kwargs: Any) -> None:
        """The batch the probe replays: `model(*args, **kwargs)`."""

    def observe_reference_kl(self, kl: float) -> None:
        """KL(π_θ ‖ π_ref) per token before the coming step (the drift budget's K)."""


class KLControl:
    """What LoGRA's step control keeps between steps, and its probe of the KL.

    `fit` calibrates the diagonal estimate to nats; `steps` counts the steps taken (with the
    control off, the skipped ones too), which schedules the probes and rotates their subsample;
    `reference_kls` are the last KLs to the reference the trainer reported. Only these three are
    saved with the optimizer (`state_dict`); the batch to probe on, and `process_group`, are the
    trainer's to set again.
    """

    def __init__(self, calibration_window: int, process_group: dist.ProcessGroup | None) -> None:
        self.fit = KLCalibration(calibration_window)  # validates the window
        self.process_group = process_group
        self.steps = 0
        self.reference_kls: list[float] = []
        self._warned_uncalibrated = False
        self._recorder: BatchRecorder | None = None
        self._model: nn.Module | None = None
        self._batch: tuple[tuple, dict, Tensor | None] | None = None

    # ------------------------------------------------------------------ the batch to probe on

    def attach(
        self,
        model: nn.Module,
        token_mask_fn: Callable[[tuple, dict], Tensor | None] | None,
        inputs_fn: Callable[[tuple, dict], tuple[tuple, dict]] | None,
    ) -> None:
        """Record `model`'s last batch with a gradient for the probe (`LoGRA.attach`). The hook
        goes on `model` itself: a `torch.compile` wrapper runs its hooks eagerly on every call,
        and the probe replays the batch on the eager module inside it (`eager_module`)."""
        self.detach()
        self._model = eager_module(model)
        self._recorder = BatchRecorder(model, token_mask_fn, inputs_fn)

    def detach(self) -> None:
        """Remove the hook installed by `attach`."""
        if self._recorder is not None:
            self._recorder.remove()
        self._recorder = None

    def set_batch(
        self, model: nn.Module, args: tuple, kwargs: dict[str, Any], token_mask: Tensor | None
    ) -> None:
        """Probe on `model(*args, **kwargs)` (its eager module if compiled), counting the tokens
        of `token_mask`."""
        self._model = eager_module(model)
        self._batch = (args, kwargs, token_mask)

    @property
    def has_batch(self) -> bool:
        """Whether a batch to probe on is at hand: one set, or one the hook recorded."""
        return self._batch is not None or (self._recorder is not None and self._recorder.has_batch)

    # ------------------------------------------------------------------ what the trainer reports

    def observe_reference_kl(self, kl: float, window: int) -> None:
        """Keep KL(π_θ ‖ π_ref) in nats per token among the last `window` reports."""
        kl = float(kl)
        if not kl >= 0:  # NaN or negative: a caller's bug, not a drift
            raise ValueError(f"observe_reference_kl needs a KL ≥ 0, got {kl}")
        self.reference_kls = [*self.reference_kls, kl][-window:]

    def observe_kl(self, last_step: Mapping[str, Any], kl: float) -> bool:
        """Fit the pair (γ²·d, kl) of the step `last_step` describes (`LoGRA.last_step`): its
        applied diagonal estimate and the KL the trainer measured. Whether the pair was used.

        A NaN, infinite or clearly negative KL (below −ROUND_OFF_KL) is a caller's bug, refused
        with a ValueError before it reaches the fit (it would switch the calibration off); a KL
        of 0 or a round-off negative is not used."""
        kl = float(kl)
        if not math.isfinite(kl) or kl < -ROUND_OFF_KL:
            raise ValueError(f"observe_kl needs the measured KL of the last step in nats per "
                             f"token (finite, >= 0), got {kl}")
        if (not last_step or not math.isfinite(last_step.get("diag_kl", math.nan))
                or last_step["skipped"]):
            return False  # diag_kl first: a control-off step's `skipped` is read off the device
        return self.fit.observe(last_step["gamma"] ** 2 * last_step["diag_kl"], float(kl))

    # ------------------------------------------------------------------ one step

    def threshold(self, settings: dict[str, Any]) -> float | None:
        """δ_t of the coming step in nats per token (module docstring), None: no control."""
        delta, budget = settings["predicted_kl_threshold"], settings["kl_drift_budget"]
        if budget is None or not self.reference_kls:
            return delta
        drift = max(self.reference_kls)
        room = (math.sqrt(budget) - math.sqrt(min(drift, budget))) ** 2
        return room if delta is None else min(delta, room)

    def probe_due(self, settings: dict[str, Any], mesh_group: dist.ProcessGroup | None) -> bool:
        """Whether this step predicts its KL by the exact JVP: every step for "jvp"; for
        "calibrated", when a batch is at hand (and no FSDP2 sharding: `mesh_group` is None), on
        the first step and every `kl_probe_every` steps after it (until calibrated, every step)."""
        if settings["kl_estimator"] == "jvp":
            if mesh_group is not None:
                raise NotImplementedError(
                    "kl_estimator='jvp' does not support FSDP2-sharded (DTensor) parameters; use "
                    "kl_estimator='calibrated' with observe_kl(...) under FSDP2"
                )
            return True
        if settings["kl_estimator"] != "calibrated" or mesh_group is not None:
            return False
        return self.has_batch and (not self.fit.calibrated
                                   or self.steps % settings["kl_probe_every"] == 0)

    def probe_inputs(
        self, settings: dict[str, Any], named: list[tuple[str, Tensor]]
    ) -> tuple[nn.Module, tuple, dict, Tensor | None]:
        """The model and batch (args, kwargs, token mask) the probe replays: the batch set with
        `set_batch` first, else the recorded one; for "calibrated", every `kl_probe_stride`-th
        sequence from an offset that rotates with `steps`. RuntimeError when there is no batch,
        or when the model lacks one of the `named` parameters the step updates."""
        if self._batch is not None:
            inputs = (self._model, *self._batch)
        elif self._recorder is not None and self._recorder.has_batch:
            recorder = self._recorder
            inputs = (self._model, *recorder.replay(), recorder.token_mask())
        elif self._recorder is not None:
            raise RuntimeError(f"kl_estimator={settings['kl_estimator']!r} needs a batch: "
                               + _UNSEEN_BATCH)
        else:
            raise RuntimeError(
                f"kl_estimator={settings['kl_estimator']!r} needs a batch: call "
                "optimizer.attach(model) and run a forward pass, or "
                "optimizer.set_kl_batch(model, ...) before step()"
            )
        in_model = {id(p) for p in inputs[0].parameters()}
        missing = [name for name, p in named if id(p) not in in_model]
        if missing:
            raise RuntimeError(f"parameters the KL model does not have: {missing[:5]}")
        if settings["kl_estimator"] == "calibrated":  # every kl_probe_stride-th sequence, rotating
            inputs = (inputs[0], *batch_rows(*inputs[1:], settings["kl_probe_stride"], self.steps))
        return inputs

    def jvp_kl(
        self, params: list[Tensor], model: nn.Module, args: tuple, kwargs: dict,
        token_mask: Tensor | None,
    ) -> Tensor:
        """½ΔᵀFΔ by one forward-mode JVP of `model`'s logits, Δ read from `params`' grad buffers.

        Each rank predicts on its own batch and the token mean runs over every rank's tokens of
        the data-parallel group: Σ_ranks (mean · tokens) / Σ_ranks tokens, one all-reduce, so γ
        (and the calibration) is the same on every rank. The group is `process_group`, or the
        default group when torch.distributed runs more than one rank.
        """
        names = {id(p): name for name, p in model.named_parameters()}
        delta = {names[id(p)]: p.grad for p in params}
        group = self.process_group
        if group is None and dist.is_available() and dist.is_initialized() \
                and dist.get_world_size() > 1:
            group = dist.group.WORLD
        if group is None:
            return predicted_kl_jvp(model, delta, args, kwargs, token_mask)
        logits, tangent = logits_jvp(model, delta, args, kwargs)
        count = token_count(logits, token_mask)
        terms = torch.stack([fisher_quadratic(logits, tangent, token_mask) * count, count])
        total, tokens = all_reduce_sum(terms, group)
        return total / tokens.clamp_min(1.0)

    def predict(
        self, settings: dict[str, Any], estimate: float, probed: float | None
    ) -> tuple[float, bool]:
        """KL̂ in nats of a step with finite gradients, and whether the step must be skipped.

        estimate: the diagonal estimate d (NaN for "jvp"); probed: the JVP's ½ΔᵀFΔ on a probed
        step, else None. A probe also refits "calibrated"; without one, "calibrated" scales d by
        the fit (NaN, with a warning once, before any observation). The step is skipped when d or
        the probe is not finite: Δ overflowed although the gradients were finite.
        """
        estimator = settings["kl_estimator"]
        if probed is not None:
            predicted = probed
            if estimator == "calibrated":
                self.fit.observe(estimate, predicted)
        elif estimator == "diag":
            predicted = settings["kl_calibration"] * estimate
        else:
            predicted = self.fit.scale * estimate  # NaN until the first observation
            if not self.fit.calibrated:
                self._warn_uncalibrated(settings)
        checked = ([predicted] if probed is not None else []) + (
            [estimate] if estimator != "jvp" else [])
        return predicted, not all(math.isfinite(x) for x in checked)

    def _warn_uncalibrated(self, settings: dict[str, Any]) -> None:
        if self._warned_uncalibrated:
            return
        self._warned_uncalibrated = True
        what_to_do = (_UNSEEN_BATCH if self._recorder is not None else
                      "Call optimizer.attach(model) (the JVP probe replays the model's last "
                      "batch), or optimizer.set_kl_batch(model, ...).")
        warnings.warn(
            f"LoGRA: predicted_kl_threshold={settings['predicted_kl_threshold']} asks for a step "
            "bound in nats, but there is no batch to probe the KL on and nothing to calibrate the "
            f"diagonal estimate from, so the control does not act. {what_to_do} Or report each "
            "step's measured KL with optimizer.observe_kl(kl).",
            UserWarning, stacklevel=_CALLER_OF_STEP,
        )

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The control's keys of the optimizer's checkpoint: the calibration's window of
        log-ratios (fp64), the probe schedule's step count, the recent KLs to the reference."""
        return {"kl_log_ratios": self.fit.state_dict(), "kl_steps": self.steps,
                "reference_kls": list(self.reference_kls)}

    def load_state_dict(self, state_dict: dict[str, Any], window: int) -> None:
        """Take (pop) the control's keys from an optimizer's checkpoint, keeping the last
        `window` KLs to the reference; a key a checkpoint lacks resets its part."""
        self.fit.load_state_dict(state_dict.pop("kl_log_ratios", torch.zeros(0)))
        self.steps = int(state_dict.pop("kl_steps", 0))
        self.reference_kls = [float(k) for k in state_dict.pop("reference_kls", [])][-window:]


def step_scale(predicted: float, threshold: float) -> float:
    """γ = min(1, √(δ / KL̂)) for a predicted KL̂ and a threshold δ (1 when KL̂ is NaN)."""
    return math.sqrt(threshold / predicted) if predicted > threshold else 1.0


def predicted_fisher(
    updates: list[FisherTerm], sharded: list[bool], group: dist.ProcessGroup | None
) -> Tensor:
    """Σ F Δ² over every parameter, a scalar on the device: the local sums of the updates of
    row-sharded parameters (`sharded`) are all-reduced over `group` (one scalar), replicated
    parameters counted once."""
    replicated: list[Tensor] = []
    shards: list[Tensor] = []
    for update, is_sharded in zip(updates, sharded, strict=True):
        (shards if is_sharded else replicated).append(update.predicted_fisher())
    if shards:
        replicated.append(all_reduce_sum(torch.stack(shards).sum(), group))
    return torch.stack(replicated).sum() if replicated else torch.zeros(())
