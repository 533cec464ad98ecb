"""scripts/grpo_rules.py plans notebook 09's uncontrolled LoGRA runs, one per registered rule."""

from __future__ import annotations

import pytest

from logra.experiments import kl_control as kc
from logra.optim.rules import RULES


@pytest.fixture
def script(load_script):
    return load_script("grpo_rules")


def test_each_rule_runs_uncontrolled_and_gain_is_notebook_09s_own_run(script) -> None:
    cfg = kc.config("default")
    configs = {key: kc.grpo_config(cfg, run) for key, run in script.plan(cfg, 3e-4, [0, 1]).items()}
    assert set(configs) == {(rule, seed) for rule in RULES for seed in (0, 1)}
    for (rule, seed), config in configs.items():
        assert (config.optimizer, config.reconstruction, config.seed) == (
            "logra", rule, seed)
        assert config.predicted_kl_threshold is None and config.lr == 3e-4
        assert config.eval_every == config.steps == cfg.steps
    (nine,) = [r for r in kc.plan(cfg) if r.study == "frontier"
               and (r.method, r.lr, r.seed) == ("logra-nokl", 3e-4, 0)]
    assert configs[("gain", 0)] == kc.grpo_config(cfg, nine)
