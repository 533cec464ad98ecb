"""How much a sweep gains from more workers, and what a Ray task costs: one benchmark, figures
measured side by side in one run.

The same sweep (`--runs` GRPO runs, seeds 0..runs-1, each sweep in a fresh results directory so
that nothing is read back from the store) runs on the local pool with 1 worker and with
`--workers` workers, then as Ray tasks on a local Ray cluster of `--workers` CPUs
(`logra.experiments.jobs.run_jobs`, the notebooks' own entry point). A run is `--size smoke`
(the packaged smoke config: seconds, mostly process start and imports) or `--size proxy`
(proxy-1m at the default scale's batch, `PROXY_STEPS` steps and a `PROXY_EVAL`-problem
evaluation: about a minute, mostly compute, like the notebooks' runs). Ray's own overhead per
task is the wall time of `--empty` tasks that do nothing, divided by their number, after the
cluster is up. Writes one table (`sweep_speedup_<size>` in `--figures-dir`): wall seconds and
speed-up over one local worker. Run it on a quiet machine: a timing taken beside another job is
not a figure.

    .venv/bin/python scripts/sweep_speedup.py --size proxy --runs 8 --workers 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from logra.experiments import grpo_runs, report
from logra.experiments.jobs import run_jobs
from logra.rl import config as grpo

PROXY_STEPS = 10
PROXY_EVAL = 20


def _nothing() -> None:
    return None


def sweep_jobs(size: str, runs: int, results_dir: Path) -> list:
    """`runs` GRPO runs of `size`, seeds 0..runs-1, stored under `results_dir`."""
    keys = (dict(scale="smoke") if size == "smoke" else
            dict(scale="default", steps=PROXY_STEPS, eval_every=PROXY_STEPS,
                 eval_prompts=PROXY_EVAL, eval_batch_size=PROXY_EVAL))
    configs = [grpo.resolve(seed=seed, results_dir=str(results_dir), **keys)
               for seed in range(runs)]
    grpo_runs.prepare_inputs(results_dir, [configs[0].model], [configs[0].task])
    return [(grpo_runs.grpo_job, (config,)) for config in configs]


def timed_sweep(size: str, runs: int, workers: int, backend: str) -> float:
    """Wall seconds of the sweep (the proxy and task data are built before the clock starts)."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = sweep_jobs(size, runs, Path(tmp))
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
    parser.add_argument("--size", choices=("smoke", "proxy"), default="proxy")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--empty", type=int, default=100)
    parser.add_argument("--figures-dir", default=str(report.FIGURES_DIR))
    args = parser.parse_args(argv)
    import ray

    sweep = (args.size, args.runs)
    rows = [("local pool", 1, timed_sweep(*sweep, 1, "local")),
            ("local pool", args.workers, timed_sweep(*sweep, args.workers, "local"))]
    startup, per_task = ray_overhead(args.workers, args.empty)
    rows.append(("local Ray cluster", args.workers,
                 timed_sweep(*sweep, args.workers, "ray")))
    ray.shutdown()
    table = pd.DataFrame(rows, columns=["backend", "workers", "seconds"])
    table["speed-up"] = table["seconds"].iloc[0] / table["seconds"]
    table["s per run"] = table["seconds"] / args.runs
    table["ray start s"] = [None, None, startup]
    table["ray ms per empty task"] = [None, None, 1000 * per_task]
    table.insert(0, "runs", f"{args.runs} × {args.size}")
    table.insert(1, "cores", os.cpu_count())
    report.save_table(table.round(3), f"sweep_speedup_{args.size}", args.figures_dir)
    print(report.to_markdown(table.round(3)))


if __name__ == "__main__":
    main()
