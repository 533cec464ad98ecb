"""GRPO with TRL's `GRPOTrainer` and LoGRA, on a proxy policy or a hub model.

    pip install -e ".[trl]"
    python scripts/trl_grpo.py --model smoke --steps 10             # builds the smoke proxy first
    python scripts/trl_grpo.py --model smoke --steps 10 --ready-made    # optimizers=(LoGRA, None)
    # FSDP2 on one 8-GPU node (the subclass path; Trainer refuses a ready-made optimizer under
    # FSDP), the settings of a reported scale read from a file (docs/distributed.md):
    accelerate launch --config_file experiments/launch/accelerate_fsdp2_8gpu.yaml \
        scripts/trl_grpo.py --config experiments/launch/trl_grpo_7b.yaml

The reward is 1 for a correct final answer (`logra.data.grading.reward`, the harness's grader).
Every logged step prints LoGRA's `logra/predicted_kl` and `logra/gamma` beside TRL's reward.
The KL prediction is LoGRA's default (`kl_estimator="calibrated"`): the diagonal estimate in nats
per token, refitted by a JVP probe that replays TRL's loss batch every `--kl-probe-every` steps
(`logra.integrations.trl`). Under FSDP2 the probe is unavailable: the control then warns once
and does not act unless a measured KL is reported with `optimizer.observe_kl`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml
from trl import GRPOConfig, GRPOTrainer

from logra import LoGRA
from logra.data import load_task, to_prompts
from logra.data.grading import reward
from logra.integrations.trl import LoGRAGRPOTrainer, LoGRAMetrics
from logra.memory import logra_param_groups
from logra.models import SCALES, load_policy, prepare


def correct(completions: list[str], gold: list[str], **_) -> list[float]:
    """TRL reward function: the dataset's `gold` column arrives as a keyword argument."""
    return [reward(text, answer) for text, answer in zip(completions, gold, strict=True)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with defaults from `--config` if given."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smoke", help="a proxy scale, directory or hub id")
    parser.add_argument("--task", default="gsm-synth")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--embedding-rank", type=int, default=None,
                        help="sketch rank of the embedding and head (default: --rank)")
    parser.add_argument("--kl-threshold", type=float, default=0.02)
    parser.add_argument("--kl-probe-every", type=int, default=10)
    parser.add_argument("--completions-per-device", type=int, default=16,
                        help="completions each process scores per step (TRL's "
                             "per_device_train_batch_size); prompts per step = this × "
                             "processes / group size")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--bf16", action="store_true", help="bf16 mixed precision")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--ready-made", action="store_true",
                        help="pass optimizers=(LoGRA(...), None) instead of the subclass")
    parser.add_argument("--output-dir", default="results/trl_grpo")
    parser.add_argument("--config", help="YAML of defaults for these options (keys as below, "
                                          "with underscores); the command line wins")
    config_file = parser.parse_known_args(argv)[0].config
    if config_file:
        defaults = yaml.safe_load(Path(config_file).read_text())
        unknown = sorted(set(defaults) - set(vars(parser.parse_args([]))))
        if unknown:
            parser.error(f"{config_file}: unknown options {unknown}")
        parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)

    source = str(prepare(args.model)) if args.model in SCALES else args.model
    model, tokenizer = load_policy(source, torch.float32)  # fp32 master weights, bf16 compute
    prompts = to_prompts(load_task(args.task, "train"), args.task)
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.steps, learning_rate=args.lr,
        per_device_train_batch_size=args.completions_per_device,
        num_generations=args.group_size, max_completion_length=args.max_new_tokens,
        logging_steps=1, report_to="none", save_strategy="no", bf16=args.bf16, seed=0,
        gradient_checkpointing=args.gradient_checkpointing, use_cpu=not torch.cuda.is_available(),
    )
    embedding_rank = args.rank if args.embedding_rank is None else args.embedding_rank
    logra = dict(predicted_kl_threshold=args.kl_threshold, kl_probe_every=args.kl_probe_every)
    common = dict(reward_funcs=correct, args=config, train_dataset=prompts,
                  processing_class=tokenizer)
    if args.ready_made:
        groups = logra_param_groups(model, args.rank, embedding_rank)
        optimizer = LoGRA(groups, lr=args.lr, **logra)
        trainer = GRPOTrainer(model, optimizers=(optimizer, None), **common)
        trainer.add_callback(LoGRAMetrics(trainer))
    else:
        trainer = LoGRAGRPOTrainer(
            model, logra=dict(logra, rank=args.rank, embedding_rank=embedding_rank), **common)
    trainer.train()
    rows = [row for row in trainer.state.log_history if "logra/gamma" in row]
    for row in rows:
        print(f"step {row['step']:4d}  reward {row['reward']:.3f}  "
              f"predicted_kl {row['logra/predicted_kl']:.3e}  gamma {row['logra/gamma']:.3f}")
    return rows


if __name__ == "__main__":
    main()
