"""Held-out evaluation of a policy, problem by problem: greedy and sampled pass@1.

Greedy pass@1 (one argmax completion per problem) is the conservative number; sampled pass@1 at
temperature 1 (the mean reward of `samples` completions of each problem, drawn by
`rollout.sample` as the training rollouts are) moves first when RL sharpens the policy. Both are
kept per problem, so that two policies evaluated on the same problems can be compared by a paired
test (`logra.stats`), and the sampled draws use fixed per-row seeds (`seed`): two evaluations of
the same problems share their sampling noise (common random numbers), and so do two runs.

    problem   index of the held-out problem (the test split's row)
    greedy    1.0 if the greedy completion is correct, else 0.0
    sampled   share of the `samples` sampled completions that are correct (NaN past
              `sampled_prompts`, or with samples = 0)
"""

from __future__ import annotations

import math

import datasets
import pandas as pd
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from logra.data.grading import reward
from logra.models import greedy_completions
from logra.rl.rollout import sample

PROBLEM_COLUMNS = ("problem", "greedy", "sampled")


def held_out(
    policy: nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: datasets.Dataset, *,
    max_new_tokens: int, batch_size: int, samples: int = 0, sampled_prompts: int | None = None,
    seed: int = 0, first_problem: int = 0,
) -> pd.DataFrame:
    """The per-problem frame of the module docstring for `prompts` (`prompt`, `gold` columns).

    Sampled pass@1 runs on the first `sampled_prompts` of them (None: all), `samples` each, in
    batches of about `batch_size` completions; `first_problem` is the index of prompts[0] (a
    rank's share starts there), and the sampling seeds follow the index, so a share draws what
    the whole would.
    """
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    golds = list(prompts["gold"])
    texts = list(prompts["prompt"])
    completions = greedy_completions(policy, tokenizer, texts, max_new_tokens, batch_size)
    greedy = [reward(c, g) for c, g in zip(completions, golds, strict=True)]
    sampled = [math.nan] * len(texts)
    n_sampled = len(texts) if sampled_prompts is None else min(sampled_prompts, len(texts))
    if samples:
        per_batch = max(1, batch_size // samples)
        for start in range(0, n_sampled, per_batch):
            stop = min(start + per_batch, n_sampled)
            rollout = sample(policy, tokenizer, texts[start:stop], samples, max_new_tokens,
                             seed=seed, first_row=(first_problem + start) * samples)
            graded = torch.tensor([reward(text, golds[start + i // samples])
                                   for i, text in enumerate(rollout.completions)],
                                  dtype=torch.float64)
            sampled[start:stop] = graded.view(stop - start, samples).mean(dim=1).tolist()
    return pd.DataFrame(dict(problem=range(first_problem, first_problem + len(texts)),
                             greedy=greedy, sampled=sampled))


def summary(problems: pd.DataFrame) -> dict[str, float]:
    """eval_accuracy (greedy pass@1) and eval_sampled (sampled pass@1, NaN when not sampled)."""
    sampled = problems["sampled"].dropna()
    return dict(eval_accuracy=float(problems["greedy"].mean()),
                eval_sampled=float(sampled.mean()) if len(sampled) else math.nan)
