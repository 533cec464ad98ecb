"""The policy-improvement probe (`logra.rl.probe`): one step along the GRPO gradient must raise
the paired reward, and a harness with the advantage's sign flipped fails it."""

from __future__ import annotations

import pytest
import torch

from logra.models.tokenizer import char_tokenizer
from logra.rl import probe

PROMPTS = [f"{a}+{b}=" for a in range(4) for b in range(4)]


def digit_share(completion: str, gold: str) -> float:
    """A reward that varies within a group from the first step: the share of digits."""
    return sum(c.isdigit() for c in completion) / max(len(completion), 1)


@pytest.fixture
def policy(tiny_qwen2):
    tokenizer = char_tokenizer()
    model = tiny_qwen2(vocab_size=len(tokenizer), num_attention_heads=2, num_key_value_heads=1,
                       max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id)
    return model, tokenizer


def run(model, tokenizer, **kwargs):
    return probe.improvement_probe(model, tokenizer, PROMPTS, ["0"] * len(PROMPTS),
                                   group_size=8, fresh=16, max_new_tokens=8, reward_fn=digit_share,
                                   norms=(2.0, -2.0), **kwargs).set_index(["direction", "norm"])


def test_a_step_along_the_gradient_raises_the_paired_reward(policy) -> None:
    model, tokenizer = policy
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    table = run(model, tokenizer)
    up, down = table.loc[("gradient", 2.0)], table.loc[("gradient", -2.0)]
    assert up["change"] > 3 * up["stderr"] > 0  # paired: well beyond its noise
    assert down["change"] < up["change"]
    assert set(table.index.get_level_values("direction")) == {"none", "gradient", "adam"}
    assert table.loc[("none", 0.0), "change"] == 0.0
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())  # put back


def test_a_flipped_advantage_sign_is_caught(policy, monkeypatch) -> None:
    """The defect the probe exists for: the harness's gradient then lowers the reward."""
    model, tokenizer = policy
    right = probe.group_advantages
    monkeypatch.setattr(probe, "group_advantages", lambda *args: -right(*args))
    up = run(model, tokenizer, directions=("gradient",)).loc[("gradient", 2.0)]
    assert up["change"] < 0  # where the right sign gains 0.03 (> 3 standard errors)


def test_bad_arguments_are_named(policy) -> None:
    model, tokenizer = policy
    with pytest.raises(ValueError, match="directions"):
        probe.improvement_probe(model, tokenizer, PROMPTS, ["0"] * 16, directions=("sgd",))
    with pytest.raises(ValueError, match="one gold per prompt"):
        probe.improvement_probe(model, tokenizer, PROMPTS, ["0"])
