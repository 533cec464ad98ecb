"""LoGRA's step written out in plain dense torch, in float64: the tests' independent reference.

Nothing here calls `logra`: the formulas are the module docstring of `logra.optim.logra`, read
literally. For W (m×n), projections P (m×k) and Q (n×r), and a stream of gradients G_t:

    L = Pᵀ G,  R = G Q,  m ← β₁ m + (1−β₁) x,  v ← β₂ v + (1−β₂) x²  (x = L, R)
    m̂ = m / (1−β₁ᵗ),  v̂ = v / (1−β₂ᵗ),  u = m̂ / (√v̂ + ε)
    ρ_i = (n/r) Σ_k v̂_R[i,k],  κ_j = (m/k) Σ_k v̂_L[k,j],  V̂ = ρ κᵀ / Σρ
    Δ = −lr (U + λ W),  W ← W + Δ

with U one of the five rules (`direction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

NORM_GROWTH_LIMIT = 1.01  # Fira's γ, as the docstring of `logra.optim.limiter` states


@dataclass
class DenseLoGRA:
    """The sketch moments of one matrix and the rule's memory (subspace, channel: the limited
    norm)."""

    P: Tensor  # m×k
    Q: Tensor  # n×r
    reconstruction: str
    betas: tuple[float, float]
    eps: float
    rtol: float = 0.05
    maximize: bool = False
    t: int = 0
    moments: dict[str, Tensor] = field(default_factory=dict)
    residual_norm: float = 0.0
    limited: int = 0  # steps on which the limiter shrank the scaled direction

    def __post_init__(self) -> None:
        self.P, self.Q = self.P.double(), self.Q.double()
        (m, k), (n, r) = self.P.shape, self.Q.shape
        for name, shape in (("L", (k, n)), ("R", (m, r))):
            self.moments[f"m_{name}"] = torch.zeros(shape, dtype=torch.float64)
            self.moments[f"v_{name}"] = torch.zeros(shape, dtype=torch.float64)

    def step(self, W: Tensor, G: Tensor, lr: float, weight_decay: float) -> Tensor:
        """Δ of one step from weights W and gradient G (float64 results)."""
        W, G = W.double(), G.double()
        if self.maximize:
            G = -G
        self.t += 1
        beta1, beta2 = self.betas
        L, R = self.P.T @ G, G @ self.Q
        for name, x in (("L", L), ("R", R)):
            self.moments[f"m_{name}"] = beta1 * self.moments[f"m_{name}"] + (1 - beta1) * x
            self.moments[f"v_{name}"] = beta2 * self.moments[f"v_{name}"] + (1 - beta2) * x**2
        U = self.direction(G, L, R)
        return -lr * (U + weight_decay * W)

    def corrected(self) -> dict[str, Tensor]:
        """m̂_L, v̂_L, m̂_R, v̂_R."""
        bias1, bias2 = 1 - self.betas[0] ** self.t, 1 - self.betas[1] ** self.t
        return {name: value / (bias1 if name[0] == "m" else bias2)
                for name, value in self.moments.items()}

    def second_moment(self) -> Tensor:
        """V̂ = ρ κᵀ / Σρ (m×n) from the sketches' corrected second moments."""
        hat = self.corrected()
        (m, k), (n, r) = self.P.shape, self.Q.shape
        rho = (n / r) * hat["v_R"].sum(dim=1)
        kappa = (m / k) * hat["v_L"].sum(dim=0)
        return torch.outer(rho, kappa) / rho.sum()

    def direction(self, G: Tensor, L: Tensor, R: Tensor) -> Tensor:
        hat = self.corrected()
        u_L = hat["m_L"] / (hat["v_L"].sqrt() + self.eps)
        u_R = hat["m_R"] / (hat["v_R"].sqrt() + self.eps)
        P = self.P
        if self.reconstruction == "gain":
            c = u_L.norm(dim=0) / L.norm(dim=0)
            s = u_R.norm(dim=1) / R.norm(dim=1)
            return s.sqrt()[:, None] * G * c.sqrt()[None, :]
        if self.reconstruction == "nystrom":
            core = P.T @ hat["m_R"]
            M = hat["m_R"] @ torch.linalg.pinv(core, rtol=self.rtol) @ hat["m_L"]
            return M / (self.second_moment().sqrt() + self.eps)
        if self.reconstruction == "blend":
            phi = u_L.norm(dim=0) / torch.maximum(L.norm(dim=0), hat["m_L"].norm(dim=0))
            return (G + P @ (hat["m_L"] - L)) * phi[None, :]
        if self.reconstruction == "subspace":
            phi = u_L.norm(dim=0) / L.norm(dim=0)
            return P @ u_L + self.limit((G - P @ L) * phi[None, :])
        if self.reconstruction == "channel":
            # √(n/r)·‖R[i,:]‖ and √(m/k)·‖L[:,j]‖ stand for ‖G[i,:]‖ and ‖G[:,j]‖
            (m, k), (n, r) = P.shape, self.Q.shape
            if G.shape[0] >= G.shape[1]:  # rows are the channels
                scaled = (u_R.norm(dim=1) / (R.norm(dim=1) * (n / r) ** 0.5))[:, None] * G
            else:
                scaled = G * (u_L.norm(dim=0) / (L.norm(dim=0) * (m / k) ** 0.5))[None, :]
            return self.limit(scaled)
        raise ValueError(self.reconstruction)

    def limit(self, scaled: Tensor) -> Tensor:
        """Fira's norm-growth limiter: ζ·scaled with ζ = min(1, γ‖previous‖/‖scaled‖)."""
        norm = float(scaled.norm())
        zeta = 1.0
        if self.residual_norm > 0 and norm > NORM_GROWTH_LIMIT * self.residual_norm:
            zeta = NORM_GROWTH_LIMIT * self.residual_norm / norm
            self.limited += 1
        self.residual_norm = zeta * norm
        return zeta * scaled


def adamw_step(
    W: Tensor, G: Tensor, state: dict[str, Tensor], t: int, lr: float, betas: tuple[float, float],
    eps: float, weight_decay: float,
) -> Tensor:
    """Δ of AdamW (decoupled decay) in float64; `state` holds m and v (updated in place)."""
    W, G = W.double(), G.double()
    beta1, beta2 = betas
    state.setdefault("m", torch.zeros_like(W))
    state.setdefault("v", torch.zeros_like(W))
    state["m"] = beta1 * state["m"] + (1 - beta1) * G
    state["v"] = beta2 * state["v"] + (1 - beta2) * G**2
    m_hat, v_hat = state["m"] / (1 - beta1**t), state["v"] / (1 - beta2**t)
    return -lr * (m_hat / (v_hat.sqrt() + eps) + weight_decay * W)
