"""Grading: pull the final answer out of a completion and compare it with the gold answer.

The answer is what follows the last `####` (GSM8K) or the content of the last `\\boxed{}` (MATH),
whichever comes later in the text. Equivalence is decided by `math-verify`: both strings are
parsed as LaTeX math and compared with `verify(gold, pred)` — the order matters, since
`verify` treats its first argument as the reference. Before parsing, a trailing full stop,
enclosing dollar signs and plain-word units ("17 apples") are dropped.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

from math_verify import parse, verify

_UNITS = re.compile(r"(?<=[\d}])\s+[A-Za-z][A-Za-z\s]*$")
_TIMEOUT_S = 5


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced) or `\\boxed x`; None if absent."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    rest = text[start + len("\\boxed"):]
    if not rest.startswith("{"):
        match = re.match(r"\s+([^\s$]+)", rest)
        return match.group(1) if match else None
    depth = 0
    for i, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i].strip() or None
    return None


def extract_answer(text: str) -> str | None:
    """The final answer in `text`: after the last `####`, or in the last `\\boxed{}`."""
    hashes, boxed = text.rfind("####"), text.rfind("\\boxed")
    if hashes < 0 and boxed < 0:
        return None
    if boxed > hashes:
        return last_boxed(text)
    lines = text[hashes + len("####"):].strip().splitlines()
    return lines[0].strip() if lines else None


def normalize(answer: str) -> str:
    """Drop what math-verify should not see: enclosing `$`, a final `.`, plain-word units."""
    answer = answer.strip().strip("$").strip().removesuffix(".").strip()
    return _UNITS.sub("", answer)


def is_correct(completion: str, gold: str) -> bool:
    """Whether the answer extracted from `completion` is mathematically equal to `gold`."""
    pred = extract_answer(completion)
    if pred is None:
        return False
    gold, pred = normalize(gold), normalize(pred)
    if gold == pred:
        return True
    gold_parsed, pred_parsed = _parse(gold), _parse(pred)
    if not gold_parsed or not pred_parsed:
        return False
    return verify(list(gold_parsed), list(pred_parsed), timeout_seconds=_timeout())


def reward(completion: str, gold: str) -> float:
    """1.0 for a correct final answer, 0.0 otherwise (also when there is none)."""
    return 1.0 if is_correct(completion, gold) else 0.0


@lru_cache(maxsize=4096)
def _parse(answer: str) -> tuple:
    """math-verify's parse of `answer` as inline LaTeX (cached: a GRPO group shares its gold)."""
    return tuple(parse(f"${answer}$", parsing_timeout=_timeout()))


def _timeout() -> int | None:
    """math-verify times out with SIGALRM, which only the main thread may use."""
    return _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
