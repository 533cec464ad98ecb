"""Which code computed a cached result: a fingerprint that changes when that code does.

Experiments cache what they compute under <results_dir> (training runs, GRPO runs, greedy
evaluations, generated data) so that a rerun redoes only what is missing. A cache keyed by
settings alone outlives the code: after a change to an optimizer or to the training loop a rerun
reads the old code's numbers back and presents them as the new code's (notebook 10 once
committed LoGRA rows that an older optimizer step had produced). So each cache key also holds

    fingerprint = sha256( AST of each module, docstrings dropped, in path order
                          ‖ versions of the libraries that compute: torch, transformers, … )

The abstract syntax tree holds no comments, formatting or docstrings, so editing those keeps the
caches; any change to code the runs execute, or an upgrade of one of those libraries, gives
another fingerprint and the result is computed again. `TRAINING_CODE` is the code every
training run goes through (the optimizers, models, data, RL loop); an experiment adds its own
modules.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent

# Code every cached run goes through, relative to the package: the optimizers, the models and
# their warm-up, data and grading, the GRPO loop (tables, plots and the CLI are not in it).
TRAINING_CODE = ("optim", "optimizers.py", "models", "data", "rl")

# Distributions whose version changes the numbers a run computes (absent ones count as absent).
COMPUTING_LIBRARIES = ("torch", "transformers", "peft", "datasets", "math-verify",
                       "galore-torch", "apollo-torch", "bitsandbytes", "fira", "adam-mini")


def fingerprint(*parts: str) -> str:
    """16 hex digits naming the code in `TRAINING_CODE` and `parts` (paths relative to the
    package, a module file or a package directory) and the computing libraries' versions."""
    return _fingerprint(tuple(sorted({*TRAINING_CODE, *parts})))


@functools.cache
def _fingerprint(parts: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for path in _modules(parts):
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode())
        digest.update(code_tree(path.read_text()).encode())
    for name in COMPUTING_LIBRARIES:
        digest.update(f"{name}=={_version(name)}".encode())
    return digest.hexdigest()[:16]


def _modules(parts: tuple[str, ...]) -> list[Path]:
    files = set()
    for part in parts:
        path = PACKAGE_ROOT / part
        if path.is_dir():
            files.update(path.rglob("*.py"))
        elif path.is_file():
            files.add(path)
        else:
            raise FileNotFoundError(f"no module or package {part!r} in {PACKAGE_ROOT}")
    return sorted(files)


def code_tree(source: str) -> str:
    """The module's abstract syntax tree without docstrings, as text (comments are not in it)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:]
    return ast.dump(tree, include_attributes=False)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
