"""Row generators of the generated tasks: `gsm-synth` (GSM8K schema), `math-synth` (MATH schema).

Both are short on purpose: every reference completion fits in `MAX_COMPLETION_CHARS` characters,
so a character-level proxy can write it in under 48 new tokens (docs/design.md §3).

- gsm-synth: two or three arithmetic steps told as a story; `answer` is the worked chain ending
  in GSM8K's `#### n`, e.g. "5+3=8. 8*2=16.\\n#### 16".
- math-synth: linear equations, integer expressions with negative numbers, and fraction sums;
  `solution` is the worked chain ending in `\\boxed{}`, `answer` is the boxed content
  (an integer or `\\frac{p}{q}`), as in MATH.

Each generator draws one row from a `random.Random`; the tasks that use them are in
`logra.data.registry`, and their splits are drawn by `logra.data.splits`.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

GENERATOR_VERSION = 2  # bump whenever the generators' output changes: cached splits are keyed by it
MAX_COMPLETION_CHARS = 47  # + <eos> = 48 new tokens for a character-level policy

NAMES = (
    ("Ann", "she"), ("Ben", "he"), ("Cal", "he"), ("Dee", "she"), ("Eli", "he"), ("Fay", "she"),
    ("Gus", "he"), ("Ivy", "she"), ("Jon", "he"), ("Kim", "she"), ("Leo", "he"), ("Mia", "she"),
    ("Ned", "he"), ("Pam", "she"), ("Ray", "he"), ("Tia", "she"),
)
ITEMS = ("apples", "pens", "cards", "eggs", "books", "coins", "shells", "stamps", "beads", "toys")


def gsm_example(rng: random.Random) -> dict[str, str]:
    """One word problem of two or three steps in GSM8K's schema (`question`, `answer`)."""
    name, pronoun = rng.choice(NAMES)
    items = rng.choice(ITEMS)
    while True:
        total = rng.randint(2, 15)
        sentences = [f"{name} has {total} {items}."]
        steps: list[str] = []
        while len(steps) < 2 or (len(steps) == 2 and rng.random() < 0.5):
            sentence, total, new_steps = _gsm_step(rng, pronoun.capitalize(), total)
            sentences.append(sentence)
            steps += new_steps
        sentences.append(f"How many {items} does {name} have now?")
        answer = " ".join(steps) + f"\n#### {total}"
        if len(steps) <= 3 and len(answer) <= MAX_COMPLETION_CHARS:
            return {"question": " ".join(sentences), "answer": answer}


def _gsm_step(rng: random.Random, subject: str, total: int) -> tuple[str, int, list[str]]:
    """A sentence that changes `total`, the new total, and the equations that compute it.

    Operands stay small (mostly one digit) so that a 1M-parameter character-level model learns
    the arithmetic within a few minutes of warm-up.
    """
    kinds = ["add", "pack"]
    if total >= 2:
        kinds.append("sub")
    if total <= 12:
        kinds.append("mul")
    divisors = [k for k in (2, 3) if total % k == 0]
    if divisors:
        kinds.append("div")
    kind = rng.choice(kinds)
    if kind == "add":
        b = rng.randint(1, 9)
        verb = rng.choice(("buys", "finds", "gets"))
        return f"{subject} {verb} {b} more.", total + b, [f"{total}+{b}={total + b}."]
    if kind == "sub":
        b = rng.randint(1, min(total - 1, 9))
        verb = rng.choice(("gives away", "loses", "sells"))
        return f"{subject} {verb} {b}.", total - b, [f"{total}-{b}={total - b}."]
    if kind == "mul":
        k = rng.randint(2, 3)
        return (f"{subject} then has {k} times as many.", total * k, [f"{total}*{k}={total * k}."])
    if kind == "div":
        k = rng.choice(divisors)
        new = total // k
        return f"{subject} keeps 1/{k} of them.", new, [f"{total}/{k}={new}."]
    packs, size = rng.randint(2, 3), rng.randint(2, 5)
    bought = packs * size
    return (f"{subject} buys {packs} packs of {size}.", total + bought,
            [f"{packs}*{size}={bought}.", f"{total}+{bought}={total + bought}."])


def math_example(rng: random.Random) -> dict[str, str]:
    """One MATH-style problem (`problem`, `solution`, `answer`) that fits the length budget."""
    kind = rng.choice((_linear, _expression, _fractions))
    while True:
        problem, steps, value = kind(rng)
        answer = latex_number(value)
        solution = " ".join(steps) + f" \\boxed{{{answer}}}"
        if len(solution) <= MAX_COMPLETION_CHARS:
            return {"problem": problem, "solution": solution, "answer": answer}


def _linear(rng: random.Random) -> tuple[str, list[str], Fraction]:
    """Solve a*x + b = c for an integer x (a, b, c may be negative)."""
    a = rng.choice([k for k in range(-5, 6) if abs(k) >= 2])
    x = rng.randint(-9, 9)
    b = rng.choice([k for k in range(-9, 10) if k])
    c = a * x + b
    rhs = a * x
    steps = [f"{a}x={c}{-b:+d}={rhs}.", f"x={rhs}/{_paren(a)}={x}."]
    return f"Solve {a}x{b:+d}={c} for x.", steps, Fraction(x)


def _expression(rng: random.Random) -> tuple[str, list[str], Fraction]:
    """Evaluate (a op b) op c with signed operands, inner parentheses first."""
    a, b, c = (rng.choice([k for k in range(-9, 10) if k]) for _ in range(3))
    op1, op2 = rng.choice("+-*"), rng.choice("+-*")
    inner = _apply(op1, a, b)
    value = _apply(op2, inner, c)
    steps = [f"{a}{op1}{_paren(b)}={inner}.", f"{inner}{op2}{_paren(c)}={value}."]
    return f"Compute ({a}{op1}{_paren(b)}){op2}{_paren(c)}.", steps, Fraction(value)


def _fractions(rng: random.Random) -> tuple[str, list[str], Fraction]:
    """Add or subtract two proper fractions through their least common denominator."""
    q1, q2 = rng.randint(2, 6), rng.randint(2, 6)
    p1, p2 = rng.randint(1, q1 - 1), rng.randint(1, q2 - 1)
    op = rng.choice("+-")
    lcd = math.lcm(q1, q2)
    n1, n2 = p1 * lcd // q1, p2 * lcd // q2
    raw = n1 + n2 if op == "+" else n1 - n2
    value = Fraction(raw, lcd)
    chain = f"{p1}/{q1}{op}{p2}/{q2}"
    if q1 != q2:
        chain += f"={n1}/{lcd}{op}{n2}/{lcd}"
    chain += f"={raw}/{lcd}"
    if value.denominator != lcd:
        chain += f"={_slash(value)}"
    return f"Compute {p1}/{q1}{op}{p2}/{q2}.", [chain + "."], value


def _apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def _paren(n: int) -> str:
    """A signed operand, parenthesized when negative: 3 or (-3)."""
    return f"({n})" if n < 0 else str(n)


def _slash(value: Fraction) -> str:
    """A rational as p/q, or as an integer when q is 1."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def latex_number(value: Fraction) -> str:
    """An integer as digits, any other rational as `\\frac{p}{q}` with the sign in front."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
