"""The task registry: one `Task` per task, the single description every layer reads.

    name        label       family  rows                                             template
    gsm-synth   GSM8K-like  gsm     generated: `synth.gsm_example`                   PROXY_TEMPLATE
    math-synth  MATH-like   math    generated: `synth.math_example`                  PROXY_TEMPLATE
    gsm8k       GSM8K       gsm     hub: openai/gsm8k (main)                         GSM8K_TEMPLATE
    math        MATH        math    hub: MATH-500 (test), MATH-lighteval (train)     MATH_TEMPLATE

A task's family is the benchmark schema its rows share (`Family`: columns, where the gold answer
is) and the reported column its accuracy stands for. Proxies are trained on `PROXY_TEMPLATE`
("Q: ...\\nA: ", then the worked solution), so the generated tasks use exactly that. The hub
tasks are for the real instruct models: a plain prompt that asks for the answer format the
grader reads. A chat model would normally get this text wrapped by
`tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)`;
the RL harness is the place to do that, per model.

Adding a task is adding one `Task` to `TASKS`: loading (`logra.data.tasks`), prompts
(`logra.data.prompts`), the GRPO config's valid tasks and the experiments' labels follow.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from logra.data import synth

SPLITS = ("train", "test")

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
class Family:
    """A benchmark's row schema, shared by its generated and hub tasks.

    `name` ("gsm" or "math") is the reported benchmark a task's accuracy stands for; a row holds
    `columns`, the problem in `question`, the worked reference solution in `solution`.
    """

    name: str
    question: str
    solution: str
    columns: tuple[str, ...]
    gold_after_hashes: bool  # GSM8K: gold is what follows "####" in `answer`; MATH: `answer`

    def gold(self, row: dict) -> str:
        """The gold answer string of one row."""
        if self.gold_after_hashes:
            return row["answer"].rsplit("####", 1)[-1].strip()
        return row["answer"]


GSM = Family("gsm", question="question", solution="answer", columns=("question", "answer"),
             gold_after_hashes=True)
MATH = Family("math", question="problem", solution="solution",
              columns=("problem", "solution", "answer"), gold_after_hashes=False)


@dataclass(frozen=True)
class HubSplit:
    """Where one split of a hub task lives: `datasets.load_dataset(path[, config], split=split)`."""

    path: str
    split: str
    config: str | None = None  # the dataset's configuration, for datasets that have several

    def load_args(self) -> tuple[str, ...]:
        """The positional arguments of `datasets.load_dataset`: the path, then the config."""
        return (self.path,) if self.config is None else (self.path, self.config)


@dataclass(frozen=True)
class Task:
    """One task: its name, how tables and figures label it, its family, its prompt template
    (`{text}` stands for the problem), and where its rows come from — drawn by `example` (a
    generated task: one row from an RNG) or read from `hub` (split name -> `HubSplit`)."""

    name: str
    label: str
    family: Family
    template: str
    example: Callable[[random.Random], dict[str, str]] | None = None
    hub: dict[str, HubSplit] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.example is None) == (not self.hub):
            raise ValueError(f"task {self.name!r} needs exactly one source of rows: a generator "
                             "(`example`) or hub splits (`hub`)")
        if self.hub and set(self.hub) != set(SPLITS):
            raise ValueError(f"hub task {self.name!r} must name the splits {list(SPLITS)}, "
                             f"got {list(self.hub)}")

    @property
    def generated(self) -> bool:
        """Whether the rows are generated here (else they come from the hub)."""
        return self.example is not None

    def prompt(self, row: dict) -> str:
        """The text given to the policy for one row."""
        return self.template.format(text=row[self.family.question])

    def gold(self, row: dict) -> str:
        """The gold answer string of one row."""
        return self.family.gold(row)

    def solution(self, row: dict) -> str:
        """The worked reference solution of one row (the warm-up's completion)."""
        return row[self.family.solution]


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("gsm-synth", "GSM8K-like", GSM, PROXY_TEMPLATE, example=synth.gsm_example),
        Task("math-synth", "MATH-like", MATH, PROXY_TEMPLATE, example=synth.math_example),
        Task("gsm8k", "GSM8K", GSM, GSM8K_TEMPLATE,
             hub={split: HubSplit("openai/gsm8k", split, config="main") for split in SPLITS}),
        Task("math", "MATH", MATH, MATH_TEMPLATE, hub={
            # the 500-problem test subset of Lightman et al. (2023); the 7,500 train problems
            "test": HubSplit("HuggingFaceH4/MATH-500", "test"),
            "train": HubSplit("DigitalLearningGmbH/MATH-lighteval", "train"),
        }),
    )
}
SYNTH_TASKS = tuple(name for name, task in TASKS.items() if task.generated)


def get_task(name: str) -> Task:
    """The task called `name`; ValueError naming the valid tasks otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {list(TASKS)}")
    return TASKS[name]
