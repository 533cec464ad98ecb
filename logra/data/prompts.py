"""Prompts: a task's rows as what the policy sees, and the completion it is warmed up to write.

The template, the problem column and the gold rule of each task are in `logra.data.registry`.
"""

from __future__ import annotations

import datasets

from logra.data.registry import get_task
from logra.quiet import no_dataset_bars


def to_prompts(dataset: datasets.Dataset, task: str) -> datasets.Dataset:
    """Columns `prompt` (the text given to the policy) and `gold` (the gold answer string)."""
    spec = get_task(task)
    with no_dataset_bars():
        return dataset.map(lambda row: {"prompt": spec.prompt(row), "gold": spec.gold(row)},
                           remove_columns=dataset.column_names)


def to_sft(dataset: datasets.Dataset, task: str) -> datasets.Dataset:
    """Columns `prompt` and `completion` (the reference solution) for supervised warm-up."""
    spec = get_task(task)
    with no_dataset_bars():
        return dataset.map(
            lambda row: {"prompt": spec.prompt(row), "completion": spec.solution(row)},
            remove_columns=dataset.column_names)
