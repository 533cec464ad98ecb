"""The blend rule: the gradient with its part in span(P) replaced by the momentum's.

    U = (G + P (m̂_L − L)) diag(φ),   φ_j = ‖u_L[:,j]‖ / max(‖L[:,j]‖, ‖m̂_L[:,j]‖)

P L = P Pᵀ G is G's projection onto span(P), so the momentum's direction comes back from the
same state, with no inverse (a Flora/Fira blend; Hao et al. 2024, Chen et al. 2024).
"""

from __future__ import annotations

import torch

from logra.optim import sketch as sk
from logra.optim.rules.base import MatrixRule, SketchStep, register
from logra.optim.updates import BlendUpdate, Update


@register
class Blend(MatrixRule):
    name = "blend"

    def update(self, s: SketchStep) -> Update:
        m_hat, u_L = s.left_adam()
        scale = sk.column_scale(u_L, torch.maximum(sk.norms(s.L, 0), sk.norms(m_hat, 0)))
        return BlendUpdate(left_gap=m_hat - s.L, col_scale=scale, grad=s.grad,
                           grad_sign=s.grad_sign, P=s.P, **s.common)
