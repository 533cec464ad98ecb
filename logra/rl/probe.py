"""The policy-improvement probe: does one step along the GRPO gradient raise the reward?

A harness whose policy gradient points the wrong way (an advantage sign, a stale log-probability,
a misplaced normalization) fails this, and so does an optimizer that turns a right gradient into
a wrong step. On prompts q_1..q_N:

  1. sample G completions of each with the policy θ, grade them, and take the GRPO loss's
     gradient g = ∇_θ(−J) of that batch (`grpo.grpo_loss`, one update: ratio 1);
  2. grade F fresh completions of each prompt, drawn with fixed per-row seeds (common random
     numbers: the same Gumbel noise before and after every step), r_0(q) their mean reward;
  3. for each direction u (unit norm over every trainable parameter) and step norm η, set
     θ' = θ + η·u, grade F completions with the same seeds, r_η(q), and put θ back.

Directions: "gradient" u = −g/‖g‖ (plain ascent on J), and "adam" u = −sign(g)/‖sign(g)‖,
Adam's first step (m̂/√v̂ = g/|g| elementwise at t = 1, ε aside), the direction a normalized
optimizer takes from one noisy batch. A negative η steps the other way. The table gives
r_η − r_0 per prompt, averaged, with its standard error over prompts (the pairs share the
sampling noise, so the difference is far less noisy than either reward).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd
import torch
from torch import Tensor, nn
from transformers import PreTrainedTokenizerBase

from logra.data.grading import reward
from logra.rl.grpo import group_advantages, grpo_loss
from logra.rl.rollout import completion_logits, sample, token_logprobs

DIRECTIONS = ("gradient", "adam")
COLUMNS = ("direction", "norm", "reward", "change", "stderr", "batch_reward")


class NoRewardSpread(ValueError):
    """The probe's batch has no policy gradient: every group's completions graded alike."""
Reward = Callable[[str, str], float]


def improvement_probe(
    policy: nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
    golds: Sequence[str], *, group_size: int = 8, fresh: int = 16, max_new_tokens: int = 48,
    norms: Sequence[float] = (0.1, 0.25, -0.1, -0.25), directions: Sequence[str] = DIRECTIONS,
    seed: int = 0, reward_fn: Reward = reward,
) -> pd.DataFrame:
    """The probe of the module docstring; one row per (direction, η), and η = 0 first.

    Columns: direction, norm (η), reward (mean of the N·F fresh completions), change (mean over
    prompts of r_η − r_0), stderr (its standard error over prompts), batch_reward (the mean
    reward of the gradient's batch). The policy's weights are the same after the call.
    """
    unknown = sorted(set(directions) - set(DIRECTIONS))
    if unknown:
        raise ValueError(f"unknown directions {unknown}; valid: {list(DIRECTIONS)}")
    if len(prompts) != len(golds) or not prompts:
        raise ValueError(f"need one gold per prompt and at least one prompt, got {len(prompts)} "
                         f"prompts and {len(golds)} golds")
    params = [p for p in policy.parameters() if p.requires_grad]
    grads, batch_reward = _policy_gradient(policy, tokenizer, prompts, golds, group_size,
                                           max_new_tokens, seed, reward_fn)

    def fresh_rewards() -> Tensor:  # (N,) mean reward of F completions per prompt, fixed seeds
        rollout = sample(policy, tokenizer, list(prompts), fresh, max_new_tokens, seed=seed + 1)
        golds_per_row = [gold for gold in golds for _ in range(fresh)]
        graded = [reward_fn(text, gold)
                  for text, gold in zip(rollout.completions, golds_per_row, strict=True)]
        return torch.tensor(graded).view(len(prompts), fresh).mean(dim=1)

    before = fresh_rewards()
    rows = [dict(direction="none", norm=0.0, reward=float(before.mean()), change=0.0,
                 stderr=0.0, batch_reward=batch_reward)]
    saved = [p.detach().clone() for p in params]
    for direction in directions:
        unit = _unit(grads, direction)
        for norm in norms:
            with torch.no_grad():
                for p, u in zip(params, unit, strict=True):
                    p.add_(u, alpha=norm)
            change = fresh_rewards() - before
            with torch.no_grad():
                for p, w in zip(params, saved, strict=True):
                    p.copy_(w)
            rows.append(dict(direction=direction, norm=float(norm),
                             reward=float((before + change).mean()), change=float(change.mean()),
                             stderr=float(change.std() / math.sqrt(len(prompts)))
                             if len(prompts) > 1 else math.nan,
                             batch_reward=batch_reward))
    return pd.DataFrame(rows)


def _policy_gradient(
    policy: nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
    golds: Sequence[str], group_size: int, max_new_tokens: int, seed: int, reward_fn: Reward,
) -> tuple[list[Tensor], float]:
    """∇(−J) of one GRPO batch of `group_size` completions per prompt, and its mean reward."""
    rollout = sample(policy, tokenizer, list(prompts), group_size, max_new_tokens, seed=seed)
    golds_per_row = [gold for gold in golds for _ in range(group_size)]
    rewards = torch.tensor([reward_fn(text, gold)
                            for text, gold in zip(rollout.completions, golds_per_row, strict=True)])
    advantages = group_advantages(rewards, group_size)
    params = [p for p in policy.parameters() if p.requires_grad]
    was_training = policy.training
    policy.train()
    try:
        logprobs = token_logprobs(completion_logits(policy, rollout), rollout.response_tokens)
        loss = grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), advantages,
                         rollout.response_mask, clip_eps=0.2, beta=0.0).loss
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        policy.train(was_training)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
    return grads, float(rewards.mean())


def _unit(grads: list[Tensor], direction: str) -> list[Tensor]:
    """The ascent direction of `direction` (module docstring), of unit norm over all tensors."""
    steps = [-g if direction == "gradient" else -g.sign() for g in grads]
    norm = torch.stack([s.float().norm() for s in steps]).norm()
    if not norm > 0:
        raise NoRewardSpread("the batch's policy gradient is zero: every group graded alike "
                             "(no reward spread); use more prompts or a larger group")
    return [s / norm for s in steps]
