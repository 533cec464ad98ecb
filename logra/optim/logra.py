"""LoGRA: Adam moments of two-sided gradient sketches, with predicted-KL step control.

For each matrix parameter W ∈ R^{m×n} with gradient G (a tensor of more dims is viewed as
shape[0] × rest) and seeded orthonormal projections P ∈ R^{m×k}, Q ∈ R^{n×r} (k = r + oversample):

    L_t = Pᵀ G_t                      R_t = G_t Q                              sketches
    m_L ← β₁ m_L + (1−β₁) L_t         v_L ← β₂ v_L + (1−β₂) L_t²               k×n each
    m_R ← β₁ m_R + (1−β₁) R_t         v_R ← β₂ v_R + (1−β₂) R_t²               m×r each

Hats denote AdamW's bias corrections (m̂ = m / (1−β₁ᵗ), v̂ = v / (1−β₂ᵗ)). The direction U is
rebuilt from the sketches by a reconstruction rule (`reconstruction=`), one module each in
`logra.optim.rules`, where its math is written out (u = m̂/(√v̂+ε) in sketch space):

    "gain"     diag(√s) G diag(√c), s, c row/column ratios ‖u‖/‖sketch‖ (two-sided APOLLO)
    "nystrom"  M̂ / (√V̂ + ε), M̂ = m̂_R (Pᵀ m̂_R)^† m̂_L (generalized Nyström, truncated at `rtol`)
    "channel"  ζ diag(s) G or ζ G diag(c) along the larger side (APOLLO, Fira's limiter ζ ≤ 1)
    "blend"    (G + P (m̂_L − L)) diag(φ): G with its part in span(P) the momentum's (Flora/Fira)
    "subspace" P u_L + (G − P L) diag(ζφ): Adam inside span(P), the scaled residual outside (Fira)

and the tentative update is Δ = −lr·(U + λ·W) (decoupled weight decay λ). Parameters that are
1-D, in a group with `sketch=False`, or too small for a sketch to save memory get AdamW's exact
update instead (a matrix too small warns when its group is built, `add_param_group`); a state
saved at another rank is refused (`load_state_dict`).
Before any weight changes, the whole step is scaled once:

    KL̂ = ½ Δᵀ F Δ,    γ = min(1, √(δ / KL̂)),    W ← W + γ Δ

δ in nats per token per step, KL̂ predicted by an exact JVP probe of the batch or by a diagonal
estimate calibrated to nats (`kl_estimator=`): `logra.optim.control` gives the estimators, what a
probe needs (`attach`, `set_kl_batch`, `observe_kl`) and the drift budget.

Persistent state per sketched matrix: 2·r·(m+n) fp32 numbers (+2·oversample·n), laid out as
`logra.optim.moments` says. P and Q depend on (seed, shape, refresh epoch) only: the projection
bank (`logra.optim.projections`) draws them and keeps them between steps or not
(`cache_projections`, with its measured costs). Δ itself is never stored (`LoGRA.step`).

More than one device (docs/distributed.md): under DDP every rank takes the same step from the
all-reduced gradients (`logra.optim.control`: the JVP's prediction); `logra.optim.comm_hook`
all-reduces the sketches instead of the gradients of Nyström matrices; FSDP2's DTensor parameters
are stepped on their local rows, the few sums over rows all-reduced (`logra.optim.distributed`).

Why "gain" is the default: it is a positive row/column rescaling of the current gradient, hence
always a descent direction, and keeps full rank every step. The literal Nyström reading is an
oblique projection that is exact only while the momentum has rank ≤ r; above that it can point
uphill. The acceptance tests measure the rules on a least-squares problem, a classifier and a
tiny causal LM (tests/test_optim_training.py). On the training-quality benchmarks (notebook 10:
byte-level pretraining and the proxies' SFT, 5 seeds) "subspace" is 1.8 % below "gain" on text,
beyond the seed noise, and level on SFT; "blend" 2–6 % and "nystrom" 5 % above, "channel" 0.9 %
below on text (inside the noise). On the GRPO proxy the momentum rules drift further from the
reference at the same accuracy, so "gain" stays the default for RL under a KL budget, and
"subspace" is the better choice for pretraining. What closes the gap to APOLLO in pretraining is
its recipe around the rule: AdamW on the embeddings and head (a `sketch=False` group),
projections refreshed every few steps (`refresh_every`) and "channel"; with all three LoGRA's
state trains within about 1 % of APOLLO there (docs/results.md, "Training quality").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.optimizer import ParamsT

from logra.optim import moments, rules
from logra.optim.control import KLControl, predicted_fisher, step_scale
from logra.optim.distributed import mesh_group
from logra.optim.gate import StepGate, all_finite
from logra.optim.hyperparameters import (
    KL_CONTROL_KEYS,
    check_adamw,
    check_saved_groups,
    check_saved_shapes,
    check_sketch,
    common_kl_control,
)
from logra.optim.packing import Packings
from logra.optim.projections import ProjectionBank
from logra.optim.report import StepReport
from logra.optim.units import is_sketched, partition, sketch_shapes, slots_with_grad

# The report's settings for RL fine-tuning at 1.5B: `LoGRA(params, **REPORT_RL_SETTINGS)`. (The
# constructor's defaults are AdamW's, with the KL control off: what a drop-in loop expects.)
REPORT_RL_SETTINGS: Mapping[str, Any] = MappingProxyType(
    dict(lr=1e-6, rank=16, predicted_kl_threshold=0.02))


def _group_setting(key: str) -> property:
    """A read-only view of a KL-control key, the same in every param group (set it there)."""
    return property(lambda self: common_kl_control(self.param_groups)[key],
                    doc=f"`{key}` of the param groups (read-only: set group[{key!r}])")


def _component_attribute(component: str, name: str, doc: str) -> property:
    """An attribute of LoGRA that one of its components keeps, read and set through."""
    return property(lambda self: getattr(getattr(self, component), name),
                    lambda self, value: setattr(getattr(self, component), name, value), doc=doc)


def _warn_unsketched(group: dict[str, Any], params: list) -> None:
    """Warn, naming them, about the matrices of a group with `sketch=True` that the group's rank
    does not fit (`units.sketch_shapes`), so that they get dense AdamW moments."""
    if not group["sketch"]:
        return
    named = (item if isinstance(item, tuple) else (f"parameter {i}", item)
             for i, item in enumerate(params))
    dense = [f"{name} {tuple(p.shape)}" for name, p in named
             if p.dim() >= 2 and sketch_shapes(p.shape, group["rank"], group["oversample"]) is None]
    if dense:
        warnings.warn(
            f"LoGRA: rank={group['rank']} (oversample={group['oversample']}) does not fit "
            f"{len(dense)} matrices of this param group, which keep AdamW's dense moments "
            f"instead of sketches: {', '.join(dense[:5])}{', ...' if len(dense) > 5 else ''}. A "
            "rank-r sketch of an m×n matrix (n: the trailing dims) needs r + oversample ≤ m, "
            "r ≤ n and fewer numbers than the matrix, r·(m + n) < m·n. Lower the rank, or put "
            "these in a param group with sketch=False to keep them dense without this warning.",
            UserWarning, stacklevel=3)


class LoGRA(Optimizer):
    """Drop-in replacement for `torch.optim.AdamW` keeping Adam moments of gradient sketches.

    The positional arguments are AdamW's (params, lr, betas, eps, weight_decay, amsgrad), with
    AdamW's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01); every other
    argument is keyword-only. The KL control is off unless `predicted_kl_threshold` is given: a
    plain AdamW loop needs no batch for it. The report's RL settings (lr 1e-6, rank 16, δ = 0.02
    nats per token) are `LoGRA(params, **REPORT_RL_SETTINGS)`.

    Hyperparameters live in the param groups, as torch's optimizers keep them: `state_dict()`
    carries them and a scheduler (or user code: `group["predicted_kl_threshold"] = 0.01`) can
    change them between steps. That includes the KL control's `predicted_kl_threshold`,
    `kl_estimator`, `kl_calibration`, `kl_probe_every`, `kl_probe_stride`, `kl_drift_budget` and
    `kl_drift_window`. The control is global: one γ scales the whole step, from one prediction
    summed over every group, so these keys must be equal in every group; a group added with
    another value, or a step after groups came to disagree, raises a ValueError naming the key
    (change them in every group). The attributes of the same names read them (read-only).
    Loading a state saved before these keys were in the groups keeps the constructor's values.

    Args:
        params: parameters or param groups, as for AdamW (named parameters work too). A group may
            set its own `rank`, `oversample`, `reconstruction`, `rtol`, or `sketch=False`
            (dense AdamW for that group, e.g. for embeddings that want more than low rank).
        lr, betas, eps, weight_decay: as for AdamW (weight decay decoupled), but eps > 0.
        rank: sketch rank r of every matrix in the group.
        predicted_kl_threshold: δ of the step control, in nats per token per step: the largest
            predicted KL(π_before ‖ π_after) a step may cause; None (default) turns the control
            off.
        seed: seed of the projections; the same on every rank.
        cache_projections: True (default) keeps P and Q on the parameters' device between
            steps, until the next refresh epoch (m·k + n·r fp32 numbers per distinct shape; no
            per-step QR or host-to-device copy); False regenerates them every step and keeps
            nothing outside `optimizer.state` (the report's zero persistent memory, and what an
            offloading trainer needs; `logra.optim.projections`: the measured costs).
        reconstruction: "gain" (default), "nystrom", "blend", "subspace", "channel", or a rule
            of one's own registered in `logra.optim.rules`; see the module docstring.
        kl_estimator: how KL̂ is predicted, in nats per token (`logra.optim.control`):
            "calibrated" (default): an exact JVP probe on a subsample of the batch of
            `attach(model)` or `set_kl_batch`, and between probes (or without a batch, from KLs
            reported with `observe_kl`) the diagonal estimate refitted to nats; with neither,
            it warns once and does not clip. "jvp": the exact probe on the whole batch every
            step. "diag": the raw diagonal estimate times the constant `kl_calibration`.
        kl_calibration: multiplies the "diag" estimate (measured KL / predicted, see the
            KL-trajectory notebook); used by "diag" only.
        kl_probe_every: steps between the JVP probes of "calibrated" (1: every step).
        kl_probe_stride: the probe of "calibrated" replays every this many-th sequence of the
            batch (from an offset that rotates with the step), so it costs 1/stride of "jvp".
        kl_calibration_window: how many recent (estimate, KL) pairs the calibration's median
            runs over (`logra.optim.calibration`); fixed at construction, not a group key.
        kl_drift_budget: B, a bound on KL(π_θ ‖ π_ref) in nats per token (beyond the report):
            each step's budget shrinks to (√B − √K)² as the KL to the reference K, reported by
            the trainer with `observe_reference_kl`, approaches B (`step_threshold`); K is the
            largest of the last `kl_drift_window` reports (a KL measured on a batch is noisy, and
            one that reads low would let a step overshoot). None: the
            per-step δ alone, which bounds each step but not the drift.
        rtol: relative cutoff of the Nyström core's pseudo-inverse.
        oversample: extra columns of P (generalized Nyström oversampling of the left sketch).
        refresh_every: draw new projections every this many steps (moments are re-sketched into
            the new ones); None keeps them fixed.
        sketch: False keeps dense AdamW moments for the group (a group key, see params).
        maximize: ascend instead of descend, as in AdamW.
        foreach: True updates the group's same-shaped matrices stacked and its dense tensors
            with torch's `_foreach` kernels, False one parameter at a time; None (default)
            batches tensors of at most 2^18 elements (2^16 on the CPU; `logra.optim.units`).
            The "blend", "subspace" and "channel" rules have no stacked form.
        process_group: under DDP, the data-parallel group: the JVP probe's KL prediction, made
            on each rank's own batch, is token-averaged over it, so that γ, the calibration and
            the weights stay equal on every rank (default: the whole default group when
            torch.distributed runs; the diagonal estimate reads only all-reduced gradients).
            A KL given to `observe_kl` must be the same on every rank. FSDP2's DTensor
            parameters bring their own group (see `logra.optim.distributed`).
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
        predicted_kl_threshold: float | None = None,
        seed: int = 0,
        cache_projections: bool = True,
        reconstruction: str = "gain",
        kl_estimator: str = "calibrated",
        kl_calibration: float = 1.0,
        kl_probe_every: int = 1,
        kl_probe_stride: int = 4,
        kl_calibration_window: int = 8,
        kl_drift_budget: float | None = None,
        kl_drift_window: int = 5,
        rtol: float = 0.05,
        oversample: int = 0,
        refresh_every: int | None = None,
        sketch: bool = True,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        for flag, value in (("amsgrad", amsgrad), ("capturable", capturable),
                            ("differentiable", differentiable), ("fused", fused)):
            if value:
                raise ValueError(f"LoGRA does not support {flag}=True")
        self._control = KLControl(kl_calibration_window, process_group)  # validates the window
        self.projection_bank = ProjectionBank(cache_projections, refresh_every)  # and the period
        if not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {type(seed).__name__}")
        defaults = dict(
            lr=lr, rank=rank, betas=betas, eps=eps, weight_decay=weight_decay,
            reconstruction=reconstruction, rtol=rtol, oversample=oversample, sketch=sketch,
            maximize=maximize, seed=seed, foreach=foreach,
            predicted_kl_threshold=predicted_kl_threshold, kl_estimator=kl_estimator,
            kl_calibration=kl_calibration, kl_probe_every=kl_probe_every,
            kl_probe_stride=kl_probe_stride, kl_drift_budget=kl_drift_budget,
            kl_drift_window=kl_drift_window,
        )
        self._report = StepReport()
        # the moments of gain families and dense units packed in buffers that the state's
        # entries are views of, kept between steps (`logra.optim.packing`)
        self.packings = Packings()
        super().__init__(params, defaults)

    def __getstate__(self) -> dict[str, Any]:
        """Every attribute, for copy.deepcopy and pickle: torch's Optimizer keeps only defaults,
        state and param_groups, which would leave a copy without LoGRA's own settings."""
        return dict(self.__dict__)

    last_step = _component_attribute(
        "_report", "last", "The last step's KL̂, γ, skip and calibration, Python scalars when "
        "read; with the control off γ and the skip wait on the device until read, so that a step "
        "makes no host synchronization (`logra.optim.report.StepRecord`).")
    skipped_steps = _component_attribute(
        "_report", "skipped_steps", "Steps skipped for a NaN or ∞ in the gradients or in Δ "
        "(reading it may synchronize with the device).")
    kl_fit = _component_attribute(
        "_control", "fit", "The diagonal KL estimate's calibration to nats (`KLCalibration`).")
    process_group = _component_attribute(
        "_control", "process_group", "Under DDP, the group the JVP probe averages over.")
    cache_projections = _component_attribute(
        "projection_bank", "cache", "Whether the projections are kept between steps "
        "(`logra.optim.projections`).")
    refresh_every = _component_attribute(
        "projection_bank", "refresh_every", "Steps between new projections (None: fixed).")

    # ------------------------------------------------------------------ configuration

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Validate a group's hyperparameters and parameters before it joins the optimizer."""
        merged = {**self.defaults, **param_group}
        check_adamw(merged)
        check_sketch(merged)
        common_kl_control([*self.param_groups, merged])
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)  # may be a generator
        param_group = {**param_group, "params": params}
        for i, p in enumerate(params):
            p = p[1] if isinstance(p, tuple) else p
            if isinstance(p, Tensor) and p.is_complex():
                raise TypeError(f"LoGRA does not support complex parameters (parameter {i})")
        _warn_unsketched(merged, params)
        super().add_param_group(param_group)

    predicted_kl_threshold = _group_setting("predicted_kl_threshold")
    kl_estimator = _group_setting("kl_estimator")
    kl_calibration = _group_setting("kl_calibration")
    kl_probe_every = _group_setting("kl_probe_every")
    kl_probe_stride = _group_setting("kl_probe_stride")
    kl_drift_budget = _group_setting("kl_drift_budget")
    kl_drift_window = _group_setting("kl_drift_window")

    def attach(
        self,
        model: nn.Module,
        token_mask_fn: Callable[[tuple, dict], Tensor | None] | None = None,
        inputs_fn: Callable[[tuple, dict], tuple[tuple, dict]] | None = None,
    ) -> None:
        """Let the JVP probe replay the last batch `model` saw in a gradient pass (a forward
        pre-hook; `token_mask_fn` and `inputs_fn` as for `logra.optim.kl.BatchRecorder`)."""
        self._control.attach(model, token_mask_fn, inputs_fn)

    def detach(self) -> None:
        """Remove the hook installed by `attach`."""
        self._control.detach()

    def set_kl_batch(
        self, model: nn.Module, *args: Any, token_mask: Tensor | None = None, **kwargs: Any
    ) -> None:
        """Give the JVP estimator the batch to predict the KL on: `model(*args, **kwargs)`."""
        self._control.set_batch(model, args, kwargs, token_mask)

    def observe_reference_kl(self, kl: float) -> None:
        """Report the current KL(π_θ ‖ π_ref) in nats per token, as the trainer measured it
        before the coming step, for the drift budget (`kl_drift_budget`)."""
        self._control.observe_reference_kl(kl, self.kl_drift_window)

    def step_threshold(self) -> float | None:
        """The KL budget of the coming step, in nats per token (None: no control).

        δ = `predicted_kl_threshold`; with a `kl_drift_budget` B and K the largest of the last
        `kl_drift_window` KLs to the reference reported by `observe_reference_kl`, the step
        gets at most (√B − √K)² (0 once K ≥ B), which keeps the KL to the reference ≤ B after
        the step, to second order (`logra.optim.control`).
        """
        return self._control.threshold(common_kl_control(self.param_groups))

    def wants_kl_batch(self) -> bool:
        """Whether the coming step probes a batch: a JVP estimator ("jvp", "calibrated") with a
        budget to keep (δ, or a drift budget alone). A trainer gives it with `set_kl_batch`
        (`logra.optim.KLControlled`)."""
        return self.kl_estimator in ("jvp", "calibrated") and self.step_threshold() is not None

    def observe_kl(self, kl: float) -> bool:
        """Report the KL in nats per token that the last step caused, as a trainer measured it
        (e.g. KL(π_before ‖ π_after) on the step's batch), to calibrate the diagonal estimate.

        The pair (γ²·d, kl) of the step's applied diagonal estimate and the measured KL joins the
        running fit of `kl_fit`, which `kl_estimator="calibrated"` scales its estimate by; this
        needs no model (`attach`) and no probe. Returns whether the pair was used (it is not
        after a skipped step, with the control off, or for a non-positive KL).
        """
        return self._control.observe_kl(self._report.last, kl)

    # ------------------------------------------------------------------ the step

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One LoGRA step: sketch, update moments, predict KL̂ of Δ, apply γΔ.

        Three passes over each sketched matrix: one reads G for both sketches, one evaluates
        Σ F Δ² (skipped without control), one writes W + γΔ; Δ is recomputed a block of rows at
        a time rather than stored (`logra.optim.updates`), so the step's peak memory is
        parameters + gradients + state + cache-sized blocks. On a step the JVP probes (every
        step of the default estimator when it has a batch), the JVP needs Δ whole, so it is
        written into the gradient buffer (free once sketched) and applied from there: after
        such a step `p.grad` holds the unscaled Δ, not the gradient. Such a step also copies
        the state of the parameters it updates before changing it (their state's size again,
        freed when the step ends): if the probe raises, the step counters and moments are put
        back as they were and the error propagates, the weights untouched (the gradients then
        hold Δ).

        Host synchronizations: none with the control off (the finiteness flag gates the moment
        updates and masks Δ on the device, `logra.optim.gate`; `skipped_steps` and `last_step`'s
        "gamma", "skipped", "skipped_steps" then wait on the device until the caller reads
        them), and one with it on: the flag and the prediction read together. (The "subspace"
        and "channel" rules' norm limiter reads one more scalar per matrix.) With the control
        off a skipped step still advances the host-side step counters, which the flag never
        reaches.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        settings = common_kl_control(self.param_groups)  # checked before any change
        slots = slots_with_grad(self.param_groups)
        mesh = mesh_group([s.shard for s in slots])
        threshold = self._control.threshold(settings)
        probe = threshold is not None and self._control.probe_due(settings, mesh)
        kl_inputs = (self._control.probe_inputs(settings, [(s.name, s.param) for s in slots])
                     if probe else None)  # fails before any state changes

        # a probe can fail (an op without a forward derivative, memory): the states it would
        # leave half-stepped are copied first, and put back if it does
        saved = moments.snapshot(self.state, [s.param for s in slots]) if probe else None
        units = partition(slots, self.state)
        sketches = [rules.sketch(unit, self.state, self.projection_bank) for unit in units]
        checked = [t for unit, sketch in zip(units, sketches, strict=True)
                   for t in (sketch[-2:] if sketch else [s.grad for s in unit.slots])]
        gate = StepGate(all_finite(checked, mesh))
        context = rules.StepContext(self.state, self.projection_bank, self.packings, gate)
        with self.packings.step():  # a unit not stepped now lets its buffers go
            updates = rules.unit_updates(units, sketches, context)
        self.projection_bank.end_step()
        if threshold is None:  # nothing to read on the host: a skipped step is masked on the device
            for update in updates:
                update.apply(1.0, gate)
            self._control.steps += 1
            self._report.uncontrolled(gate, self.kl_fit.scale)
            return loss

        # the control's one synchronization: the finiteness flag, the skips counted on the device
        # by earlier steps without control, and the prediction(s), together
        scalars = [gate.ok.to(torch.float32), *self._report.pending(gate.ok.device)]
        diagonal = settings["kl_estimator"] != "jvp"
        if diagonal:
            sharded = [unit.slots[0].shard is not None for unit in units]
            scalars.append(0.5 * predicted_fisher(updates, sharded, mesh))
        if probe:
            for update in updates:
                update.store_delta()
            try:
                scalars.append(self._control.jvp_kl([s.param for s in slots], *kl_inputs)
                               .to(gate.ok.device))
            except BaseException:
                moments.restore(self.state, saved)
                self.packings.clear()  # they pin the moments just put aside
                raise
        finite, *values = torch.stack(scalars).tolist()
        self._report.settle(values)
        if not finite:  # a NaN or ∞ in the gradients: the gated moments did not change
            for slot in slots:
                self.state[slot.param]["step"] -= 1
            self._report.rejected(threshold, self.kl_fit.scale)
            return loss

        estimate = values.pop(0) if diagonal else math.nan
        predicted, skipped = self._control.predict(
            settings, estimate, values.pop(0) if probe else None)
        gamma = 1.0 if skipped else step_scale(predicted, threshold)
        if not skipped:  # (skipped: Δ overflowed although the gradients were finite)
            if probe:
                for slot in slots:
                    slot.weight.add_(slot.grad, alpha=gamma)
            else:
                for update in updates:
                    update.apply(gamma)
            self._control.steps += 1
        self._report.controlled(predicted=predicted, gamma=gamma, skipped=skipped,
                                estimate=estimate, probed=probe, kl_scale=self.kl_fit.scale,
                                threshold=threshold)
        return loss

    def sketch_only_projections(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor] | None]:
        """For each parameter, the projections (P: m×k, Q: n×r) its next step will sketch its
        gradient with, if that step reads the gradient only through the sketches L = Pᵀ G and
        R = G Q (a sketched matrix with the Nyström reconstruction), else None: the other rules
        also read G itself (gain and channel rescale it, blend and subspace keep its part outside
        span(P)), dense AdamW all of it, and parameters not in this optimizer get None. A DDP
        communication hook may all-reduce (L, R) instead of G for the parameters given
        projections (`logra.optim.comm_hook`)."""
        group_of = {id(p): g for g in self.param_groups for p in g["params"]}
        plans: list[tuple[Tensor, Tensor] | None] = []
        for p in params:
            group = group_of.get(id(p))
            if (group is None or not rules.rule(group["reconstruction"]).sketch_only
                    or not is_sketched(group, p.shape)):
                plans.append(None)
                continue
            state = self.state.get(p)  # (indexing the defaultdict would add an entry)
            step = int(state["step"].item()) if state else 0
            plans.append(self.projection_bank.pair(group, p, step + 1))
        return plans

    def projections(self, param: Tensor) -> tuple[Tensor, Tensor]:
        """P (m×k) and Q (n×r) of the refresh epoch `param`'s sketch moments are expressed in:
        m_L = Pᵀ M and m_R = M Q for the dense first moment M it stands for (k = r + oversample).

        `param` must be a sketched parameter of this optimizer that has taken a step.
        """
        group = next((g for g in self.param_groups if any(p is param for p in g["params"])), None)
        if group is None:
            raise ValueError(f"parameter of shape {tuple(param.shape)} is not in this optimizer")
        state = self.state.get(param)
        if not state or "exp_avg_L" not in state:
            raise ValueError(f"parameter of shape {tuple(param.shape)} has no sketch moments "
                             "(not sketched, or no step taken yet)")
        return self.projection_bank.pair(group, param, int(state["step"].item()))

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """AdamW's layout plus the skipped-step count and the KL control's state (the
        calibration's window, the probe schedule's step count, the recent KLs to the reference:
        `KLControl.state_dict`); tensors, ints and floats only, never P or Q."""
        state = super().state_dict()
        state["skipped_steps"] = self.skipped_steps
        state.update(self._control.state_dict())
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load as AdamW does, but keep the moments fp32 (torch casts them to the param dtype:
        `moments.restore_fp32`). Groups saved before the KL control's keys moved into the groups
        take this optimizer's values. A group saved with another rank or oversample than this
        optimizer's is refused (`check_saved_shapes`), before anything changes."""
        state_dict = dict(state_dict)
        saved_groups = state_dict.get("param_groups", [])
        check_saved_groups(saved_groups, set(self.defaults) - set(KL_CONTROL_KEYS), "LoGRA",
                           "sketches of the moments")
        check_saved_shapes(saved_groups, self.param_groups)
        groups = [{**{k: self.defaults[k] for k in KL_CONTROL_KEYS}, **group}
                  for group in saved_groups]
        state_dict["param_groups"] = groups
        settings = common_kl_control(groups)
        self.skipped_steps = int(state_dict.pop("skipped_steps", 0))
        self._control.load_state_dict(state_dict, settings["kl_drift_window"])
        self.projection_bank.clear()
        self.packings.clear()  # the loaded moments are packed again at the next step
        super().load_state_dict(state_dict)
        moments.restore_fp32(self.state, self.param_groups, state_dict)
