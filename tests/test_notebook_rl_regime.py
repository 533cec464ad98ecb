"""The RL-regime notebook (11): its GRPO configs, the learning rule on hand-made evaluations,
and the notebook at smoke scale."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import rl_regime as rr
from logra.rl import config as grpo
from logra.rl.probe import COLUMNS as PROBE_COLUMNS


def test_runs_evaluate_many_problems_before_and_after() -> None:
    cfg = rr.config("default")
    run = rr.grpo_config(cfg, "math-synth", 2)
    assert (run.optimizer, run.task, run.seed) == ("adamw", "math-synth", 2)
    assert run.eval_every == run.steps == cfg.steps
    assert (run.eval_prompts, run.eval_samples, run.eval_sampled_prompts) == (
        5000, 4, 2000)
    assert (run.prompts_per_step, run.group_size) == (cfg.prompts_per_step,
                                                            cfg.group_size)
    dirs = {grpo.run_dir(rr.grpo_config(cfg, t, s)) for t in cfg.tasks for s in cfg.seeds}
    assert len(dirs) == len(cfg.tasks) * len(cfg.seeds)


def evaluations(seed: int, greedy_gain: int, sampled_gain: float, n: int = 2000) -> pd.DataFrame:
    """Hand-made per-problem evaluations of one run: `greedy_gain` problems flip to correct,
    each sampled share rises by `sampled_gain` (with noise)."""
    rng = np.random.default_rng(seed)
    greedy = (rng.random(n) < 0.35).astype(float)
    after = greedy.copy()
    after[np.flatnonzero(greedy == 0)[:greedy_gain]] = 1.0
    sampled = rng.uniform(0, 0.5, n)
    later = np.clip(sampled + sampled_gain + rng.normal(0, 0.05, n), 0, 1)
    return pd.concat([pd.DataFrame(dict(step=0, problem=range(n), greedy=greedy,
                                        sampled=sampled)),
                      pd.DataFrame(dict(step=100, problem=range(n), greedy=after,
                                        sampled=later))]).assign(task="gsm-synth", seed=seed)


def test_a_run_passes_only_with_both_gains_large_and_significant() -> None:
    cfg = rr.config("default")
    frame = pd.concat([evaluations(0, 200, 0.15), evaluations(1, 20, 0.15),
                       evaluations(2, 200, 0.02)])
    table = rr.learning_table(frame, cfg).set_index("seed")
    assert table.loc[0, "greedy_gain"] == pytest.approx(10.0)
    assert table.loc[1, "greedy_gain"] == pytest.approx(1.0)
    assert table["passes"].tolist() == [True, False, False]  # greedy too small; sampled too small
    assert (table["greedy_p_holm"] >= table["greedy_p"]).all()
    assert table.loc[0, "greedy_p_holm"] < cfg.alpha and table.loc[2, "sampled_p_holm"] < 0.01
    assert (table["steps"] == 100).all() and (table["greedy_problems"] == 2000).all()
    assert "does not learn (1/3 seeds)" in rr.verdict(table.reset_index(), cfg)


@pytest.fixture(scope="module")
def executed(run_smoke_notebook, smoke_results):
    return run_smoke_notebook(rr.NOTEBOOK, results_dir=str(smoke_results))


def test_notebook_writes_the_table_the_curves_and_the_probe(executed, assert_figure) -> None:
    out = executed
    assert notebooks.NOTEBOOKS[rr.NOTEBOOK] == rr.EXPERIMENT
    cfg = rr.config("smoke")
    table = pd.read_csv(out / "rl_regime.csv")
    assert len(table) == len(cfg.tasks) * len(cfg.seeds)
    assert (table["greedy_problems"] == cfg.eval_prompts).all()
    assert (table["sampled_problems"] == cfg.eval_sampled_prompts).all()
    probe = pd.read_csv(out / "rl_regime_probe.csv")  # the smoke policy solves nothing:
    assert probe.empty and list(probe.columns) == list(PROBE_COLUMNS)  # nothing to step along
    trl = pd.read_csv(out / "rl_regime_trl.csv")
    assert trl["steps"].tolist() == ["1-1", "2-2"] and trl["overlap"].dtype == bool
    for name in ("rl_regime_training", "rl_regime_probe", "rl_regime_trl"):
        for suffix in (".png", ".pdf"):
            assert_figure(out / f"{name}{suffix}")
