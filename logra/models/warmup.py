"""Supervised warm-up of a proxy: next-token loss on the reference solutions, prompt masked.

Each step trains on one task (math-synth with probability `math_fraction`, else gsm-synth), so a
batch is padded only to its own task's lengths. The batch of step s is a function of (seed, s)
alone, which makes a resumed run identical to an uninterrupted one. Every `eval_every` steps the
greedy accuracy on held-out gsm-synth rows decides whether to stop; every `checkpoint_every`
steps the model, optimizer and history are written atomically, and a later call resumes there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import torch
from tqdm.auto import tqdm
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    get_cosine_with_min_lr_schedule_with_warmup,
)

from logra import io
from logra.models.evaluate import evaluate_greedy
from logra.models.ladder import Warmup

IGNORE = -100  # label of positions without loss (prompt, padding)


@dataclass
class WarmupResult:
    """What a warm-up did: steps taken, seconds spent, and the (step, loss, accuracy) history."""

    steps: int = 0
    seconds: float = 0.0
    stopped_early: bool = False
    history: list[dict[str, float]] = field(default_factory=list)


def collate(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], completions: list[str]
) -> dict[str, torch.Tensor]:
    """Right-padded input_ids, attention_mask and labels of prompt + completion + eos.

    The loss falls on the completion and eos only. Right padding keeps every sequence at
    positions 0.., as left-padded generation sees them.
    """
    prompt_ids = tokenizer(prompts)["input_ids"]
    completion_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    sequences = [p + c + [tokenizer.eos_token_id] for p, c in zip(prompt_ids, completion_ids,
                                                                   strict=True)]
    width = max(len(seq) for seq in sequences)
    input_ids = torch.full((len(sequences), width), tokenizer.pad_token_id)
    labels = torch.full((len(sequences), width), IGNORE)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, (prompt, seq) in enumerate(zip(prompt_ids, sequences, strict=True)):
        seq = torch.tensor(seq)
        input_ids[i, :len(seq)] = seq
        mask[i, :len(seq)] = 1
        labels[i, len(prompt):len(seq)] = seq[len(prompt):]
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def step_rows(config: Warmup, step: int, sizes: dict[str, int]) -> tuple[str, list[int]]:
    """The task and the row indices that step `step` trains on (a function of seed and step)."""
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    on_math = torch.rand((), generator=gen).item() < config.math_fraction
    task = "math-synth" if on_math else "gsm-synth"
    rows = torch.randint(sizes[task], (config.batch_size,), generator=gen).tolist()
    return task, rows


def warmup_cosine(warmup_steps: int, total_steps: int, min_lr_rate: float
                  ) -> Callable[[int], float]:
    """The factor f(t) of the learning rate before step t + 1 (a `LambdaLR`'s t counts the steps
    taken): linear warm-up over W = `warmup_steps`, then cosine decay to ρ = `min_lr_rate` at
    T = `total_steps`:

        f(t) = (t + 1) / W                                      for t < W
        f(t) = ρ + (1 − ρ) · ½ (1 + cos(π (t − W) / (T − W)))     for W ≤ t ≤ T

    This is transformers' `get_cosine_with_min_lr_schedule_with_warmup` with its warm-up one
    step ahead: transformers' warm-up is t / W, so its first step trains at lr 0 and ours at
    lr / W, and both reach lr at t = W. The shipped proxies were warmed up with this schedule
    and every GRPO figure starts from them, so the shift stays (tests/test_models.py shows
    where the two agree). transformers' factor is read off a schedule on a stand-in parameter.
    """
    stand_in = torch.optim.SGD([torch.zeros(1)], lr=1.0)
    cosine = get_cosine_with_min_lr_schedule_with_warmup(
        stand_in, warmup_steps, total_steps, min_lr_rate=min_lr_rate).lr_lambdas[0]
    return lambda step: cosine(step + 1 if step < warmup_steps else step)


def warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: Warmup,
    train: dict[str, datasets.Dataset],
    valid_prompts: datasets.Dataset,
    checkpoint: Path,
    checkpoint_key: str,
    progress: bool = True,
) -> WarmupResult:
    """Train `model` in place on `train` (task -> SFT dataset with prompt/completion columns).

    `valid_prompts` (prompt/gold) is what the stop check evaluates. A checkpoint at `checkpoint`
    whose key equals `checkpoint_key` is resumed; the caller deletes it once the model is saved.
    """
    columns = {task: sft[:] for task, sft in train.items()}  # column name -> list of rows
    sizes = {task: len(sft) for task, sft in train.items()}
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(  # cosine decay to 10 % of lr
        optimizer, warmup_cosine(config.lr_warmup_steps, config.max_steps, 0.1))
    result = WarmupResult()
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=True)
        if state["key"] == checkpoint_key:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["schedule"])
            result = WarmupResult(**state["result"])
    model.train()
    bar = tqdm(total=config.max_steps, initial=result.steps, desc="warm-up", disable=not progress)
    losses: list[float] = []
    while result.steps < config.max_steps and not result.stopped_early:
        start = time.perf_counter()
        task, rows = step_rows(config, result.steps, sizes)
        prompts = [columns[task]["prompt"][r] for r in rows]
        completions = [columns[task]["completion"][r] for r in rows]
        loss = model(**collate(tokenizer, prompts, completions)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        result.steps += 1
        if result.steps % config.eval_every == 0 or result.steps == config.max_steps:
            accuracy = evaluate_greedy(
                model, tokenizer, valid_prompts, config.max_new_tokens, config.eval_batch_size
            )
            result.history.append(
                {"step": result.steps, "loss": sum(losses) / len(losses), "accuracy": accuracy}
            )
            losses = []
            bar.set_postfix(loss=f"{result.history[-1]['loss']:.3f}", acc=f"{accuracy:.2f}")
            stop = config.stop_accuracy
            result.stopped_early = stop is not None and accuracy >= stop
        result.seconds += time.perf_counter() - start
        bar.update()
        if result.steps % config.checkpoint_every == 0:
            _save_checkpoint(checkpoint, checkpoint_key, model, optimizer, schedule, result)
    bar.close()
    model.eval()
    return result


def _save_checkpoint(
    path: Path,
    key: str,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    result: WarmupResult,
) -> None:
    state = {
        "key": key,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "result": asdict(result),
    }
    with io.atomic_path(path) as tmp:
        torch.save(state, tmp)
