"""Prompt templates: what the policy sees, and the completion it is warmed up to write.

Proxies are trained on `PROXY_TEMPLATE` ("Q: ...\\nA: ", then the worked solution), so the
generated tasks use exactly that. The hub tasks are for the real instruct models: a plain prompt
that asks for the answer format the grader reads. A chat model would normally get this text
wrapped by `tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
add_generation_prompt=True)`; the RL harness is the place to do that, per model.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets

PROXY_TEMPLATE = "Q: {text}\nA: "
GSM8K_TEMPLATE = (
    "Question: {text}\nSolve it step by step, then give the final answer on its own line as "
    "'#### <number>'.\nAnswer: "
)
MATH_TEMPLATE = (
    "Problem: {text}\nSolve it step by step, then put the final answer in \\boxed{{}}.\n"
    "Solution: "
)


@dataclass(frozen=True)
class TaskFormat:
    """How a task's rows become prompts: template, problem column, solution column, gold rule."""

    template: str
    question: str
    solution: str
    gold_after_hashes: bool  # GSM8K: gold is what follows "####" in `answer`; MATH: `answer`

    def gold(self, row: dict) -> str:
        """The gold answer string of one row."""
        if self.gold_after_hashes:
            return row["answer"].rsplit("####", 1)[-1].strip()
        return row["answer"]


FORMATS: dict[str, TaskFormat] = {
    "gsm-synth": TaskFormat(PROXY_TEMPLATE, "question", "answer", gold_after_hashes=True),
    "math-synth": TaskFormat(PROXY_TEMPLATE, "problem", "solution", gold_after_hashes=False),
    "gsm8k": TaskFormat(GSM8K_TEMPLATE, "question", "answer", gold_after_hashes=True),
    "math": TaskFormat(MATH_TEMPLATE, "problem", "solution", gold_after_hashes=False),
}


def to_prompts(dataset: datasets.Dataset, task: str) -> datasets.Dataset:
    """Columns `prompt` (the text given to the policy) and `gold` (the gold answer string)."""
    fmt = task_format(task)
    return dataset.map(
        lambda row: {"prompt": fmt.template.format(text=row[fmt.question]), "gold": fmt.gold(row)},
        remove_columns=dataset.column_names,
    )


def to_sft(dataset: datasets.Dataset, task: str) -> datasets.Dataset:
    """Columns `prompt` and `completion` (the reference solution) for supervised warm-up."""
    fmt = task_format(task)
    return dataset.map(
        lambda row: {
            "prompt": fmt.template.format(text=row[fmt.question]),
            "completion": row[fmt.solution],
        },
        remove_columns=dataset.column_names,
    )


def task_format(task: str) -> TaskFormat:
    """The format of `task`; ValueError naming the valid tasks otherwise."""
    if task not in FORMATS:
        raise ValueError(f"unknown task {task!r}; valid tasks: {list(FORMATS)}")
    return FORMATS[task]
