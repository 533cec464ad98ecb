"""The statistics of scripts/grpo_proxy_report.py: the exact sign test and the seed-spread rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest


@pytest.fixture
def script(load_script):
    return load_script("grpo_proxy_report")


@pytest.mark.parametrize(("gained", "lost", "expected"), [
    (0, 0, 1.0),
    (5, 5, 1.0),
    (10, 0, 2 / 2**10),  # all ten flips one way
    (0, 10, 2 / 2**10),
    (8, 2, 2 * (1 + 10 + 45) / 2**10),  # P(X ≤ 2) twice, X ~ Bin(10, 1/2)
])
def test_sign_test_is_the_exact_two_sided_binomial_tail(script, gained, lost, expected) -> None:
    assert script.sign_test(gained, lost) == pytest.approx(expected)


def exact_tail(gained: int, lost: int) -> float:
    """The hand-written test scipy replaced: twice the lower binomial tail, in integers."""
    n, k = gained + lost, min(gained, lost)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0


@pytest.mark.parametrize(("gained", "lost"), [
    (1, 0), (3, 3), (7, 4), (20, 13), (53, 34), (80, 37), (611, 354), (653, 498),
])
def test_scipy_binomtest_gives_the_hand_written_tail(script, gained, lost) -> None:
    """Up to round-off: scipy sums floating-point probabilities, the old test exact integers
    (the committed tables' p-values, e.g. 611 vs 354, agree to 2e-14)."""
    assert script.sign_test(gained, lost) == pytest.approx(exact_tail(gained, lost), rel=1e-12)
    assert script.sign_test(lost, gained) == pytest.approx(exact_tail(gained, lost), rel=1e-12)


def test_sign_test_is_symmetric_and_at_most_one(script) -> None:
    for gained in range(12):
        for lost in range(12):
            p = script.sign_test(gained, lost)
            assert 0 < p <= 1 and math.isclose(p, script.sign_test(lost, gained))


def test_flips_count_gained_and_lost_problems(script) -> None:
    before = [True, True, False, False, False, True]
    after = [True, False, True, True, False, True]
    row = script.flips(before, after)
    assert (row["gained"], row["lost"], row["problems"]) == (2, 1, 6)
    assert row["accuracy"] == pytest.approx(4 / 6) and row["warmup_accuracy"] == 0.5
    assert row["p_value"] == pytest.approx(script.sign_test(2, 1)) == 1.0


def test_seed_summary_compares_the_gain_of_the_mean_with_the_range(script) -> None:
    rows = [dict(run=f"proxy1m-adamw-s{seed}", step=0, accuracy=0.30) for seed in range(3)]
    rows += [dict(run="proxy1m-adamw-s0", step=50, accuracy=0.34),
             dict(run="proxy1m-adamw-s1", step=50, accuracy=0.35),
             dict(run="proxy1m-adamw-s2", step=50, accuracy=0.36),   # gain .05 > range .02
             dict(run="proxy1m-adamw-s0", step=100, accuracy=0.28),
             dict(run="proxy1m-adamw-s1", step=100, accuracy=0.33),
             dict(run="proxy1m-adamw-s2", step=100, accuracy=0.40)]  # gain .03 < range .12
    summary = script.seed_summary(pd.DataFrame(rows)).set_index("step")
    assert summary.loc[50, "gain"] == pytest.approx(0.05)
    assert summary.loc[50, "spread"] == pytest.approx(0.02)
    assert bool(summary.loc[50, "clears_spread"]) and not bool(summary.loc[100, "clears_spread"])
    assert (summary["seeds"] == 3).all()


def test_every_method_resolves_to_a_grpo_config_for_the_proxy(script) -> None:
    runs = script.configs("proxy-1m")
    assert list(runs) == [f"proxy1m-{suffix}" for suffix in script.METHODS]
    assert {config.optimizer for config in runs.values()} == {"adamw", "lora", "logra", "naive"}
    assert runs["proxy1m-logra-nokl"].predicted_kl_threshold is None
    assert all(config.steps == script.STEPS for config in runs.values())


def test_seed_study_differs_from_the_method_runs_only_in_lr_and_held_out_problems(script) -> None:
    """Its lr-1e-4 seeds train exactly as the method table's AdamW seeds (the eval draws no
    random numbers), so they are the same policies measured on ten times the problems."""
    method = script.configs("proxy-1m")["proxy1m-adamw-s1"]
    study = script.seed_configs("proxy-1m")
    assert list(study) == list(script.SEED_STUDY)
    for label, runs in study.items():
        assert len(runs) == len(script.SEEDS)
        config = runs[f"proxy1m-adamw-{label}-s1-heldout{script.HELD_OUT}"]
        differ = {k for k, v in config.to_dict().items() if v != method.to_dict()[k]}
        assert differ <= {"lr", "eval_prompts", "run_name"}
        assert config.lr == script.SEED_STUDY[label]
        assert config.eval_prompts == script.HELD_OUT > script.TEST_PROBLEMS
