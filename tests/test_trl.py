"""TRL's GRPOTrainer trains with LoGRA, both ways in, and logs LoGRA's predicted KL and γ.

Runs when `trl` is installed (the `trl` extra, which `make test` installs); skipped otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl")

import datasets  # noqa: E402

from logra import LoGRA  # noqa: E402
from logra.integrations.trainer import add_logra_metrics, unwrap  # noqa: E402
from logra.integrations.trl import LoGRAGRPOTrainer  # noqa: E402
from logra.models.tokenizer import char_tokenizer  # noqa: E402

STEPS = 3
METRICS = ("logra/predicted_kl", "logra/gamma", "logra/clipped", "logra/kl_probed",
           "logra/kl_scale", "logra/skipped_steps")


def digit_share(completions: list[str], **_) -> list[float]:
    """Reward: the share of digits in a completion (varies within a group from the start)."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def grpo_setup(tmp_path: Path, tiny_qwen2):
    """A random two-layer Qwen2 over the character vocabulary, its tokenizer, prompts and a
    GRPOConfig of `STEPS` steps."""
    tokenizer = char_tokenizer()
    prompts = datasets.Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4)
                                                     for b in range(4)]})
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
        max_completion_length=8, max_steps=STEPS, logging_steps=1, learning_rate=1e-2,
        report_to="none", use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True,
    )
    policy = tiny_qwen2(vocab_size=len(tokenizer), num_attention_heads=2, num_key_value_heads=1,
                        max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id)
    return policy, tokenizer, prompts, config


# the default KL estimate (calibrated by JVP probes of TRL's batch), δ small enough to clip
LOGRA = dict(rank=4, predicted_kl_threshold=1e-5, kl_probe_every=2)


def logged(trainer) -> list[dict]:
    return [row for row in trainer.state.log_history if "logra/gamma" in row]


def check_training(trainer, before: dict[str, torch.Tensor]) -> None:
    rows = logged(trainer)
    assert len(rows) == STEPS
    for row in rows:
        assert all(key in row for key in METRICS)
        assert math.isfinite(row["logra/predicted_kl"]) and 0 < row["logra/gamma"] <= 1
    assert any(row["logra/gamma"] < 1 for row in rows)  # the KL control acted
    # the probe replayed TRL's batch on steps 1 and 3, and calibrated the diagonal estimate
    assert [row["logra/kl_probed"] for row in rows] == [1.0, 0.0, 1.0]
    assert all(math.isfinite(row["logra/kl_scale"]) and row["logra/kl_scale"] > 0 for row in rows)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)


def test_grpo_trainer_with_a_ready_made_logra(tmp_path: Path, tiny_qwen2) -> None:
    model, tokenizer, prompts, config = grpo_setup(tmp_path, tiny_qwen2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = LoGRA(model.parameters(), lr=config.learning_rate, **LOGRA)
    trainer = trl.GRPOTrainer(model, digit_share, args=config, train_dataset=prompts,
                              processing_class=tokenizer, optimizers=(optimizer, None))
    add_logra_metrics(trainer)
    trainer.train()
    assert unwrap(trainer.optimizer) is optimizer
    check_training(trainer, before)


def test_grpo_trainer_subclass_builds_logra(tmp_path: Path, tiny_qwen2) -> None:
    model, tokenizer, prompts, config = grpo_setup(tmp_path, tiny_qwen2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = LoGRAGRPOTrainer(model, digit_share, args=config, train_dataset=prompts,
                               processing_class=tokenizer, logra=dict(LOGRA, embedding_rank=8))
    trainer.train()
    optimizer = unwrap(trainer.optimizer)
    assert isinstance(optimizer, LoGRA)
    groups = [(group["weight_decay"], group["rank"], len(group["params"]))
              for group in optimizer.param_groups]
    embedding = model.get_input_embeddings().weight  # tied to the head: one parameter
    assert groups[1] == (config.weight_decay, 8, 1)  # the embedding, at its own rank
    assert optimizer.param_groups[1]["params"][0] is embedding
    assert [(d, r) for d, r, _ in groups] == [(config.weight_decay, 4), (config.weight_decay, 8),
                                             (0.0, 4)]
    check_training(trainer, before)
    for row in logged(trainer):
        print({key: row[key] for key in ("step", "reward", *METRICS)})


def test_subclass_refuses_a_second_optimizer_and_fixed_options(tmp_path: Path, tiny_qwen2) -> None:
    model, tokenizer, prompts, config = grpo_setup(tmp_path, tiny_qwen2)
    with pytest.raises(ValueError, match="logra="):
        LoGRAGRPOTrainer(model, digit_share, args=config, train_dataset=prompts,
                         processing_class=tokenizer,
                         optimizers=(LoGRA(model.parameters()), None))
    with pytest.raises(ValueError, match="GRPOConfig"):
        LoGRAGRPOTrainer(model, digit_share, args=config, train_dataset=prompts,
                         processing_class=tokenizer, logra=dict(lr=1.0))


def test_subclass_keeps_the_report_s_delta_unless_told(tmp_path: Path, tiny_qwen2) -> None:
    """LoGRA's own default is the control off; the RL trainer keeps it on at the report's δ."""
    model, tokenizer, prompts, config = grpo_setup(tmp_path, tiny_qwen2)
    for logra, delta in ((dict(rank=4), 0.02), (dict(rank=4, predicted_kl_threshold=None), None)):
        trainer = LoGRAGRPOTrainer(model, digit_share, args=config, train_dataset=prompts,
                                   processing_class=tokenizer, logra=logra)
        assert trainer.create_optimizer().predicted_kl_threshold == delta


def test_the_script_passes_every_grpo_config_option_through(load_script) -> None:
    """TrlParser: GRPOConfig's options on the command line and in a --config file; no
    hard-coded report_to or save_strategy."""
    script = load_script("trl_grpo")
    launch = Path(__file__).resolve().parents[1] / "experiments" / "launch" / "trl_grpo_7b.yaml"
    options, config = script.parse_args([
        "--config", str(launch), "--report_to", "tensorboard", "--save_steps", "50",
        "--beta", "0.04", "--rank", "8"])
    assert isinstance(config, trl.GRPOConfig)
    assert config.report_to == ["tensorboard"] and config.save_steps == 50 and config.beta == 0.04
    assert config.save_strategy == "steps" and config.max_steps == 1100  # TRL's, the file's
    assert (options.model, options.rank, options.embedding_rank) == (
        "Qwen/Qwen2.5-7B-Instruct", 8, 64)
    _, defaults = script.parse_args([])
    assert defaults.max_steps == script.SCRIPT_DEFAULTS["max_steps"]
    with pytest.raises(ValueError, match="not_an_option"):
        script.parse_args(["--not_an_option", "1"])


def test_the_kit_s_grpo_loss_and_advantages_are_trl_s_on_one_batch(tmp_path: Path,
                                                                   tiny_qwen2) -> None:
    """One batch of the kit's rollouts (prompts of three lengths, so rows are left-padded, and
    completions that stop at EOS) scored by both: TRL's group advantages are the kit's, and
    TRL's default loss ("dapo": Σ token losses / the batch's response tokens, one gradient
    step so the ratio is 1) has the kit's value and gradient. TRL's GRPOConfig trains in bf16
    by default (its `bf16` defaults to True), which moves each log-probability by ~1e-3 on this
    model; the check sets bf16=False, as the kit computes in fp32."""
    from trl.trainer.utils import nanstd

    from logra.rl.grpo import group_advantages, grpo_loss
    from logra.rl.rollout import completion_logits, sample, token_logprobs

    tokenizer = char_tokenizer()
    model = tiny_qwen2(vocab_size=len(tokenizer), num_attention_heads=2, num_key_value_heads=1,
                       max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id)
    group = 4
    prompts = ["1+2=", "13+24=", "7*8+1=", "9="]
    rollout = sample(model, tokenizer, prompts, group, max_new_tokens=10, seed=3)
    mask = rollout.response_mask
    assert (rollout.attention_mask[:, 0] == 0).any() and not mask.all()  # padding, early EOS
    rewards = torch.tensor([float(i % 3 == 0) for i in range(len(prompts) * group)])
    advantages = group_advantages(rewards, group)
    grouped = rewards.view(-1, group)
    trl_advantages = ((grouped - grouped.mean(dim=1, keepdim=True))
                      / (nanstd(grouped, dim=1).unsqueeze(1) + 1e-4)).view(-1)
    torch.testing.assert_close(advantages, trl_advantages, rtol=0, atol=1e-7)

    model.train()
    logprobs = token_logprobs(completion_logits(model, rollout), rollout.response_tokens)
    ours = grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), advantages, mask,
                     clip_eps=0.2, beta=0.0).loss
    our_grads = torch.autograd.grad(ours, list(model.parameters()))

    config = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=16,
                            num_generations=group, max_completion_length=10, max_steps=1,
                            report_to="none", use_cpu=True, save_strategy="no", bf16=False,
                            disable_tqdm=True)
    trainer = trl.GRPOTrainer(model, lambda completions, **_: [0.0] * len(completions),
                              args=config, processing_class=tokenizer,
                              train_dataset=datasets.Dataset.from_dict({"prompt": prompts}))
    assert config.loss_type == "dapo" and config.beta == 0.0  # TRL's defaults, the kit's loss
    trainer.current_gradient_accumulation_steps = 1  # what Trainer.training_step sets
    prompt_length = rollout.input_ids.shape[1] - mask.shape[1]
    theirs = trainer._compute_loss(trainer.model, dict(
        prompt_ids=rollout.input_ids[:, :prompt_length],
        prompt_mask=rollout.attention_mask[:, :prompt_length],
        completion_ids=rollout.response_tokens, completion_mask=mask.long(),
        advantages=advantages, num_items_in_batch=mask.sum().float()))
    their_grads = torch.autograd.grad(theirs, list(model.parameters()))
    torch.testing.assert_close(theirs, ours, rtol=1e-6, atol=1e-8)
    difference = torch.stack([(a - b).norm() for a, b in zip(our_grads, their_grads,
                                                               strict=True)]).norm()
    size = torch.stack([g.norm() for g in our_grads]).norm()
    assert size > 0 and difference / size < 1e-5
