"""The KL-control notebook (09): its plan of runs, the GRPO configs they map to, the C5/C6 stress
rules on hand-made runs, and the notebook at smoke scale."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import kl_control as kc
from logra.experiments.report import VERDICTS
from logra.rl import config as grpo
from logra.rl import runner


def test_plan_covers_the_sweep_the_stress_test_and_the_budget_study() -> None:
    cfg = kc.config("default")
    runs = kc.plan(cfg)
    sweep = [r for r in runs if r.study == "sweep"]
    assert len(sweep) == len(cfg["sweep_methods"]) * len(cfg["deltas"]) * len(cfg["seeds"])
    assert {r.delta for r in sweep} == set(cfg["deltas"]) and {r.lr for r in sweep} == {1e-4}
    stress = [r for r in runs if r.study == "stress"]
    assert {(r.method, r.delta) for r in stress} == {
        ("adamw", None), ("adamw-kl", 3e-4), ("logra", None), ("logra", 3e-4), ("naive", None)}
    assert {r.lr for r in stress} == {cfg["stress_lr"]}
    budget = [r for r in runs if r.study == "budget"]
    assert {r.setting for r in budget} == set(cfg["budget_runs"])
    assert len(budget) == len(cfg["budget_runs"]) * len(cfg["budget_seeds"])


def test_runs_map_to_their_grpo_settings() -> None:
    cfg = kc.config("default")
    runs = {(r.study, r.method, r.delta, r.setting, r.seed): r for r in kc.plan(cfg)}
    controlled = kc.grpo_config(cfg, runs[("sweep", "adamw-kl", 1e-4, "", 2)])
    assert (controlled["optimizer"], controlled["predicted_kl_threshold"], controlled["seed"],
            controlled["lr"]) == ("adamw-kl", 1e-4, 2, 1e-4)
    assert controlled["kl_estimator"] == "calibrated"  # the default: δ in nats
    assert controlled["eval_every"] == controlled["steps"] == cfg["steps"]
    assert controlled["eval_prompts"] == 5000 and controlled["model"] == "proxy-1m"
    free = kc.grpo_config(cfg, runs[("sweep", "logra", None, "", 0)])
    assert free["predicted_kl_threshold"] is None
    stress = kc.grpo_config(cfg, runs[("stress", "naive", None, "", 0)])
    assert stress["lr"] == cfg["stress_lr"] and stress["optimizer"] == "naive"
    budget = kc.grpo_config(cfg, runs[("budget", "logra", None, "drift budget B = 0.005", 1)])
    assert budget["kl_drift_budget"] == 0.005 and budget["predicted_kl_threshold"] is None
    assert budget["steps"] == cfg["budget_steps"]
    adaptive = kc.grpo_config(cfg, runs[("budget", "logra", None, "adaptive β (target 0.005)",
                                         0)])
    assert (adaptive["beta"], adaptive["kl_target"]) == (0.1, 0.005)
    # each run is its own cached directory
    dirs = {grpo.run_dir(kc.grpo_config(cfg, r)) for r in kc.plan(cfg)}
    assert len(dirs) == len(kc.plan(cfg))


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(sweep_methods=["adamw"]), "no KL control"),
    (dict(stress_methods=["sgd"]), "unknown methods"),
    (dict(deltas=[0.0]), "deltas"),
    (dict(budget_method="naive"), "budget_method"),
])
def test_bad_configs_fail_before_any_run(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        kc.config("default", **overrides)


def _stress(peaks: dict[tuple[str, float | None], list[float]], accuracy: float = 0.36
            ) -> pd.DataFrame:
    """Hand-made stress runs: {(method, δ): [KL reached at the last of 20 steps, per seed]},
    KL rising linearly from 0."""
    rows = []
    for (method, delta), ends in peaks.items():
        for seed, end in enumerate(ends):
            base = dict(study="stress", method=method, lr=1e-3, seed=seed, setting="",
                        delta=math.nan if delta is None else delta)
            rows.append(dict(base, step=0, eval_accuracy=0.36))
            for step in range(1, 21):
                rows.append(dict(base, step=step, kl=end * step / 20, step_kl=1e-4,
                                 reward=0.3, clipped=delta is not None, gamma=0.5, beta=0.0,
                                 seconds=0.5, eval_accuracy=accuracy if step == 20 else math.nan))
    columns = ["study", "method", "delta", "lr", "seed", "setting", *runner.COLUMNS]
    return pd.DataFrame(rows).reindex(columns=columns)


def _cfg() -> dict:
    return kc.config("default", smooth_steps=1, final_steps=2, c5_window=[10, 20])


def test_c5_stress_rule() -> None:
    runaway = _stress({("adamw", None): [0.05, 0.06], ("naive", None): [0.5, 0.8]})
    assert kc.c5_stress_claim(runaway, _cfg()).verdict == "reproduced"
    some = _stress({("adamw", None): [0.05], ("naive", None): [0.5, 0.01]})
    assert kc.c5_stress_claim(some, _cfg()).verdict == "partly"
    calm = _stress({("adamw", None): [0.05], ("naive", None): [0.01, 0.02]})
    assert kc.c5_stress_claim(calm, _cfg()).verdict == "not reproduced"
    # dense AdamW runs away as early: the learning rate's doing, not the compression's
    both = _stress({("adamw", None): [0.9], ("naive", None): [0.5]})
    row = kc.c5_stress_claim(both, _cfg())
    assert row.verdict == "not reproduced" and "dense AdamW from step" in row.reproduced


def test_c6_stress_rule() -> None:
    prevented = _stress({("adamw", None): [0.5], ("adamw-kl", 3e-4): [0.05],
                         ("logra", None): [0.4], ("logra", 3e-4): [0.02]})
    row = kc.c6_stress_claim(prevented, _cfg())
    assert row.verdict == "reproduced" and row.verdict in VERDICTS, row.reproduced
    reduced = _stress({("adamw", None): [0.9], ("adamw-kl", 3e-4): [0.3]})
    assert kc.c6_stress_claim(reduced, _cfg()).verdict == "partly"
    nothing = _stress({("logra", None): [0.01], ("logra", 3e-4): [0.005]})
    row = kc.c6_stress_claim(nothing, _cfg())
    assert row.verdict == "not reproduced" and "no runaway" in row.reproduced


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory, smoke_results):
    out = tmp_path_factory.mktemp("kl_control")
    notebooks.execute(kc.NOTEBOOK, {"scale": "smoke", "figures_dir": str(out),
                                    "results_dir": str(smoke_results)}, executed_dir=out)
    return out


def test_notebook_writes_its_figures_tables_and_claims(executed, assert_figure) -> None:
    out = executed
    assert notebooks.NOTEBOOKS[kc.NOTEBOOK] == kc.EXPERIMENT
    for name in kc.FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(out / f"{name}{suffix}")
    cfg = kc.config("smoke")
    sweep = pd.read_csv(out / "kl_control_sweep.csv")
    assert len(sweep) == len(cfg["sweep_methods"]) * len(cfg["deltas"])
    assert (sweep["seeds"] == len(cfg["seeds"])).all()
    budget = pd.read_csv(out / "kl_control_budget.csv")
    assert list(budget["setting"]) == list(cfg["budget_runs"])
    cost = pd.read_csv(out / "kl_control_cost.csv")
    assert list(cost["setting"]) == list(kc.COST_SETTINGS)
    assert (cost["s/step (median)"] > 0).all() and (cost["steps timed"] == 1).all()
    assert cost.loc[cost["setting"] == "dense AdamW (torch)", "÷ dense AdamW"].item() == 1.0
    claims = pd.read_csv(out / "claims_kl_control.csv")
    assert list(claims["claim"]) == ["C5", "C6"] and claims["verdict"].isin(VERDICTS).all()
