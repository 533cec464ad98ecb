"""The channel rule: APOLLO's one-sided channel-wise scaling along the larger side.

    s_i = ‖u_R[i,:]‖ / (√(n/r)·‖R[i,:]‖),  c_j = ‖u_L[:,j]‖ / (√(m/k)·‖L[:,j]‖)   (u = m̂ / (√v̂ + ε))
    U = ζ diag(s) G   if m ≥ n,   else   ζ G diag(c)

with Fira's norm-growth limiter ζ ≤ 1 on the scaled gradient, as APOLLO applies it (Zhu et al.
2024; `logra.optim.limiter`, which keeps one float per matrix in the state). √(n/r)·‖R[i,:]‖
estimates ‖G[i,:]‖, what APOLLO's Gaussian projections divide by, so a channel steps as far as
APOLLO's at the same learning rate (`sketch.channel_gains`).
"""

from __future__ import annotations

from logra.optim import sketch as sk
from logra.optim.limiter import channel_limit
from logra.optim.rules.base import MatrixRule, SketchStep, register
from logra.optim.updates import GainUpdate, Update


@register
class Channel(MatrixRule):
    name = "channel"

    def update(self, s: SketchStep) -> Update:
        _, u_L = s.left_adam()
        u_R = s.right_adam()
        rows_are_channels = s.slot.param.shape[0] >= s.L.shape[1]
        row_gain, col_gain = sk.channel_gains(s.L, s.R, u_L, u_R, rows_are_channels,
                                             rows=s.slot.param.shape[0])
        row_gain *= channel_limit(s.state, s.grad, row_gain, col_gain, rows_are_channels,
                                  s.reduce, s.gate)
        # D = s ⊙ (−G) ⊙ c on the unnegated gradient under maximize
        return GainUpdate(grad=s.grad, row_factor=row_gain.mul_(-s.common["lr"] * s.grad_sign),
                          col_gain=col_gain, **s.common)
