"""scripts/gpu_checks.py at tiny sizes on the CPU: every section runs and writes its table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_checks.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_every_section_runs_tiny_on_the_cpu(tmp_path) -> None:
    result = run("--device", "cpu", "--tiny", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FAILED" not in (tmp_path / "summary.md").read_text()
    bench = pd.read_csv(tmp_path / "benchmark.csv").set_index(["case", "optimizer"])
    for case in ("square-256", "smoke"):
        assert bench.loc[(case, "adamw"), "time_ratio"] == pytest.approx(1.0)
        assert bench.loc[(case, "adamw-fused"), "fused_ratio"] == pytest.approx(1.0)
        assert bench.loc[(case, "logra-r16"), "state_bytes"] > 0
    assert {"logra-r16-none", "logra-r16-diag", "logra-r16-calibrated", "logra-r16-jvp"} <= {
        name for case, name in bench.index if case == "smoke"}
    projections = pd.read_csv(tmp_path / "projections.csv")
    assert (projections["cache_bytes"] > 0).all() and (projections["regenerate_ms"] > 0).all()
    syncs = pd.read_csv(tmp_path / "syncs.csv")
    assert list(syncs["control"]) == ["none", "diag"]
    assert syncs["synchronizing_calls"].isna().all()  # counted on CUDA only
    memory = pd.read_csv(tmp_path / "memory.csv")
    assert set(memory["optimizer"]) == {"adamw", "logra"}
    assert (memory["predicted_gib"] > 0).all() and memory["measured_gib"].isna().all()
    jvp = pd.read_csv(tmp_path / "jvp.csv").set_index("pass")
    assert list(jvp.index) == ["forward", "forward+backward", "jvp probe"]
    assert jvp.loc["forward+backward", "over_forward_backward"] == pytest.approx(1.0)
    grpo = pd.read_csv(tmp_path / "grpo.csv")
    assert list(grpo["optimizer"]) == ["adamw", "logra-none", "logra-calibrated"]
    assert (grpo["seconds_per_step"] > 0).all()
    compiled = pd.read_csv(tmp_path / "compiled.csv")
    assert list(compiled["mode"].unique()) == ["eager", "compiled"]
    assert compiled["clipped"].all() and compiled["probed"].all()  # the probe runs every step
    assert (compiled["gamma"] < 1).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_cuda_without_a_gpu_is_refused_by_name(tmp_path) -> None:
    result = run("--out", str(tmp_path))
    assert result.returncode == 2 and "--device cuda: no CUDA GPU here" in result.stderr
