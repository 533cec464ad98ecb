"""One experiment under several floating-point paths, and a verdict that flips between them
printed as a tie.

A CPU run's numbers hang on the kernels torch picks (`logra.models.determinism`): a pin (`avx2`,
`strict`) fixes them, and without one (`"native"`) ATen takes the best instruction set the CPU
has (AVX-512 on most x86 servers) and MKL its own path. Most tables move at round-off between
two paths. Where training amplifies the difference, as in notebook 10's SFT benchmark, whose
base is pretrained from scratch, a paired verdict can change with the path. Such a verdict
says nothing about the optimizers, so an experiment runs under each path of a list and prints,
row by row,

    verdict = v                                if every path gives v
              "tie (flips with the path)"      otherwise,

beside the first path's numbers (`verdicts`); `verdict_table` lists what each path gave.

A path other than the process's own runs in a fresh child process whose environment holds that
path's variables (they act only before torch loads). Every run's cache key holds the path of the
process that computed it (`logra.provenance.fingerprint`), so the paths' runs live apart in one
results store, and the child's own worker pool inherits its path. Paths differ within one
machine: across CPU vendors the pin itself gives other numbers (docs/reproducibility.md), which
this does not cover.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import pandas as pd

from logra.experiments.jobs import die_with_parent
from logra.models.determinism import PINS, floating_point_path

NATIVE = "native"  # no pin: the kernels torch and MKL choose for this CPU
PATHS = (*PINS, NATIVE)
FLIPS = "tie (flips with the path)"

T = TypeVar("T")


def environment(path: str) -> dict[str, str | None]:
    """The variables that select `path`: a pin's (`determinism.PINS`), or for "native" every
    variable a pin sets, unset (None). ValueError naming the valid paths otherwise."""
    if path == NATIVE:
        return {key: None for pin in PINS.values() for key in pin}
    if path not in PINS:
        raise ValueError(f"unknown floating-point path {path!r}; valid: {list(PATHS)}")
    return dict(PINS[path])


def current() -> str | None:
    """The path this process's environment selects (a pin's name, or "native" with no pin
    variable set); None for a mix of them."""
    for path in PATHS:
        if all(os.environ.get(key) == value for key, value in environment(path).items()):
            return path
    return None


def available(paths: list[str]) -> list[str]:
    """`paths` checked (ValueError for an unknown one or a repeat), as this machine can run
    them: on a CPU other than x86-64 the pins do not apply (their instruction sets are x86's),
    so only the first path is kept."""
    for path in paths:
        environment(path)
    if len(set(paths)) != len(paths):
        raise ValueError(f"floating-point paths repeat: {paths}")
    if not paths:
        raise ValueError("no floating-point path given")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return paths[:1]
    return list(paths)


@contextmanager
def _environment(variables: Mapping[str, str | None]) -> Iterator[None]:
    """`os.environ` with `variables` set (None: removed) inside the block, restored after."""
    saved = {key: os.environ.get(key) for key in variables}
    try:
        for key, value in variables.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _child(send: Connection, fn: Callable[..., Any], args: tuple) -> None:
    """A path's process: send ("ok", fn(*args), its floating-point path), or ("error", the
    traceback, None)."""
    die_with_parent(os.getppid())
    try:
        send.send(("ok", fn(*args), floating_point_path()))
    except BaseException:  # reported to the parent, which raises it
        send.send(("error", traceback.format_exc(), None))
    finally:
        send.close()


def run_under(path: str, fn: Callable[..., T], *args: Any) -> tuple[T, str]:
    """`fn(*args)` computed on `path`, and the floating-point path it ran on
    (`determinism.floating_point_path`: ATen's instruction set, MKL's path, the vendor).

    In this process if its environment selects `path`; else in a spawned child process whose
    environment is this one's with `path`'s variables (threads unchanged). The child is not a
    daemon, so `fn` may start its own worker pool, whose workers inherit the path; it ends with
    this process. A failure in it is raised here as RuntimeError with its traceback. `fn` and
    `args` must pickle (a module-level function)."""
    variables = environment(path)
    if current() == path:
        return fn(*args), floating_point_path()
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, fn, args), name=f"logra-{path}")
    with _environment(variables):
        child.start()
    send.close()
    try:
        status, value, ran_on = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the process computing on the {path!r} path ended without a "
                           f"result (exit code {child.exitcode})") from None
    except BaseException:
        child.terminate()
        child.join()
        raise
    child.join()
    if status == "error":
        raise RuntimeError(f"computing on the {path!r} path failed:\n{value}")
    return value, ran_on


def run_on_paths(paths: list[str] | None, fn: Callable[..., T], *args: Any) -> dict[str, T]:
    """`fn(*args)` on each of `paths` in order (`run_under`), keyed by path, printing the
    floating-point path each ran on; None: once, in this process, keyed by its path's name
    (`current`, or "this process" for a mix of variables)."""
    if paths is None:
        return {current() or "this process": fn(*args)}
    results = {}
    for path in available(paths):
        results[path], ran_on = run_under(path, fn, *args)
        print(f"{path}: computed on {ran_on}")
    return results


def _rows(table: pd.DataFrame) -> list:
    """A table's row labels: its first column (the optimizer or rule it is about)."""
    return table.iloc[:, 0].tolist() if len(table.columns) else []


def verdicts(tables: Mapping[str, pd.DataFrame], column: str = "verdict") -> pd.DataFrame:
    """The first path's table, its `column` kept where every path's table gives the same and
    `FLIPS` where they differ. `tables`: path -> the same table computed on that path (same
    rows in the same order; ValueError otherwise). A table without `column` is returned as the
    first path's."""
    first_path, first = next(iter(tables.items()))
    for path, table in tables.items():
        if _rows(table) != _rows(first):
            raise ValueError(f"the tables of paths {first_path!r} and {path!r} hold other rows: "
                             f"{_rows(first)} against {_rows(table)}")
    if column not in first.columns:
        return first
    combined = first.copy()
    flips = pd.Series(False, index=first.index)
    for table in tables.values():
        flips |= table[column].to_numpy() != first[column].to_numpy()
    combined.loc[flips, column] = FLIPS
    return combined


def verdict_table(tables: Mapping[str, Mapping[str, pd.DataFrame]],
                  column: str = "verdict") -> pd.DataFrame:
    """Every verdict of every table under each path: one row per (table, row) with the verdict
    each path gave and the one printed (`verdicts`). `tables`: table name -> path -> table."""
    rows = []
    for name, by_path in tables.items():
        printed = verdicts(by_path, column)
        if column not in printed.columns:
            continue
        for i, row in enumerate(_rows(printed)):
            rows.append({"table": name, "row": row,
                         **{path: table[column].iloc[i] for path, table in by_path.items()},
                         "printed": printed[column].iloc[i]})
    return pd.DataFrame(rows)
