"""The kit-vs-TRL training-curve check (`logra.experiments.trl_check`)."""

from __future__ import annotations

import pandas as pd
import pytest

from logra.experiments import trl_check
from logra.rl import config as cfg

pytest.importorskip("trl")


def rewards(offset: float, seeds=(0, 1, 2), steps: int = 20) -> pd.DataFrame:
    return pd.DataFrame([dict(step=t, seed=s, reward=offset + 0.01 * s + 0.001 * t)
                         for s in seeds for t in range(1, steps + 1)])


def test_agreement_compares_the_seed_ranges_block_by_block() -> None:
    kit = pd.concat([rewards(0.30), pd.DataFrame([dict(step=0, seed=0, reward=9.0)])])
    table = trl_check.agreement(kit, rewards(0.31), block=10)
    assert table["steps"].tolist() == ["1-10", "11-20"]
    assert table["overlap"].all()  # seed ranges [0.30, 0.32] and [0.31, 0.33] meet
    assert table["kit mean"].iloc[0] == pytest.approx(0.30 + 0.01 + 0.0055)
    assert not trl_check.agreement(kit, rewards(0.40), block=10)["overlap"].any()
    smooth = trl_check.curves(kit, rewards(0.31), window=5)
    assert set(smooth["source"]) == {"kit", "TRL"} and (smooth["step"] > 0).all()


def test_trl_trains_the_kit_s_config(tmp_path, capsys) -> None:
    """TRL's GRPOTrainer runs the kit's smoke config: one reward per step, and no step's log
    dict printed."""
    config = cfg.resolve("grpo", "smoke", results_dir=str(tmp_path), steps=2)
    frame = trl_check.trl_run(config)
    assert frame["step"].tolist() == [1, 2]
    assert frame["reward"].between(0, 1).all()
    assert "'reward'" not in capsys.readouterr().out
