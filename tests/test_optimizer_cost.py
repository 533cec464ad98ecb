"""The optimizer-cost benchmark: cases, builders, and the notebook at smoke scale."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from logra import notebooks
from logra.config import ConfigError
from logra.experiments import optimizer_cost as oc


def test_cases_have_the_advertised_shapes() -> None:
    assert oc.build_case("square-64").weight.shape == (64, 64)
    assert oc.build_case("2048x8192").weight.shape == (2048, 8192)
    assert sum(p.numel() for p in oc.build_case("smoke").parameters()) > 1000
    with pytest.raises(ValueError, match="unknown case"):
        oc.build_case("square")


def test_cases_take_the_device_and_dtype() -> None:
    model = oc.build_case("square-64", "cpu", "bfloat16")
    assert model.weight.dtype == torch.bfloat16 and model.weight.device.type == "cpu"
    with pytest.raises(ValueError, match="unknown dtype"):
        oc.build_case("square-64", "cpu", "float8")


def test_builders_cover_the_field_and_honour_the_filter() -> None:
    cfg = oc.config("smoke")
    names = [name for name, _ in oc.optimizer_builders(cfg)]
    assert {"adamw", "adamw-fused", "logra-r8", "naive-r16", "adafactor", "logra-r16-none",
            "logra-r16-diag", "logra-r16-regenerate"} <= set(names)
    assert "logra-r16-jvp" not in names  # the JVP estimators need a model with logits
    lm_names = [name for name, _ in oc.optimizer_builders(cfg, language_model=True)]
    assert {"logra-r16-calibrated", "logra-r16-jvp"} <= set(lm_names)
    only = [name for name, _ in oc.optimizer_builders(cfg.replace(optimizers=["logra"],
                                                                  control_estimators=[]))]
    # the AdamWs always (the ratios' baselines), then every LoGRA row
    assert only == ["adamw", "adamw-fused", "logra-r8", "logra-r16-regenerate"]
    with pytest.raises(ConfigError, match=r"control_estimators.*'exact'"):
        cfg.replace(control_estimators=["exact"])


def test_a_package_that_fails_to_import_is_not_installed(tmp_path, monkeypatch) -> None:
    """galore-torch's package imports bitsandbytes: present but unimportable is left out, not
    a crash of the whole benchmark (seen on a GPU machine without bitsandbytes)."""
    (tmp_path / "needs_missing.py").write_text("import a_module_nobody_has\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not oc._installed("needs_missing")
    assert not oc._installed("not_a_module_at_all")
    assert oc._installed("json")


def test_projection_cost_counts_every_distinct_shape() -> None:
    cfg = oc.config("smoke")
    cost = oc.projection_cost("square-256", 8, cfg, repeats=1)
    # one P (256×8) and one Q (256×8): the square matrix's two sides share the dimension but
    # not the side, so two projections
    assert cost["projections"] == 2 and cost["cache_bytes"] == 2 * 256 * 8 * 4
    assert cost["regenerate_ms"] > 0


def test_notebook_runs_at_smoke_scale(tmp_path, assert_figure) -> None:
    notebooks.execute("07_optimizer_cost", {"scale": "smoke", "figures_dir": str(tmp_path)},
                      executed_dir=tmp_path)
    assert_figure(tmp_path / "optimizer_cost.png")
    assert (tmp_path / "optimizer_cost.pdf").exists()
    table = pd.read_csv(tmp_path / "optimizer_cost.csv")
    for case, rows in table.groupby("case"):
        rows = rows.set_index("optimizer")
        assert rows.loc["adamw", "time_ratio"] == pytest.approx(1.0)
        assert rows.loc["adamw-fused", "fused_ratio"] == pytest.approx(1.0)
        # cached by default, on the CPU too; regenerated with cache_projections=False
        assert rows.loc["logra-r16-none", "cache_bytes"] > 0
        assert rows.loc["logra-r16-regenerate", "cache_bytes"] == 0
        assert (rows["step_ms"] > 0).all()
        # LoGRA keeps less state than AdamW wherever it sketches something
        assert rows.loc["logra-r8", "state_bytes"] < rows.loc["adamw", "state_bytes"], case
