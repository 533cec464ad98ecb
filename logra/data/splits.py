"""The splits of a generated task, drawn from its generator with a fixed seed.

The test split is drawn first (distinct questions), and the train split never contains a test
question. A test split can be extended past its canonical size for tighter evaluations: the draw
continues, and extra questions the train split holds are dropped, so the first `n_test` rows and
the train split stay what they were.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from logra.data.registry import SPLITS, SYNTH_TASKS, TASKS


def generate(task: str, split: str, seed: int, n: int, n_test: int,
             n_train: int | None = None) -> list[dict[str, str]]:
    """`n` examples of a generated task's split; the same (task, seed, n_test) gives the same split.

    The test split holds distinct questions; its first `n_test` define it, and train examples
    never repeat one of them. A test split of `n` > `n_test` rows continues the same draw and
    skips the questions of the `n_train`-example train split (required then), so its extra rows
    are held out as well and its first `n_test` rows are the canonical test split.
    """
    if task not in SYNTH_TASKS:
        raise ValueError(f"unknown generated task {task!r}; valid: {sorted(SYNTH_TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for {task}; valid: {list(SPLITS)}")
    spec = TASKS[task]
    make, key = spec.example, spec.family.question
    test_rng = random.Random(f"{task}/test/{seed}")
    test = _draw(make, key, test_rng, n_test, exclude=set())
    test_questions = {row[key] for row in test}
    if split == "train":
        return _draw(make, key, random.Random(f"{task}/train/{seed}"), n, test_questions,
                     distinct=False)
    if n <= n_test:
        return test[:n]
    if n_train is None:
        raise ValueError(f"a {task} test split longer than n_test={n_test} needs n_train, "
                         "the size of the train split its extra questions must avoid")
    train = generate(task, "train", seed, n_train, n_test)
    extra = _draw(make, key, test_rng, n - n_test, test_questions | {row[key] for row in train})
    return test + extra


def _draw(
    make: Callable[[random.Random], dict[str, str]],
    key: str,
    rng: random.Random,
    n: int,
    exclude: set[str],
    distinct: bool = True,
) -> list[dict[str, str]]:
    """Draw `n` examples whose `key` is not in `exclude` (and not repeated, if `distinct`)."""
    rows: list[dict[str, str]] = []
    seen = set(exclude)
    for _ in range(100 * n + 1000):
        if len(rows) == n:
            return rows
        row = make(rng)
        if row[key] in seen:
            continue
        if distinct:
            seen.add(row[key])
        rows.append(row)
    raise RuntimeError(f"could not draw {n} distinct examples; the generator's space is too small")
