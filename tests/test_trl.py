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
