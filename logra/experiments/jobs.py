"""Run independent jobs in spawned worker processes, one torch thread each.

`workers` = 0 means one worker per CPU core this process may use (`available_cpus`): every job
runs on one thread in its own process whatever the count, so the results do not depend on it,
only the wall time. Callers that pass `workers` ≠ 1 must run under `if __name__ == "__main__":`
when started as a script (spawn re-imports the main module).

Backends: "local" (the default) runs the jobs in this process or the spawned pool above; "ray"
runs each job as a task on a Ray cluster (`logra.experiments.ray_backend`, the `cluster` extra),
where the cluster's free CPUs, not `workers`, decide how many run at once. The environment
variable LOGRA_BACKEND chooses it when the caller does not (the notebooks' sweeps inherit it
from `logra-repro reproduce --backend`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

BACKENDS = ("local", "ray")
BACKEND_VARIABLE = "LOGRA_BACKEND"


@contextmanager
def _single_threaded_children() -> Iterator[None]:
    """Spawned workers inherit OMP_NUM_THREADS=1 (each run also sets one torch thread)."""
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = saved


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def die_with_parent(parent: int) -> None:
    """A spawned worker's initializer: on Linux, ask for SIGTERM when the process that started
    it dies, so that killing a sweep (its parent) does not leave its runs going as orphans
    that still write to the results store; elsewhere nothing. If the parent is already gone,
    exit at once."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request was in place
        os._exit(1)


def available_cpus() -> int:
    """CPU cores this process may run on (its affinity where the platform reports it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worker_count(workers: int) -> int:
    """The processes `workers` stands for: itself, or one per available core when 0."""
    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0: one per CPU core), got {workers}")
    return workers or available_cpus()


def backend_name(backend: str | None) -> str:
    """`backend` itself, or LOGRA_BACKEND when None (default "local"), once it is a known
    one (ValueError naming the valid ones otherwise)."""
    name = os.environ.get(BACKEND_VARIABLE, "local") if backend is None else backend
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; valid: {list(BACKENDS)}")
    return name


def run_jobs(jobs: list[tuple[Callable[..., Any], tuple]], workers: int, desc: str,
             progress: bool = True, backend: str | None = None,
             gpus: bool | None = None) -> list[Any]:
    """`fn(*args)` of every job, in order; `workers` > 1 runs them in spawned processes, 0 in
    one per available core.

    Jobs are handed out in the order given (put the longest first). The first failure cancels
    what has not started and is raised. The workers end with this process, however it ends.
    `backend` "ray" runs every job as a Ray task instead (`workers` is then unused; `gpus` True
    gives each task a GPU, None each whose config asks for one: `ray_backend.wants_gpu`); None
    is LOGRA_BACKEND's choice, else "local".
    """
    if backend_name(backend) == "ray":
        from logra.experiments import ray_backend

        return ray_backend.run(jobs, desc, progress, gpus)
    workers = worker_count(workers)
    results: list[Any] = [None] * len(jobs)
    bar = tqdm(total=len(jobs), desc=desc, unit="run", disable=not progress)
    if workers <= 1 or len(jobs) <= 1:
        for i, (fn, args) in enumerate(jobs):
            results[i] = fn(*args)
            bar.update()
        bar.close()
        return results
    context = multiprocessing.get_context("spawn")
    with _single_threaded_children(), ProcessPoolExecutor(
            min(workers, len(jobs)), mp_context=context, initializer=die_with_parent,
            initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(jobs)}
        try:
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            bar.close()
    return results
