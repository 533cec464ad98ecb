"""The KL-control notebook (09): its plan of runs, the GRPO configs they map to (notebook 04's
runs shared), the lr-matched baseline, the C5/C6 stress rules on hand-made runs, and the
notebook at smoke scale."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import comparison
from logra.experiments import kl_control as kc
from logra.experiments import kl_control_report as kcr
from logra.experiments.grpo_runs import Run
from logra.experiments.report import VERDICTS
from logra.rl import config as grpo
from logra.rl import runner


def test_plan_covers_the_points_and_the_budget_study() -> None:
    cfg = kc.config("full")
    runs = kc.plan(cfg)
    frontier = [r for r in runs if r.study == "frontier"]
    assert len(frontier) == len(cfg.points) * len(cfg.seeds)
    assert ("logra", 1e-3, 5e-3) in {(r.method, r.lr, r.delta) for r in frontier}
    # a point without δ: the experiment's predicted_kl_threshold if controlled, else None
    assert {r.delta for r in frontier if r.method == "adamw"} == {None}
    assert not [r for r in runs if r.study == "bands"]  # full: every point has 3 seeds
    budget = [r for r in runs if r.study == "budget"]
    assert {r.setting for r in budget} == set(cfg.budget_runs)
    assert len(budget) == len(cfg.budget_runs) * len(cfg.budget_seeds)
    # the default runs the budget study at the stress lr, where the uncontrolled run drifts
    default = kc.config("default")
    assert default["budget_lr"] == default["stress_lr"]
    assert {r.setting for r in kc.plan(default) if r.study == "budget"} == set(
        default["budget_runs"])
    bands = [r for r in kc.plan(default) if r.study == "bands"]
    assert [(r.method, r.lr, r.delta, r.seed) for r in bands] == [
        (method, lr, delta, seed) for method, lr, delta in kc._points(default, "band_points")
        for seed in default.band_seeds]
    # seed 0 of a band point is the frontier's run; seeds 1 and 2 are runs of their own
    frontier = {grpo.run_dir(kc.grpo_config(default, r)) for r in kc.plan(default)
                if r.study == "frontier"}
    for r in bands:
        assert (grpo.run_dir(kc.grpo_config(default, r)) in frontier) == (r.seed == 0)


@pytest.mark.parametrize("studies", [["budget"], ["frontier"], ["bands"], ["naive_sweep"],
                                     ["cost"], ["frontier", "budget"]])
def test_studies_select_the_runs_planned(studies) -> None:
    runs = kc.plan(kc.config("default", studies=studies))
    assert {r.study for r in runs} == set(studies) - {"cost"}
    everything = kc.plan(kc.config("default"))
    assert runs == [r for r in everything if r.study in studies]


@pytest.mark.parametrize(("studies", "message"), [
    ([], "studies: list should have at least 1 item"),
    (["budget", "sweep"],
     "studies: input should be 'frontier', 'bands', 'naive_sweep', 'budget' or 'cost', got "
     "'sweep'"),
    ("budget", "studies must be list like")])
def test_bad_studies_fail_before_any_run(studies, message) -> None:
    with pytest.raises(ValueError, match=message):
        kc.config("default", studies=studies)


def test_the_naive_sweep_plans_every_lr_at_every_seed_and_shares_the_frontier_s_run() -> None:
    cfg = kc.config("default")
    sweep = [r for r in kc.plan(cfg) if r.study == "naive_sweep"]
    assert [(r.method, r.lr, r.delta, r.seed) for r in sweep] == [
        ("naive", lr, None, seed) for lr in cfg.naive_lrs for seed in cfg.seeds]
    assert cfg.stress_lr in cfg.naive_lrs  # the stress point is one of the sweep's
    frontier = {grpo.run_dir(kc.grpo_config(cfg, r)) for r in kc.plan(cfg)
                if r.study == "frontier"}
    shared = [r.lr for r in sweep if grpo.run_dir(kc.grpo_config(cfg, r)) in frontier]
    assert shared == [lr for lr in cfg.naive_lrs if ["naive", lr] in cfg.points]
    assert kc.config("full").naive_lrs == cfg.naive_lrs
    assert "naive_sweep" in kc.config("full").studies


@pytest.mark.parametrize(("naive_lrs", "message"), [
    ([1e-3, 1e-2], "naive_lrs: list should have at least 3 items"),
    ([1e-3, 1e-1, 1e-2], "naive_lrs must ascend"),
    ([1e-3, 1e-3, 1e-2], "naive_lrs must ascend without repeats"),
    ([0.0, 1e-3, 1e-2], "naive_lrs")])
def test_bad_naive_lrs_fail_before_any_run(naive_lrs, message) -> None:
    with pytest.raises(ValueError, match=message):
        kc.config("default", naive_lrs=naive_lrs)


def test_budget_study_alone_needs_no_stress_points() -> None:
    cfg = kc.config("default", studies=["budget"], points=[["logra", 1e-3]])
    assert {r.study for r in kc.plan(cfg)} == {"budget"}


def test_runs_map_to_their_grpo_settings_and_share_notebook_04s() -> None:
    cfg = kc.config("full")
    runs = {(r.study, r.method, r.lr, r.delta, r.setting, r.seed): r for r in kc.plan(cfg)}
    controlled = kc.grpo_config(cfg, runs[("frontier", "adamw-kl", 3e-4, 1e-3, "", 2)])
    assert (controlled.optimizer, controlled.predicted_kl_threshold, controlled.seed,
            controlled.lr) == ("adamw-kl", 1e-3, 2, 3e-4)
    assert controlled.kl_estimator == "calibrated"  # the default: δ in nats
    assert controlled.eval_every == controlled.steps == cfg.steps
    free = kc.grpo_config(cfg, runs[("frontier", "logra-nokl", 1e-3, None, "", 0)])
    assert free.optimizer == "logra" and free.predicted_kl_threshold is None
    budget = kc.grpo_config(cfg, runs[("budget", "logra-nokl", 1e-3, None,
                                       "drift budget B = 0.03", 1)])
    assert budget.kl_drift_budget == 0.03 and budget.predicted_kl_threshold is None
    assert budget.steps == cfg.budget_steps and budget.drift_probe_every == 20
    dirs = {r: grpo.run_dir(kc.grpo_config(cfg, r)) for r in kc.plan(cfg)}
    own = [d for r, d in dirs.items() if r.study not in ("bands", "naive_sweep")]
    assert len(set(own)) == len(own)  # each run is its own cached directory ...
    # ... and a band point or a naive lr at a frontier seed is the frontier's run
    assert {d for r, d in dirs.items() if r.study == "bands"} <= set(own)
    sweep = {r.lr: d for r, d in dirs.items() if r.study == "naive_sweep" and r.seed == 0}
    assert [lr for lr, d in sweep.items() if d in own] == [3e-4, 1e-3]  # the frontier's
    assert len(set(sweep.values())) == len(sweep)
    # the points with notebook 04's method, lr and seed are notebook 04's runs
    default, theirs = kc.config("default"), comparison.config("default")
    for method, lr in (("adamw", 1e-4), ("logra", 3e-4), ("logra", 1e-3)):
        mine = kc.grpo_config(default, Run(study="frontier", method=method, lr=lr, seed=0,
                                           delta=0.02 if method == "logra" else None,
                                           eval_every=default["steps"]))
        assert mine == comparison.grpo_config(theirs, Run(model="proxy-1m", method=method,
                                                          seed=0, lr=lr))


@pytest.mark.parametrize(("points", "message"), [
    ([["sgd", 1e-3]], "unknown method 'sgd'"),
    ([["adamw", 1e-3, 1e-4]], "no KL control"),
    ([["logra", 0.0]], "positive"),
    ([["logra", 1e-3, -1.0]], "δ must be a positive"),
    ([["adamw", 1e-3], ["adamw", 1e-3]], "twice"),
    ([["adamw", 1e-3]], "adamw and naive at stress_lr"),
    (["adamw"], "points: input should be a valid list, got 'adamw'"),
    ([["adamw"]], "points: list should have at least 2 items"),
])
def test_bad_points_fail_before_any_run(points, message) -> None:
    with pytest.raises(ValueError, match=message):
        kc.config("default", points=points)


@pytest.mark.parametrize(("band_points", "message"), [
    ([], "band_points is empty"),
    ([["logra", 1e-3, 5e-3], ["logra", 1e-3, 5e-3]], "band_points: an entry is given twice"),
    ([["sgd", 1e-3]], "band_points: unknown method 'sgd'"),
])
def test_bad_band_points_fail_before_any_run(band_points, message) -> None:
    with pytest.raises(ValueError, match=message):
        kc.config("default", band_points=band_points)
    kc.config("default", band_points=band_points, studies=["frontier"])  # not asked: not read


def test_a_run_two_studies_share_is_trained_once(monkeypatch, tmp_path) -> None:
    cfg = kc.config("smoke", results_dir=str(tmp_path), studies=["frontier", "bands"])
    runs = kc.plan(cfg)
    run_dirs = [grpo.run_dir(kc.grpo_config(cfg, r)) for r in runs]
    marks = {d: float(i) for i, d in enumerate(sorted(set(run_dirs)))}  # one per trained run
    trained = []

    def fake_run_jobs(jobs, workers, desc, progress):
        """Records and evaluations that name their run (its directory's mark)."""
        trained.extend(grpo.run_dir(args[0]) for _, args in jobs)
        out = []
        for _, (config,) in jobs:
            mark = marks[grpo.run_dir(config)]
            evaluated = pd.DataFrame({"step": [0, 0, 3, 3], "problem": [0, 1, 0, 1],
                                      "greedy": [0.0, 1.0, mark, mark], "sampled": np.nan})
            out.append((pd.DataFrame({c: [mark] for c in runner.COLUMNS}), evaluated))
        return out

    monkeypatch.setattr(kc, "run_jobs", fake_run_jobs)
    monkeypatch.setattr(kc.grpo_runs, "prepare_inputs", lambda *args: None)
    frame, problems = kc.run(cfg, progress=False)
    shared = sum(r.study == "bands" and r.seed in cfg.seeds for r in runs)
    assert shared > 0
    assert len(trained) == len(set(trained)) == len(runs) - shared
    # every run is in the frame under its own study, the shared ones under both
    assert len(frame) == len(runs)
    assert (frame["study"] == "bands").sum() == len(cfg.band_points) * len(cfg.band_seeds)
    assert set(problems["study"]) == {"frontier", "bands", ""}
    # a shared run's rows are the frontier's run's, under the bands study
    point = ["method", "lr", "delta", "seed"]
    for rows in (frame, problems[problems["method"] != kc.BASE]):
        studies = {s: r.drop(columns="study").set_index(point) for s, r in rows.groupby("study")}
        shared_keys = studies["bands"].index.intersection(studies["frontier"].index)
        assert len(shared_keys.unique()) == shared
        pd.testing.assert_frame_equal(studies["bands"].loc[shared_keys],
                                      studies["frontier"].loc[shared_keys])
    # ... and every row is its own run's, in the order of the plan (no two runs swapped, a
    # band seed beyond the frontier's not a copy)
    assert list(frame["kl"]) == [marks[d] for d in run_dirs]


def test_bad_budget_method_fails() -> None:
    with pytest.raises(ValueError, match="budget_method"):
        kc.config("full", budget_method="naive")


def _cut(kls: list[float], values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"lr": np.arange(len(kls)), "final_kl": kls, "greedy": values})


def test_lr_matched_interpolates_in_log_kl_and_never_extrapolates() -> None:
    cut = _cut([0.001, 0.1], [0.40, 0.30])
    assert kcr.lr_matched(cut, 0.01, "greedy") == pytest.approx(0.35)  # halfway in log KL
    assert kcr.lr_matched(cut, 0.001, "greedy") == pytest.approx(0.40)
    assert math.isnan(kcr.lr_matched(cut, 0.2, "greedy"))
    assert math.isnan(kcr.lr_matched(cut, 0.0005, "greedy"))
    assert math.isnan(kcr.lr_matched(_cut([0.01], [0.4]), 0.01, "greedy"))  # one point: no line


def _runs(spec: dict[tuple[str, float, float | None], tuple[float, list[float]]],
          steps: int = 20) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Hand-made frontier runs, one seed each: {(method, lr, δ): (KL reached at the last step,
    per-problem greedy outcomes)}, KL rising linearly from 0; the policy before RL solves the
    first half of the problems."""
    rows, problems = [], []
    n = len(next(iter(spec.values()))[1])
    for (method, lr, delta), (end, outcomes) in spec.items():
        base = dict(study="frontier", method=method, lr=lr, seed=0, setting="",
                    delta=math.nan if delta is None else delta)
        for step in range(1, steps + 1):
            rows.append(dict(base, step=step, kl=end * step / steps, step_kl=1e-4, reward=0.3,
                             clipped=delta is not None, gamma=0.5, beta=0.0, seconds=0.5))
        problems += [dict(base, problem=i, greedy=o, sampled=np.nan)
                     for i, o in enumerate(outcomes)]
    problems += [dict(study="", method=kc.BASE, lr=math.nan, seed=0, setting="", delta=math.nan,
                      problem=i, greedy=float(i < n // 2), sampled=np.nan) for i in range(n)]
    columns = [*kc.KEYS, *runner.COLUMNS]
    return pd.DataFrame(rows).reindex(columns=columns), pd.DataFrame(problems)


def _cfg(**overrides) -> dict:
    return kc.config("default", smooth_steps=1, final_steps=2, c5_window=[10, 20], **overrides)


def test_lr_matched_table_sets_the_control_against_the_lr_cut() -> None:
    n = 400
    solved = lambda k: [1.0] * k + [0.0] * (n - k)  # noqa: E731
    frame, problems = _runs({("logra-nokl", 1e-4, None): (0.001, solved(160)),
                             ("logra-nokl", 1e-3, None): (0.1, solved(120)),
                             ("logra", 1e-3, 0.02): (0.01, solved(200))})
    table = kcr.lr_matched_table(frame, problems, _cfg())
    row = table.iloc[0]
    assert row["final KL"] == pytest.approx(0.01 * 19.5 / 20)  # mean of the last 2 steps
    assert row["pass@1 (%)"] == pytest.approx(50.0)
    assert row["lr cut at this KL (%)"] == pytest.approx(35.0, abs=0.3)  # between 40 and 30
    assert row["control − lr cut (pts)"] == pytest.approx(15.0, abs=0.3)
    assert row["nearest lr cut: lr"] in (1e-4, 1e-3)
    assert row["Δ vs no control at this lr (pts)"] == pytest.approx(20.0)
    assert row["Δ vs no control, p (Holm)"] < 1e-6  # 80 problems gained, none lost


def test_budget_table_tests_each_setting_against_the_first_two_problem_by_problem() -> None:
    n = 400
    solved = lambda k: [1.0] * k + [0.0] * (n - k)  # noqa: E731
    frame, problems = _runs({("logra-nokl", 1e-3, None): (0.1, solved(120)),
                             ("logra-nokl", 2e-3, None): (0.03, solved(200)),
                             ("logra-nokl", 3e-3, None): (0.05, solved(122))})
    # the same method and lr in every setting: only the setting tells the runs apart
    settings = {2e-3: "drift budget", 3e-3: "fixed β", 1e-3: "no control"}
    for table in (frame, problems):
        known = table["lr"].isin(list(settings))
        table.loc[known, "setting"] = table.loc[known, "lr"].map(settings)
        table.loc[known, "study"] = "budget"
        table.loc[known, "lr"] = 1e-3
    frame = frame.assign(drift_kl=np.nan)
    table = kcr.budget_table(frame, problems, _cfg()).set_index("setting")
    assert list(table.index) == ["no control", "drift budget", "fixed β"]
    assert table.loc["no control", "final KL to ref, mean"] == pytest.approx(0.1 * 19.5 / 20)
    assert math.isnan(table.loc["no control", "greedy: Δ vs no control (pts)"])
    assert table.loc["drift budget", "greedy: Δ vs no control (pts)"] == pytest.approx(20.0)
    assert table.loc["drift budget", "greedy vs no control: p (Holm)"] < 1e-6  # 80 gained
    assert table.loc["fixed β", "greedy: Δ vs no control (pts)"] == pytest.approx(0.5)
    assert table.loc["fixed β", "greedy vs no control: p (Holm)"] > 0.1  # 2 problems: none
    # the soft control after the budget is also tested against the budget: 78 problems lost
    assert table.loc["fixed β", "greedy: Δ vs drift budget (pts)"] == pytest.approx(-19.5)
    assert table.loc["fixed β", "greedy vs drift budget: p (Holm)"] < 1e-6
    for reference in ("no control", "drift budget"):  # no row is tested against itself or later
        assert math.isnan(table.loc[reference, f"greedy: Δ vs {reference} (pts)"])
    assert math.isnan(table.loc["no control", "greedy vs drift budget: p (Holm)"])


def test_c5_stress_rule() -> None:
    n = 10
    runaway, problems = _runs({("adamw", 1e-3, None): (0.05, [0.0] * n),
                               ("naive", 1e-3, None): (0.5, [0.0] * n)})
    assert kcr.c5_stress_claim(runaway, problems, _cfg()).verdict == "reproduced"
    calm, problems = _runs({("adamw", 1e-3, None): (0.05, [0.0] * n),
                            ("naive", 1e-3, None): (0.02, [0.0] * n)})
    assert kcr.c5_stress_claim(calm, problems, _cfg()).verdict == "not reproduced"
    # dense AdamW runs away as early: the learning rate's doing, not the compression's
    both, problems = _runs({("adamw", 1e-3, None): (0.9, [0.0] * n),
                            ("naive", 1e-3, None): (0.5, [0.0] * n)})
    row = kcr.c5_stress_claim(both, problems, _cfg())
    assert row.verdict == "not reproduced" and "dense AdamW from step" in row.reproduced
    # runs shorter than the window's start can show a runaway, not its absence
    assert kcr.c5_stress_claim(calm, problems, _cfg(steps=5)).verdict == "undecided"
    assert kcr.c5_stress_claim(runaway, problems, _cfg(steps=5)).verdict == "reproduced"


def _sweep(spec: dict[float, tuple[float, int]], seeds: int = 1, n: int = 400,
           sampled: dict[float, int] | None = None, steps: int = 20
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Hand-made naive_sweep runs: {lr: (KL reached at the last step, problems solved of n)} at
    every seed, and where `sampled` is given, the problems each lr solves sampled ({lr: k});
    the policy before RL solves the first half either way."""
    solved = lambda k: [1.0] * k + [0.0] * (n - k)  # noqa: E731
    frames, problems = [], []
    for seed in range(seeds):
        frame, evaluated = _runs({("naive", lr, None): (kl, solved(k))
                                  for lr, (kl, k) in spec.items()}, steps=steps)
        if sampled is not None:
            for lr, k in [(math.nan, n // 2), *sampled.items()]:
                rows = evaluated["lr"].isna() if math.isnan(lr) else evaluated["lr"] == lr
                evaluated.loc[rows, "sampled"] = solved(k)
        for table, out in ((frame, frames), (evaluated, problems)):
            table = table.assign(seed=seed)
            table.loc[table["method"] == "naive", "study"] = "naive_sweep"
            out.append(table)
    return pd.concat(frames, ignore_index=True), pd.concat(problems, ignore_index=True)


def test_naive_sweep_table_tests_each_lr_against_the_policy_before_rl() -> None:
    frame, problems = _sweep({1e-3: (0.01, 202), 1e-2: (0.05, 280), 1e-1: (2.0, 40)})
    cfg = _cfg(naive_lrs=[1e-3, 1e-2, 1e-1])
    table = kcr.naive_sweep_table(frame, problems, cfg)
    assert list(table["lr"]) == [1e-3, 1e-2, 1e-1]
    assert list(table["greedy gain (pts)"]) == pytest.approx([0.5, 20.0, -40.0])
    p = table["greedy gain, p (Holm)"]
    assert p[0] > 0.1 and p[1] < 1e-6 and p[2] < 1e-6  # 2 problems gained: no difference
    assert list(table["first step with KL > 0.1"]) == ["never", "never", "2"]
    # rows in ascending lr whatever the runs' order; other studies' runs of the same method
    # and lr, and the policy before RL at a seed the sweep did not run, are not read
    shuffled = frame.iloc[::-1]
    other = problems[problems["method"] == "naive"].assign(study="frontier", greedy=0.0)
    stray = problems[problems["method"] == kc.BASE].assign(seed=7, greedy=1.0)
    mixed = pd.concat([problems, other, stray], ignore_index=True)
    pd.testing.assert_frame_equal(kcr.naive_sweep_table(shuffled, mixed, cfg), table)


@pytest.mark.parametrize(("spec", "verdict", "says"), [
    # learns best at 1e-2 and runs away there
    ({1e-3: (0.01, 210), 1e-2: (0.5, 280), 1e-1: (3.0, 100)}, "reproduced", "1/1 seeds"),
    # learns best at 1e-2 and stays calm; runs away only at 10× that
    ({1e-3: (0.01, 210), 1e-2: (0.05, 280), 1e-1: (3.0, 100)}, "not reproduced",
     "runs away first at lr 0.1 (10× the best)"),
    # the best lr at either end of the grid: the sweep did not bracket it
    ({1e-3: (0.01, 210), 1e-2: (0.05, 240), 1e-1: (0.5, 280)}, "undecided",
     "at an end of the sweep"),
    ({1e-3: (0.01, 280), 1e-2: (0.05, 240), 1e-1: (0.5, 210)}, "undecided",
     "at an end of the sweep"),
    # nothing learns (2 problems): the mechanism never got a chance
    ({1e-3: (0.01, 200), 1e-2: (0.5, 202), 1e-1: (3.0, 190)}, "undecided",
     "not a significant rise"),
    # every lr loses, significantly: the least bad is no lr that learns
    ({1e-3: (0.01, 150), 1e-2: (0.5, 170), 1e-1: (3.0, 100)}, "undecided",
     "not a significant rise")])
def test_c5_sweep_rule(spec, verdict, says) -> None:
    frame, problems = _sweep(spec)
    row = kcr.c5_sweep_claim(frame, problems, _cfg(naive_lrs=sorted(spec)))
    assert row.verdict == verdict and row.verdict in VERDICTS, row.reproduced
    assert says in row.reproduced, row.reproduced
    # the runs' order does not move the ends of the sweep
    assert kcr.c5_sweep_claim(frame.iloc[::-1], problems,
                              _cfg(naive_lrs=sorted(spec))).verdict == verdict


def test_c5_sweep_rule_picks_the_best_lr_by_sampled_pass_at_1() -> None:
    # greedy is best at 1e-3 (an end); sampled at 1e-2, where the run runs away
    spec = {1e-3: (0.01, 300), 1e-2: (0.5, 250), 1e-1: (3.0, 100)}
    frame, problems = _sweep(spec, sampled={1e-3: 210, 1e-2: 290, 1e-1: 100})
    row = kcr.c5_sweep_claim(frame, problems, _cfg(naive_lrs=sorted(spec)))
    assert row.verdict == "reproduced" and "best lr 0.01: sampled gain +22.5" in row.reproduced


def test_c5_sweep_rule_reads_every_seed_at_the_best_lr_within_the_window() -> None:
    spec = {1e-3: (0.01, 210), 1e-2: (0.5, 280), 1e-1: (3.0, 100)}
    frame, problems = _sweep(spec, seeds=2)
    calm = (frame["seed"] == 1) & (frame["lr"] == 1e-2)
    frame.loc[calm, "kl"] = frame.loc[calm, "kl"] / 50  # one seed of two stays under 0.1
    row = kcr.c5_sweep_claim(frame, problems, _cfg(naive_lrs=sorted(spec)))
    assert row.verdict == "partly" and "1/2 seeds" in row.reproduced, row.reproduced
    # a runaway after the window's end (step 20 here) is not the claim's: KL rising to 0.2 at
    # step 40 crosses 0.1 at step 21
    late, problems = _sweep({1e-3: (0.01, 210), 1e-2: (0.2, 280), 1e-1: (3.0, 100)}, steps=40)
    row = kcr.c5_sweep_claim(late, problems, _cfg(naive_lrs=sorted(spec)))
    assert row.verdict == "not reproduced" and "0/1 seeds" in row.reproduced, row.reproduced
    # runs shorter than the window's start: no runaway is no evidence, a runaway still is
    short = _cfg(naive_lrs=sorted(spec), steps=5)
    assert kcr.c5_sweep_claim(late, problems, short).verdict == "undecided"
    frame, problems = _sweep(spec)
    assert kcr.c5_sweep_claim(frame, problems, short).verdict == "reproduced"


def test_c6_stress_rule() -> None:
    n = 10
    prevented, problems = _runs({("adamw", 1e-3, None): (0.5, [0.0] * n),
                                 ("adamw-kl", 1e-3, 3e-4): (0.05, [1.0] * n),
                                 ("logra-nokl", 1e-3, None): (0.4, [0.0] * n),
                                 ("logra", 1e-3, 3e-4): (0.02, [0.0] * n)})
    row = kcr.c6_stress_claim(prevented, problems, _cfg())
    assert row.verdict == "reproduced" and row.verdict in VERDICTS, row.reproduced
    reduced, problems = _runs({("adamw", 1e-3, None): (0.9, [1.0] * n),
                               ("adamw-kl", 1e-3, 3e-4): (0.3, [0.0] * n)})
    assert kcr.c6_stress_claim(reduced, problems, _cfg()).verdict == "partly"
    nothing, problems = _runs({("logra-nokl", 1e-3, None): (0.01, [0.0] * n),
                               ("logra", 1e-3, 3e-4): (0.005, [0.0] * n)})
    row = kcr.c6_stress_claim(nothing, problems, _cfg())
    assert row.verdict == "not reproduced" and "no runaway" in row.reproduced
    # seeds: every uncontrolled seed must run away for "prevented"; one calm seed of two
    # leaves the control a runaway to prevent on the other only
    def two_seeds(second_kl: float) -> tuple[pd.DataFrame, pd.DataFrame]:
        runs = [_runs({("logra-nokl", 1e-3, None): (kl, [0.0] * n),
                       ("logra", 1e-3, 3e-4): (0.02, [1.0] * n)}) for kl in (0.4, second_kl)]
        return tuple(pd.concat([a, b.assign(seed=1)], ignore_index=True)
                     for a, b in zip(*runs, strict=True))
    assert kcr.c6_stress_claim(*two_seeds(0.3), _cfg()).verdict == "reproduced"
    assert kcr.c6_stress_claim(*two_seeds(0.05), _cfg()).verdict == "partly"


@pytest.fixture(scope="module")
def executed(run_smoke_notebook, smoke_results):
    return run_smoke_notebook(kc.NOTEBOOK, results_dir=str(smoke_results))


def test_notebook_writes_its_figures_tables_and_claims(executed, assert_figure) -> None:
    out = executed
    assert notebooks.NOTEBOOKS[kc.NOTEBOOK] == kc.EXPERIMENT
    for name in kcr.FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(out / f"{name}{suffix}")
    cfg = kc.config("smoke")
    frontier = pd.read_csv(out / "kl_control_frontier.csv")
    assert len(frontier) == len(cfg.points)
    assert (frontier["seeds"] == len(cfg.seeds)).all()
    assert {"greedy pass@1 (%)", "sampled pass@1 (%)"} <= set(frontier.columns)
    matched = pd.read_csv(out / "kl_control_lr_matched.csv")
    controlled = [p for p in cfg.points if len(p) == 3]
    assert len(matched) == 2 * len(controlled)  # greedy and sampled per controlled point
    assert matched["Δ vs nearest, p (Holm)"].between(0, 1).all()
    stress = pd.read_csv(out / "kl_control_stress.csv")
    assert len(stress) == sum(p[1] == cfg.stress_lr for p in cfg.points)
    budget = pd.read_csv(out / "kl_control_budget.csv")
    assert list(budget["setting"]) == list(cfg.budget_runs)
    cost = pd.read_csv(out / "kl_control_cost.csv")
    assert list(cost["setting"]) == list(kc.COST_SETTINGS)
    assert (cost["s/step (median)"] > 0).all() and (cost["steps timed"] == 1).all()
    assert cost.loc[cost["setting"] == "dense AdamW (torch)", "÷ dense AdamW"].item() == 1.0
    claims = pd.read_csv(out / "claims_kl_control.csv")
    assert list(claims["claim"]) == ["C5", "C6"] and claims["verdict"].isin(VERDICTS).all()
    bands = pd.read_csv(out / "kl_control_bands.csv")
    assert len(bands) == len(cfg.band_points)
    assert (bands["seeds"] == len(cfg.band_seeds)).all()
    assert (bands["greedy pass@1 (%), seed min"] <= bands["greedy pass@1 (%)"]).all()
    assert (bands["greedy pass@1 (%)"] <= bands["greedy pass@1 (%), seed max"]).all()
    banded = pd.read_csv(out / "kl_control_bands_lr_matched.csv")
    assert len(banded) == 2 * sum(len(p) == 3 for p in cfg.band_points)
    sweep = pd.read_csv(out / "kl_control_naive_sweep.csv")
    assert list(sweep["lr"]) == cfg.naive_lrs and (sweep["seeds"] == len(cfg.seeds)).all()
    assert sweep["greedy gain, p (Holm)"].between(0, 1).all()
    sweep_claims = pd.read_csv(out / "claims_kl_control_naive_sweep.csv")
    assert list(sweep_claims["claim"]) == ["C5"] and sweep_claims["verdict"].isin(VERDICTS).all()
    band_claims = pd.read_csv(out / "claims_kl_control_bands.csv")
    assert list(band_claims["claim"]) == ["C6"]
    assert band_claims["scale"].str.endswith(f"{len(cfg.band_seeds)} seed(s)").all()


def test_a_study_reads_only_its_own_evaluations_and_the_base_policy() -> None:
    """A band point at a frontier seed and a budget run share method and lr with frontier
    points; the bands' per-problem means must count each seed of their own once."""
    rows = []
    for study, method, delta, seed, greedy in [
            ("frontier", "logra", 5e-3, 0, 1.0), ("bands", "logra", 5e-3, 0, 1.0),
            ("bands", "logra", 5e-3, 1, 0.0), ("budget", "logra-nokl", math.nan, 0, 0.0),
            ("frontier", "logra-nokl", math.nan, 0, 1.0), ("", kc.BASE, math.nan, 0, 0.5)]:
        rows += [dict(study=study, method=method, delta=delta, lr=1e-3, seed=seed, setting="",
                      problem=p, greedy=greedy, sampled=greedy) for p in range(3)]
    problems = pd.DataFrame(rows)
    bands = kcr._study_problems(problems, "bands")
    assert set(zip(bands["study"], bands["seed"], strict=True)) == {
        ("bands", 0), ("bands", 1), ("", 0)}
    means = kcr._per_problem(bands, "logra", 1e-3, 5e-3)
    assert (means[("greedy", "mean")] == 0.5).all() and (means[("greedy", "count")] == 2).all()
    # read unfiltered, the frontier's copy of seed 0 would be counted twice
    assert (kcr._per_problem(problems, "logra", 1e-3, 5e-3)[("greedy", "count")] == 3).all()
    frontier = kcr._study_problems(problems, "frontier")
    assert set(frontier["study"]) == {"frontier", ""}
    assert kcr._per_problem(frontier, "logra-nokl", 1e-3, math.nan)[("greedy", "mean")].eq(1).all()
