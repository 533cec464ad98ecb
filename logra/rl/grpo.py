"""GRPO's pieces: group-normalized advantages, the k3 KL estimate, and the clipped surrogate.

GRPO (Shao et al. 2024, DeepSeekMath) samples G completions o_1..o_G per prompt q, scores them
with rewards r_i, and gives every token of o_i the advantage of its completion relative to its
group:

    A_i = (r_i − mean(r_1..r_G)) / (std(r_1..r_G) + ε_A)           (std with Bessel's correction,
                                                                    ε_A = 1e-4, as in TRL)

The policy maximises PPO's clipped surrogate (Schulman et al. 2017) with the per-token ratio
ρ_t = π_θ(o_t | q, o_<t) / π_old(o_t | q, o_<t), minus a penalty β·k3 that keeps the policy near
a frozen reference π_ref:

    k3_t = π_ref/π_θ − log(π_ref/π_θ) − 1                  (Schulman's "k3" approximation of
                                                            KL(π_θ ‖ π_ref), as in TRL and verl;
                                                            unbiased, always ≥ 0)
    J    = Σ_t m_t · [min(ρ_t A, clip(ρ_t, 1−ε, 1+ε) A) − β k3_t] / Σ_t m_t

m_t masks the response tokens (up to and including EOS); the mean runs over every response token
of the batch (token-level normalization, as in DAPO and TRL's default loss), and the loss is −J.
With a single gradient step per batch π_old = π_θ, ρ = 1 and the clip is inactive: J's gradient
is then the plain policy gradient Σ m_t A ∇log π_θ / Σ m_t.

Shapes: B = prompts × G sequences, T = response tokens (padded to the batch's longest).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

ADVANTAGE_EPS = 1e-4


def group_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """A_i = (r_i − mean of its group) / (std of its group + 1e-4).

    rewards: (B,) with the G = group_size completions of each prompt contiguous (B = n·G).
    Returns (B,) float32; a group whose rewards are all equal gets advantage 0.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a group std, got {group_size}")
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be 1-D with a multiple of group_size={group_size} entries, "
            f"got shape {tuple(rewards.shape)}"
        )
    grouped = rewards.float().view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + ADVANTAGE_EPS)).view(-1)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Σ values·mask / Σ mask over every element (token-level mean); values, mask: (B, T)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 = exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1 for log-probabilities ℓ of π_θ, ℓ_ref."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1


@dataclass(frozen=True)
class LossTerms:
    """The GRPO loss and what to log about it (floats, detached)."""

    loss: Tensor  # scalar, differentiable
    surrogate: float  # masked mean of the clipped surrogate
    kl_k3: float  # masked mean of k3 (the estimate of KL(π_θ ‖ π_ref) on the sampled tokens)
    clip_fraction: float  # share of response tokens whose ratio was clipped


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    ref_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_eps: float,
    beta: float,
) -> LossTerms:
    """−J of the module docstring.

    logprobs: (B, T) log π_θ of the sampled tokens (differentiable); old_logprobs: (B, T) under
    the policy that sampled them (detached); ref_logprobs: (B, T) under π_ref (detached);
    advantages: (B,); response_mask: (B, T) booleans; clip_eps: ε; beta: β ≥ 0 (0: no penalty,
    k3 is still measured).
    """
    advantage = advantages.to(logprobs.dtype).unsqueeze(1)
    ratio = torch.exp(logprobs - old_logprobs)
    clipped_ratio = ratio.clamp(1 - clip_eps, 1 + clip_eps)
    surrogate = torch.minimum(ratio * advantage, clipped_ratio * advantage)
    per_token_k3 = k3(logprobs, ref_logprobs)
    objective = surrogate - beta * per_token_k3 if beta else surrogate
    with torch.no_grad():
        was_clipped = (ratio - clipped_ratio).abs() > 0
        clip_fraction = float(masked_mean(was_clipped.float(), response_mask))
        surrogate_mean = float(masked_mean(surrogate, response_mask))
        kl_k3 = float(masked_mean(per_token_k3, response_mask))
    return LossTerms(
        loss=-masked_mean(objective, response_mask),
        surrogate=surrogate_mean,
        kl_k3=kl_k3,
        clip_fraction=clip_fraction,
    )


@dataclass
class AdaptiveKLController:
    """Ziegler et al.'s adaptive penalty (2019, §2.2; the `AdaptiveKLController` of TRL's PPO and
    of verl): after each batch of `n` samples with measured KL(π_θ ‖ π_ref) = K,

        β ← β · (1 + clip(K / target − 1, −0.2, 0.2) · n / horizon)

    so β grows while the KL is above `target` and shrinks while it is below.
    """

    beta: float
    target: float
    horizon: int

    def update(self, kl: float, n: int) -> float:
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.beta *= 1.0 + error * n / self.horizon
        return self.beta
