"""The optimizer-cost benchmark: cases, builders, and the notebook at smoke scale."""

from __future__ import annotations

import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import optimizer_cost as oc


def test_cases_have_the_advertised_shapes() -> None:
    assert oc.build_case("square-64").weight.shape == (64, 64)
    assert oc.build_case("2048x8192").weight.shape == (2048, 8192)
    assert sum(p.numel() for p in oc.build_case("smoke").parameters()) > 1000
    with pytest.raises(ValueError, match="unknown case"):
        oc.build_case("square")


def test_builders_cover_the_field_and_honour_the_filter() -> None:
    cfg = oc.config("smoke")
    names = [name for name, _ in oc.optimizer_builders(cfg)]
    assert {"adamw", "adamw-fused", "logra-r8", "naive-r16", "adafactor"} <= set(names)
    only = [name for name, _ in oc.optimizer_builders({**cfg, "optimizers": ["logra"]})]
    assert only == ["logra-r8"]


def test_notebook_runs_at_smoke_scale(tmp_path, assert_figure) -> None:
    notebooks.execute("07_optimizer_cost", {"scale": "smoke", "figures_dir": str(tmp_path)},
                      executed_dir=tmp_path)
    assert_figure(tmp_path / "optimizer_cost.png")
    assert (tmp_path / "optimizer_cost.pdf").exists()
    table = pd.read_csv(tmp_path / "optimizer_cost.csv")
    for case, rows in table.groupby("case"):
        rows = rows.set_index("optimizer")
        assert rows.loc["adamw", "time_ratio"] == pytest.approx(1.0)
        assert (rows["step_ms"] > 0).all()
        # LoGRA keeps less state than AdamW wherever it sketches something
        assert rows.loc["logra-r8", "state_bytes"] < rows.loc["adamw", "state_bytes"], case
