"""What LoGRA's steps report: `last_step`, and `skipped_steps` counted without a host read.

A step is skipped when a gradient holds a NaN or ∞ (moments, step counters and weights stay as
they were, `logra.optim.gate`), or, with the control on, when Δ overflowed although the
gradients were finite (its predicted KL is not finite: the moments moved, the weights did not).
With the control off the step's finiteness flag is never read on the host: its skip is added up
on the device, and read when `skipped_steps` is, or together with the scalars of the next step
with the control on (that step's one synchronization).

`last_step` is a dict of the last step's

    predicted_kl   KL̂, the predicted KL(π_before ‖ π_after) of Δ in nats per token
    applied_kl     γ²·KL̂, the prediction for the step taken
    gamma          γ = min(1, √(δ/KL̂)), 0 on a skipped step
    clipped        γ < 1
    skipped        whether the step was skipped
    skipped_steps  the count of skipped steps so far
    diag_kl        the diagonal estimate d = ½ Σ V̂ Δ² (NaN for kl_estimator="jvp")
    kl_probed      whether an exact JVP probe made the prediction
    kl_scale       the calibration's factor c after the step (NaN before any observation)
    threshold      δ of the step (less under a drift budget)

With the control off there is no prediction (NaN), and "gamma" is 1 or 0. Every value reads as
a Python scalar (float, bool, int), whether the control is on or off; with it off "gamma",
"skipped" and "skipped_steps" wait on the device as 0-d tensors until a key is read (or the
mapping copied, `dict(optimizer.last_step)`), so that a step synchronizes with the device only
when its report is read (`StepRecord`). Keep the mapping itself to read it later without a
read per step: each step records a new one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from logra.optim.gate import StepGate


class StepRecord(Mapping[str, Any]):
    """`last_step`: a read-only mapping whose 0-d tensor values become Python scalars (`item()`:
    a float, bool or int by dtype) the first time they are read, and stay read."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        if isinstance(value, Tensor):
            value = self._values[key] = value.item()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return repr(dict(self))


class StepReport:
    """`last_step` (`last`) and the count of skipped steps, part on the host, part on the
    device (the skips of steps with the control off, not read yet)."""

    def __init__(self) -> None:
        self.last = StepRecord({})
        self._on_host = 0
        self._on_device: Tensor | None = None  # int64

    @property
    def skipped_steps(self) -> int:
        """Steps skipped for a NaN or ∞ in the gradients or in Δ. Reading it synchronizes with
        the device when steps were taken with the control off (their flags stay there)."""
        pending = 0 if self._on_device is None else int(self._on_device)
        return self._on_host + pending

    @skipped_steps.setter
    def skipped_steps(self, count: int) -> None:
        self._on_host, self._on_device = int(count), None

    def uncontrolled(self, gate: StepGate, kl_scale: float) -> None:
        """Record a step taken with the control off: its skip flag stays on the device."""
        self._on_device = (gate.skip.to(torch.int64) if self._on_device is None
                           else self._on_device + gate.skip)
        self.last = StepRecord(dict(
            predicted_kl=math.nan, applied_kl=math.nan, gamma=gate.ok.to(torch.float32),
            clipped=False, skipped=gate.skip, skipped_steps=self._on_device + self._on_host,
            diag_kl=math.nan, kl_probed=False, kl_scale=kl_scale, threshold=math.nan))

    def pending(self, device: torch.device) -> list[Tensor]:
        """The skips on the device not read yet, as an fp32 scalar on `device` for the step's one
        host read: one tensor, or none."""
        return [] if self._on_device is None else [self._on_device.to(device, torch.float32)]

    def settle(self, values: list[float]) -> None:
        """Take the count of `pending` off the front of the values read on the host."""
        if self._on_device is not None:
            self._on_host += int(values.pop(0))
            self._on_device = None

    def rejected(self, threshold: float, kl_scale: float) -> None:
        """Record a step skipped, with the control on, for a NaN or ∞ in the gradients."""
        self._on_host += 1
        self.last = StepRecord(dict(
            predicted_kl=math.nan, applied_kl=math.nan, gamma=0.0, clipped=False, skipped=True,
            skipped_steps=self.skipped_steps, diag_kl=math.nan, kl_probed=False,
            kl_scale=kl_scale, threshold=threshold))

    def controlled(self, *, predicted: float, gamma: float, skipped: bool, estimate: float,
                   probed: bool, kl_scale: float, threshold: float) -> None:
        """Record a step with the control on and finite gradients: taken as γΔ, or skipped
        because its prediction is not finite."""
        if skipped:
            self._on_host += 1
        self.last = StepRecord(dict(
            predicted_kl=predicted, applied_kl=gamma**2 * predicted,
            gamma=0.0 if skipped else gamma, clipped=gamma < 1.0, skipped=skipped,
            skipped_steps=self.skipped_steps, diag_kl=estimate, kl_probed=probed,
            kl_scale=kl_scale, threshold=threshold))
