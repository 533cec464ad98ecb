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

from logra.cli import PIN_MARK
from logra.experiments.jobs import BACKEND_VARIABLE, die_with_parent
from logra.models import determinism
from logra.models.determinism import PINS, floating_point_path, pinned_environment

NATIVE = "native"  # no pin: the kernels torch and MKL choose for this CPU
PATHS = (*PINS, NATIVE)
FLIPS = "tie (flips with the path)"

T = TypeVar("T")


def environment(path: str) -> dict[str, str | None]:
    """The variables that select `path`, as `logra-repro reproduce --pin` sets them: a pin's
    (`determinism.pinned_environment`: instruction sets and the pin's thread count) and its
    mark; for "native", every instruction-set variable a pin sets and the mark unset (None),
    threads as they are. ValueError naming the valid paths otherwise."""
    if path == NATIVE:
        return {key: None for pin in PINS.values() for key in pin} | {PIN_MARK: None}
    if path not in PINS:
        raise ValueError(f"unknown floating-point path {path!r}; valid: {list(PATHS)}")
    return pinned_environment(path) | {PIN_MARK: path}


def current() -> str | None:
    """The path this process computes on, as it started: a pin's name where ATen's instruction
    set and MKL's path are the pin's (`PINS`), "native" where neither variable was set; None
    for anything else (a mix). Read from what torch and MKL took when they loaded, not from
    `os.environ` now, which a notebook cell may have changed since."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability().lower()
    mkl = determinism._MKL_CBWR_AT_START
    for name, variables in PINS.items():
        if (capability, mkl) == (variables["ATEN_CPU_CAPABILITY"], variables["MKL_CBWR"]):
            return name
    if mkl is None and "ATEN_CPU_CAPABILITY" not in _ENVIRONMENT_AT_START:
        return NATIVE
    return None


_ENVIRONMENT_AT_START = dict(os.environ)  # when this module loaded (torch had, or has not yet)


def x86() -> bool:
    """Whether this CPU is x86-64, whose instruction sets the pins name."""
    return platform.machine().lower() in ("x86_64", "amd64")


def checked(paths: list[str]) -> list[str]:
    """`paths`, checked: ValueError for an unknown one, a repeat or none."""
    for path in paths:
        environment(path)
    if len(set(paths)) != len(paths):
        raise ValueError(f"floating-point paths repeat: {paths}")
    if not paths:
        raise ValueError("no floating-point path given")
    return list(paths)


def _set_environment(variables: Mapping[str, str | None]) -> None:
    """Set each of `variables` in `os.environ` (None: remove it)."""
    for key, value in variables.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextmanager
def _environment(variables: Mapping[str, str | None]) -> Iterator[None]:
    """`os.environ` with `variables` set (None: removed) inside the block, restored after."""
    saved = {key: os.environ.get(key) for key in variables}
    try:
        _set_environment(variables)
        yield
    finally:
        _set_environment(saved)


def _child(parent: int, send: Connection, fn: Callable[..., Any], args: tuple) -> None:
    """A path's process: send ("ok", fn(*args), its floating-point path), or ("error", the
    traceback, None). It ends with `parent` (the process that started it)."""
    die_with_parent(parent)
    try:
        send.send(("ok", fn(*args), floating_point_path()))
    except BaseException:  # reported to the parent, which raises it
        send.send(("error", traceback.format_exc(), None))
    finally:
        send.close()


def run_under(path: str, fn: Callable[..., T], *args: Any) -> tuple[T, str]:
    """`fn(*args)` computed on `path`, and the floating-point path it ran on
    (`determinism.floating_point_path`: ATen's instruction set, MKL's path, the vendor).

    In this process if it computes on `path` (`current`); else in a spawned child process
    whose environment is this one's with `path`'s variables (`environment`), exactly as
    `reproduce --pin` would start it. The child is not a daemon, so `fn` may start its own
    worker pool, whose workers inherit the path; its jobs run on the local pool even where this
    process's go to Ray (`LOGRA_BACKEND`): a cluster's workers compute on the path the cluster
    started with. The child ends with this process. A failure in it is raised here as
    RuntimeError with its traceback (in this process, as itself). `fn` and `args` must pickle
    (a module-level function)."""
    variables = environment(path) | {BACKEND_VARIABLE: "local"}
    if current() == path:
        return fn(*args), floating_point_path()
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(os.getpid(), send, fn, args),
                            name=f"logra-{path}")
    try:
        with _environment(variables):
            child.start()
        send.close()
        status, value, ran_on = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the process computing on the {path!r} path ended without a "
                           f"result (exit code {child.exitcode})") from None
    except BaseException:
        if child.pid is not None:
            child.terminate()
            child.join()
        raise
    finally:
        send.close()
        receive.close()
    child.join()
    if status == "error":
        raise RuntimeError(f"computing on the {path!r} path failed:\n{value}")
    return value, ran_on


def run_on_paths(paths: list[str] | None, fn: Callable[..., T], *args: Any) -> dict[str, T]:
    """`fn(*args)` on each of `paths` in order (`run_under`), keyed by path, printing the
    floating-point path each ran on. None, or a CPU other than x86-64 (the pins name x86
    instruction sets): once, in this process, keyed by its path's name (`current`, or "this
    process" for a mix of variables)."""
    if paths is not None and not x86():
        print(f"floating-point paths {paths} not compared: the pins are x86's and this CPU is "
              f"{platform.machine()}")
    if paths is None or not x86():
        return {current() or "this process": fn(*args)}
    results = {}
    for path in checked(paths):
        results[path], ran_on = run_under(path, fn, *args)
        print(f"{path}: computed on {ran_on}")
    return results


def _rows(table: pd.DataFrame) -> list[Any]:
    """A table's row labels: its first column (the optimizer or rule it is about)."""
    return table.iloc[:, 0].tolist() if len(table.columns) else []


REFERENCE_PREFIX = "reference"  # a row that is the table's reference holds no verdict


def verdicts(tables: Mapping[str, pd.DataFrame], column: str = "verdict") -> pd.DataFrame:
    """The first path's table, its `column` kept where every path's table gives the same and
    `FLIPS` where they differ; a row the first path makes the reference ("reference...") stays
    as it is (`verdict_table` lists what every path gave). `tables`: path -> the same table
    computed on that path (same rows in the same order; ValueError otherwise). A table without
    `column` is returned as the first path's."""
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
    flips &= ~first[column].astype(str).str.startswith(REFERENCE_PREFIX)
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
