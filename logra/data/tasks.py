"""`load_task`: every task as a `datasets.Dataset` in its benchmark's schema.

Generated tasks are written once as JSON lines under `data_dir` and read back with
`datasets.load_dataset("json", ...)`; hub tasks come from `datasets.load_dataset(hub id)`. Either
way the rows look the same to the caller:

    gsm-synth, gsm8k     question, answer (worked solution ending in "#### n")
    math-synth, math     problem, solution (ending in \\boxed{...}), answer
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

from logra import io
from logra.data import synth
from logra.data.grading import last_boxed
from logra.paths import results_root

DATA_DIR = results_root() / "data"

SYNTH_SEED = 0
SYNTH_SIZES = {"train": 20_000, "test": 500}

GSM8K_ID = ("openai/gsm8k", "main")
MATH_TEST_ID = "HuggingFaceH4/MATH-500"  # the 500-problem test subset of Lightman et al. (2023)
MATH_TRAIN_ID = "DigitalLearningGmbH/MATH-lighteval"  # the 7,500 MATH train problems

SYNTH_TASKS = tuple(synth.GENERATORS)
HUB_TASKS = ("gsm8k", "math")
TASKS = (*SYNTH_TASKS, *HUB_TASKS)
MATH_COLUMNS = ["problem", "solution", "answer"]


def load_task(task: str, split: str, data_dir: str | Path | None = None,
              test_rows: int | None = None) -> datasets.Dataset:
    """The `split` ("train" or "test") of `task` (one of `TASKS`) as a Dataset.

    `data_dir` is where generated tasks are cached (default results/data); hub tasks live in the
    `datasets` cache and are downloaded on first use. `test_rows` > 500 extends a generated
    task's test split to that many rows with more questions held out of the train split (its
    first 500 rows stay the canonical test split; `synth.generate`); hub tasks ignore it.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; valid tasks: {list(TASKS)}")
    if split not in synth.SPLITS:
        raise ValueError(f"unknown split {split!r} for {task}; valid splits: {list(synth.SPLITS)}")
    if task == "gsm8k":
        return datasets.load_dataset(*GSM8K_ID, split=split)
    if task == "math":
        return _load_math(split)
    data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
    n = SYNTH_SIZES[split]
    if split == "test" and test_rows is not None and test_rows > n:
        n = test_rows
    path = synth_path(task, split if n == SYNTH_SIZES[split] else f"{split}{n}", data_dir)
    if not path.exists():
        rows = synth.generate(task, split, SYNTH_SEED, n, SYNTH_SIZES["test"],
                              SYNTH_SIZES["train"])
        io.write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    return datasets.load_dataset(
        "json", data_files=str(path), split="train", cache_dir=str(data_dir / "hf-cache")
    )


def synth_key() -> str:
    """Names the generated splits: it changes with the generator version, seed, or sizes."""
    sizes = "-".join(f"{split}{n}" for split, n in SYNTH_SIZES.items())
    return f"v{synth.GENERATOR_VERSION}-seed{SYNTH_SEED}-{sizes}"


def synth_path(task: str, split: str, data_dir: Path) -> Path:
    """Where a generated split is cached."""
    return data_dir / task / synth_key() / f"{split}.jsonl"


def _load_math(split: str) -> datasets.Dataset:
    """MATH-500 for test, the MATH train set for train, as `problem`, `solution`, `answer`."""
    if split == "test":
        data = datasets.load_dataset(MATH_TEST_ID, split="test")
    else:
        data = datasets.load_dataset(MATH_TRAIN_ID, split="train")
    if "answer" not in data.column_names:
        data = data.map(lambda row: {"answer": last_boxed(row["solution"]) or ""})
    return data.select_columns(MATH_COLUMNS)
