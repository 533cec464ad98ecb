"""The Ray backend of `run_jobs` (`logra.experiments.ray_backend`) on a local 2-CPU Ray cluster:
the local pool's results, a smoke GRPO run included; a worker killed in a run is retried and the
run resumes from its checkpoint; a raising job is named, not retried; tasks get the driver's CPU
pin; the core never imports Ray; clear errors for an unknown backend or a missing Ray;
`reproduce --backend`.

The job functions live at module level and take what they need as arguments: monkeypatches do
not reach the worker processes. Ray pickles them by value (`register_pickle_by_value`), since
its workers cannot import this module (tests/ is not on their path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from logra import cli, experiments, notebooks
from logra.experiments import jobs
from logra.experiments.grpo_runs import grpo_job
from logra.experiments.jobs import run_jobs
from logra.models import prepare
from logra.rl import config as cfg
from logra.rl import runner

ray = pytest.importorskip("ray")

TIMING = list(runner.TIMING_COLUMNS)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs for this module, to which this module's functions travel
    by value."""
    ray.init(num_cpus=2, include_dashboard=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


@pytest.fixture(scope="module")
def smoke_dirs(tmp_path_factory):
    """The smoke proxy, built once into a temporary directory, and its data cache."""
    data = tmp_path_factory.mktemp("data")
    model = prepare("smoke", root=tmp_path_factory.mktemp("models"), data_dir=data,
                    progress=False)
    return str(model), str(data)


def smoke_config(smoke_dirs, results: Path) -> cfg.GRPOConfig:
    """The smoke LoGRA run "logra" in `results`."""
    model, data = smoke_dirs
    return cfg.resolve("experiments/grpo.yaml", "smoke", model=model, data_dir=data,
                       results_dir=str(results), optimizer="logra", run_name="logra")


def sweep(smoke_dirs, results: Path) -> list[tuple]:
    """A smoke GRPO run into `results`, then four cheap seeded jobs."""
    return [(stand_in_grpo_job, (smoke_config(smoke_dirs, results),)),
            *[(seeded_product, (seed,)) for seed in range(4)]]


# ------------------------------------------------------------------ jobs (run on the workers)

def seeded_product(seed: int) -> tuple[int, float]:
    """torch's thread count here and the sum of a seeded matrix product."""
    torch.manual_seed(seed)
    x = torch.randn(96, 96)
    return torch.get_num_threads(), float((x @ x).sum())


def even_length_reward(text: str, gold: str) -> float:
    """The stand-in reward of tests/test_rl_runs.py: 1 for a completion of even length."""
    return float(len(text) % 2 == 0)


def stand_in_grpo_job(config: cfg.GRPOConfig, crash_marker: str | None = None) -> pd.DataFrame:
    """`grpo_job(config)` under the stand-in reward (the smoke policy earns 0 from the real
    one); with `crash_marker` not yet written, the worker process dies in step 3, after the
    step-2 checkpoint, writing the marker first."""
    reward, step = runner.reward, runner.Trainer.step

    def crash(self, t):
        if t == 3:
            Path(crash_marker).touch()
            os._exit(1)
        return step(self, t)

    runner.reward = even_length_reward
    if crash_marker is not None and not Path(crash_marker).exists():
        runner.Trainer.step = crash
    try:
        return grpo_job(config)
    finally:
        runner.reward, runner.Trainer.step = reward, step


def environment(name: str) -> str | None:
    """The worker's value of the environment variable `name`."""
    return os.environ.get(name)


def raise_value_error(config: cfg.GRPOConfig, attempts: str) -> None:
    """Count this attempt in the file `attempts`, then raise."""
    with open(attempts, "a") as file:
        file.write("attempt\n")
    raise ValueError("bad config")


# ------------------------------------------------------------------ tests

@pytest.fixture(scope="module")
def local_results(smoke_dirs, tmp_path_factory) -> list:
    """`sweep`'s results by the local pool (2 workers)."""
    results = tmp_path_factory.mktemp("local")
    return run_jobs(sweep(smoke_dirs, results), workers=2, desc="local", progress=False,
                    backend="local")


def assert_same_records(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=TIMING), b.drop(columns=TIMING))


def test_ray_gives_the_local_pools_results(cluster, local_results, smoke_dirs,
                                           tmp_path) -> None:
    records, *cheap = run_jobs(sweep(smoke_dirs, tmp_path), workers=2, desc="ray",
                               progress=False, backend="ray")
    assert cheap == local_results[1:]
    assert {threads for threads, _ in cheap} == {1}  # one torch thread per task
    assert (records["grad_norm"] > 0).any()  # the stand-in reward reached the worker
    assert_same_records(records, local_results[0])


def test_a_killed_worker_is_retried_and_the_run_resumes_from_its_checkpoint(
    cluster, local_results, smoke_dirs, tmp_path, monkeypatch
) -> None:
    config = smoke_config(smoke_dirs, tmp_path)
    marker = tmp_path / "crashed"
    monkeypatch.setenv("LOGRA_BACKEND", "ray")  # the backend chosen by the environment
    [records] = run_jobs([(stand_in_grpo_job, (config, str(marker)))], workers=1, desc="crash",
                         progress=False)
    assert marker.exists()  # the first attempt died in step 3
    manifest = json.loads((cfg.run_dir(config) / "manifest.json").read_text())
    assert manifest["resumed_from"] == [0, 2] and manifest["status"] == "finished"
    assert_same_records(records, local_results[0])


def test_a_raising_job_is_named_and_not_retried(cluster, tmp_path) -> None:
    attempts = tmp_path / "attempts"
    work = [(seeded_product, (0,)), (raise_value_error, ({"run_name": "broken"}, str(attempts)))]
    with pytest.raises(RuntimeError, match=r"job 1 \(raise_value_error\(run_name='broken'\)\) "
                                           r"failed: ValueError\('bad config'\)") as error:
        run_jobs(work, workers=2, desc="t", progress=False, backend="ray")
    assert isinstance(error.value.__cause__, ValueError)
    assert attempts.read_text().splitlines() == ["attempt"]


def test_tasks_run_under_the_drivers_cpu_pin(cluster, monkeypatch) -> None:
    from logra.models import determinism

    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")  # as `reproduce --pin avx2` sets it, before
    monkeypatch.setattr(determinism, "_MKL_CBWR_AT_START", "AVX2,STRICT")  # the driver starts
    assert run_jobs([(environment, ("MKL_CBWR",)), (environment, ("OMP_NUM_THREADS",))],
                    workers=2, desc="t", progress=False, backend="ray") == ["AVX2,STRICT", "1"]


def test_a_task_on_another_floating_point_path_is_refused_and_a_gpu_task_takes_the_drivers(
        monkeypatch) -> None:
    """The driver keys the results by its floating-point path: a CPU task that would compute
    on another is refused, naming both; a GPU task computes on its GPU and is given the
    driver's path, so that both build the same keys."""
    from logra.experiments import ray_backend
    from logra.models import determinism

    here = determinism.floating_point_path()
    ray_backend.check_path(here)
    with pytest.raises(RuntimeError, match=r"computes on floating-point path aten=.*, the driver "
                                           r"on aten=AVX2,mkl_cbwr=AVX2,STRICT,vendor=Other"):
        ray_backend.check_path("aten=AVX2,mkl_cbwr=AVX2,STRICT,vendor=Other")
    assert determinism.PATH_OVERRIDE not in ray_backend.task_environment()["env_vars"]
    gpu = ray_backend.task_environment(gpu=True)["env_vars"]
    assert gpu[determinism.PATH_OVERRIDE] == here
    monkeypatch.setattr(determinism, "_PATH_AT_START", "aten=AVX2,mkl_cbwr=None,vendor=Driver")
    assert determinism.floating_point_path() == "aten=AVX2,mkl_cbwr=None,vendor=Driver"


def test_the_core_does_not_import_ray() -> None:
    code = "import logra, logra.experiments.jobs, sys; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_backend_and_missing_ray_are_clear_errors(monkeypatch) -> None:
    work = [(seeded_product, (0,))]
    with pytest.raises(ValueError, match=r"unknown backend 'dask'; valid: \['local', 'ray'\]"):
        run_jobs(work, workers=1, desc="t", progress=False, backend="dask")
    monkeypatch.setenv("LOGRA_BACKEND", "spark")
    with pytest.raises(ValueError, match="unknown backend 'spark'"):
        run_jobs(work, workers=1, desc="t", progress=False)

    monkeypatch.setenv("LOGRA_BACKEND", "ray")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    monkeypatch.delitem(sys.modules, "logra.experiments.ray_backend", raising=False)
    monkeypatch.delattr(experiments, "ray_backend", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'logra\[cluster\]'"):
        run_jobs(work, workers=1, desc="t", progress=False)
    assert jobs.backend_name("local") == "local"


def test_reproduce_passes_the_backend_to_the_notebooks(monkeypatch, capsys) -> None:
    seen = []
    monkeypatch.setenv("LOGRA_BACKEND", "local")  # restored after the test
    monkeypatch.setattr(notebooks, "reproduce",
                        lambda *args, **kwargs: seen.append(os.environ["LOGRA_BACKEND"]))
    assert cli.main(["reproduce", "--scale", "smoke", "--backend", "ray"]) == 0
    assert seen == ["ray"]

    monkeypatch.setitem(sys.modules, "ray", None)  # find_spec then reports no Ray
    assert cli.main(["reproduce", "--scale", "smoke", "--backend", "ray"]) == 1
    assert "pip install 'logra[cluster]'" in capsys.readouterr().err
    assert seen == ["ray"]
