"""The optimizer-comparison notebook end to end at smoke scale, its verdict rules on hand-made
frames, run sharing with the KL notebook, and the proxy preparation of `logra-repro reproduce`."""

from __future__ import annotations

import json
import re
import time

import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import comparison as cmp
from logra.experiments import grpo_runs
from logra.experiments import kl_trajectories as kt
from logra.experiments.report import VERDICTS
from logra.models import SCALES
from logra.rl import config as grpo


def shared_results(tmp_path_factory: pytest.TempPathFactory):
    """The session's results directory of tests/test_notebook_kl.py: the smoke runs of the KL
    notebook are reused here, as in `logra-repro reproduce`."""
    path = tmp_path_factory.getbasetemp() / "grpo-smoke-results"
    path.mkdir(exist_ok=True)
    return path

@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("comparison")
    results = shared_results(tmp_path_factory)
    notebooks.execute(cmp.NOTEBOOK, {"scale": "smoke", "figures_dir": str(out),
                                     "results_dir": str(results)}, executed_dir=out)
    return out, results


# ---------------------------------------------------------------- the notebook


def test_notebook_writes_figures_and_the_papers_table(executed, assert_figure) -> None:
    out, results = executed
    for name in cmp.FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(out / f"{name}{suffix}")
    cfg = cmp.config("smoke")
    table = pd.read_csv(out / "comparison.csv", dtype=str, keep_default_na=False)
    assert list(table["method"]) == ["policy before RL",
                                     *[grpo_runs.METHODS[m].label for m in cfg["methods"]]]
    for column in ("smoke GSM8K-like (gsm-synth), %", "smoke MATH-like (math-synth), %",
                   "reported 27B GSM8K, %", "reported 27B MATH, %",
                   "smoke optimizer state, MB", "smoke s/step"):
        assert column in table.columns, column
    reported = table.set_index("method")
    assert reported.loc["LoGRA gain + KL control", "reported 27B GSM8K, %"] == "84.2"
    assert reported.loc["LoRA", "reported 27B MATH, %"] == "44.4"
    runs = pd.read_csv(out / "comparison_runs.csv")
    assert len(runs) == 1 + len(cfg["methods"]) * len(cfg["seeds"])
    trained = runs[runs["method"] != "base"]
    assert trained["gsm-synth pass@1, %"].between(0, 100).all()
    assert (trained["state_bytes"] > 0).all() and (trained["steps"] == cfg["steps"]).all()
    lora = trained[trained["method"] == "lora"]["state_bytes"].iloc[0]
    adamw = trained[trained["method"] == "adamw"]["state_bytes"].iloc[0]
    assert lora < adamw  # adapters' moments only
    # the held-out accuracies are cached beside the runs
    assert len(list((results / "heldout").glob("*.json"))) == len(cfg["methods"]) * len(
        cfg["seeds"])


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
    assert any("comparison:" in text for text in stderr)  # the runs' one bar is there
    noisy = [line for text in stderr for line in text.splitlines() if NOISE.search(line)]
    assert not noisy, noisy


def test_comparison_reuses_the_kl_notebooks_runs() -> None:
    """With equal settings the adamw and logra runs are the same run directories, so the
    comparison reads the KL notebook's runs back instead of rerunning them."""
    for scale in ("smoke", "default"):
        kl, comp = kt.config(scale), cmp.config(scale)
        for method in ("adamw", "logra"):
            for seed in comp["seeds"]:
                assert grpo.run_dir(grpo_runs.grpo_config(kl, method, seed)) == grpo.run_dir(
                    cmp.grpo_config(comp, comp["models"][0], method, seed)), (scale, method)


def test_scales() -> None:
    assert cmp.config("default")["models"] == ["proxy-1m"]
    assert cmp.config("full")["models"] == ["proxy-1m", "proxy-4m"]
    gpu = cmp.config("7b")
    config = cmp.grpo_config(gpu, gpu["models"][0], "lora", 0)
    assert config["model"] == "Qwen/Qwen2.5-7B-Instruct" and config["task"] == "gsm8k"
    assert gpu["eval_tasks"] == ["gsm8k", "math"]
    with pytest.raises(ValueError, match="unknown methods"):
        cmp.config("smoke", methods=["adamw", "sgd"])


# ---------------------------------------------------------------- verdict rules


def _frame(accuracy: dict[str, dict[str, list[float]]], model: str = "proxy-1m") -> pd.DataFrame:
    """Hand-made results: {method: {task: [accuracy per seed, in %]}}."""
    rows = []
    for method, tasks in accuracy.items():
        for task, values in tasks.items():
            for seed, value in enumerate(values):
                rows.append(dict(model=model, method=method, seed=seed, task=task,
                                 accuracy=value / 100, final_kl=0.01, state_bytes=1e6,
                                 step_seconds=1.0, steps=100))
    return pd.DataFrame(rows)


def _cfg(models=("proxy-1m",), tasks=("gsm-synth", "math-synth")) -> dict:
    return cmp.config("default", methods=["adamw", "lora", "logra"], models=list(models),
                      eval_tasks=list(tasks))


@pytest.mark.parametrize(("logra", "verdict"), [
    ({"gsm-synth": [41, 42, 40], "math-synth": [12, 13, 12]}, "reproduced"),  # ≥ AdamW
    ({"gsm-synth": [39, 40, 39], "math-synth": [11, 12, 11]}, "reproduced"),  # within margin
    ({"gsm-synth": [30, 31, 30], "math-synth": [12, 12, 13]}, "partly"),
    ({"gsm-synth": [30, 31, 30], "math-synth": [5, 6, 5]}, "not reproduced"),
])
def test_c7_rule(logra, verdict) -> None:
    frame = _frame({"base": {"gsm-synth": [30], "math-synth": [8]},
                    "adamw": {"gsm-synth": [40, 41, 40], "math-synth": [12, 12, 12]},
                    "lora": {"gsm-synth": [35, 35, 35], "math-synth": [10, 10, 10]},
                    "logra": logra})
    row = cmp.c7_claim(frame, _cfg())
    assert row.claim == "C7" and row.verdict == verdict, row.reproduced
    assert "proxy analogue" in row.reproduced


def test_c7_pairs_give_each_part_of_the_rule() -> None:
    frame = _frame({"base": {"gsm-synth": [30], "math-synth": [12]},
                    "adamw": {"gsm-synth": [40, 41, 42], "math-synth": [12, 12, 12]},
                    "lora": {"gsm-synth": [35, 35, 35], "math-synth": [10, 10, 10]},
                    "logra": {"gsm-synth": [39, 40, 41], "math-synth": [5, 6, 7]}})
    pairs = cmp.c7_pairs(frame, _cfg()).set_index("task")
    gsm, math_ = pairs.loc["gsm-synth"], pairs.loc["math-synth"]
    assert (gsm.base, gsm.adamw, gsm.logra) == pytest.approx((30, 41, 40))
    assert gsm.difference == pytest.approx(-1) and gsm.margin == pytest.approx(2)  # c7_margin
    assert gsm.matches and gsm.adamw_learned  # 1 below, inside 2; AdamW 11 above base
    assert math_.difference == pytest.approx(-6) and not math_.matches
    assert not math_.adamw_learned  # AdamW 12 = base
    assert cmp.c7_claim(frame, _cfg()).verdict == "partly"


def test_c7_matching_a_dense_run_that_learned_nothing_is_only_partly() -> None:
    frame = _frame({"base": {"gsm-synth": [40], "math-synth": [12]},
                    "adamw": {"gsm-synth": [40, 41, 40], "math-synth": [12, 12, 12]},
                    "lora": {"gsm-synth": [35, 35, 35], "math-synth": [10, 10, 10]},
                    "logra": {"gsm-synth": [41, 42, 40], "math-synth": [12, 13, 12]}})
    row = cmp.c7_claim(frame, _cfg())
    assert row.verdict == "partly" and "did not improve" in row.reproduced


def test_c7_margin_widens_with_seed_noise() -> None:
    frame = _frame({"base": {"gsm-synth": [20]}, "adamw": {"gsm-synth": [30, 50, 40]},
                    "lora": {"gsm-synth": [0, 0, 0]},
                    "logra": {"gsm-synth": [33, 35, 34]}})  # 6 points lower, noisy reference
    assert cmp.c7_claim(frame, _cfg(tasks=["gsm-synth"])).verdict == "reproduced"
    quiet = _frame({"adamw": {"gsm-synth": [40, 40, 40]}, "lora": {"gsm-synth": [0, 0, 0]},
                    "logra": {"gsm-synth": [34, 34, 34]}})
    assert cmp.c7_claim(quiet, _cfg(tasks=["gsm-synth"])).verdict == "not reproduced"


@pytest.mark.parametrize(("lora", "verdict"), [
    ({"gsm-synth": [30, 31, 30], "math-synth": [5, 5, 6]}, "reproduced"),
    ({"gsm-synth": [30, 31, 30], "math-synth": [12, 12, 12]}, "partly"),
    ({"gsm-synth": [41, 41, 41], "math-synth": [12, 12, 12]}, "not reproduced"),
])
def test_c8_direction_rule_at_proxy_scale(lora, verdict) -> None:
    frame = _frame({"adamw": {"gsm-synth": [40] * 3, "math-synth": [12] * 3}, "lora": lora,
                    "logra": {"gsm-synth": [40] * 3, "math-synth": [12] * 3}})
    row = cmp.c8_claim(frame, _cfg())
    assert row.verdict == verdict and "direction" in row.scale, row.reproduced


@pytest.mark.parametrize(("logra", "lora", "verdict"), [
    ({"gsm8k": [84, 84.5, 84], "math": [51.5, 52, 51.5]},
     {"gsm8k": [76.5, 77, 76.5], "math": [44, 44.5, 44]}, "reproduced"),
    ({"gsm8k": [84, 84.5, 84], "math": [40, 40, 40]},
     {"gsm8k": [76.5, 77, 76.5], "math": [39, 39, 39]}, "partly"),
    ({"gsm8k": [70, 70, 70], "math": [40, 40, 40]},
     {"gsm8k": [70, 70, 70], "math": [40, 40, 40]}, "not reproduced"),
])
def test_c8_numbers_rule_at_27b(logra, lora, verdict) -> None:
    big = SCALES["27b"].hub_id
    frame = _frame({"adamw": {"gsm8k": [80] * 3, "math": [50] * 3}, "lora": lora,
                    "logra": logra}, model=big)
    cfg = _cfg(models=[big], tasks=["gsm8k", "math"])
    row = cmp.c8_claim(frame, cfg)
    assert row.verdict == verdict, row.reproduced
    assert not [r for r in cmp.gpu_rows(cfg) if r.claim == "C8"]  # 27B ran: no GPU row


# ---------------------------------------------------------------- reproduce prepares proxies


def test_required_models_follow_the_scale() -> None:
    names = [kt.NOTEBOOK, cmp.NOTEBOOK]
    assert notebooks.required_models("smoke", names) == ["smoke"]
    assert notebooks.required_models("default", names) == ["proxy-1m"]
    assert "proxy-1m" in notebooks.required_models("default", notebooks.ordered())
    assert notebooks.required_models("full", names) == ["proxy-1m", "proxy-4m"]
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
    notebooks.reproduce("full", only=[kt.NOTEBOOK, cmp.NOTEBOOK], log=log.append)
    assert events == [("prepare", "proxy-1m"), ("prepare", "proxy-4m"),
                      ("run", kt.NOTEBOOK), ("run", cmp.NOTEBOOK)]
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
    seconds = notebooks.reproduce("smoke", figures_dir=tmp_path, log=lambda _: None)
    assert ran == notebooks.ordered() and list(seconds) == ["prepare", *ran]
    table = pd.read_csv(tmp_path / "reproduce_time_smoke.csv")
    assert list(table["step"]) == ["prepare", *ran, "total"]
    rounding = 0.05 * len(table)  # each row rounded to 0.1 s
    assert table["seconds"].iloc[-1] == pytest.approx(table["seconds"].iloc[:-1].sum(),
                                                      abs=rounding)
    assert (table["scale"] == "smoke").all()
    # a partial run (--only) replaces its notebook's row, keeps the others and the complete
    # run's prepare, and sums the total again
    complete = table.set_index("step")["seconds"]
    monkeypatch.setattr(notebooks, "execute",
                        lambda name, params, executed_dir: time.sleep(0.3))
    notebooks.reproduce("smoke", only=[kt.NOTEBOOK], figures_dir=tmp_path, log=lambda _: None)
    updated = pd.read_csv(tmp_path / "reproduce_time_smoke.csv")
    assert list(updated["step"]) == list(table["step"])
    again = updated.set_index("step")["seconds"]
    assert again[kt.NOTEBOOK] >= 0.3 > complete[kt.NOTEBOOK]
    others = [s for s in complete.index if s not in (kt.NOTEBOOK, "total")]
    assert (again[others] == complete[others]).all()
    assert again["total"] == pytest.approx(again.drop("total").sum(), abs=rounding)
    # with no table yet, a partial run writes none
    (tmp_path / "reproduce_time_smoke.csv").unlink()
    notebooks.reproduce("smoke", only=[kt.NOTEBOOK], figures_dir=tmp_path, log=lambda _: None)
    assert not (tmp_path / "reproduce_time_smoke.csv").exists()


def test_accuracy_figure_has_a_facet_per_model_and_task_with_bars_and_seed_dots() -> None:
    """seaborn's barplot + swarmplot per facet: a bar per method at its seed mean, a dot per
    seed, and the policy before RL dashed."""
    frame = _frame({"base": {"gsm-synth": [30], "math-synth": [8]},
                    "adamw": {"gsm-synth": [40, 41, 42], "math-synth": [12, 12, 12]},
                    "lora": {"gsm-synth": [35, 35, 35], "math-synth": [10, 11, 12]},
                    "logra": {"gsm-synth": [41, 42, 40], "math-synth": [12, 13, 14]}})
    fig = cmp.plot_accuracy(frame, _cfg())
    assert len(fig.axes) == 2  # 1 model × 2 tasks
    for ax, means, base in zip(fig.axes, ([41, 35, 41], [12, 11, 13]), (30, 8), strict=True):
        assert [bar.get_height() for bar in ax.patches] == pytest.approx(means)
        assert sum(len(dots.get_offsets()) for dots in ax.collections) == 9  # 3 methods × 3
        (line,) = ax.lines
        assert line.get_linestyle() == "--" and line.get_ydata()[0] == pytest.approx(base)
    assert [t.get_text() for t in fig.legends[0].texts] == [
        *(grpo_runs.METHODS[m].label for m in ("adamw", "lora", "logra")), "policy before RL"]
