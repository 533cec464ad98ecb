"""The method registry (`logra.methods`): one table every experiment and figure reads."""

from __future__ import annotations

import matplotlib
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from logra.experiments import comparison, comparison_report, grpo_runs, kl_control
from logra.methods import METHODS, Method, get_method, palette
from logra.optimizers import REGISTRY

matplotlib.use("Agg")


def test_every_optimizer_is_a_method_and_every_method_has_its_own_colour() -> None:
    assert set(REGISTRY) <= set(METHODS)
    colors = [to_hex(m.color) for m in METHODS.values()]
    assert len(set(colors)) == len(colors)
    for name, entry in REGISTRY.items():  # a method of an optimizer's name draws in its colour
        assert METHODS[name].color == entry.color


def test_presets_say_whether_the_control_acts() -> None:
    assert METHODS["logra"].controlled and METHODS["adamw-kl"].controlled
    assert METHODS["logra-nokl"].controllable and not METHODS["logra-nokl"].controlled
    assert not METHODS["adamw"].controllable and not METHODS["lora"].controlled
    assert METHODS["logra-nystrom"].settings == {"reconstruction": "nystrom"}


def test_a_method_is_checked_when_it_is_written() -> None:
    with pytest.raises(ValueError, match="optimizer 'sgd'"):
        Method("sgd-method", "sgd", "SGD")
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        get_method("nope")
    with pytest.raises(TypeError):  # presets are read-only: a run must not edit the table
        METHODS["logra"].settings["rank"] = 4  # type: ignore[index]


def test_a_method_added_in_one_place_reaches_the_sweeps_and_the_figures(monkeypatch) -> None:
    """One entry: the GRPO runs build its preset, the KL notebook plans its frontier point, and
    the comparison figure draws it in its colour."""
    added = Method("logra-r4", "logra", "LoGRA rank 4", color="#123456", settings={"rank": 4})
    monkeypatch.setitem(METHODS, added.name, added)

    cfg = comparison.config("smoke", methods=["adamw", "logra-r4"],
                            lr_grid={"adamw": [1e-4], "logra-r4": [3e-4]})
    run = grpo_runs.grpo_config(cfg, grpo_runs.Run(method="logra-r4", seed=1))
    assert (run.optimizer, run.rank, run.seed) == ("logra", 4, 1)
    assert run.predicted_kl_threshold == cfg.predicted_kl_threshold  # the experiment's δ

    kl_cfg = kl_control.config("smoke", points=[["adamw", 1e-3], ["naive", 1e-3],
                                                ["logra-r4", 1e-3, 1e-4]])
    point = [r for r in kl_control.plan(kl_cfg) if r.method == "logra-r4"]
    assert [(r.lr, r.delta) for r in point] == [(1e-3, 1e-4)]
    run = kl_control.grpo_config(kl_cfg, point[0])
    assert (run.rank, run.predicted_kl_threshold) == (4, 1e-4)

    assert palette(["adamw", "logra-r4"]) == {"dense AdamW": "black", "LoGRA rank 4": "#123456"}
    runs = pd.DataFrame([
        dict(model="smoke", method=m, lr=cfg.lr_grid[m][0], seed=s, greedy=0.1 * s + 0.05,
             sampled=0.1 * s, greedy_before=0.05, sampled_before=0.0, steps=2)
        for m in ("adamw", "logra-r4") for s in (0, 1)])
    figure = comparison_report.plot_accuracy(runs, cfg)
    drawn = {to_hex(patch.get_facecolor()) for ax in figure.axes for patch in ax.patches}
    assert "#123456" in drawn and "#000000" in drawn
