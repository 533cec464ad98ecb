"""The optimizer-comparison notebook end to end at smoke scale, its lr choice, paired tests and
verdict rules on hand-made runs, and the proxy preparation of `logra-repro reproduce`."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import comparison as cmp
from logra.experiments import comparison_report as cmp_report
from logra.experiments import kl_trajectories as kt
from logra.experiments.grpo_runs import Run
from logra.experiments.report import VERDICTS
from logra.methods import METHODS
from logra.models import SCALES
from logra.rl import config as grpo


@pytest.fixture(scope="module")
def executed(run_smoke_notebook, smoke_results):
    return run_smoke_notebook(cmp.NOTEBOOK, results_dir=str(smoke_results)), smoke_results


# ---------------------------------------------------------------- the notebook


def test_notebook_sweeps_then_runs_the_seeds_at_the_chosen_lr(executed, assert_figure) -> None:
    out, results = executed
    for name in cmp_report.FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(out / f"{name}{suffix}")
    cfg = cmp.config("smoke")
    runs = pd.read_csv(out / "comparison_runs.csv")
    # the sweep: every lr of every grid at seed 0; then seed 1 at each chosen lr only
    sweep = runs[runs["seed"] == cfg.sweep_seed]
    assert sorted(zip(sweep["method"], sweep["lr"], strict=True)) == sorted(
        (m, lr) for m in cfg.methods for lr in cfg.lr_grid[m])
    swept = pd.read_csv(out / "comparison_sweep.csv")
    chosen = swept[swept["lr choice"].notna()].set_index("method")["lr"]
    assert len(chosen) == len(cfg.methods)
    later = runs[runs["seed"] == 1].set_index("method")["lr"]
    assert later.to_dict() == {m: chosen[METHODS[m].label] for m in cfg.methods}
    assert swept.set_index("method").loc["LoRA", "lr choice"] == "not swept"
    assert runs[["greedy", "sampled", "greedy_before"]].stack().between(0, 100).all()
    assert (runs["state_bytes"] > 0).all() and (runs["steps"] == cfg.steps).all()
    assert runs["math-synth greedy"].between(0, 100).all()  # the extra eval task
    lora = runs[runs["method"] == "lora"]["state_bytes"].iloc[0]
    adamw = runs[runs["method"] == "adamw"]["state_bytes"].iloc[0]
    assert lora < adamw  # adapters' moments only
    # every run holds its per-problem evaluations before and after
    stored = cmp.config("smoke", results_dir=str(results))
    run_dir = grpo.run_dir(cmp.grpo_config(stored, Run(model="smoke", method="adamw", seed=0,
                                                     lr=1.0e-4)))
    problems = pd.read_csv(run_dir / "problems.csv")
    assert sorted(problems["step"].unique()) == [0, cfg.steps]
    assert len(problems) == 2 * cfg.eval_prompts


def test_notebook_reads_the_lrs_of_a_sweep_table_and_runs_no_sweep(executed, tmp_path) -> None:
    """Given the smoke sweep's own table (`chosen_lrs`), the notebook runs each method at the
    table's chosen lr only, writes no sweep table or figure of its own, and finds the same
    numbers for those runs (read back from the results store)."""
    out, results = executed
    notebooks.execute(cmp.NOTEBOOK, {"scale": "smoke", "figures_dir": str(tmp_path),
                                     "results_dir": str(results),
                                     "chosen_lrs": str(out / "comparison_sweep.csv")},
                      executed_dir=tmp_path)
    assert not (tmp_path / "comparison_sweep.csv").exists()
    assert not (tmp_path / "comparison_sweep.png").exists()
    swept, again = (pd.read_csv(d / "comparison_runs.csv") for d in (out, tmp_path))
    chosen = pd.read_csv(out / "comparison_sweep.csv")
    chosen = chosen[chosen["lr choice"].isin(cmp.CHOICES)]
    assert sorted(again["lr"]) == sorted(np.repeat(chosen["lr"].to_numpy(), 2))  # two seeds
    keys = ["method", "lr", "seed"]
    pd.testing.assert_frame_equal(
        again.drop(columns="step_seconds").sort_values(keys, ignore_index=True),
        swept.merge(again[keys]).drop(columns="step_seconds").sort_values(keys,
                                                                           ignore_index=True))


def test_notebook_writes_the_papers_table_and_the_tests(executed) -> None:
    out, _ = executed
    cfg = cmp.config("smoke")
    table = pd.read_csv(out / "comparison.csv", dtype=str, keep_default_na=False)
    assert list(table["method"]) == ["policy before RL",
                                     *[METHODS[m].label for m in cfg.methods]]
    for column in ("greedy pass@1, %", "sampled pass@1, %", "greedy vs dense, pts",
                   "sampled vs dense, pts", "math-synth greedy, %", "reported 27B GSM8K, %",
                   "reported 27B MATH, %", "optimizer state, MB", "s/step"):
        assert column in table.columns, column
    reported = table.set_index("method")
    assert reported.loc["LoGRA gain + KL control", "reported 27B GSM8K, %"] == "84.2"
    assert reported.loc["LoRA", "reported 27B MATH, %"] == "44.4"
    assert reported.loc["dense AdamW", "greedy vs dense, pts"] == "the reference"
    assert " ± " in reported.loc["LoRA", "greedy pass@1, %"]  # two seeds
    tests = pd.read_csv(out / "comparison_tests.csv")
    assert tests["greedy_gain_p"].between(0, 1).all()
    assert tests["greedy_vs_dense_p"].isna().sum() == 1  # dense AdamW against itself: none


def test_notebook_claim_rows(executed) -> None:
    out, _ = executed
    claims = pd.read_csv(out / "claims_comparison.csv")
    assert list(claims["claim"]) == ["C7", "C8", "C7", "C7", "C8"]
    assert claims["verdict"].isin(VERDICTS).all()
    assert list(claims["scale"][2:]) == ["1.5B", "7B", "27B, 8×80 GB"]
    assert (claims["verdict"][2:] == "needs GPU scale").all()
    assert "logra-repro reproduce --scale 7b --only 04_optimizer_comparison" in claims[
        "reproduced"][3]
    assert "scripts/trl_grpo.py --config experiments/launch/trl_grpo_27b.yaml" in claims[
        "reproduced"][4]


NOISE = re.compile(r"warning|Loading weights|Failed to load", re.IGNORECASE)


def test_the_executed_notebook_reads_cleanly(executed) -> None:
    """No warning, per-load "Loading weights" bar or library notice in any stderr output
    (logra.quiet, logra.models.load_policy): the bars of long loops and the results only.
    This notebook loads every policy it trains, LoRA's through peft (and bitsandbytes)."""
    out, _ = executed
    notebook = json.loads((out / f"{cmp.NOTEBOOK}.ipynb").read_text())
    stderr = ["".join(output["text"]) for cell in notebook["cells"]
              for output in cell.get("outputs", []) if output.get("name") == "stderr"]
    assert any("comparison (lr sweep):" in text for text in stderr)
    noisy = [line for text in stderr for line in text.splitlines() if NOISE.search(line)]
    assert not noisy, noisy


def test_scales_and_bad_configs() -> None:
    default = cmp.config("default")
    assert default["models"] == ["proxy-1m"] and cmp.reads_chosen(default)
    assert default["methods"] == ["adamw", "lora", "logra"] and default["seeds"] == [0, 1, 2]
    run = cmp.grpo_config(default, Run(model="proxy-1m", method="lora", seed=0, lr=1e-3))
    assert (run.group_size, run.prompts_per_step, run.eval_every) == (16, 8, 100)
    assert (run.eval_prompts, run.eval_samples, run.eval_sampled_prompts) == (
        5000, 4, 2000)
    assert all(len(cmp.config("full")["lr_grid"][m]) == 3 for m in default["methods"])
    gpu = cmp.config("7b")
    config = cmp.grpo_config(gpu, Run(model=gpu["models"][0], method="lora", seed=0))
    assert config.model == "Qwen/Qwen2.5-7B-Instruct" and config.task == "gsm8k"
    assert gpu["extra_eval_tasks"] == ["math"]
    with pytest.raises(ValueError, match=r"methods: input should be one of .*got 'sgd'"):
        cmp.config("smoke", methods=["adamw", "sgd"], lr_grid={"adamw": [1.0], "sgd": [1.0]})
    with pytest.raises(ValueError, match="no learning rates for methods \\['logra'\\]"):
        cmp.config("smoke", lr_grid={"adamw": [1e-4], "lora": [1e-3]})
    with pytest.raises(ValueError, match=r"lr_grid: input should be greater than 0, got -0.0001"):
        cmp.config("smoke", lr_grid={"adamw": [-1e-4], "lora": [1e-3], "logra": [1e-3]})
    with pytest.raises(ValueError, match="must include 'adamw'"):
        cmp.config("smoke", methods=["lora", "logra"])
    with pytest.raises(ValueError, match="sweep_seed 5"):
        cmp.config("smoke", sweep_seed=5)


# ---------------------------------------------------------------- lr choice, tests, verdicts


PROBLEMS = 400


def _outcomes(rate: float, rng: np.random.Generator) -> np.ndarray:
    return (rng.random(PROBLEMS) < rate).astype(float)


def _made(spec: dict[str, dict[float, tuple[float, float]]], seeds=(0,), base=(0.30, 0.20),
          model: str = "proxy-1m") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Hand-made runs and problems: {method: {lr: (greedy rate, sampled rate)}} at every seed,
    outcomes drawn per problem around those rates (sampled: means of 4 draws)."""
    rng = np.random.default_rng(0)
    rows, problems = [], []
    before = {"greedy": _outcomes(base[0], rng),
              "sampled": np.mean([_outcomes(base[1], rng) for _ in range(4)], axis=0)}
    problems.append(pd.DataFrame(dict(model=model, method=cmp.BASE, lr=np.nan, seed=-1,
                                      problem=range(PROBLEMS), **before)))
    for method, lrs in spec.items():
        for lr, (greedy, sampled) in lrs.items():
            for seed in seeds:
                g = _outcomes(greedy, rng)
                s = np.mean([_outcomes(sampled, rng) for _ in range(4)], axis=0)
                problems.append(pd.DataFrame(dict(model=model, method=method, lr=lr, seed=seed,
                                                  problem=range(PROBLEMS), greedy=g,
                                                  sampled=s)))
                rows.append(dict(model=model, method=method, lr=lr, seed=seed,
                                 greedy_before=before["greedy"].mean(), greedy=g.mean(),
                                 sampled_before=before["sampled"].mean(), sampled=s.mean(),
                                 final_kl=0.01, state_bytes=1e6, step_seconds=1.0, steps=100))
    return pd.DataFrame(rows), pd.concat(problems, ignore_index=True)


def _cfg(spec, seeds=(0,), models=("proxy-1m",)) -> dict:
    """A sweeping config (the full scale) over `spec`'s grids."""
    return cmp.config("full", methods=list(spec), seeds=list(seeds), models=list(models),
                      lr_grid={m: sorted(lrs) for m, lrs in spec.items()})


def test_the_chosen_lr_is_the_best_sampled_and_bracketed_only_inside_the_grid() -> None:
    spec = {"adamw": {1e-5: (0.3, 0.2), 1e-4: (0.4, 0.35), 1e-3: (0.2, 0.1)},
            "lora": {1e-4: (0.3, 0.2), 1e-3: (0.3, 0.25)},
            "logra": {3e-4: (0.35, 0.3)}}
    runs, _ = _made(spec)
    chosen = cmp.choose(runs, _cfg(spec)).loc["proxy-1m"]
    assert chosen.loc["adamw", "lr"] == 1e-4 and chosen.loc["adamw", "bracketed"]
    assert chosen.loc["lora", "lr"] == 1e-3 and not chosen.loc["lora", "bracketed"]
    assert not chosen.loc["logra", "bracketed"] and chosen.loc["logra", "grid"] == 1
    marks = cmp_report.sweep_table(runs, _cfg(spec)).set_index(["method", "lr"])["lr choice"]
    assert marks[("dense AdamW", 1e-4)] == "chosen" and marks[("dense AdamW", 1e-3)] == ""
    assert marks[("LoRA", 1e-3)] == "chosen, at the grid's end"
    assert marks[("LoGRA gain + KL control", 3e-4)] == "not swept"


def test_a_committed_sweep_table_gives_the_lrs_and_replaces_the_sweep(tmp_path, monkeypatch
                                                                      ) -> None:
    """With `chosen_lrs` the lrs are the table's marked ones (its grid sizes and brackets
    kept), every method runs only there at each seed, and a table that lacks a method
    fails in `config`, naming the file and the method."""
    spec = {"adamw": {1e-5: (0.3, 0.2), 1e-4: (0.4, 0.35), 1e-3: (0.2, 0.1)},
            "lora": {1e-4: (0.3, 0.2), 1e-3: (0.3, 0.25)},
            "logra": {3e-4: (0.35, 0.3)}}
    runs, _ = _made(spec)
    table = tmp_path / "sweep.csv"
    cmp_report.sweep_table(runs, _cfg(spec)).to_csv(table, index=False)
    cfg = cmp.config("full", methods=list(spec), seeds=[0, 1], chosen_lrs=str(table))
    assert cmp.reads_chosen(cfg)
    chosen = cmp.choose(pd.DataFrame(), cfg).loc["proxy-1m"]
    assert chosen["lr"].to_dict() == {"adamw": 1e-4, "lora": 1e-3, "logra": 3e-4}
    assert chosen["grid"].to_dict() == {"adamw": 3, "lora": 2, "logra": 1}
    assert chosen["bracketed"].to_dict() == {"adamw": True, "lora": False, "logra": False}
    pd.testing.assert_frame_equal(cmp_report.sweep_table(pd.DataFrame(), cfg), pd.read_csv(table))
    # only the chosen lrs at each method's seeds: what run() executes
    ran = []

    def execute(cfg, runs, desc, progress):
        ran.extend((r.model, r.method, r.lr, r.seed) for r in runs)
        rows = pd.DataFrame([(r.model, r.method, r.lr, r.seed) for r in runs],
                            columns=["model", "method", "lr", "seed"])
        return rows, pd.DataFrame(columns=["model", "method", "problem"])

    monkeypatch.setattr(cmp, "_execute", execute)
    monkeypatch.setattr(cmp.grpo_runs, "prepare_inputs", lambda *args, **kwargs: None)
    cmp.run(cfg, progress=False)
    assert sorted(ran) == sorted([("proxy-1m", "adamw", 1e-4, 0), ("proxy-1m", "adamw", 1e-4, 1),
                                  ("proxy-1m", "lora", 1e-3, 0), ("proxy-1m", "lora", 1e-3, 1),
                                  ("proxy-1m", "logra", 3e-4, 0), ("proxy-1m", "logra", 3e-4, 1)])
    with pytest.raises(ValueError, match=f"{table}.*no single chosen lr for \\['proxy-1m/galore'"):
        cmp.config("full", methods=[*spec, "galore"], chosen_lrs=str(table))
    missing = cmp.config("full", methods=list(spec), chosen_lrs=str(tmp_path / "none.csv"))
    assert not cmp.reads_chosen(missing)  # no table: the scale sweeps
    other = pd.read_csv(table)
    other.loc[other["lr choice"] == "chosen", "lr"] = 5e-4  # another sweep's grid
    other.to_csv(table, index=False)
    with pytest.raises(ValueError, match=r"chose lr 0\.0005 for adamw, outside its lr_grid"):
        cmp.config("full", methods=list(spec), chosen_lrs=table)


def test_the_default_reads_the_committed_sweep() -> None:
    """The committed figures/comparison_sweep.csv names a chosen lr for every default method,
    inside its grid, with the grid's size; the notebook's example run is at that lr."""
    default = cmp.config("default")
    chosen = cmp.choose(pd.DataFrame(), default).loc["proxy-1m"]
    assert list(chosen.index) == default["methods"]
    for method, row in chosen.iterrows():
        grid = default["lr_grid"][method]
        assert row["lr"] in grid and row["grid"] == len(grid), method
        run = Run(model="proxy-1m", method=method, seed=0)
        assert cmp.grpo_config(default, run).lr == row["lr"]


def test_paired_tests_find_a_real_difference_and_not_a_null_one() -> None:
    spec = {"adamw": {1e-4: (0.45, 0.40)}, "lora": {1e-3: (0.30, 0.20)},
            "logra": {3e-4: (0.45, 0.40)}}
    runs, problems = _made(spec)
    table = cmp_report.paired_table(runs, problems, _cfg(spec)).set_index("method")
    assert table.loc["adamw", "greedy_gain"] == pytest.approx(
        100 * (runs.loc[0, "greedy"] - runs.loc[0, "greedy_before"]))
    assert table.loc["adamw", "greedy_gain_p"] < 0.01  # 30 % -> 45 % on 400 problems
    assert table.loc["lora", "greedy_vs_dense_p"] < 0.01 and table.loc["lora",
                                                                       "greedy_vs_dense"] < -5
    assert table.loc["logra", "sampled_vs_dense_p"] > 0.01  # the same rates: no difference
    ps = table[[c for c in table.columns if c.endswith("_p")]].stack().dropna()
    assert ps.between(0, 1).all() and len(ps) == 3 * 2 + 2 * 2  # Holm over all ten tests


@pytest.mark.parametrize(("logra", "verdict"), [
    ((0.45, 0.40), "reproduced"),   # the same rates as dense
    ((0.55, 0.50), "reproduced"),   # above
    ((0.45, 0.20), "partly"),       # sampled significantly below
    ((0.30, 0.20), "not reproduced"),
])
def test_c7_rule(logra, verdict) -> None:
    spec = {"adamw": {1e-4: (0.45, 0.40)}, "lora": {1e-3: (0.35, 0.3)},
            "logra": {3e-4: logra}}
    runs, problems = _made(spec)
    row = cmp_report.c7_claim(runs, problems, _cfg(spec))
    assert row.claim == "C7" and row.verdict == verdict, row.reproduced
    assert "proxy analogue" in row.reproduced and "one seed" in row.reproduced


def test_c7_matching_a_dense_run_that_learned_nothing_is_only_partly() -> None:
    spec = {"adamw": {1e-4: (0.30, 0.20)}, "lora": {1e-3: (0.3, 0.2)},
            "logra": {3e-4: (0.30, 0.20)}}
    runs, problems = _made(spec)
    row = cmp_report.c7_claim(runs, problems, _cfg(spec))
    assert row.verdict == "partly" and "did not improve" in row.reproduced


def test_seeds_are_averaged_per_problem_before_the_test() -> None:
    spec = {"adamw": {1e-4: (0.45, 0.40)}, "lora": {1e-3: (0.45, 0.40)},
            "logra": {3e-4: (0.45, 0.40)}}
    runs, problems = _made(spec, seeds=(0, 1, 2))
    table = cmp_report.paired_table(runs, problems, _cfg(spec, seeds=(0, 1, 2))).set_index("method")
    assert (table["seeds"] == 3).all()
    mean = problems[problems["method"] == "lora"].groupby("problem")["greedy"].mean().mean()
    assert table.loc["lora", "greedy"] == pytest.approx(100 * mean)


@pytest.mark.parametrize(("lora", "verdict"), [
    ((0.30, 0.20), "reproduced"), ((0.30, 0.40), "partly"), ((0.45, 0.40), "not reproduced"),
])
def test_c8_direction_rule_at_proxy_scale(lora, verdict) -> None:
    spec = {"adamw": {1e-4: (0.45, 0.40)}, "lora": {1e-3: lora}, "logra": {3e-4: (0.45, 0.40)}}
    runs, problems = _made(spec)
    row = cmp_report.c8_claim(runs, problems, _cfg(spec))
    assert row.verdict == verdict and "direction" in row.scale, row.reproduced


def test_c8_numbers_rule_at_27b() -> None:
    big = SCALES["27b"].hub_id
    spec = {"adamw": {1e-6: (0.80, 0.80)}, "lora": {1e-5: (0.766, 0.7)},
            "logra": {1e-6: (0.842, 0.8)}}
    runs, problems = _made(spec, model=big)
    runs["math greedy"] = runs["method"].map({"adamw": 0.5, "lora": 0.444, "logra": 0.517})
    cfg = cmp.config("27b", methods=list(spec), seeds=[0],
                     lr_grid={m: sorted(lrs) for m, lrs in spec.items()})
    runs["greedy"] = runs["method"].map({"adamw": 0.80, "lora": 0.766, "logra": 0.842})
    assert cmp_report.c8_claim(runs, problems, cfg).verdict == "reproduced"
    runs.loc[runs["method"] == "logra", "math greedy"] = 0.40
    assert cmp_report.c8_claim(runs, problems, cfg).verdict == "partly"
    assert not [r for r in cmp_report.gpu_rows(cfg) if r.claim == "C8"]  # 27B ran: no GPU row


def test_accuracy_figure_has_bars_and_seed_dots_per_measure() -> None:
    """seaborn's barplot + swarmplot per facet: a bar per method at its seed mean, a dot per
    seed, and the policy before RL dashed."""
    spec = {"adamw": {1e-4: (0.45, 0.40)}, "lora": {1e-3: (0.35, 0.3)},
            "logra": {3e-4: (0.45, 0.40)}}
    runs, _ = _made(spec, seeds=(0, 1, 2))
    cfg = _cfg(spec, seeds=(0, 1, 2))
    fig = cmp_report.plot_accuracy(runs, cfg)
    assert len(fig.axes) == 2  # greedy, sampled
    for ax, measure in zip(fig.axes, cmp.MEASURES, strict=True):
        means = runs.groupby("method", sort=False)[measure].mean().reindex(cfg.methods)
        assert [bar.get_height() for bar in ax.patches] == pytest.approx(100 * means.to_numpy())
        assert sum(len(dots.get_offsets()) for dots in ax.collections) == 9  # 3 methods × 3
        (line,) = ax.lines
        assert line.get_linestyle() == "--"
        assert line.get_ydata()[0] == pytest.approx(100 * runs[f"{measure}_before"].iloc[0])
        low, high = ax.get_ylim()
        assert low <= 100 * runs[measure].min() and high >= 100 * runs[measure].max()
    assert [t.get_text() for t in fig.legends[0].texts] == [
        *(METHODS[m].label for m in ("adamw", "lora", "logra")), "policy before RL"]


# ---------------------------------------------------------------- reproduce prepares proxies


def test_required_models_follow_the_scale() -> None:
    names = [kt.NOTEBOOK, cmp.NOTEBOOK]
    assert notebooks.required_models("smoke", names) == ["smoke"]
    assert notebooks.required_models("default", names) == ["proxy-1m"]
    assert "proxy-1m" in notebooks.required_models("default", notebooks.ordered())
    assert notebooks.required_models("proxy-4m", names) == ["proxy-4m"]
    assert notebooks.required_models("1.5b", names) == []  # hub models: nothing to build
    assert list(notebooks.NOTEBOOKS).index(cmp.NOTEBOOK) < list(notebooks.NOTEBOOKS).index(
        "07_optimizer_cost")
    assert notebooks.NOTEBOOKS[kt.NOTEBOOK] == "kl_trajectories"


def test_reproduce_prepares_missing_proxies_before_any_notebook(monkeypatch) -> None:
    events = []
    monkeypatch.setattr("logra.models.prepare",
                        lambda model, **kw: events.append(("prepare", model)) or model)
    monkeypatch.setattr(notebooks, "execute",
                        lambda name, params, executed_dir: events.append(("run", name)))
    log = []
    notebooks.reproduce("proxy-4m", only=[kt.NOTEBOOK, cmp.NOTEBOOK], log=log.append)
    assert events == [("prepare", "proxy-4m"), ("run", kt.NOTEBOOK), ("run", cmp.NOTEBOOK)]
    assert any("proxy-4m" in line and "ready" in line for line in log)


def test_a_bad_scale_fails_before_any_preparation(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("nothing may be built for a bad scale")

    monkeypatch.setattr("logra.models.prepare", fail)
    monkeypatch.setattr(notebooks, "execute", fail)
    with pytest.raises(ValueError, match="unknown scale"):
        notebooks.reproduce("huge", only=[kt.NOTEBOOK, cmp.NOTEBOOK], log=lambda _: None)


def test_a_complete_reproduce_writes_its_wall_times(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("logra.models.prepare", lambda model, **kw: model)
    ran = []
    monkeypatch.setattr(notebooks, "execute",
                        lambda name, params, executed_dir: ran.append(name))
    seconds = notebooks.reproduce("smoke", figures_dir=tmp_path, log=lambda _: None,
                                  results_dir=tmp_path / "results", record_times=True)
    assert ran == notebooks.ordered() and list(seconds) == ["prepare", *ran]
    table = pd.read_csv(tmp_path / "reproduce_time_smoke.csv")
    assert list(table["step"]) == ["prepare", *ran, "total"]
    rounding = 0.05 * len(table)  # each row rounded to 0.1 s
    assert table["seconds"].iloc[-1] == pytest.approx(table["seconds"].iloc[:-1].sum(),
                                                      abs=rounding)
    assert (table["scale"] == "smoke").all()
    # a partial run (--only) replaces its notebook's row, keeps the others and, where it
    # prepares fewer proxies than a complete run (02_memory: none), the complete run's prepare,
    # and sums the total again
    complete = table.set_index("step")["seconds"]
    monkeypatch.setattr(notebooks, "execute",
                        lambda name, params, executed_dir: time.sleep(0.3))
    monkeypatch.setattr("logra.models.prepare", lambda model, **kw: time.sleep(0.2) or model)
    notebooks.reproduce("smoke", only=["02_memory"], figures_dir=tmp_path, log=lambda _: None,
                        results_dir=tmp_path / "results", record_times=True)
    updated = pd.read_csv(tmp_path / "reproduce_time_smoke.csv")
    assert list(updated["step"]) == list(table["step"])
    again = updated.set_index("step")["seconds"]
    assert again["02_memory"] >= 0.3 > complete["02_memory"]
    others = [s for s in complete.index if s not in ("02_memory", "total")]
    assert (again[others] == complete[others]).all()
    assert again["total"] == pytest.approx(again.drop("total").sum(), abs=rounding)
    # one that prepares every proxy a complete run does (at smoke, 03's one) replaces prepare
    notebooks.reproduce("smoke", only=[kt.NOTEBOOK], figures_dir=tmp_path, log=lambda _: None,
                        results_dir=tmp_path / "results", record_times=True)
    last = pd.read_csv(tmp_path / "reproduce_time_smoke.csv").set_index("step")["seconds"]
    assert last["prepare"] >= 0.2 > again["prepare"] and last["02_memory"] == again["02_memory"]
    # with no table yet, a partial run writes none
    (tmp_path / "reproduce_time_smoke.csv").unlink()
    notebooks.reproduce("smoke", only=[kt.NOTEBOOK], figures_dir=tmp_path, log=lambda _: None,
                        results_dir=tmp_path / "results", record_times=True)
    assert not (tmp_path / "reproduce_time_smoke.csv").exists()
    # without record_times the table goes under the results directory, not among the figures
    notebooks.reproduce("smoke", figures_dir=tmp_path, log=lambda _: None,
                        results_dir=tmp_path / "results")
    assert not (tmp_path / "reproduce_time_smoke.csv").exists()
    assert (tmp_path / "results" / "reproduce_time_smoke.csv").exists()




def test_greedy_only_runs_are_compared_on_greedy_alone() -> None:
    """The GPU scales evaluate greedily only (no eval_samples): the tests, the table and C7
    use greedy pass@1 and say nothing of a sampled one."""
    spec = {"adamw": {1e-4: (0.45, 0.40)}, "lora": {1e-3: (0.30, 0.20)},
            "logra": {3e-4: (0.45, 0.40)}}
    runs, problems = _made(spec)
    runs["sampled"] = runs["sampled_before"] = np.nan
    problems["sampled"] = np.nan
    cfg = _cfg(spec)
    tests = cmp_report.paired_table(runs, problems, cfg)
    assert "sampled_gain" not in tests.columns and tests["greedy_gain_p"].notna().all()
    table = cmp_report.comparison_table(runs, problems, cfg)
    assert "greedy pass@1, %" in table.columns and "sampled pass@1, %" not in table.columns
    pairs = cmp_report.c7_pairs(runs, problems, cfg)
    assert list(pairs["measure"]) == ["greedy"]
    assert cmp_report.c7_claim(runs, problems, cfg).verdict == "reproduced"
    assert len(cmp_report.plot_accuracy(runs, cfg).axes) == 1
