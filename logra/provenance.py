"""Which code computed a cached result: a fingerprint that changes when that code does.

Experiments cache what they compute under <results_dir> (training runs, GRPO runs, greedy
evaluations, generated data) so that a rerun redoes only what is missing. A cache keyed by
settings alone outlives the code: after a change to an optimizer or to the training loop a rerun
reads the old code's numbers back and presents them as the new code's (notebook 10 once
committed LoGRA rows that an older optimizer step had produced). So each cache key also holds

    fingerprint = sha256( AST of each module, docstrings dropped, in path order
                          ‖ versions of the libraries that compute: torch, transformers, …
                          ‖ the floating-point path: ATen's instruction set, MKL_CBWR, vendor )

The abstract syntax tree holds no comments, formatting or docstrings, so editing those keeps the
caches; any change to code the runs execute, or an upgrade of one of those libraries, gives
another fingerprint and the result is computed again; so does running under another
floating-point path (with or without `--pin`: `determinism.floating_point_path`), whose
numbers differ at round-off and, where training amplifies it, beyond. `TRAINING_CODE` is the
code every training run goes through (the optimizers, models, data, RL loop); an experiment
adds its own modules.

The fingerprint is of the code as the process loaded it (the package's sources are read when
`logra.provenance` is imported). If a file changes on disk while the process runs (an edit in
JupyterLab, with or without autoreload), the process's code and the files no longer agree, and
the next `fingerprint` raises `CodeChanged` naming the file instead of caching results under a
name that may not be theirs. Restart the process.
"""

from __future__ import annotations

import ast
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


class CodeChanged(RuntimeError):
    """The code on disk changed since this process loaded it (module docstring)."""


def _loaded_modules() -> dict[Path, tuple[int, int, str]]:
    """Each module file of the package -> (mtime, size, source) as this process found it."""
    found = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        stat = path.stat()
        found[path] = (stat.st_mtime_ns, stat.st_size, path.read_text())
    return found


_LOADED = _loaded_modules()  # when logra is imported: the code this process runs
_FINGERPRINTS: dict[tuple[str, ...], tuple[tuple, str]] = {}  # parts -> (file stats, digest)


def fingerprint(*parts: str) -> str:
    """16 hex digits naming the code in `TRAINING_CODE` and `parts` (paths relative to the
    package, a module file or a package directory) as this process loaded it, and the computing
    libraries' versions and the floating-point path. Raises CodeChanged if a file of that code
    has changed since (beyond its docstrings, comments and layout)."""
    from logra.models.determinism import floating_point_path

    key = tuple(sorted({*TRAINING_CODE, *parts}))
    files = _modules(key)
    arithmetic = floating_point_path()
    stats = (arithmetic, *((path, *_stat(path)) for path in files))
    memo = _FINGERPRINTS.get(key)
    if memo is not None and memo[0] == stats:
        return memo[1]
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode())
        digest.update(_loaded_tree(path).encode())
    for name in COMPUTING_LIBRARIES:
        digest.update(f"{name}=={_version(name)}".encode())
    digest.update(arithmetic.encode())
    _FINGERPRINTS[key] = (stats, digest.hexdigest()[:16])
    return _FINGERPRINTS[key][1]


def _stat(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _loaded_tree(path: Path) -> str:
    """The syntax tree of `path` as this process loaded it (a file first seen now: as it is);
    CodeChanged if the file's code differs now."""
    if path not in _LOADED:
        _LOADED[path] = (*_stat(path), path.read_text())
    mtime, size, source = _LOADED[path]
    tree = code_tree(source)
    if (mtime, size) != _stat(path):
        if code_tree(path.read_text()) != tree:
            raise CodeChanged(
                f"logra's code changed on disk while this process ran "
                f"({path.relative_to(PACKAGE_ROOT).as_posix()}): the results it would cache "
                "could come from either version. Restart the process (in Jupyter: restart the "
                "kernel).")
        _LOADED[path] = (*_stat(path), source)  # touched, or docstrings and comments edited
    return tree


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
