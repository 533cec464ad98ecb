"""GRPO runs at `smoke` scale: every optimizer of the registry, records, manifest, checkpoints,
and resume (interrupted and resumed = uninterrupted, to 1e-6).

The smoke proxy solves no problem after its few warm-up steps, so the real reward would be 0
everywhere and every gradient zero. These tests swap in a deterministic stand-in (1 for a
completion of even length) so that the advantages, updates and optimizer states are not trivial.
"""

from __future__ import annotations

import importlib.util
import json
import math

import datasets
import pandas as pd
import pytest

from logra.cli import main
from logra.config import ConfigError
from logra.models import prepare
from logra.optimizers import OPTIMIZERS, REGISTRY
from logra.rl import config as cfg
from logra.rl import runner

TIMING = list(runner.TIMING_COLUMNS)


@pytest.fixture(scope="module")
def smoke_dirs(tmp_path_factory):
    """The smoke proxy, built once into a temporary directory, and its data cache."""
    data = tmp_path_factory.mktemp("data")
    model = prepare("smoke", root=tmp_path_factory.mktemp("models"), data_dir=data,
                    progress=False)
    return str(model), str(data)


@pytest.fixture(autouse=True)
def even_length_reward(monkeypatch):
    monkeypatch.setattr(runner, "reward", lambda text, gold: float(len(text) % 2 == 0))


def smoke_config(smoke_dirs, results, **overrides):
    model, data = smoke_dirs
    return cfg.resolve("experiments/grpo.yaml", "smoke", model=model, data_dir=data,
                       results_dir=str(results), **overrides)


def installed(optimizer: str) -> bool:
    package = REGISTRY[optimizer].package
    return package is None or importlib.util.find_spec(package[0]) is not None


def assert_same_records(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=TIMING), b.drop(columns=TIMING),
                                  check_exact=False, rtol=0, atol=1e-6)


def interrupted_and_resumed(config: cfg.GRPOConfig, monkeypatch, crash_step: int) -> pd.DataFrame:
    """The records of `config` run as "<run_name>-interrupted", stopped in step `crash_step`
    (after the last checkpoint before it), then rerun to the end."""
    interrupted = config.replace(run_name=f"{config.run_name}-interrupted")
    step = runner.Trainer.step

    def crash(self, t):
        if t == crash_step:
            raise KeyboardInterrupt
        return step(self, t)

    monkeypatch.setattr(runner.Trainer, "step", crash)
    with pytest.raises(KeyboardInterrupt):
        runner.run_grpo(interrupted, progress=False)
    monkeypatch.setattr(runner.Trainer, "step", step)
    return runner.run_grpo(interrupted, progress=False)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_optimizer_completes_a_smoke_run_and_resumes_exactly(
    optimizer, smoke_dirs, tmp_path, monkeypatch
):
    if not installed(optimizer):
        pytest.skip(f"{REGISTRY[optimizer].package[1]} is not installed")
    config = smoke_config(smoke_dirs, tmp_path, optimizer=optimizer, run_name="full")
    records = runner.run_grpo(config, progress=False)

    assert list(records.columns) == list(runner.COLUMNS)
    assert records["step"].tolist() == [0, 1, 2, 3, 4]
    assert records["eval_accuracy"].notna().tolist() == [True, False, True, False, True]
    train = records.iloc[1:]
    assert train["kl"].iloc[0] == pytest.approx(0.0, abs=1e-7)  # π_θ = π_ref before step 1
    assert (train["kl"] >= -1e-7).all() and (train["step_kl"] >= -1e-7).all()
    assert (train["grad_norm"] > 0).any() and (train["state_bytes"] > 0).all()
    assert (train["tokens"] > 0).all() and (train["seconds"] > 0).all()
    if optimizer in ("logra", "adamw-kl"):  # the KL control's prediction and γ
        assert train["predicted_kl"].notna().all()
        assert ((train["gamma"] > 0) & (train["gamma"] <= 1)).all()
    else:
        assert train["predicted_kl"].isna().all()

    directory = cfg.run_dir(config)
    assert_same_records(pd.read_csv(directory / "records.csv"), records)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["config"] == config.to_dict() and manifest["seed"] == config.seed
    assert manifest["status"] == "finished" and manifest["completed_steps"] == 4
    assert {"torch", "transformers", "logra"} <= set(manifest["versions"])
    assert "commit" in manifest["git"]
    assert manifest["machine"]["cpu"] and manifest["machine"]["cpu_capability"]
    assert (directory / "checkpoint" / "state.pt").exists()

    # interrupted in step 3 (checkpoint at step 2), then rerun: the same records
    assert_same_records(interrupted_and_resumed(config, monkeypatch, crash_step=3), records)
    interrupted = config.replace(run_name=f"{config.run_name}-interrupted")
    manifest = json.loads((cfg.run_dir(interrupted) / "manifest.json").read_text())
    assert manifest["resumed_from"] == [0, 2]


def test_raising_steps_extends_a_finished_run(smoke_dirs, tmp_path) -> None:
    full = runner.run_grpo(smoke_config(smoke_dirs, tmp_path, run_name="full"), progress=False)
    short = smoke_config(smoke_dirs, tmp_path, run_name="extended", steps=2)
    assert len(runner.run_grpo(short, progress=False)) == 3
    extended = runner.run_grpo(short.replace(steps=4), progress=False)
    assert_same_records(extended, full)
    assert runner.evaluations(extended)["step"].tolist() == [0, 2, 4]


def test_a_run_directory_refuses_a_different_config(smoke_dirs, tmp_path, monkeypatch) -> None:
    config = smoke_config(smoke_dirs, tmp_path, run_name="taken", steps=1)
    runner.run_grpo(config, progress=False)
    with pytest.raises(ConfigError, match=r"different \['lr'\]"):
        runner.run_grpo(config.replace(lr=0.5), progress=False)
    # a named run resumed by other code (an automatic name would change with the code)
    monkeypatch.setattr(runner, "fingerprint", lambda: "0123456789abcdef")
    with pytest.raises(ConfigError, match=r"made by other code or on another floating-point "
                                          r"path .fingerprint [0-9a-f]{16}, now 0123456789abcdef"
                                          r".*the run was made on .+, ATen \w+, MKL_CBWR "
                                          r".*this process: aten="):
        runner.run_grpo(config.replace(steps=2), progress=False)


def test_eval_prompts_past_the_test_split(smoke_dirs, tmp_path, monkeypatch) -> None:
    """A generated task evaluates on any number of held-out problems, the first 500 being its
    test split; a fixed (hub) split that is too short is an error naming the key."""
    canonical = runner.Trainer(smoke_config(smoke_dirs, tmp_path, eval_prompts=500), False)
    longer = runner.Trainer(smoke_config(smoke_dirs, tmp_path, eval_prompts=520), False)
    assert len(longer.test_prompts) == 520
    assert longer.test_prompts[:500] == canonical.test_prompts[:]
    assert not set(longer.test_prompts["prompt"][500:]) & set(longer.train_prompts["prompt"])
    hub = datasets.Dataset.from_dict({"question": ["2+3?"] * 3, "answer": ["5\n#### 5"] * 3})
    monkeypatch.setattr(runner, "load_task", lambda *args, **kwargs: hub)
    with pytest.raises(ConfigError, match=r"eval_prompts=4 but the test split of gsm-synth "
                                          r"has 3 problems"):
        runner.Trainer(smoke_config(smoke_dirs, tmp_path, eval_prompts=4), False)


def test_command_line_run(smoke_dirs, tmp_path, capsys) -> None:
    model, data = smoke_dirs
    code = main(["run", "experiments/grpo.yaml", "--scale", "smoke", f"model={model}",
                 f"data_dir={data}", f"results_dir={tmp_path}", "steps=2", "run_name=cli",
                 "--quiet"])
    assert code == 0
    assert "2 steps; greedy accuracy" in capsys.readouterr().out
    assert len(pd.read_csv(tmp_path / "runs" / "cli" / "records.csv")) == 3
    assert main(["run", "experiments/grpo.yaml", "--scale", "smoke", "optimizer=sgd"]) == 2
    assert "valid" not in capsys.readouterr().out


def test_command_line_run_reports_on_rank_zero_only(monkeypatch, capsys) -> None:
    import torch.distributed as dist

    import logra.rl

    records = pd.DataFrame(dict(step=[0, 1], eval_accuracy=[0.25, 0.5]))
    monkeypatch.setattr(logra.rl, "run_grpo", lambda config, progress: records)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    for rank, reported in ((1, False), (0, True)):
        monkeypatch.setattr(dist, "get_rank", lambda rank=rank: rank)
        assert main(["run", "experiments/grpo.yaml", "--scale", "smoke", "--quiet"]) == 0
        assert ("1 steps; greedy accuracy 0.500" in capsys.readouterr().out) == reported


def test_several_updates_per_batch_engage_the_clip(smoke_dirs, tmp_path) -> None:
    config = smoke_config(smoke_dirs, tmp_path, updates_per_batch=3, lr=3e-2, steps=2)
    train = runner.run_grpo(config, progress=False).iloc[1:]
    assert (train["clip_fraction"] > 0).all()  # the 2nd and 3rd updates move the ratio off 1
    assert (train["step_kl"] > 0).all()


def test_update_hooks_see_every_optimizer_step_and_leave_the_run_alone(smoke_dirs,
                                                                       tmp_path) -> None:
    """A hook gets each optimizer step's rollout and the weights before it, after the update;
    the records are those of the same trainer without a hook."""
    config = smoke_config(smoke_dirs, tmp_path, optimizer="adamw", lr=1e-2, updates_per_batch=2)
    seen = []

    def hook(trainer, rollout, before):
        moved = max(float((trainer.trainable[n] - w).abs().max()) for n, w in before.items())
        seen.append((rollout.response_tokens.shape[0], moved))

    hooked = runner.Trainer(config, progress=False, update_hooks=[hook])
    plain = runner.Trainer(config, progress=False)
    with_hook = runner.frame([hooked.step(t) for t in (1, 2)])
    without = runner.frame([plain.step(t) for t in (1, 2)])
    assert len(seen) == 2 * 2  # two updates per batch, two steps
    assert all(rows == config.prompts_per_step * config.group_size and moved > 0
               for rows, moved in seen)
    assert_same_records(with_hook, without)


def test_runs_from_the_same_policy_share_the_evaluation_before_training(
    smoke_dirs, tmp_path, monkeypatch
) -> None:
    """The greedy evaluation at step 0 runs once per (weights, evaluation settings); a LoRA run
    and a different evaluation setting evaluate again."""
    calls = []
    evaluate = runner.Trainer.evaluate

    def counted(self):
        calls.append(self.config.optimizer)
        return evaluate(self)

    monkeypatch.setattr(runner.Trainer, "evaluate", counted)
    common = dict(steps=1, eval_every=1)
    first = runner.run_grpo(smoke_config(smoke_dirs, tmp_path, optimizer="adamw", **common),
                            progress=False)
    second = runner.run_grpo(smoke_config(smoke_dirs, tmp_path, optimizer="naive", **common),
                             progress=False)
    assert calls == ["adamw", "adamw", "naive"]  # step 0 once; step 1 for each run
    pd.testing.assert_series_equal(first.iloc[0], second.iloc[0], check_names=False)
    runner.run_grpo(smoke_config(smoke_dirs, tmp_path, optimizer="lora", **common),
                    progress=False)
    runner.run_grpo(smoke_config(smoke_dirs, tmp_path, optimizer="naive", eval_prompts=4,
                                 **common), progress=False)
    assert calls[3:] == ["lora", "lora", "naive", "naive"]
    assert len(list((tmp_path / runner.EVALUATIONS_DIR).glob("*.json"))) == 2


def test_drift_budget_and_adaptive_beta_steer_the_run_and_resume(
    smoke_dirs, tmp_path, monkeypatch
) -> None:
    """A drift budget caps every step's KL budget at (√B − √KL_ref)²; Ziegler's adaptive β
    moves β from step to step and is restored from the checkpoint."""
    budget = 1e-6
    config = smoke_config(smoke_dirs, tmp_path, optimizer="logra", kl_drift_budget=budget,
                          predicted_kl_threshold=None, beta=0.1, kl_target=1e-4, kl_horizon=10,
                          run_name="steered")
    records = runner.run_grpo(config, progress=False)
    train = records.iloc[1:]
    assert train["kl_probed"].all()  # a budget alone still gets the batch to predict on
    assert train["applied_kl"].notna().all()
    room = (math.sqrt(budget) - train["kl"].clip(upper=budget).pow(0.5)) ** 2
    assert (train["threshold"] <= room + 1e-15).all()
    assert (train["applied_kl"] <= train["threshold"] * (1 + 1e-6) + 1e-15).all()
    assert train["beta"].iloc[0] == 0.1 and train["beta"].nunique() == len(train)

    assert_same_records(interrupted_and_resumed(config, monkeypatch, crash_step=3), records)
    with pytest.raises(ConfigError, match="kl_drift_budget"):
        smoke_config(smoke_dirs, tmp_path, optimizer="adamw", kl_drift_budget=0.1)
    with pytest.raises(ConfigError, match="kl_target"):
        smoke_config(smoke_dirs, tmp_path, kl_target=0.1)


def test_the_drift_probe_measures_without_changing_the_run(smoke_dirs, tmp_path) -> None:
    """The probe records KL(π_θ ‖ π_ref) every `drift_probe_every` steps, is 0 before training,
    and leaves the training records (and the run directory's hash when off) as they were."""
    plain = smoke_config(smoke_dirs, tmp_path, optimizer="adamw", lr=1e-2)
    probed = plain.replace(drift_probe_every=2, drift_probe_prompts=3)
    assert cfg.run_dir(plain) != cfg.run_dir(probed)
    assert cfg.config_hash(plain.replace(drift_probe_prompts=5)) == cfg.config_hash(plain)
    without = runner.run_grpo(plain, progress=False)
    records = runner.run_grpo(probed, progress=False)
    assert_same_records(records.drop(columns="drift_kl"), without.drop(columns="drift_kl"))
    assert without["drift_kl"].isna().all()
    assert records["drift_kl"].notna().tolist() == [s > 0 and s % 2 == 0 for s in records["step"]]
    assert (records["drift_kl"].dropna() > 0).all()  # lr 1e-2 moves the policy

    trainer = runner.Trainer(probed, progress=False)
    assert trainer.probe_drift()["drift_kl"] == pytest.approx(0.0, abs=1e-7)  # π_θ = π_ref
    with pytest.raises(ConfigError, match="drift_probe_prompts"):
        smoke_config(smoke_dirs, tmp_path, drift_probe_every=1, drift_probe_prompts=9)
    with pytest.raises(ConfigError, match="drift_probe_every"):
        smoke_config(smoke_dirs, tmp_path, drift_probe_every=0)


def test_a_probe_fed_drift_budget_steers_on_the_probe_plus_the_applied_steps(
    smoke_dirs, tmp_path, monkeypatch
) -> None:
    """kl_drift_source: probe feeds the budget K̂ = the last probe + the KL each step since
    applied (0 before the first probe): every step's budget is (√B − √K̂)², and a resumed run
    rebuilds K̂ from its records."""
    budget = 5e-3  # several of the smoke policy's steps at lr 1e-4 (KL̂ about 1e-3 each)
    config = smoke_config(smoke_dirs, tmp_path, optimizer="logra", lr=1e-4, steps=6,
                          predicted_kl_threshold=None, kl_drift_budget=budget,
                          kl_drift_window=1, kl_drift_source="probe", drift_probe_every=2,
                          drift_probe_prompts=2, run_name="probe-fed")
    records = runner.run_grpo(config, progress=False)
    bound, expected = 0.0, []
    for _, r in records.iloc[1:].iterrows():
        expected.append((math.sqrt(budget) - math.sqrt(min(bound, budget))) ** 2)
        bound = r["drift_kl"] if math.isfinite(r["drift_kl"]) else bound + r["applied_kl"]
    assert records["threshold"].iloc[1:].tolist() == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert (records["applied_kl"].iloc[1:] > 0).sum() >= 3  # it moved, within the budget
    assert (records["threshold"].iloc[2:] < budget).all()

    assert_same_records(interrupted_and_resumed(config, monkeypatch, crash_step=4), records)
    with pytest.raises(ConfigError, match="kl_drift_source"):
        smoke_config(smoke_dirs, tmp_path, optimizer="logra", kl_drift_budget=0.1,
                     kl_drift_source="probe")  # no probe
    with pytest.raises(ConfigError, match="kl_drift_source"):
        smoke_config(smoke_dirs, tmp_path, kl_drift_source="batch")


def test_sampled_pass_at_1_is_kept_problem_by_problem_and_resumes(
    smoke_dirs, tmp_path, monkeypatch
) -> None:
    """eval_samples=3 on the first 4 of 8 held-out problems: problems.csv holds each evaluation's
    greedy and sampled outcome per problem, the records their means, and a resumed run the same
    rows; the sampled draws are the same at every evaluation of the same weights."""
    from logra.rl import evaluation

    monkeypatch.setattr(evaluation, "reward", lambda text, gold: float(len(text) % 2 == 0))
    config = smoke_config(smoke_dirs, tmp_path, run_name="sampled", eval_samples=3,
                          eval_sampled_prompts=4)
    records = runner.run_grpo(config, progress=False)
    problems = pd.read_csv(cfg.run_dir(config) / runner.PROBLEMS_FILE)
    assert problems["step"].tolist() == [s for s in (0, 2, 4) for _ in range(8)]
    assert problems["problem"].tolist() == list(range(8)) * 3
    assert problems["sampled"].notna().tolist() == ([True] * 4 + [False] * 4) * 3
    assert set(problems["sampled"].dropna()) <= {0.0, 1 / 3, 2 / 3, 1.0}
    assert problems["sampled"].dropna().nunique() > 1  # the stand-in reward varies
    means = problems.groupby("step")[["greedy", "sampled"]].mean()
    evaluated = records.dropna(subset=["eval_accuracy"]).set_index("step")
    assert evaluated["eval_accuracy"].tolist() == pytest.approx(means["greedy"].tolist())
    assert evaluated["eval_sampled"].tolist() == pytest.approx(means["sampled"].tolist())
    assert records["solved_groups"].iloc[1:].between(0, 1).all()

    trainer = runner.Trainer(config, progress=False)  # the same weights, evaluated again
    _, again = trainer.evaluate()
    pd.testing.assert_frame_equal(again, problems[problems["step"] == 0].drop(columns="step")
                                  .reset_index(drop=True), check_dtype=False)

    interrupted_and_resumed(config, monkeypatch, crash_step=3)
    resumed = pd.read_csv(cfg.run_dir(config.replace(run_name="sampled-interrupted"))
                          / runner.PROBLEMS_FILE)
    pd.testing.assert_frame_equal(resumed, problems)


def test_sampled_evaluation_settings_are_checked(smoke_dirs, tmp_path) -> None:
    with pytest.raises(ConfigError, match="eval_samples"):
        smoke_config(smoke_dirs, tmp_path, eval_samples=0)
    with pytest.raises(ConfigError, match="eval_sampled_prompts=9 exceeds"):
        smoke_config(smoke_dirs, tmp_path, eval_samples=2, eval_sampled_prompts=9)
