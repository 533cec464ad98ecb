"""GRPO with TRL's `GRPOTrainer` and LoGRA, on a proxy policy or a hub model.

    pip install -e ".[trl]"
    python scripts/trl_grpo.py --model smoke --max_steps 10        # builds the smoke proxy first
    python scripts/trl_grpo.py --model smoke --max_steps 10 --ready_made  # optimizers=(LoGRA, None)
    # FSDP2 on one 8-GPU node (the subclass path; Trainer refuses a ready-made optimizer under
    # FSDP), the settings of a reported scale read from a file (docs/distributed.md):
    accelerate launch --config_file experiments/launch/accelerate_fsdp2_8gpu.yaml \
        scripts/trl_grpo.py --config experiments/launch/trl_grpo_7b.yaml

Options (`trl.TrlParser`): this script's own (`LoGRAArguments`: the policy, the task and LoGRA's
settings) and every option of TRL's `GRPOConfig` (`--learning_rate`, `--max_steps`,
`--per_device_train_batch_size` = completions each process scores per step, `--num_generations`
= the group size, `--max_completion_length`, `--report_to tensorboard`, `--save_strategy`, ...),
in a `--config` YAML of defaults or on the command line, which wins. `SCRIPT_DEFAULTS` sizes a
CPU run; otherwise TRL's defaults hold (checkpoints every `save_steps`, no reporting).

The reward is 1 for a correct final answer (`logra.data.grading.reward`, the harness's grader).
Every logged step prints LoGRA's `logra/predicted_kl` and `logra/gamma` beside TRL's reward.
The KL prediction is LoGRA's default (`kl_estimator="calibrated"`): the diagonal estimate in nats
per token, refitted by a JVP probe that replays TRL's loss batch every `--kl_probe_every` steps
(`logra.integrations.trainer`). Under FSDP2 the probe is unavailable: the control then warns
once and does not act unless a measured KL is reported with `optimizer.observe_kl`.
"""

from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer, TrlParser

from logra import LoGRA
from logra.data import load_task, to_prompts
from logra.data.grading import reward
from logra.integrations.trainer import add_logra_metrics
from logra.integrations.trl import LoGRAGRPOTrainer
from logra.memory import logra_param_groups
from logra.models import SCALES, load_policy, prepare


@dataclass
class LoGRAArguments:
    """The options of this script that are not `GRPOConfig`'s."""

    model: str = field(default="smoke", metadata={"help": "a proxy scale, directory or hub id"})
    task: str = field(default="gsm-synth", metadata={"help": "a task of logra.data.TASKS"})
    rank: int = field(default=16, metadata={"help": "LoGRA's sketch rank"})
    embedding_rank: int | None = field(
        default=None, metadata={"help": "sketch rank of the embedding and head (default: rank)"})
    kl_threshold: float = field(default=0.02, metadata={"help": "δ, nats per token per step"})
    kl_probe_every: int = field(default=10, metadata={"help": "steps between JVP probes"})
    ready_made: bool = field(default=False, metadata={
        "help": "pass optimizers=(LoGRA(...), None) instead of the subclass"})


# GRPOConfig defaults for a CPU-sized run; a --config file and the command line override them
SCRIPT_DEFAULTS = dict(
    output_dir="results/trl_grpo", max_steps=10, learning_rate=1e-3,
    per_device_train_batch_size=16, num_generations=4, max_completion_length=48,
    logging_steps=1, seed=0, use_cpu=not torch.cuda.is_available(),
)


def correct(completions: list[str], gold: list[str], **_) -> list[float]:
    """TRL reward function: the dataset's `gold` column arrives as a keyword argument."""
    return [reward(text, answer) for text, answer in zip(completions, gold, strict=True)]


def parse_args(argv: list[str] | None = None) -> tuple[LoGRAArguments, GRPOConfig]:
    """This script's options and TRL's `GRPOConfig`, from `--config` and the command line."""
    parser = TrlParser((LoGRAArguments, GRPOConfig), description=__doc__.split("\n")[0])
    parser.set_defaults(**SCRIPT_DEFAULTS)
    return parser.parse_args_and_config(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    options, config = parse_args(argv)

    source = str(prepare(options.model)) if options.model in SCALES else options.model
    model, tokenizer = load_policy(source, torch.float32)  # fp32 master weights, bf16 compute
    prompts = to_prompts(load_task(options.task, "train"), options.task)
    embedding_rank = options.rank if options.embedding_rank is None else options.embedding_rank
    logra = dict(predicted_kl_threshold=options.kl_threshold,
                 kl_probe_every=options.kl_probe_every)
    common = dict(reward_funcs=correct, args=config, train_dataset=prompts,
                  processing_class=tokenizer)
    if options.ready_made:  # the optimizer settings the subclass takes from the GRPOConfig
        groups = logra_param_groups(model, options.rank, embedding_rank)
        optimizer = LoGRA(groups, config.learning_rate, (config.adam_beta1, config.adam_beta2),
                          config.adam_epsilon, config.weight_decay, **logra)
        trainer = GRPOTrainer(model, optimizers=(optimizer, None), **common)
        add_logra_metrics(trainer)
    else:
        trainer = LoGRAGRPOTrainer(
            model, logra=dict(logra, rank=options.rank, embedding_rank=embedding_rank),
            **common)
    trainer.train()
    rows = [row for row in trainer.state.log_history if "logra/gamma" in row]
    for row in rows:
        print(f"step {row['step']:4d}  reward {row['reward']:.3f}  "
              f"predicted_kl {row['logra/predicted_kl']:.3e}  gamma {row['logra/gamma']:.3f}")
    return rows


if __name__ == "__main__":
    main()
