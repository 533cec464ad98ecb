"""The `ray` backend of `logra.experiments.jobs.run_jobs`: every job one Ray task (the `cluster`
extra, `pip install 'logra[cluster]'`; imported only when that backend is chosen).

A task takes one CPU, or one GPU where the job asks for it, and computes on one thread
(OMP_NUM_THREADS=1, as in the local pool) under this process's CPU pin (`reproduce --pin`'s
variables, which the workers of a cluster started elsewhere would not inherit), so the results
are the local pool's; how many run at once is the cluster's count of free CPUs (GPUs), not
`workers`. A task whose worker dies (a killed process, a lost node) is retried up to
`MAX_RETRIES` times; a GRPO run then resumes from its own checkpoint. A job that raises is not
retried: the first one is raised, the rest are cancelled.
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Callable
from typing import Any

try:
    import ray
except ModuleNotFoundError as err:
    raise ImportError("the ray backend needs Ray: pip install 'logra[cluster]'") from err
from tqdm.auto import tqdm

from logra.models.determinism import PATH_OVERRIDE, floating_point_path, pinned_environment

MAX_RETRIES = 3  # attempts after a system failure (a dead worker), not after an exception
PIN_VARIABLES = sorted(set(pinned_environment()) - {"OMP_NUM_THREADS"})


def connect() -> None:
    """Join the cluster at RAY_ADDRESS (default "auto": the one `ray start` started on this
    machine), or start a local one when none is found there; nothing when Ray is initialized."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    except ConnectionError:
        ray.init(address="local")


def task_environment(gpu: bool = False) -> dict[str, dict[str, str]]:
    """The tasks' runtime_env: one OpenMP thread, and the CPU pin variables set here; a GPU task
    also takes the driver's floating-point path as its own (`determinism.PATH_OVERRIDE`): its
    numbers come from the GPU, and the driver looks its results up under that path's keys."""
    pinned = {name: os.environ[name] for name in PIN_VARIABLES if name in os.environ}
    driver = {PATH_OVERRIDE: floating_point_path()} if gpu else {}
    return {"env_vars": {**pinned, **driver, "OMP_NUM_THREADS": "1"}}


def check_path(driver_path: str) -> None:
    """Refuse to compute on another floating-point path than the driver's: the driver names the
    cached results by its own path (`logra.provenance.fingerprint`), so a worker on another (a
    node without the driver's instruction set, or a raylet started with another MKL_CBWR, which
    the task's environment cannot unset) would file its numbers under the wrong key."""
    here = floating_point_path()
    if here != driver_path:
        raise RuntimeError(f"this Ray worker computes on floating-point path {here}, the driver "
                           f"on {driver_path}: start the cluster's nodes under the driver's pin "
                           "(logra.models.determinism.pinned_environment), or run on nodes of "
                           "the driver's kind")


@ray.remote
def _call(fn: Callable[..., Any], args: tuple, driver_path: str) -> Any:
    """`fn(*args)`, on a Ray worker on the driver's floating-point path (`check_path`)."""
    check_path(driver_path)
    return fn(*args)


def wants_gpu(args: tuple) -> bool:
    """Whether a job runs on a GPU: its first argument is a config whose `device` is cuda (or
    auto, on a cluster with GPUs)."""
    config = args[0] if args else None
    device = config.get("device") if isinstance(config, dict) else getattr(config, "device", None)
    if not isinstance(device, str):
        return False
    if device == "auto":
        return ray.cluster_resources().get("GPU", 0) > 0
    return device.startswith("cuda")


def job_label(index: int, fn: Callable[..., Any], args: tuple) -> str:
    """How an error names a job: its index, function and run name (or a short repr of its first
    argument)."""
    first = args[0] if args else None
    run_name = (first.get("run_name") if isinstance(first, dict)
                else getattr(first, "run_name", None))
    detail = f"run_name={run_name!r}" if run_name else reprlib.repr(first) if args else ""
    return f"job {index} ({getattr(fn, '__name__', fn)}({detail}))"


def _submit(fn: Callable[..., Any], args: tuple, gpu: bool) -> ray.ObjectRef:
    """Start `fn(*args)` as a task on one CPU thread, with one GPU when `gpu`."""
    task = _call.options(num_cpus=1, num_gpus=int(gpu), max_retries=MAX_RETRIES,
                         retry_exceptions=False, runtime_env=task_environment(gpu))
    return task.remote(fn, args, floating_point_path())


def _original(err: ray.exceptions.RayError) -> BaseException:
    """The exception a job raised on its worker, or the system failure itself."""
    if isinstance(err, ray.exceptions.RayTaskError) and isinstance(err.cause, BaseException):
        return err.cause
    return err


def _result(ref: ray.ObjectRef, index: int, job: tuple[Callable[..., Any], tuple]) -> Any:
    """The finished task's result; a RuntimeError naming job `index` (the original as its
    cause) when it failed."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as err:
        cause = _original(err)
        raise RuntimeError(f"{job_label(index, *job)} failed: {cause!r}") from cause


def run(jobs: list[tuple[Callable[..., Any], tuple]], desc: str, progress: bool,
        gpus: bool | None) -> list[Any]:
    """`fn(*args)` of every job as Ray tasks, results in job order; `gpus` None asks
    `wants_gpu` per job. The first failed job is raised (`_result`), and an interrupt too,
    once the unfinished tasks are cancelled."""
    connect()
    refs = [_submit(fn, args, wants_gpu(args) if gpus is None else gpus) for fn, args in jobs]
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(jobs)
    pending = list(refs)
    with tqdm(total=len(jobs), desc=desc, unit="run", disable=not progress) as bar:
        try:
            while pending:
                [ready], pending = ray.wait(pending, num_returns=1)
                results[index[ready]] = _result(ready, index[ready], jobs[index[ready]])
                bar.update()
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
    return results
