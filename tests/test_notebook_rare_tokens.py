"""The rare-token notebook end to end at smoke scale, its measurements, and the C10 rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from logra.config import ConfigError
from logra.experiments import rare_tokens as rt
from logra.experiments import rare_tokens_report as rtr
from logra.experiments.report import VERDICTS


@pytest.fixture(scope="module")
def executed(run_smoke_notebook):
    return run_smoke_notebook("06_rare_tokens")


# ---------------------------------------------------------------- the notebook


def test_notebook_writes_every_figure_table_and_claim(executed, assert_figure) -> None:
    assert (executed / "06_rare_tokens.ipynb").exists()
    for name in rtr.FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(executed / f"{name}{suffix}")
    for name in ("rare_tokens_survival", "rare_tokens_fix", "claims_rare_tokens"):
        assert (executed / f"{name}.csv").exists() and (executed / f"{name}.md").exists(), name


def test_tables_cover_every_rule_rank_and_share(executed) -> None:
    cfg = rt.config("smoke")
    survival = pd.read_csv(executed / "rare_tokens_survival.csv")
    assert set(survival.rule) == set(rt.RULES[1:])
    assert set(survival["rank"]) == set(cfg.ranks)
    assert [c for c in survival.columns if c.startswith("share")] == \
        [f"share {s:g}" for s in cfg.shares]
    fix = pd.read_csv(executed / "rare_tokens_fix.csv").set_index("rule")
    assert list(fix.index) == list(rt.RULES)
    assert fix.at["adamw", "ratio to AdamW"] == 1.0


def test_claim_row_c10(executed) -> None:
    claims = pd.read_csv(executed / "claims_rare_tokens.csv")
    assert list(claims.claim) == ["C10"]
    assert claims.verdict[0] in VERDICTS
    assert "smoke" in claims.scale[0] and "(b) steps to fix" in claims.reproduced[0]


# ---------------------------------------------------------------- measurements


def test_rare_stream_holds_the_requested_share_of_gradient_mass() -> None:
    cfg = rt.config("smoke")
    for share in (1e-3, 0.2):
        stream, rows = rt.rare_stream(cfg, share, seed=0)
        assert len(stream) == cfg.stream_steps and stream[0].shape == tuple(cfg.vocab_shape)
        rare_mass = sum(float(g[rows].square().sum()) for g in stream)
        total = sum(float(g.square().sum()) for g in stream)
        assert rare_mass / total == pytest.approx(share, rel=1e-4)  # rows are disjoint
    assert len(rows) == cfg.rare_rows
    with pytest.raises(ValueError, match="share"):
        rt.rare_stream(cfg, 1.0, seed=0)


def test_rare_metrics() -> None:
    signal = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    rows = torch.tensor([1, 3])
    right = torch.zeros(5, 2)
    right[rows] = signal
    assert rt.rare_metrics(right, rows, signal) == pytest.approx(
        {"rare_component": 1.0, "alignment": 1.0})
    assert rt.rare_metrics(-right, rows, signal)["alignment"] == pytest.approx(-1.0)
    elsewhere = torch.zeros(5, 2)
    elsewhere[0] = 1.0
    assert rt.rare_metrics(elsewhere, rows, signal) == {"rare_component": 0.0, "alignment": 0.0}
    half = right.clone()
    half[0] = torch.tensor([0.0, math.sqrt(2.0)])  # as much movement on a common row
    assert rt.rare_metrics(half, rows, signal)["rare_component"] == pytest.approx(2 ** -0.5)


def test_survival_is_relative_to_adamw_on_the_same_stream() -> None:
    cfg = rt.config("smoke", ranks=[4], stream_steps=3)
    rows = pd.DataFrame(rt.survival_rows(cfg, 0.01, seed=0))
    survival = rows[rows.metric == "survival"].set_index("method")["value"]
    assert survival["adamw"] == 1.0
    assert set(survival.index) == set(rt.RULES)
    assert rows[rows.metric == "alignment"].value.between(-1, 1).all()


def test_lm_data_plants_the_pattern() -> None:
    cfg = rt.config("smoke", rare_fraction=1.0)
    probs = rt.transition_matrix(cfg, seed=0)
    assert torch.allclose(probs.sum(dim=1), torch.ones(cfg.lm_vocab))
    assert (probs[:, :3] == 0).all()  # the chain never emits a special token
    ids = rt.lm_batch(cfg, probs, rt.RARE, torch.Generator().manual_seed(0))
    assert ids.shape == (cfg.batch_size, cfg.seq_len)
    triggers = torch.nonzero(ids == rt.TRIGGER)
    assert len(triggers) == cfg.batch_size  # every sequence holds the pattern once
    assert (ids[triggers[:, 0], triggers[:, 1] + 1] == rt.RARE).all()
    assert (ids != rt.PLANTED).all()
    contexts = rt.eval_contexts(cfg, probs, seed=0)
    assert (contexts[:, -1] == rt.TRIGGER).all() and contexts.shape[0] == cfg.eval_contexts


def test_rare_gradient_share_is_a_fraction() -> None:
    cfg = rt.config("smoke")
    probs = rt.transition_matrix(cfg, seed=0)
    ids = rt.lm_batch(cfg, probs, rt.RARE, torch.Generator().manual_seed(0))
    share = rt.rare_gradient_share(rt.lm(cfg, seed=0), ids)
    assert 0 < share < 1


# ---------------------------------------------------------------- the C10 rule


def _frame(survival: dict[str, float], steps: dict[str, list[float]]) -> pd.DataFrame:
    """Hand-made results at the smoke config's rank and smallest share."""
    cfg = rt.config("smoke")
    rank, share = cfg.fix_rank, min(cfg.shares)
    rows = [dict(experiment="survival", method=rule, rank=rank, share=share, seed=0, step=-1,
                 metric="survival", value=value) for rule, value in survival.items()]
    for rule, values in steps.items():
        rows += [dict(experiment="fix", method=rule, rank=rank, share=math.nan, seed=seed,
                      step=-1, metric="steps_to_fix", value=v) for seed, v in enumerate(values)]
    rows.append(dict(experiment="fix", method="adamw", rank=-1, share=math.nan, seed=0, step=0,
                     metric="rare_grad_share", value=0.01))
    return pd.DataFrame(rows, columns=list(rt.COLUMNS))


NAN = math.nan


@pytest.mark.parametrize(("survival", "steps", "verdict"), [
    ({"logra_gain": 0.2, "logra_nystrom": 0.1, "naive_projection": 0.0},
     {"adamw": [10, 20], "logra_gain": [50, NAN], "logra_nystrom": [NAN, NAN],
      "naive_projection": [NAN, NAN]}, "reproduced"),
    ({"logra_gain": 0.9, "logra_nystrom": 0.1, "naive_projection": 0.0},
     {"adamw": [10, 20], "logra_gain": [15, 20], "logra_nystrom": [NAN, NAN],
      "naive_projection": [NAN, NAN]}, "partly"),
    ({"logra_gain": 0.2, "logra_nystrom": 0.9, "naive_projection": 0.0},
     {"adamw": [10, 20], "logra_gain": [15, 20], "logra_nystrom": [15, 20],
      "naive_projection": [NAN, NAN]}, "partly"),
    ({"logra_gain": 0.9, "logra_nystrom": 0.8, "naive_projection": 0.0},
     {"adamw": [10, 20], "logra_gain": [15, 20], "logra_nystrom": [20, 25],
      "naive_projection": [NAN, NAN]}, "not reproduced"),
])
def test_c10_rule(survival: dict, steps: dict, verdict: str) -> None:
    row = rtr.c10_claim(_frame(survival, steps), rt.config("smoke"))
    assert row.claim == "C10" and row.verdict == verdict


def test_c10_needs_the_reported_rank() -> None:
    frame = _frame({"logra_gain": 0.2, "logra_nystrom": 0.1, "naive_projection": 0.0},
                   {"adamw": [10], "logra_gain": [10], "logra_nystrom": [10],
                    "naive_projection": [10]})
    with pytest.raises(ValueError, match="rank"):
        rtr.c10_claim(frame, rt.config("smoke", fix_rank=8))


def test_config_scales_and_errors() -> None:
    smoke, default = rt.config("smoke"), rt.config("default")
    assert default["fix_rank"] == 16 and default["fix_rank"] in default["ranks"]
    assert smoke["fix_rank"] in smoke["ranks"]
    assert default["rank_plot_share"] in default["shares"]
    assert smoke["max_fix_steps"] < default["max_fix_steps"]
    with pytest.raises(ConfigError, match="unknown key"):
        rt.config("smoke", rank=3)
