"""The subspace rule: Adam inside span(P), plus the scaled residual outside it (Fira).

    U = P u_L + (G − P L) diag(ζ φ),   φ_j = ‖u_L[:,j]‖ / ‖L[:,j]‖

ζ ≤ 1 Fira's norm-growth limiter on the scaled residual (Chen et al. 2024;
`logra.optim.limiter`, which keeps one float per matrix in the state).
"""

from __future__ import annotations

from logra.optim import sketch as sk
from logra.optim.limiter import residual_limit
from logra.optim.rules.base import MatrixRule, SketchStep, register
from logra.optim.updates import SubspaceUpdate, Update


@register
class Subspace(MatrixRule):
    name = "subspace"

    def update(self, s: SketchStep) -> Update:
        _, u_L = s.left_adam()
        scale = sk.column_scale(u_L, sk.norms(s.L, 0))
        scale *= residual_limit(s.state, s.grad, s.L, scale, s.reduce, s.gate)
        return SubspaceUpdate(left_adam=u_L, left_grad=s.L, col_scale=scale, grad=s.grad,
                              grad_sign=s.grad_sign, P=s.P, **s.common)
