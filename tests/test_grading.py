"""Answer extraction and math-verify equivalence."""

from __future__ import annotations

import pytest

from logra.data import grading
from logra.data.grading import extract_answer, is_correct, last_boxed, reward


@pytest.mark.parametrize(
    "text, answer",
    [
        ("5+3=8. 8*2=16.\n#### 16", "16"),
        ("#### -7", "-7"),
        ("#### 1,234\nextra words", "1,234"),
        ("The answer is \\boxed{\\frac{5}{6}}.", "\\frac{5}{6}"),
        ("\\boxed{1} first, then \\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
        ("\\boxed 5", "5"),
        ("\\boxed{3} but #### 4", "4"),  # the later marker wins
        ("#### 4 but \\boxed{3}", "3"),
        ("no final answer here", None),
        ("####", None),
        ("#### \n", None),
        ("\\boxed{unclosed", None),
        ("\\boxed{}", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_last_boxed_balances_nested_braces() -> None:
    assert last_boxed("x \\boxed{\\frac{a}{b}+\\left\\{1\\right\\}} y") == (
        "\\frac{a}{b}+\\left\\{1\\right\\}"
    )
    assert last_boxed("none") is None


@pytest.mark.parametrize(
    "completion, gold",
    [
        ("#### 17", "17"),
        ("#### -5", "-5"),  # negatives
        ("#### - 5", "-5"),
        ("#### 3.50", "3.5"),  # decimals
        ("#### 0.5", "\\frac{1}{2}"),
        ("#### 1,000", "1000"),  # thousands separators
        ("#### 1,234,567", "1234567"),
        ("#### 5/6", "\\frac{5}{6}"),  # fractions
        ("\\boxed{\\frac{5}{6}}", "\\frac{5}{6}"),  # \frac
        ("\\boxed{\\dfrac{5}{6}}", "\\frac{5}{6}"),
        ("\\boxed{-\\frac{1}{2}}", "-\\frac{1}{2}"),
        ("\\boxed{\\frac{-1}{2}}", "-\\frac{1}{2}"),
        ("\\boxed{0.75}", "\\frac{3}{4}"),
        ("#### 17 apples", "17"),  # units
        ("#### $17", "17"),
        ("#### 5 dollars", "5"),
        ("\\boxed{12 \\text{ cm}}", "12"),
        ("#### 17.", "17"),
        ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
        ("\\boxed{x=3}", "3"),
    ],
)
def test_equivalent_answers_are_correct(completion: str, gold: str) -> None:
    assert is_correct(completion, gold)
    assert reward(completion, gold) == 1.0


@pytest.mark.parametrize(
    "completion, gold",
    [
        ("#### 18", "17"),
        ("#### 5", "-5"),
        ("#### 3.5", "3.05"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{3}"),
        ("#### 1000", "100"),
        ("17", "17"),  # a number without a final-answer marker is no answer
        ("", "17"),  # missing answers
        ("#### ", "17"),
        ("\\boxed{", "17"),
    ],
)
def test_wrong_or_missing_answers_are_not(completion: str, gold: str) -> None:
    assert not is_correct(completion, gold)
    assert reward(completion, gold) == 0.0


def test_verify_gets_gold_first(monkeypatch) -> None:
    seen: list[tuple] = []

    def verify(gold, pred, **kwargs):
        seen.append((gold, pred))
        return True

    monkeypatch.setattr(grading, "verify", verify)
    assert is_correct("#### 7", "-7")
    (gold, pred), = seen
    assert gold == list(grading._parse("-7")) and pred == list(grading._parse("7"))


def test_grading_works_off_the_main_thread() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(is_correct, "#### 0.25", "\\frac{1}{4}").result()
