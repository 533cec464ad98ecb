"""`load_task`: every task of `logra.data.registry` as a `datasets.Dataset` in its family's schema.

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
from logra.data.registry import SPLITS, Task, get_task
from logra.data.splits import generate
from logra.paths import results_root
from logra.quiet import no_dataset_bars

DATA_DIR = results_root() / "data"

SYNTH_SEED = 0
SYNTH_SIZES = {"train": 20_000, "test": 500}


def load_task(task: str, split: str, data_dir: str | Path | None = None,
              test_rows: int | None = None) -> datasets.Dataset:
    """The `split` ("train" or "test") of `task` (a name of `registry.TASKS`) as a Dataset.

    `data_dir` is where generated tasks are cached (default results/data); hub tasks live in the
    `datasets` cache and are downloaded on first use. `test_rows` > 500 extends a generated
    task's test split to that many rows with more questions held out of the train split (its
    first 500 rows stay the canonical test split; `splits.generate`); hub tasks ignore it.
    """
    spec = get_task(task)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for {task}; valid splits: {list(SPLITS)}")
    if not spec.generated:
        return _load_hub(spec, split)
    data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
    n = SYNTH_SIZES[split]
    if split == "test" and test_rows is not None and test_rows > n:
        n = test_rows
    path = synth_path(task, split if n == SYNTH_SIZES[split] else f"{split}{n}", data_dir)
    if not path.exists():
        rows = generate(task, split, SYNTH_SEED, n, SYNTH_SIZES["test"], SYNTH_SIZES["train"])
        io.write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    with no_dataset_bars():
        return datasets.load_dataset("json", data_files=str(path), split="train",
                                     cache_dir=str(data_dir / "hf-cache"))


def synth_key() -> str:
    """Names the generated splits: it changes with the generator version, seed, or sizes."""
    sizes = "-".join(f"{split}{n}" for split, n in SYNTH_SIZES.items())
    return f"v{synth.GENERATOR_VERSION}-seed{SYNTH_SEED}-{sizes}"


def synth_path(task: str, split: str, data_dir: Path) -> Path:
    """Where a generated split is cached."""
    return data_dir / task / synth_key() / f"{split}.jsonl"


def _load_hub(task: Task, split: str) -> datasets.Dataset:
    """A hub task's split in its family's columns. A MATH source without `answer`
    (MATH-lighteval) gets it from the last `\\boxed{}` of the solution."""
    source = task.hub[split]
    data = datasets.load_dataset(*source.load_args(), split=source.split)
    if "answer" not in data.column_names:
        with no_dataset_bars():
            data = data.map(lambda row: {"answer": last_boxed(row[task.family.solution]) or ""})
    return data.select_columns(list(task.family.columns))
