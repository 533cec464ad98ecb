"""Greedy evaluation: batched, left-padded `model.generate`, graded by `logra.data.grading`."""

from __future__ import annotations

from collections.abc import Sequence

import datasets
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from logra.data.grading import reward


@torch.no_grad()
def greedy_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    max_new_tokens: int,
    batch_size: int,
) -> list[str]:
    """The greedy completion of every prompt (prompt text excluded), in the order given.

    Prompts are batched by length (less padding) and padded on the left, so every completion
    starts right after its own prompt.
    """
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(
            f"max_new_tokens and batch_size must be >= 1, got {max_new_tokens}, {batch_size}"
        )
    was_training = model.training
    model.eval()
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    completions: list[str] = [""] * len(prompts)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = tokenizer(
            [prompts[i] for i in chunk], return_tensors="pt", padding=True, padding_side="left"
        ).to(model.device)
        output = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        new_tokens = output[:, batch["input_ids"].shape[1]:]
        for i, text in zip(chunk, tokenizer.batch_decode(new_tokens, skip_special_tokens=True),
                           strict=True):
            completions[i] = text
    model.train(was_training)
    return completions


def evaluate_greedy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset_prompts: datasets.Dataset,
    max_new_tokens: int,
    batch_size: int,
) -> float:
    """Greedy pass@1 on a dataset with `prompt` and `gold` columns (see `logra.data.to_prompts`)."""
    missing = {"prompt", "gold"} - set(dataset_prompts.column_names)
    if missing:
        raise ValueError(
            f"dataset_prompts lacks columns {sorted(missing)}; build it with logra.data.to_prompts"
        )
    if len(dataset_prompts) == 0:
        raise ValueError("dataset_prompts is empty")
    prompts, golds = list(dataset_prompts["prompt"]), list(dataset_prompts["gold"])
    completions = greedy_completions(model, tokenizer, prompts, max_new_tokens, batch_size)
    rewards = [reward(c, g) for c, g in zip(completions, golds, strict=True)]
    return sum(rewards) / len(rewards)
