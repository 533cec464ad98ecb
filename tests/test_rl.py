"""GRPO's pieces (advantages, clipped loss, k3, exact KL), rollouts, the optimizer registry, and
config resolution and errors. The runs themselves are in test_rl_runs.py."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import yaml
from torch.distributions import Categorical, kl_divergence
from transformers import Qwen2ForCausalLM

from logra.config import EXPERIMENTS_DIR, ConfigError, read_spec
from logra.models.tokenizer import char_tokenizer
from logra.optim.kl import categorical_kl
from logra.optimizers import (
    OPTIMIZERS,
    build_optimizer,
    check_optimizer,
    measured_state_bytes,
    wrap_model,
)
from logra.rl import config as cfg
from logra.rl import runner
from logra.rl.grpo import ADVANTAGE_EPS, group_advantages, grpo_loss, k3
from logra.rl.rollout import completion_logits, response_mask, sample, token_logprobs

# ---------------------------------------------------------------------------- advantages


def test_group_advantages_by_hand() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    advantages = group_advantages(rewards, group_size=4)
    std = math.sqrt(4 * 0.25 / 3)  # group 1: mean 0.5, Bessel-corrected std
    a = 0.5 / (std + ADVANTAGE_EPS)
    std3 = math.sqrt((3 * 0.25**2 + 0.75**2) / 3)  # group 3: mean 0.25
    expected = [a, -a, -a, a, 0, 0, 0, 0, *(x / (std3 + ADVANTAGE_EPS)
                                            for x in (-0.25, -0.25, -0.25, 0.75))]
    torch.testing.assert_close(advantages, torch.tensor(expected), rtol=0, atol=1e-6)


def test_group_advantages_are_normalized_within_each_group() -> None:
    rewards = torch.rand(6 * 8, generator=torch.Generator().manual_seed(0))
    grouped = group_advantages(rewards, group_size=8).view(6, 8)
    torch.testing.assert_close(grouped.mean(dim=1), torch.zeros(6), rtol=0, atol=1e-6)
    torch.testing.assert_close(grouped.std(dim=1), torch.ones(6), rtol=0, atol=1e-3)


@pytest.mark.parametrize(("size", "group", "match"), [(8, 1, "group_size must be >= 2"),
                                                      (10, 4, "multiple of group_size=4")])
def test_group_advantages_reject_bad_groups(size, group, match) -> None:
    with pytest.raises(ValueError, match=match):
        group_advantages(torch.zeros(size), group_size=group)


# ---------------------------------------------------------------------------- clipped loss


def test_clipped_surrogate_against_a_hand_computed_case() -> None:
    # ratios 1.5 and 0.5 for an advantage of +1 (row 0) and −1 (row 1); ε = 0.2:
    #   A=+1: min(1.5, 1.2) = 1.2,   min(0.5, 0.8) = 0.5
    #   A=−1: min(−1.5, −1.2) = −1.5, min(−0.5, −0.8) = −0.8
    old = torch.zeros(2, 3)
    logprobs = torch.log(torch.tensor([[1.5, 0.5, 9.0], [1.5, 0.5, 9.0]])).requires_grad_()
    mask = torch.tensor([[True, True, False], [True, True, False]])  # third token: padding
    advantages = torch.tensor([1.0, -1.0])
    ref = logprobs.detach().clone()
    ref[0, 0] += math.log(2.0)  # k3 = 2 − log 2 − 1 on that token, 0 elsewhere
    terms = grpo_loss(logprobs, old, ref, advantages, mask, clip_eps=0.2, beta=0.0)
    objective = (1.2 + 0.5 - 1.5 - 0.8) / 4
    assert float(terms.loss.detach()) == pytest.approx(-objective, abs=1e-6)
    assert terms.surrogate == pytest.approx(objective, abs=1e-6)
    assert terms.clip_fraction == 1.0
    k3_token = 2 - math.log(2) - 1
    assert terms.kl_k3 == pytest.approx(k3_token / 4, abs=1e-6)

    with_penalty = grpo_loss(logprobs, old, ref, advantages, mask, clip_eps=0.2, beta=0.1)
    penalized = -objective + 0.1 * k3_token / 4
    assert float(with_penalty.loss.detach()) == pytest.approx(penalized, abs=1e-6)
    # gradient: only unclipped terms carry one (A=+1 at ratio 0.5, A=−1 at ratio 1.5), d ρ/dℓ = ρ
    terms.loss.backward()
    expected = torch.tensor([[0.0, -0.5, 0.0], [1.5, 0.0, 0.0]]) / 4
    torch.testing.assert_close(logprobs.grad, expected, rtol=0, atol=1e-6)


def test_on_policy_loss_is_the_policy_gradient() -> None:
    """One update per batch: ρ = 1, no clipping, ∇loss = −A·m/Σm."""
    logprobs = torch.randn(4, 5, generator=torch.Generator().manual_seed(1)).requires_grad_()
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2, 3:] = False
    advantages = torch.tensor([1.0, -0.5, 2.0, 0.0])
    terms = grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), advantages, mask, 0.2, 0.0)
    terms.loss.backward()
    expected = -advantages.unsqueeze(1) * mask / mask.sum()
    torch.testing.assert_close(logprobs.grad, expected, rtol=0, atol=1e-7)
    assert terms.clip_fraction == 0.0
    assert terms.kl_k3 == 0.0


def test_k3_is_nonnegative_and_unbiased_for_the_kl() -> None:
    gen = torch.Generator().manual_seed(2)
    logits_p, logits_q = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
    p, q = Categorical(logits=logits_p), Categorical(logits=logits_q)
    tokens = torch.multinomial(p.probs, 200_000, replacement=True, generator=gen)
    values = k3(p.logits[tokens], q.logits[tokens])
    assert float(values.min()) >= 0
    assert float(values.mean()) == pytest.approx(float(kl_divergence(p, q)), rel=0.03)


# ---------------------------------------------------------------------------- exact KL


def test_exact_kl_matches_torch_distributions_on_random_logits() -> None:
    gen = torch.Generator().manual_seed(3)
    policy, reference = torch.randn(3, 7, 11, generator=gen), torch.randn(3, 7, 11, generator=gen)
    mask = torch.rand(3, 7, generator=gen) > 0.3
    per_token = kl_divergence(Categorical(logits=policy), Categorical(logits=reference))
    expected = per_token[mask].mean()
    torch.testing.assert_close(categorical_kl(policy, reference, mask), expected,
                               rtol=1e-5, atol=1e-7)
    assert float(categorical_kl(policy, policy, mask)) == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------------------- rollouts


def test_response_mask_keeps_tokens_through_the_first_end_token() -> None:
    ids = torch.tensor([[5, 6, 2, 0, 0], [5, 2, 7, 2, 0], [5, 6, 7, 8, 9]])
    mask = response_mask(ids, end_ids=[2])
    assert mask.tolist() == [[True, True, True, False, False], [True, True, False, False, False],
                             [True] * 5]


@pytest.fixture(scope="module")
def char_policy(tiny_qwen2):
    """A random Qwen2 over the proxies' character tokenizer (no warm-up needed)."""
    tokenizer = char_tokenizer()
    model = tiny_qwen2(vocab_size=len(tokenizer), num_attention_heads=2,
                       max_position_embeddings=32768, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    return model.eval(), tokenizer


def test_left_padded_scoring_matches_each_sequence_alone(char_policy) -> None:
    """Positions and masks of the batched, left-padded scoring pass are those of each row."""
    model, tokenizer = char_policy
    torch.manual_seed(0)
    prompts = ["Q: 1+1?\nA: ", "Q: a longer question here?\nA: "]
    rollout = sample(model, tokenizer, prompts, group_size=3, max_new_tokens=12)
    assert rollout.input_ids.shape[0] == 6 and len(rollout.completions) == 6
    with torch.no_grad():
        batched = token_logprobs(completion_logits(model, rollout), rollout.response_tokens)
        for row in range(6):
            keep = rollout.attention_mask[row].bool()
            ids = rollout.input_ids[row, keep].unsqueeze(0)
            n = int(rollout.response_mask[row].sum())
            alone = torch.log_softmax(model(input_ids=ids).logits[0, -n - 1:-1], dim=-1)
            expected = alone.gather(-1, ids[0, -n:].unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(batched[row, :n], expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- registry


FACTORY_CONFIG = dict(lr=1e-3, weight_decay=0.0, seed=0, rank=4, reconstruction="gain",
                      kl_estimator="diag", predicted_kl_threshold=None, lora_rank=2,
                      lora_alpha=4, lora_targets=["q_proj", "v_proj"])


def test_unknown_optimizer_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown optimizer 'sgd'.*'adamw'.*'adafactor'.*'logra'"):
        check_optimizer("sgd")


def test_adamw_state_bytes_are_two_moments_and_lora_trains_only_adapters(char_policy) -> None:
    model, _ = char_policy
    dense = build_optimizer("adamw", model, FACTORY_CONFIG)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    dense.step()
    numel = sum(p.numel() for p in params)
    # fp32 moments + step scalars
    assert measured_state_bytes(dense) == 2 * 4 * numel + 4 * len(params)
    for p in params:
        p.grad = None

    lora_model = wrap_model("lora", Qwen2ForCausalLM(model.config), FACTORY_CONFIG)
    trainable = [n for n, p in lora_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert all(("q_proj" in n) or ("v_proj" in n) for n in trainable)
    optimizer = build_optimizer("lora", lora_model, FACTORY_CONFIG)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(trainable)


# ---------------------------------------------------------------------------- configs


def test_smoke_and_default_configs_resolve() -> None:
    for scale in ("smoke", "default"):
        config = cfg.resolve("experiments/grpo.yaml", scale)
        assert config.optimizer in OPTIMIZERS and config.steps >= 1
    assert cfg.resolve("grpo", "smoke").model == "smoke"


def test_overrides_are_parsed_as_yaml() -> None:
    config = cfg.resolve("grpo", "smoke", ["lr=1e-4", "predicted_kl_threshold=null",
                                           "lora_targets=[q_proj, v_proj]", "optimizer=logra"])
    assert config.lr == 1e-4 and isinstance(config.lr, float)
    assert config.predicted_kl_threshold is None
    assert config.lora_targets == ("q_proj", "v_proj")  # a frozen config holds no list
    assert config.to_dict()["lora_targets"] == ["q_proj", "v_proj"]  # the YAML's, the JSON's


def test_real_scale_is_one_override_away_and_goes_through_load_policy(tmp_path, monkeypatch):
    """model=Qwen/Qwen2.5-1.5B-Instruct task=gsm8k resolves, and the run hands the hub id to
    `load_policy` (stopped there: nothing is downloaded)."""
    config = cfg.resolve("experiments/grpo.yaml", "default",
                         ["model=Qwen/Qwen2.5-1.5B-Instruct", "task=gsm8k",
                          f"results_dir={tmp_path}"])
    default = cfg.resolve("experiments/grpo.yaml", "default")
    differ = {k for k, v in config.to_dict().items() if v != default.to_dict()[k]}
    assert differ == {"model", "task", "results_dir"}
    gpu = cfg.resolve("experiments/grpo.yaml", "1.5b")
    assert (gpu.model, gpu.task, gpu.dtype) == ("Qwen/Qwen2.5-1.5B-Instruct", "gsm8k",
                                                         "bfloat16")

    class Stop(Exception):
        pass

    def load_policy(source, dtype):
        raise Stop(source)

    monkeypatch.setattr(runner, "load_policy", load_policy)
    with pytest.raises(Stop, match=r"Qwen/Qwen2\.5-1\.5B-Instruct"):
        runner.run_grpo(config, progress=False)


@pytest.mark.parametrize(("overrides", "scale", "match"), [
    (["learning_rate=1e-3"], "smoke", r"unknown key 'learning_rate'.*valid keys: \[.*'lr'"),
    (["optimizer=sgd"], "smoke", r"optimizer: input should be 'adamw', 'adamw8bit', 'adafactor'"),
    ([], "huge", r"unknown scale 'huge'.*\['1.5b', 'default', 'smoke'\]"),
    (["steps=-5"], "smoke", r"steps: input should be greater than or equal to 1, got -5"),
    (["model=proxy-2m"], "smoke", r"model 'proxy-2m' is not a scale \(\['smoke', 'proxy-1m'"),
    (["task=gsm9k"], "smoke", r"task: input should be 'gsm-synth', 'math-synth', 'gsm8k'"),
    (["kl_estimator=exact"], "smoke",
     r"kl_estimator: input should be 'calibrated', 'diag' or 'jvp'"),
    (["group_size=1"], "smoke", r"group_size: input should be greater than or equal to 2"),
    (["predicted_kl_threshold=-1"], "smoke",
     r"predicted_kl_threshold: input should be greater than 0"),
    (["lr=fast"], "smoke", r"lr must be float"),
    (["lr"], "smoke", r"'lr' is not of the form key=value"),
])
def test_bad_configs_fail_naming_the_key(overrides, scale, match) -> None:
    with pytest.raises(ConfigError, match=match):
        cfg.resolve("experiments/grpo.yaml", scale, overrides)


def test_a_bad_config_fails_before_any_compute(monkeypatch) -> None:
    def no_compute(*args, **kwargs):
        raise AssertionError("compute started")

    monkeypatch.setattr(runner, "Trainer", no_compute)
    config = cfg.resolve("grpo", "smoke")
    for key, value in (("optimizer", "sgd"), ("steps", -1), ("device", "tpu")):
        with pytest.raises(ConfigError, match=key):
            runner.run_grpo({**config.to_dict(), key: value}, progress=False)


def test_a_config_is_typed_frozen_and_validated_once(monkeypatch, tmp_path) -> None:
    """The class lists every key of grpo.yaml and nothing else; a value is checked strictly
    (no bool for an integer, no string for a number); a config cannot change in place, and
    `replace` checks its copy; `run_grpo` validates a mapping, and a config not again."""
    config = cfg.resolve("grpo", "smoke", results_dir=str(tmp_path))
    defaults, _ = read_spec("grpo")
    assert set(cfg.KEYS) == {*defaults, "scale"}
    values = config.to_dict()
    for key, bad in (("steps", True), ("lr", "1e-4"), ("eval_samples", 2.0),
                     ("lora_targets", "q_proj"), ("task", None)):
        with pytest.raises(ConfigError, match=f"^{key}: "):
            cfg.GRPOConfig.from_mapping({**values, key: bad})
    with pytest.raises(ConfigError, match=r"^missing key 'lr'"):
        cfg.GRPOConfig.from_mapping({k: v for k, v in values.items() if k != "lr"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lr = 0.5
    with pytest.raises(ConfigError, match=r"kl_target .* needs a starting beta > 0"):
        config.replace(kl_target=0.1, beta=0.0)
    assert config.replace(lr=3e-4).lr == 3e-4 and config.lr == 1e-4
    assert hash(config) == hash(cfg.resolve("grpo", "smoke", results_dir=str(tmp_path)))
    # an int for a float key becomes a float, as `resolve` makes it: one run, one directory
    assert cfg.run_dir(config.replace(lr=1)) == cfg.run_dir(
        cfg.resolve("grpo", "smoke", results_dir=str(tmp_path), lr=1))
    # ... read against the packaged default, not the value it replaces: a key whose default
    # is null keeps an int in both, whatever the copy held before
    budgeted = config.replace(optimizer="logra", kl_drift_budget=0.5)
    assert cfg.run_dir(budgeted.replace(kl_drift_budget=1)) == cfg.run_dir(cfg.resolve(
        "grpo", "smoke", results_dir=str(tmp_path), optimizer="logra", kl_drift_budget=1))

    built = []
    from_mapping = cfg.GRPOConfig.from_mapping
    monkeypatch.setattr(cfg.GRPOConfig, "from_mapping",
                        classmethod(lambda klass, v: built.append(1) or from_mapping(v)))

    class Stop(Exception):
        pass

    def trainer(config, progress):
        raise Stop(type(config).__name__)

    monkeypatch.setattr(runner, "Trainer", trainer)
    for given, validations in ((config, 0), (values, 1)):
        with pytest.raises(Stop, match="GRPOConfig"):
            runner.run_grpo(given, progress=False)
        assert len(built) == validations
        built.clear()


def test_any_grpo_config_file_is_accepted_and_other_files_are_refused(tmp_path) -> None:
    copy = tmp_path / "my_grpo.yaml"
    copy.write_text((EXPERIMENTS_DIR / "grpo.yaml").read_text().replace(
        "lr: 1.0e-4 ", "lr: 3.0e-4 "))
    assert cfg.resolve(copy, "smoke") == cfg.resolve("grpo", "smoke").replace(lr=3e-4)
    with pytest.raises(ConfigError, match="unknown experiment"):
        cfg.resolve(tmp_path / "absent.yaml", "smoke")
    with pytest.raises(ConfigError, match="not a GRPO config"):
        cfg.resolve("sketch_error", "smoke")


def test_a_config_file_in_yaml_1_1_numbers_means_what_it_says(tmp_path) -> None:
    """`lr: 1e-4` (PyYAML reads an exponent without a dot as a string) is the number 1e-4; a
    value that is no number is a ConfigError naming the key, not a TypeError."""
    text = (EXPERIMENTS_DIR / "grpo.yaml").read_text()
    copy = tmp_path / "yaml11.yaml"
    copy.write_text(text.replace("lr: 1.0e-4 ", "lr: 1e-4 ")
                    .replace("clip_eps: 0.2", "clip_eps: 2e-1"))
    assert cfg.resolve(copy, "smoke") == cfg.resolve("grpo", "smoke")
    copy.write_text(text.replace("lr: 1.0e-4 ", "lr: fast "))
    with pytest.raises(ConfigError, match=r"lr must be .*, got 'fast'"):
        cfg.resolve(copy, "smoke")


def test_run_directory_ignores_steps_but_not_results() -> None:
    config = cfg.resolve("grpo", "smoke")
    assert cfg.run_dir(config) == cfg.run_dir(config.replace(steps=99, checkpoint_every=7))
    assert cfg.run_dir(config) != cfg.run_dir(config.replace(lr=0.5))
    assert cfg.run_dir(config.replace(run_name="mine")).name == "mine"


def test_adaptive_kl_controller_follows_ziegler_et_al() -> None:
    from logra.rl.grpo import AdaptiveKLController

    controller = AdaptiveKLController(beta=0.1, target=0.01, horizon=1000)
    # KL twice the target: the error is clipped at +0.2; β ← β·(1 + 0.2·64/1000)
    assert controller.update(0.02, 64) == pytest.approx(0.1 * (1 + 0.2 * 0.064))
    beta = controller.beta
    # KL at 95 % of the target: error −0.05
    assert controller.update(0.0095, 100) == pytest.approx(beta * (1 - 0.05 * 0.1))


def test_the_drift_window_changes_only_runs_with_a_drift_budget() -> None:
    """A key that does nothing without a budget keeps the runs made before it existed valid."""
    plain = cfg.resolve("experiments/grpo.yaml", "smoke")
    older = {k: v for k, v in plain.to_dict().items() if k != "kl_drift_window"}  # an old run's
    assert cfg.config_hash(plain) == cfg.config_hash(plain.replace(kl_drift_window=1))
    assert cfg.result_keys_differ(older, plain) == []
    budget = cfg.resolve("experiments/grpo.yaml", "smoke", optimizer="logra",
                         kl_drift_budget=0.01)
    assert cfg.config_hash(budget) != cfg.config_hash(budget.replace(kl_drift_window=1))
    assert cfg.result_keys_differ({**budget.to_dict(), "kl_drift_window": 1}, budget) == [
        "kl_drift_window"]


def test_a_config_file_may_hold_only_the_keys_it_changes(tmp_path) -> None:
    """A user's file lies on top of the packaged grpo.yaml: its defaults, then its scale, over
    the packaged scale; a key grpo.yaml lacks is refused, naming the key and the file."""
    partial = tmp_path / "mine.yaml"
    partial.write_text("defaults:\n  lr: 3e-4\n  optimizer: adamw\nscales:\n  smoke:\n"
                       "    steps: 3\n")
    smoke = cfg.resolve("grpo", "smoke")
    assert cfg.resolve(partial, "smoke") == smoke.replace(lr=3e-4, optimizer="adamw", steps=3)
    assert cfg.resolve(partial, "default") == cfg.resolve("grpo").replace(lr=3e-4,
                                                                         optimizer="adamw")
    assert cfg.resolve(partial, "smoke", ["lr=1e-3"]).lr == 1e-3  # overrides on top
    with pytest.raises(ConfigError, match=r"unknown scale 'huge' for .*mine\.yaml"):
        cfg.resolve(partial, "huge")
    with pytest.raises(ConfigError, match="unknown key 'base' in the overrides"):
        cfg.resolve(partial, "smoke", ["base=1"])
    partial.write_text("defaults:\n  lr: 3e-4\n")  # no scales: every scale of grpo.yaml
    assert cfg.resolve(partial, "1.5b") == cfg.resolve("grpo", "1.5b").replace(lr=3e-4)
    copy = tmp_path / "copy.yaml"  # a copy without the 1.5b scale does not run it
    spec = yaml.safe_load((EXPERIMENTS_DIR / "grpo.yaml").read_text())
    del spec["scales"]["1.5b"]
    copy.write_text(yaml.safe_dump(spec))
    assert cfg.resolve(copy, "smoke") == cfg.resolve("grpo", "smoke")
    with pytest.raises(ConfigError, match=r"unknown scale '1\.5b'"):
        cfg.resolve(copy, "1.5b")
    partial.write_text("defaults:\n  lr: 3e-4\n  learning_rate: 1e-3\n")
    with pytest.raises(ConfigError, match=r"mine.yaml is not a GRPO config.*\['learning_rate'\]"):
        cfg.resolve(partial, "smoke")
    partial.write_text("defaults:\n  lr: 3e-4\nscales:\n  smoke:\n    learning_rate: 1.0\n")
    with pytest.raises(ConfigError,
                       match=r"unknown key 'learning_rate' in scale smoke of .*mine\.yaml"):
        cfg.resolve(partial, "smoke")
