"""scripts/warmup_seed_spread.py's summary: C7's two parts per warm-up seed, and their spread."""

from __future__ import annotations

import pandas as pd
import pytest


@pytest.fixture
def script(load_script):
    return load_script("warmup_seed_spread")


def _pairs(logra_greedy: float, adamw_learned: bool) -> pd.DataFrame:
    """`comparison_report.c7_pairs`'s shape: one row per measure."""
    return pd.DataFrame([
        {"measure": "greedy", "base": 30.0, "adamw": 40.0, "logra": logra_greedy,
         "difference": logra_greedy - 40.0, "p": 0.001, "matches": logra_greedy >= 38.0,
         "exceeds": False, "adamw_learned": adamw_learned},
        {"measure": "sampled", "base": 10.0, "adamw": 10.0, "logra": 11.0, "difference": 1.0,
         "p": 0.5, "matches": True, "exceeds": False, "adamw_learned": adamw_learned},
    ])


def test_a_seed_row_splits_c7_into_its_comparison_and_its_cap(script) -> None:
    warmup = {"warmup_steps": 1200, "test_accuracy": {"gsm-synth": 0.358}}
    row = script.summarise(3, warmup, _pairs(35.0, adamw_learned=True), "partly")
    assert row["warm-up seed"] == 3 and row["warm-up test gsm-synth, %"] == pytest.approx(35.8)
    assert row["logra greedy, %"] == 35.0 and row["base sampled, %"] == 10.0
    assert row["LoGRA − AdamW greedy, pts"] == -5.0
    assert row["LoGRA matches AdamW"] == "1/2" and row["AdamW above base"] == "yes"
    assert row["C7 verdict"] == "partly"


def test_the_spread_rows_give_mean_range_and_whether_each_verdict_agrees(script) -> None:
    warmup = {"warmup_steps": 1100, "test_accuracy": {"gsm-synth": 0.40}}
    rows = [script.summarise(0, warmup, _pairs(41.0, adamw_learned=False), "partly"),
            script.summarise(1, {**warmup, "warmup_steps": 1300},
                             _pairs(39.0, adamw_learned=True), "reproduced")]
    table = script.spread_rows(pd.DataFrame(rows)).set_index("warm-up seed")
    assert list(table.index) == [0, 1, "mean", "range"]
    assert table.loc["mean", "warm-up steps"] == 1200 and table.loc["range", "warm-up steps"] == 200
    assert table.loc["mean", "LoGRA − AdamW greedy, pts"] == 0.0
    assert table.loc["range", "LoGRA − AdamW greedy, pts"] == 2.0
    assert table.loc["range", "LoGRA matches AdamW"] == "same"
    assert table.loc["range", "AdamW above base"] == "differs"
    assert table.loc["range", "C7 verdict"] == "differs"
    assert table.loc["mean", "C7 verdict"] == ""
