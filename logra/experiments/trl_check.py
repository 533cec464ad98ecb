"""The kit's GRPO against TRL's `GRPOTrainer`: the same policy, task, reward, batch and lr.

The two are set up to compute the same thing (tests/test_trl.py checks one batch: the same
advantages, loss and gradient):

    group advantages     (r − mean) / (std + 1e-4), std with Bessel's correction (TRL: group)
    loss                 token-level mean over the batch's response tokens (TRL: "dapo")
    one update per batch ratio 1, so the clip is inactive (TRL: num_iterations 1)
    no KL penalty        β = 0 (TRL's default)
    AdamW                lr, β = (0.9, 0.999), ε = 1e-8, weight decay 0, constant lr, no
                         gradient clipping (TRL, via transformers' Trainer, would decay the lr
                         linearly and clip the norm at 1.0 unless told otherwise)
    precision            fp32 (TRL's GRPOConfig defaults to bf16, which moves every
                         log-probability by ~1e-3 on the proxy)
    sampling             temperature 1, no top-k/top-p, completions up to max_new_tokens

What stays different: the random streams (which prompts each step draws, the sampling noise),
so the curves are compared over seeds, not step by step. `trl_run` returns TRL's per-step mean
training reward; the kit's comes from its own run records.
"""

from __future__ import annotations

import tempfile
from typing import Any

import pandas as pd
import torch

from logra.data.grading import reward
from logra.models import load_policy
from logra.rl import runner
from logra.rl.config import GRPOConfig


def trl_run(config: GRPOConfig) -> pd.DataFrame:
    """TRL's GRPO on the kit's resolved GRPO `config` (its model, task, seed, prompts_per_step,
    group_size, max_new_tokens, lr, steps): step, reward (mean of the step's completions)."""
    import transformers
    import trl

    torch.set_num_threads(config.threads)
    # the kit's prompts (the trainer's own evaluation and drift probe are not used)
    trainer = runner.Trainer(config.replace(eval_prompts=1, eval_samples=None,
                                            eval_sampled_prompts=None, drift_probe_every=None,
                                            kl_drift_source=None), progress=False)
    prompts = trainer.train_prompts.select_columns(["prompt", "gold"])
    policy, tokenizer = load_policy(trainer.source)

    def graded(completions: list[str], gold: list[str], **_: Any) -> list[float]:
        return [reward(text, answer) for text, answer in zip(completions, gold, strict=True)]

    with tempfile.TemporaryDirectory() as out:
        args = trl.GRPOConfig(
            output_dir=out, seed=config.seed, max_steps=config.steps,
            per_device_train_batch_size=config.prompts_per_step * config.group_size,
            num_generations=config.group_size, max_completion_length=config.max_new_tokens,
            learning_rate=config.lr, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=config.weight_decay, max_grad_norm=0.0, beta=config.beta,
            epsilon=config.clip_eps, loss_type="dapo", scale_rewards="group",
            num_iterations=config.updates_per_batch, temperature=1.0, top_p=1.0, top_k=0,
            bf16=False, use_cpu=True, logging_steps=1, save_strategy="no", report_to="none",
            disable_tqdm=True)
        trl_trainer = trl.GRPOTrainer(policy, graded, args=args, train_dataset=prompts,
                                      processing_class=tokenizer)
        # without its bars transformers prints each step's log dict (PrinterCallback); the
        # rewards are read from the log history below, a notebook's output is not a log
        trl_trainer.remove_callback(transformers.PrinterCallback)
        trl_trainer.train()
    rows = [dict(step=int(row["step"]), reward=float(row["reward"]))
            for row in trl_trainer.state.log_history if "reward" in row and "step" in row]
    return pd.DataFrame(rows)


def curves(kit: pd.DataFrame, trl_rewards: pd.DataFrame, window: int) -> pd.DataFrame:
    """Both sources' training reward per step and seed, as rolling means over `window` steps:
    step, seed, source ("kit" or "TRL"), reward. `kit` holds the kit's records with a seed
    column; `trl_rewards` TRL's rewards with a seed column."""
    frames = []
    for source, frame in (("kit", kit[kit["step"] > 0]), ("TRL", trl_rewards)):
        frame = frame.sort_values(["seed", "step"])
        smooth = frame.groupby("seed")["reward"].transform(
            lambda s: s.rolling(window, min_periods=1).mean())
        frames.append(frame[["step", "seed"]].assign(source=source, reward=smooth))
    return pd.concat(frames, ignore_index=True)


def agreement(kit: pd.DataFrame, trl_rewards: pd.DataFrame, block: int) -> pd.DataFrame:
    """Mean training reward per block of `block` steps, per source: the mean over seeds and the
    lowest and highest seed; `overlap` says whether the two seed ranges meet."""
    rows = []
    kit = kit[kit["step"] > 0]
    last = int(min(kit["step"].max(), trl_rewards["step"].max()))
    for start in range(1, last + 1, block):
        stop = min(start + block - 1, last)
        row: dict[str, Any] = dict(steps=f"{start}-{stop}")
        ranges = []
        for source, frame in (("kit", kit), ("TRL", trl_rewards)):
            means = frame[frame["step"].between(start, stop)].groupby("seed")["reward"].mean()
            row.update({f"{source} mean": means.mean(), f"{source} lowest": means.min(),
                        f"{source} highest": means.max()})
            ranges.append((means.min(), means.max()))
        (a_low, a_high), (b_low, b_high) = ranges
        row["overlap"] = bool(a_low <= b_high and b_low <= a_high)
        rows.append(row)
    return pd.DataFrame(rows)
