"""How much a sweep gains from more workers, and what a Ray task costs: one benchmark, figures
measured side by side in one run.

The same sweep (`--runs` smoke GRPO runs of the packaged config, seeds 0..runs-1, each in a fresh
results directory so that nothing is read back from the store) runs on the local pool with 1
worker and with `--workers` workers, then as Ray tasks on a local Ray cluster of `--workers`
CPUs (`logra.experiments.jobs.run_jobs`, the notebooks' own entry point). Ray's own overhead per
task is the wall time of `--empty` tasks that do nothing, divided by their number, after the
cluster is up. Prints one table: wall seconds and speed-up over one local worker; run it on a
quiet machine (a timing taken beside another job is not a figure).

    .venv/bin/python scripts/sweep_speedup.py --runs 8 --workers 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from logra.experiments import grpo_runs
from logra.experiments.jobs import run_jobs
from logra.rl import config as grpo


def _nothing() -> None:
    return None


def sweep_jobs(runs: int, results_dir: Path) -> list:
    """`runs` smoke GRPO runs, seeds 0..runs-1, stored under `results_dir`."""
    configs = [grpo.resolve(scale="smoke", seed=seed, results_dir=str(results_dir))
               for seed in range(runs)]
    cfg = {"results_dir": str(results_dir)}
    grpo_runs.prepare_inputs(cfg, [configs[0]["model"]], [configs[0]["task"]])
    return [(grpo_runs.grpo_job, (config,)) for config in configs]


def timed_sweep(runs: int, workers: int, backend: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        jobs = sweep_jobs(runs, Path(tmp))
        start = time.perf_counter()
        run_jobs(jobs, workers, f"{backend}, {workers} worker(s)", progress=False,
                 backend=backend)
        return time.perf_counter() - start


def ray_overhead(cpus: int, tasks: int) -> tuple[float, float]:
    """Start a local Ray cluster of `cpus` CPUs: (seconds until its first empty task returned,
    seconds per empty task once it is up). The cluster stays up for the Ray sweep."""
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False)
    run_jobs([(_nothing, ())], 1, "warm-up", progress=False, backend="ray")
    startup = time.perf_counter() - start
    start = time.perf_counter()
    run_jobs([(_nothing, ())] * tasks, 1, "empty tasks", progress=False, backend="ray")
    return startup, (time.perf_counter() - start) / tasks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--empty", type=int, default=100)
    args = parser.parse_args(argv)
    import ray

    rows = [("local pool", 1, timed_sweep(args.runs, 1, "local")),
            ("local pool", args.workers, timed_sweep(args.runs, args.workers, "local"))]
    startup, per_task = ray_overhead(args.workers, args.empty)
    rows.append(("local Ray cluster", args.workers, timed_sweep(args.runs, args.workers, "ray")))
    ray.shutdown()
    table = pd.DataFrame(rows, columns=["backend", "workers", "seconds"])
    table["speed-up"] = table["seconds"].iloc[0] / table["seconds"]
    print(f"{args.runs} smoke GRPO runs per sweep")
    print(table.round(2).to_string(index=False))
    print(f"Ray: {startup:.2f} s from ray.init to a first task's result on a fresh local "
          f"cluster; then {1000 * per_task:.1f} ms per empty task ({args.empty} tasks)")


if __name__ == "__main__":
    main()
