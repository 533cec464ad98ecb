"""The KL-trajectory notebook end to end at smoke scale, its verdict rules on hand-made frames,
the calibration probe, and the `adamw-kl` optimizer of the registry."""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from logra.experiments import comparison, grpo_runs, jobs, kl_control
from logra.experiments import kl_trajectories as kt
from logra.experiments import kl_trajectories_report as ktr
from logra.experiments.grpo_runs import Run
from logra.experiments.jobs import run_jobs
from logra.experiments.report import VERDICTS
from logra.optimizers import build_optimizer
from logra.rl import config as grpo
from logra.rl import runner


@pytest.fixture(scope="module")
def executed(run_smoke_notebook, smoke_results):
    return run_smoke_notebook(kt.NOTEBOOK, results_dir=str(smoke_results)), smoke_results


# ---------------------------------------------------------------- the notebook


def test_notebook_writes_figures_tables_and_runs(executed, assert_figure) -> None:
    out, results = executed
    assert (out / f"{kt.NOTEBOOK}.ipynb").exists()
    for name in ktr.FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(out / f"{name}{suffix}")
    cfg = kt.config("smoke")
    table = pd.read_csv(out / "kl_trajectories.csv")
    assert list(table["method"]) == [grpo_runs.METHODS[m].label for m in cfg.methods]
    assert (table["seeds"] == len(cfg.seeds)).all() and (table["steps"] == cfg.steps).all()
    assert (table.filter(like="final KL") >= -1e-6).all().all()
    calibration = pd.read_csv(out / "kl_calibration.csv")
    assert list(calibration["predictor"]) == [
        ktr.DEFAULT_PREDICTOR, ktr.UNPROBED_PREDICTOR, ktr.RAW_PREDICTOR, ktr.FULL_PREDICTOR,
        ktr.APPLIED_PREDICTOR]
    schedule = pd.read_csv(out / "kl_calibration_schedule.csv")
    assert set(schedule["calibration from"]) == {"JVP probes",
                                                 "measured KL each step (observe_kl)"}
    assert set(schedule["probe"]) == {ktr.DEFAULT_PROBE, ktr.WHOLE_PROBE}
    # every (method, seed) run is cached under the results directory, with its manifest
    for method in cfg.methods:
        for seed in cfg.seeds:
            config = kt.grpo_config(cfg.replace(results_dir=str(results)), method, seed)
            assert (grpo.run_dir(config) / "manifest.json").exists(), (method, seed)
    assert list((results / "calibration").glob("*.csv"))


def test_notebook_claim_rows(executed) -> None:
    out, _ = executed
    claims = pd.read_csv(out / "claims_kl_trajectories.csv")
    assert list(claims["claim"]) == ["C5", "C6", "C6"]
    assert claims["verdict"].isin(VERDICTS).all()
    assert claims["scale"].iloc[0].startswith("smoke")
    # the smoke policy earns no reward, so nothing moves: no explosion, nothing to track
    assert list(claims["verdict"][:2]) == ["not reproduced", "not reproduced"]
    gpu = claims.iloc[2]
    assert gpu["verdict"] == "needs GPU scale"
    assert "logra-repro reproduce --scale 1.5b --only 03_kl_trajectories" in gpu["reproduced"]
    assert "logra-repro run experiments/grpo.yaml --scale 1.5b optimizer=logra" in gpu["reproduced"]


# ---------------------------------------------------------------- configs and commands


def test_methods_map_to_the_intended_optimizer_settings() -> None:
    cfg = kt.config("default", methods=list(grpo_runs.METHODS))
    expected = {
        "adamw": ("adamw", 0.02, "gain"), "adamw-kl": ("adamw-kl", 0.02, "gain"),
        "logra": ("logra", 0.02, "gain"), "logra-nystrom": ("logra", 0.02, "nystrom"),
        "logra-nokl": ("logra", None, "gain"), "naive": ("naive", 0.02, "gain"),
    }
    for method, (optimizer, threshold, reconstruction) in expected.items():
        config = kt.grpo_config(cfg, method, 2)
        assert (config.optimizer, config.predicted_kl_threshold,
                config.reconstruction) == (optimizer, threshold, reconstruction), method
        assert config.seed == 2 and config.steps == config.eval_every == cfg.steps
        assert config.model == "proxy-1m"
        assert config.lr == cfg.method_lr.get(method, cfg.lr), method
    assert kt.grpo_config(cfg, "naive", 0).lr == 3e-4  # at LoGRA's lr, not dense AdamW's
    calibration = kt.calibration_config(cfg, 0)
    assert calibration.kl_estimator == "calibrated"
    assert calibration.predicted_kl_threshold == math.inf
    # the calibration's own smaller batch
    assert (calibration.prompts_per_step, calibration.group_size, calibration.lr) == (
        2, 4, 1e-4)


def test_default_runs_are_notebook_04s_and_high_lr_notebook_09s_stress_runs() -> None:
    cfg, theirs = kt.config("default"), comparison.config("default")
    for method, lr in (("adamw", 1e-4), ("logra", 3e-4)):
        assert kt.grpo_config(cfg, method, 0) == comparison.grpo_config(
            theirs, Run(model="proxy-1m", method=method, seed=0, lr=lr))
    high, stress = kt.config("high-lr"), kl_control.config("default")
    runs = {r.method: r for r in kl_control.plan(stress)  # the budget study shares the lr
            if r.study == "frontier" and r.lr == stress["stress_lr"]
            and r.delta in (None, stress["predicted_kl_threshold"])}
    for method in high["methods"]:
        assert kt.grpo_config(high, method, 0) == kl_control.grpo_config(stress, runs[method])


def test_the_printed_command_computes_the_same_run() -> None:
    for scale in ("default", "smoke", "1.5b", "27b"):
        cfg = kt.config(scale)
        config = kt.grpo_config(cfg, cfg.methods[-1], 1)
        line = grpo_runs.command(config)
        assert line.startswith("logra-repro run experiments/grpo.yaml")
        words = line.split()[3:]
        grpo_scale = "default"
        if words and words[0] == "--scale":
            grpo_scale, words = words[1], words[2:]
        again = grpo.resolve(scale=grpo_scale, overrides=words)
        assert grpo.run_dir(again) == grpo.run_dir(config), scale


def test_gpu_scales_take_grpo_settings_from_grpo_yaml() -> None:
    config = kt.grpo_config(kt.config("1.5b"), "logra", 0)
    reference = grpo.resolve(scale="1.5b")
    for key in ("model", "lr", "prompts_per_step", "max_new_tokens", "dtype", "task"):
        assert getattr(config, key) == getattr(reference, key), key
    assert config.steps == 1100
    gemma = kt.grpo_config(kt.config("27b"), "logra", 0).model
    assert gemma == "google/gemma-3-27b-it"
    assert grpo_runs.is_real_scale(kt.config("7b"))
    assert not grpo_runs.is_real_scale(kt.config("default"))


def test_bad_configs_fail_before_any_compute() -> None:
    with pytest.raises(ValueError, match=r"methods: input should be one of .*got 'sgd'"):
        kt.config("smoke", methods=["adamw", "sgd"])
    with pytest.raises(ValueError, match="unknown scale"):
        kt.config("huge")
    with pytest.raises(ValueError, match="unknown key"):
        kt.config("smoke", optimizer="adamw")
    with pytest.raises(ValueError, match=r"method_lr: input should be one of .*got 'sgd'"):
        kt.config("smoke", method_lr={"sgd": 1e-3})
    with pytest.raises(ValueError, match=r"method_lr: input should be greater than 0, got -1.0"):
        kt.config("smoke", method_lr={"adamw": -1.0})


# ---------------------------------------------------------------- verdict rules


def _frame(curves: dict[str, list[list[float]]]) -> pd.DataFrame:
    """Hand-made runs: {method: [KL per step, one list per seed]}, with every column of `run`."""
    rows = []
    for method, seeds in curves.items():
        for seed, kls in enumerate(seeds):
            rows.append(dict(method=method, seed=seed, step=0, kl=math.nan))
            for step, kl in enumerate(kls, 1):
                rows.append(dict(method=method, seed=seed, step=step, kl=kl, step_kl=kl / 10,
                                 predicted_kl=kl / 10, applied_kl=kl / 10, gamma=1.0,
                                 clipped=False, reward=0.5, seconds=1.0, eval_accuracy=math.nan,
                                 jvp_kl=math.nan))
    return pd.DataFrame(rows).reindex(columns=["method", "seed", *runner.COLUMNS, "jvp_kl"])


def _cfg(**overrides) -> dict:
    return kt.config("default", methods=["adamw", "logra", "naive"], **overrides)


def ramp(end: float, steps: int = 60) -> list[float]:
    return list(np.linspace(end / steps, end, steps))


def test_trajectory_figure_draws_each_method_and_the_band_of_its_seeds() -> None:
    """Per panel a line per method (γ: the controlled ones) and a band where there are
    several seeds."""
    frame = _frame({"adamw": [ramp(0.05), ramp(0.04), ramp(0.03)],
                    "logra": [ramp(0.04)] * 3, "naive": [ramp(1.0)]})
    kl, step_kl, gamma, reward = ktr.plot_trajectories(frame, _cfg()).axes
    for ax in (kl, reward):
        assert len(ax.lines) == 3 and len(ax.collections) == 2  # naive ran one seed
    assert len(step_kl.lines) == 4  # and the budget's line
    assert len(gamma.lines) == 1 and gamma.lines[0].get_color() == grpo_runs.METHODS[
        "logra"].color
    assert kl.lines[0].get_ydata() == pytest.approx(
        np.mean([ramp(0.05), ramp(0.04), ramp(0.03)], axis=0)[1:])  # from step 2


@pytest.mark.parametrize(("naive_ends", "verdict"), [
    ([5.0, 6.0, 8.0], "reproduced"),  # every seed far above dense AdamW (0.05) and 0.1
    ([5.0, 0.03, 0.04], "partly"),
    ([0.3, 0.4, 0.2], "not reproduced"),  # above 0.1 nats but not 10× AdamW's 0.05
])
def test_c5_rule(naive_ends, verdict) -> None:
    frame = _frame({"adamw": [ramp(0.05), ramp(0.04), ramp(0.03)],
                    "logra": [ramp(0.04)] * 3,
                    "naive": [ramp(end) for end in naive_ends]})
    row = ktr.c5_claim(frame, _cfg())
    assert row.claim == "C5" and row.verdict == verdict, row.reproduced


def test_c5_counts_only_the_claims_window() -> None:
    late = [0.01] * 100 + [9.0] * 20  # explodes only after step 100
    frame = _frame({"adamw": [[0.05] * 120] * 3, "logra": [[0.05] * 120] * 3,
                    "naive": [late] * 3})
    assert ktr.c5_claim(frame, _cfg()).verdict == "not reproduced"


@pytest.mark.parametrize(("logra_end", "verdict"), [
    (0.045, "reproduced"),  # inside AdamW's band 0.03–0.05
    (0.08, "partly"),  # within 2× of the band
    (0.005, "not reproduced"),
])
def test_c6_rule(logra_end, verdict) -> None:
    frame = _frame({"adamw": [[0.05] * 20, [0.04] * 20, [0.03] * 20],
                    "logra": [[logra_end] * 20] * 3, "naive": [[1.0] * 20] * 3})
    row = ktr.c6_claim(frame, _cfg())
    assert row.claim == "C6" and row.verdict == verdict, row.reproduced
    assert "1,100" in row.reproduced


def test_c6_is_not_reproduced_when_dense_adamw_never_moved() -> None:
    frame = _frame({"adamw": [[0.0] * 5] * 2, "logra": [[0.0] * 5] * 2, "naive": [[0.0] * 5] * 2})
    row = ktr.c6_claim(frame, _cfg())
    assert row.verdict == "not reproduced" and "did not move" in row.reproduced


def test_summary_reads_the_numbers() -> None:
    frame = _frame({"adamw": [[0.04] * 20] * 2, "logra": [[0.01] * 20] * 2,
                    "naive": [[0.002] * 20] * 2})
    text = ktr.summary(frame, _cfg())
    assert "LoGRA gain + KL control 0.25×" in text and "naive random projection 0.05×" in text
    assert "γ < 1 on 0 of 40 steps" in text


def test_rules_need_their_methods() -> None:
    frame = _frame({"adamw": [[0.1] * 5], "logra": [[0.1] * 5]})
    with pytest.raises(ValueError, match="naive"):
        ktr.c5_claim(frame, _cfg())


def test_long_horizon_row_only_where_the_runs_are_short() -> None:
    row = ktr.c6_long_horizon(kt.config("default"))
    assert row.verdict == "needs GPU scale" and "--scale 1.5b" in row.reproduced
    assert ktr.c6_long_horizon(kt.config("1.5b")) is None


# ---------------------------------------------------------------- calibration


def test_calibration_fit_recovers_a_known_factor() -> None:
    predicted = pd.Series(np.geomspace(1e-9, 1e-6, 30))
    noise = np.exp(np.random.default_rng(0).normal(0, 0.1, 30))
    fit = ktr._fit(predicted, 2.7e6 * predicted * noise)
    assert fit["ratio"] == pytest.approx(2.7e6, rel=0.1)
    assert fit["slope"] == pytest.approx(1.0, abs=0.05) and fit["spearman"] > 0.95
    assert math.isnan(ktr._fit(pd.Series([0.0, -1.0]), pd.Series([1.0, 1.0]))["ratio"])


def test_calibration_spearman_ranks_ties_by_their_mean() -> None:
    """Ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4), both of mean 2.5: Σdd' = 4.5, Σd² = 4.5 and
    Σd'² = 5, so ρ = 4.5 / √(4.5·5) = √0.9; with a constant side ρ is undefined (nan)."""
    fit = ktr._fit(pd.Series([1e-6, 2e-6, 2e-6, 3e-6]), pd.Series([1e-6, 3e-6, 2e-6, 4e-6]))
    assert fit["spearman"] == pytest.approx(math.sqrt(0.9), rel=1e-12)
    flat = ktr._fit(pd.Series([1e-6, 1e-6, 1e-6]), pd.Series([1e-6, 3e-6, 2e-6]))
    assert math.isnan(flat["spearman"])


@pytest.fixture
def learning_smoke(monkeypatch, tmp_path_factory):
    """The smoke config with a stand-in reward (1 for an even-length completion), so that the
    gradients are not zero (the smoke policy solves nothing)."""
    monkeypatch.setattr(runner, "reward", lambda text, gold: float(len(text) % 2 == 0))
    return kt.config("smoke", results_dir=str(tmp_path_factory.mktemp("learning")),
                     calibration_steps=3, group_size=4, max_new_tokens=16, lr=3e-3)


def test_calibration_probe_predicts_the_measured_step_kl(learning_smoke) -> None:
    cfg = learning_smoke
    frame = kt.calibration_run(kt.calibration_config(cfg, 0))
    assert list(frame["step"]) == [1, 2, 3]
    assert (frame["gamma"] == 1.0).all()  # the infinite budget never clips
    assert (frame["predicted_kl"] > 0).all() and (frame["jvp_kl"] > 0).all()
    # the JVP is exact to second order: small steps land close to the measured KL (Adam's
    # first step moves every weight by lr, too far for a quadratic on this tiny policy)
    ratio = frame["step_kl"] / frame["jvp_kl"]
    assert ratio.iloc[1:].between(0.5, 2.0).all(), ratio.tolist()
    # the calibration run takes the same steps as LoGRA without control
    nokl = grpo_runs.grpo_job(grpo_runs.grpo_config(cfg.replace(steps=3),
                                                      Run(method="logra-nokl", seed=0)))
    assert np.allclose(nokl["kl"].iloc[1:], frame["kl"], atol=1e-7)
    # and it is cached
    again = kt.calibration_run(kt.calibration_config(cfg, 0))
    pd.testing.assert_frame_equal(again, frame, check_dtype=False)


def test_parallel_jobs_return_in_order() -> None:
    jobs = [(math.factorial, (n,)) for n in (5, 3, 4)]
    assert run_jobs(jobs, workers=2, desc="t", progress=False) == [120, 6, 24]
    assert run_jobs(jobs, workers=1, desc="t", progress=False) == [120, 6, 24]


def test_zero_workers_is_one_per_available_core(monkeypatch) -> None:
    assert 1 <= jobs.available_cpus() <= (os.cpu_count() or 1)
    monkeypatch.setattr(jobs, "available_cpus", lambda: 5)
    assert jobs.worker_count(0) == 5 and jobs.worker_count(3) == 3
    with pytest.raises(ValueError, match="workers must be >= 0"):
        jobs.worker_count(-1)


# ---------------------------------------------------------------- adamw-kl in the registry


def test_adamw_kl_is_torch_adamw_plus_the_control() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    twin = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    twin.load_state_dict(net.state_dict())
    settings = dict(lr=1e-2, weight_decay=0.01, rank=4, predicted_kl_threshold=None,
                    reconstruction="gain", kl_estimator="diag", kl_drift_budget=None, seed=0)
    ours = build_optimizer("adamw-kl", net, settings)
    reference = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=0.01)
    x = torch.randn(64, 16)
    for _ in range(5):
        for model, optimizer in ((net, ours), (twin, reference)):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    for a, b in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert all(not group["sketch"] for group in ours.param_groups)
    # with a budget it predicts the step's KL and scales it
    controlled = build_optimizer("adamw-kl", net, {**settings, "predicted_kl_threshold": 1e-12})
    net.zero_grad()
    net(x).square().mean().backward()
    controlled.step()
    assert controlled.last_step["predicted_kl"] > 0 and controlled.last_step["gamma"] < 1


def test_replay_of_the_calibrated_estimator_matches_the_optimizer_rule() -> None:
    """Probe steps predict the exact value and add its ratio; other steps scale the diagonal
    estimate by the median ratio of the window; feedback adds each step's measured ratio."""
    diag = np.array([1.0, 1.0, 2.0, 1.0, 1.0])
    exact = np.array([10.0, 30.0, 40.0, 5.0, 7.0])
    measured = np.array([9.0, 20.0, 50.0, 4.0, 8.0])
    every_two = ktr.replay_calibrated(diag, exact, measured, probe_every=2, window=8)
    # steps 0, 2, 4 probe; step 1 uses c = 10, step 3 the median of (10, 20) = √200 geometric
    np.testing.assert_allclose(every_two, [10.0, 10.0, 40.0, math.sqrt(200.0), 7.0])
    first_only = ktr.replay_calibrated(diag, exact, measured, probe_every=None, window=1,
                                      feedback=True)
    # step 0 probes (ratio 10), then the window of 1 holds the last measured ratio
    np.testing.assert_allclose(first_only, [10.0, 9.0, 40.0, 25.0, 4.0])


def test_the_schedule_replays_the_default_s_own_probe_and_the_whole_batch_s() -> None:
    """`schedule_table` replays both probes: the default's on 1 in `PROBE_STRIDE` sequences (the
    calibration run's prediction on its probed steps) and the JVP on the whole batch
    (`jvp_kl`); probing every step, each reproduces its calibration-table row."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, 9)
    frame = pd.concat([pd.DataFrame({
        "method": "calibration", "seed": seed, "step": steps,
        "diag_kl": rng.uniform(1e-8, 2e-8, 8), "jvp_kl": rng.uniform(0.5, 2.0, 8) * 1e-3,
        "predicted_kl": rng.uniform(0.5, 2.0, 8) * 1e-3, "kl_probed": True,
        "step_kl": rng.uniform(0.5, 2.0, 8) * 1e-3}) for seed in (0, 1)])
    controlled = pd.DataFrame({"method": "logra", "seed": 0, "step": steps, "kl_probed": True,
                               "applied_kl": 1e-3, "step_kl": 1e-3})
    frame = pd.concat([frame, controlled], ignore_index=True)
    table = ktr.schedule_table(frame, probe_every=(1, 4), windows=(2,)).set_index(
        ["calibration from", "probe", "probe every"])
    rows = ktr.calibration_table(frame).set_index("predictor")
    median, within = "median measured/predicted", "steps within 4× (%)"
    for probe, predictor in ((ktr.DEFAULT_PROBE, ktr.DEFAULT_PREDICTOR),
                             (ktr.WHOLE_PROBE, ktr.FULL_PREDICTOR)):
        row = table.loc[("JVP probes", probe, 1)]
        assert row[median] == pytest.approx(rows.loc[predictor, median])
        assert row[within] == pytest.approx(rows.loc[predictor, within])
        assert row["probes per step"] == 1 and table.loc[("JVP probes", probe, 4),
                                                         "probes per step"] == 0.25
    assert ktr.DEFAULT_PROBE.startswith(f"1 in {ktr.PROBE_STRIDE} ")
    # a step the default did not probe has no probe value to replay
    unprobed = frame[(frame["method"] == "calibration") & (frame["seed"] == 0)]
    unprobed = unprobed.assign(kl_probed=[True] * 7 + [False])
    values = ktr.probe_values(unprobed, ktr.DEFAULT_PROBE)
    assert np.isnan(values[-1]) and (values[:-1] == unprobed["predicted_kl"].iloc[:-1]).all()
