"""Online calibration of the diagonal KL estimate to nats.

The diagonal estimate d = ½ Σ_ij V̂_ij Δ_ij² is free (V̂ comes from the sketch second moments),
but V̂ is the second moment of a batch-mean gradient, not the Fisher of the policy, so d is not a
KL: on a GRPO proxy it was millions of times below the KL a step causes. Its *changes* from step
to step still track the KL (rank correlation 0.8), so one factor c, refitted as the run goes,
turns it into nats:

    KL̂_t = c_t · d_t,    c_t = exp(median{ log(k_s / d_s) : the last `window` observations s })

An observation is a pair (d_s, k_s) of the diagonal estimate of a step and a KL in nats of the
same update: the exact JVP quadratic ½ΔᵀFΔ (a probe, `logra.optim.kl`), or the KL a trainer
measured after the step (`LoGRA.observe_kl`). The median of the log-ratios is robust to the odd
step where the two disagree by orders of magnitude; the window lets c follow the drift of the
ratio as training moves the policy.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class KLCalibration:
    """A running robust fit of c = KL (nats) / diagonal estimate over the last `window` pairs."""

    def __init__(self, window: int) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"kl_calibration_window must be an int ≥ 1, got {window!r}")
        self.window = window
        self.log_ratios: list[float] = []

    @property
    def calibrated(self) -> bool:
        """Whether at least one observation has been made."""
        return bool(self.log_ratios)

    @property
    def scale(self) -> float:
        """c: the median ratio KL / estimate of the window (NaN before any observation)."""
        if not self.log_ratios:
            return math.nan
        ordered = sorted(self.log_ratios)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
        return math.exp(median)

    def observe(self, estimate: float, kl: float) -> bool:
        """Add the pair (diagonal estimate, KL in nats) of one update; False (and nothing
        added) when either is not a positive finite number."""
        if not (math.isfinite(estimate) and math.isfinite(kl) and estimate > 0 and kl > 0):
            return False
        self.log_ratios.append(math.log(kl / estimate))
        del self.log_ratios[: -self.window]
        return True

    def state_dict(self) -> Tensor:
        """The window's log-ratios, oldest first (fp64), for the optimizer's checkpoint."""
        return torch.tensor(self.log_ratios, dtype=torch.float64)

    def load_state_dict(self, log_ratios: Tensor) -> None:
        self.log_ratios = [float(x) for x in log_ratios.flatten()][-self.window:]
