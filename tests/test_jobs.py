"""The local job pool: its workers end with the sweep that started them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SWEEP = """
import os, sys, time
sys.path.insert(0, {repo!r})
from logra.experiments.jobs import run_jobs

def job(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(300)

if __name__ == "__main__":
    run_jobs([(job, ({a!r},)), (job, ({b!r},))], 2, "sweep", progress=False)
"""


def _alive(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped, does not)."""
    status = Path(f"/proc/{pid}/status")
    try:
        state = next(line for line in status.read_text().splitlines()
                     if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "Z" not in state.split()[1]


def _wait(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's prctl")
def test_killing_a_sweep_ends_its_workers(tmp_path) -> None:
    """A sweep killed outright (SIGKILL: no cleanup runs) once left its spawned workers
    computing as orphans, writing into the results store beside the next sweep's."""
    a, b = tmp_path / "a.pid", tmp_path / "b.pid"
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP.format(repo=str(REPO), a=str(a), b=str(b)))
    sweep = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    try:
        assert _wait(lambda: a.exists() and b.exists() and a.read_text() and b.read_text(),
                     120), "the workers never started"
        workers = [int(a.read_text()), int(b.read_text())]
        assert all(_alive(pid) for pid in workers)
        sweep.kill()
        sweep.wait()
        assert _wait(lambda: not any(_alive(pid) for pid in workers), 20), workers
    finally:
        sweep.kill()
