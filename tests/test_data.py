"""Generated tasks (determinism, schema, arithmetic), load_task, hub loaders (faked), prompts,
the task registry."""

from __future__ import annotations

import hashlib
import json
import random
import re
from fractions import Fraction

import datasets
import pytest

from logra.data import (
    TASKS,
    get_task,
    load_task,
    registry,
    splits,
    synth,
    tasks,
    to_prompts,
    to_sft,
)
from logra.data.grading import is_correct

N = 300
MATH_TEST_ID = "HuggingFaceH4/MATH-500"
MATH_TRAIN_ID = "DigitalLearningGmbH/MATH-lighteval"


def _rows(task: str, split: str, seed: int = 0) -> list[dict[str, str]]:
    return splits.generate(task, split, seed, N, N)


@pytest.mark.parametrize("task", ["gsm-synth", "math-synth"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_generation_is_deterministic_per_seed(task: str, split: str) -> None:
    assert _rows(task, split, seed=0) == _rows(task, split, seed=0)
    assert _rows(task, split, seed=0) != _rows(task, split, seed=1)


@pytest.mark.parametrize("task, key", [("gsm-synth", "question"), ("math-synth", "problem")])
def test_splits_are_disjoint_and_test_questions_distinct(task: str, key: str) -> None:
    test = {row[key] for row in _rows(task, "test")}
    assert len(test) == N
    assert not test & {row[key] for row in _rows(task, "train")}


def test_gsm_schema_and_arithmetic() -> None:
    for row in _rows("gsm-synth", "train"):
        assert set(row) == {"question", "answer"}
        assert row["question"].endswith("have now?")
        chain, final = row["answer"].split("\n#### ")
        equations = re.findall(r"(\d+)([-+*/])(\d+)=(\d+)\.", chain)
        assert 2 <= len(equations) <= 3
        for a, op, b, result in equations:
            assert Fraction(eval(f"{a}{op}{b}")) == int(result)
        assert equations[-1][3] == final
        assert len(row["answer"]) <= synth.MAX_COMPLETION_CHARS


def _latex_value(answer: str) -> Fraction:
    match = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", answer)
    if match:
        return Fraction(int(match[2]), int(match[3])) * (-1 if match[1] else 1)
    return Fraction(int(answer))


def test_math_schema_and_answers() -> None:
    for row in _rows("math-synth", "train"):
        assert set(row) == {"problem", "solution", "answer"}
        assert row["solution"].endswith(f"\\boxed{{{row['answer']}}}")
        assert len(row["solution"]) <= synth.MAX_COMPLETION_CHARS
        value = _latex_value(row["answer"])
        if row["problem"].startswith("Solve"):
            a, b, c = map(int, re.fullmatch(r"Solve (-?\d+)x([-+]\d+)=(-?\d+) for x\.",
                                            row["problem"]).groups())
            assert a * value + b == c
        else:
            expression = re.fullmatch(r"Compute (.*)\.", row["problem"])[1]
            exact = eval(re.sub(r"(\d+)", r"Fraction(\1)", expression), {"Fraction": Fraction})
            assert exact == value


@pytest.mark.parametrize("task", ["gsm-synth", "math-synth"])
def test_reference_solutions_grade_correct(task: str) -> None:
    prompts = to_prompts(datasets.Dataset.from_list(_rows(task, "test")[:50]), task)
    sft = to_sft(datasets.Dataset.from_list(_rows(task, "test")[:50]), task)
    for completion, gold in zip(sft["completion"], prompts["gold"], strict=True):
        assert is_correct(completion, gold)


def test_math_mixes_problem_kinds() -> None:
    starts = {row["problem"].split()[0] for row in _rows("math-synth", "test")}
    fractions = [row for row in _rows("math-synth", "test") if "\\frac" in row["answer"]]
    negatives = [row for row in _rows("math-synth", "test") if row["answer"].startswith("-")]
    assert starts == {"Solve", "Compute"}
    assert fractions and negatives


@pytest.mark.parametrize("task, key", [("gsm-synth", "question"), ("math-synth", "problem")])
def test_a_longer_test_split_extends_the_canonical_one_with_held_out_questions(task, key) -> None:
    longer = splits.generate(task, "test", 0, N + 200, N, n_train=N)
    assert longer[:N] == _rows(task, "test")
    questions = [row[key] for row in longer]
    assert len(set(questions)) == N + 200
    assert not set(questions) & {row[key] for row in _rows(task, "train")}
    assert splits.generate(task, "train", 0, N, N) == _rows(task, "train")  # train unchanged
    with pytest.raises(ValueError, match="needs n_train"):
        splits.generate(task, "test", 0, N + 1, N)


def test_load_task_extends_a_generated_test_split_in_its_own_file(tmp_path) -> None:
    canonical = load_task("gsm-synth", "test", tmp_path)
    assert len(load_task("gsm-synth", "test", tmp_path, test_rows=100)) == len(canonical)
    longer = load_task("gsm-synth", "test", tmp_path, test_rows=700)
    assert len(longer) == 700 and longer[:500] == canonical[:]
    assert tasks.synth_path("gsm-synth", "test700", tmp_path).exists()
    train = set(load_task("gsm-synth", "train", tmp_path)["question"])
    assert not set(longer["question"][500:]) & train


def test_load_task_writes_json_once_and_reads_it_back(tmp_path) -> None:
    data = load_task("gsm-synth", "test", tmp_path)
    path = tasks.synth_path("gsm-synth", "test", tmp_path)
    assert path.exists() and path.suffix == ".jsonl"
    assert isinstance(data, datasets.Dataset)
    assert data.column_names == ["question", "answer"]
    assert len(data) == tasks.SYNTH_SIZES["test"]
    stamp = path.stat().st_mtime_ns
    again = load_task("gsm-synth", "test", tmp_path)
    assert path.stat().st_mtime_ns == stamp
    assert again[:] == data[:]
    math = load_task("math-synth", "test", tmp_path)
    assert math.column_names == ["problem", "solution", "answer"]


def test_load_task_rejects_unknown_task_and_split(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"unknown task 'gsm9k'.*gsm-synth.*math"):
        load_task("gsm9k", "train", tmp_path)
    with pytest.raises(ValueError, match=r"unknown split 'dev'.*train.*test"):
        load_task("gsm-synth", "dev", tmp_path)


@pytest.fixture
def fake_hub(monkeypatch) -> list[tuple]:
    """Replace datasets.load_dataset for hub ids with small in-memory tables; record calls."""
    calls: list[tuple] = []
    tables = {
        "openai/gsm8k": {"question": ["Tom has 2 and gets 3. How many?"],
                         "answer": ["2+3=<<2+3=5>>5\n#### 5"]},
        MATH_TEST_ID: {"problem": ["What is $1/2+1/3$?"],
                       "solution": ["It is $\\boxed{\\frac{5}{6}}$."],
                       "answer": ["\\frac{5}{6}"], "subject": ["Algebra"],
                       "level": [1], "unique_id": ["x"]},
        MATH_TRAIN_ID: {"problem": ["Find $x$ if $2x=8$."],
                        "solution": ["So $x=\\boxed{4}$."], "level": ["Level 1"],
                        "type": ["Algebra"]},
    }

    def load_dataset(path, *args, **kwargs):
        calls.append((path, *args, kwargs.get("split")))
        return datasets.Dataset.from_dict(tables[path])

    monkeypatch.setattr(tasks.datasets, "load_dataset", load_dataset)
    return calls


def test_hub_loaders_use_the_benchmark_ids_and_schema(fake_hub) -> None:
    gsm = load_task("gsm8k", "test")
    assert fake_hub[-1] == ("openai/gsm8k", "main", "test")
    assert to_prompts(gsm, "gsm8k")[0]["gold"] == "5"
    math_test = load_task("math", "test")
    assert fake_hub[-1] == (MATH_TEST_ID, "test")
    assert math_test.column_names == ["problem", "solution", "answer"]
    math_train = load_task("math", "train")
    assert fake_hub[-1] == (MATH_TRAIN_ID, "train")
    assert math_train[0]["answer"] == "4"  # derived from the last \boxed{} of the solution
    prompt = to_prompts(math_train, "math")[0]["prompt"]
    assert "Find $x$ if $2x=8$." in prompt and "\\boxed{}" in prompt


def test_to_prompts_columns_template_and_gold() -> None:
    rows = _rows("gsm-synth", "test")[:3]
    prompts = to_prompts(datasets.Dataset.from_list(rows), "gsm-synth")
    assert prompts.column_names == ["prompt", "gold"]
    assert prompts[0]["prompt"] == f"Q: {rows[0]['question']}\nA: "
    assert prompts[0]["gold"] == rows[0]["answer"].split("#### ")[1]
    math = _rows("math-synth", "test")[:3]
    math_prompts = to_prompts(datasets.Dataset.from_list(math), "math-synth")
    assert math_prompts[0]["gold"] == math[0]["answer"]
    with pytest.raises(ValueError, match="valid tasks"):
        to_prompts(prompts, "nope")


def test_the_registry_describes_every_task_once() -> None:
    """Each task has one source of rows, its family's columns, and a label of its own; the
    generated tasks, in order, are part of every proxy's build hash."""
    assert list(TASKS) == ["gsm-synth", "math-synth", "gsm8k", "math"]
    assert registry.SYNTH_TASKS == ("gsm-synth", "math-synth")
    assert len({task.label for task in TASKS.values()}) == len(TASKS)
    assert {task.family.name for task in TASKS.values()} == {"gsm", "math"}
    for name in registry.SYNTH_TASKS:
        row = get_task(name).example(random.Random(0))
        assert tuple(row) == get_task(name).family.columns
    assert get_task("math").hub["test"].path == MATH_TEST_ID
    assert get_task("math").hub["train"].path == MATH_TRAIN_ID
    with pytest.raises(ValueError, match="exactly one source of rows"):
        registry.Task("x", "X", registry.GSM, registry.PROXY_TEMPLATE)
    with pytest.raises(ValueError, match="must name the splits"):
        registry.Task("x", "X", registry.GSM, registry.PROXY_TEMPLATE,
                      hub={"train": registry.HubSplit("a/b", "train")})
    with pytest.raises(ValueError, match=r"unknown task 'nope'; valid tasks"):
        get_task("nope")


# SHA-256 (first 16 hex digits) of each generated split as load_task writes it, per
# GENERATOR_VERSION: the cached splits (results/data/<task>/<synth_key>/) and the shipped
# proxy-1m's warm-up are keyed by that version, not by the generators' code.
GENERATED = {2: {("gsm-synth", "train", 20_000): "7eb56c3f77fec169",
                 ("gsm-synth", "test", 500): "b898213e63cafb88",
                 ("gsm-synth", "test", 1_000): "1ba558a558210948",
                 ("math-synth", "train", 20_000): "caa98e29c2fb3495",
                 ("math-synth", "test", 500): "648c465e8158bc6d"}}


def test_the_generated_splits_are_those_their_version_names() -> None:
    """A change to the generators' output must come with a new GENERATOR_VERSION, or a cache
    of the old splits (and the shipped warm-up) would be read as the new ones."""
    assert synth.GENERATOR_VERSION in GENERATED, (
        f"record the digests of GENERATOR_VERSION {synth.GENERATOR_VERSION} in GENERATED")
    for (task, split, n), expected in GENERATED[synth.GENERATOR_VERSION].items():
        rows = splits.generate(task, split, tasks.SYNTH_SEED, n, tasks.SYNTH_SIZES["test"],
                               tasks.SYNTH_SIZES["train"])
        text = "".join(json.dumps(row) + "\n" for row in rows)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        assert digest == expected, (
            f"{task} {split} ({n} rows) is no longer what GENERATOR_VERSION "
            f"{synth.GENERATOR_VERSION} names: bump synth.GENERATOR_VERSION (which regenerates "
            "the cached splits; rebuild and ship proxy-1m again) and record the new digests")


def test_the_kits_own_conversions_draw_no_dataset_bars(tmp_path, capfd) -> None:
    """Loading a generated split and mapping it to prompts or SFT pairs prints none of
    datasets' "Generating train split" or "Map" bars, and leaves datasets' bars as they were."""
    assert not datasets.are_progress_bars_disabled()
    train = load_task("gsm-synth", "train", tmp_path)  # writes, then reads the JSON
    to_prompts(train, "gsm-synth")
    to_sft(load_task("gsm-synth", "test", tmp_path), "gsm-synth")
    err = capfd.readouterr().err
    assert "Generating" not in err and "Map" not in err, err
    assert not datasets.are_progress_bars_disabled()
    datasets.Dataset.from_dict({"x": list(range(2000))}).map(lambda row: row)
    assert "Map" in capfd.readouterr().err  # a user's own map still shows its bar
