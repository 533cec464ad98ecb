"""The scale ladder, the smoke proxy built and loaded through from_pretrained, the build cache."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import datasets
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Qwen2ForCausalLM,
    get_cosine_with_min_lr_schedule_with_warmup,
)

from logra.cli import main
from logra.data import load_task, to_prompts, to_sft
from logra.models import (
    SCALES,
    build,
    evaluate_greedy,
    greedy_completions,
    load_policy,
    prepare,
    warmup,
)
from logra.models.ladder import ProxyArchitecture, ScaleSpec, Warmup
from logra.models.tokenizer import char_tokenizer
from logra.models.warmup import warm_up, warmup_cosine


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("models")
    return prepare("smoke", root=root, data_dir=data_dir, progress=False)


def test_ladder_names_and_hub_ids() -> None:
    assert {"smoke", "proxy-1m", "proxy-4m", "1.5b", "7b", "27b"} <= set(SCALES)
    assert SCALES["1.5b"].hub_id == "Qwen/Qwen2.5-1.5B-Instruct"
    assert SCALES["7b"].hub_id == "Qwen/Qwen2.5-7B-Instruct"
    assert SCALES["27b"].hub_id == "google/gemma-3-27b-it"
    for name, spec in SCALES.items():
        assert spec.is_proxy == (spec.arch is not None and spec.warmup is not None), name


def test_prepare_for_hub_scales_only_validates(tmp_path) -> None:
    assert prepare("7b", root=tmp_path) == "Qwen/Qwen2.5-7B-Instruct"
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"unknown scale 'proxy-2m'.*proxy-1m"):
        prepare("proxy-2m", root=tmp_path)


def test_prepare_threads_set_the_warm_up_not_the_build(tmp_path, data_dir, smoke) -> None:
    before = torch.get_num_threads()
    built = prepare("smoke", root=tmp_path, data_dir=data_dir, progress=False, threads=2)
    assert torch.get_num_threads() == before
    assert json.loads((built / "warmup.json").read_text())["threads"] == 2
    assert (built / "build_config.json").read_text() == (smoke / "build_config.json").read_text()
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    prepare("smoke", root=tmp_path, data_dir=data_dir, progress=False)  # current: no rebuild
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        prepare("smoke", root=tmp_path / "new", force=True, threads=0)
    assert not (tmp_path / "new").exists()
    assert main(["prepare", "--scale", "smoke", "--threads", "0"]) == 2


def test_smoke_proxy_is_a_hugging_face_directory(smoke) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "build_config.json",
                 "warmup.json"):
        assert (smoke / name).exists(), name
    assert not list(smoke.parent.glob(".*"))  # no temporary or checkpoint directories left
    report = json.loads((smoke / "warmup.json").read_text())
    assert report["warmup_steps"] == SCALES["smoke"].warmup.max_steps
    assert set(report["test_accuracy"]) == {"gsm-synth", "math-synth"}


def test_smoke_proxy_loads_through_from_pretrained(smoke, data_dir) -> None:
    model = AutoModelForCausalLM.from_pretrained(smoke)
    tokenizer = AutoTokenizer.from_pretrained(smoke)
    assert isinstance(model, Qwen2ForCausalLM)
    assert model.config.tie_word_embeddings
    assert tokenizer.padding_side == "left"
    text = "Q: Solve -3x+4=-11 for x.\nA: -3x=-15. \\boxed{\\frac{5}{6}}  #### 1,000"
    ids = tokenizer(text)["input_ids"]
    assert ids == char_tokenizer()(text)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tokenizer.decode(ids) == text
    policy, policy_tokenizer = load_policy(str(smoke))
    assert sum(p.numel() for p in policy.parameters()) == sum(
        p.numel() for p in model.parameters()
    )
    prompts = to_prompts(load_task("math-synth", "test", data_dir).select(range(6)), "math-synth")
    accuracy = evaluate_greedy(policy, policy_tokenizer, prompts, max_new_tokens=8, batch_size=4)
    assert 0.0 <= accuracy <= 1.0


def test_cache_is_reused_when_the_config_is_unchanged(smoke, data_dir, monkeypatch) -> None:
    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt although the config did not change")

    monkeypatch.setattr(build, "_build", no_build)
    assert prepare("smoke", root=smoke.parent, data_dir=data_dir) == smoke


def test_builds_are_deterministic_and_rebuilt_when_the_config_changes(
    smoke, tmp_path, data_dir, monkeypatch
) -> None:
    built = prepare("smoke", root=tmp_path, data_dir=data_dir, progress=False)
    weights = (built / "model.safetensors").read_bytes()
    assert weights == (smoke / "model.safetensors").read_bytes()
    before = json.loads((built / "build_config.json").read_text())
    spec = SCALES["smoke"]
    changed = dataclasses.replace(spec, warmup=dataclasses.replace(spec.warmup, max_steps=4))
    monkeypatch.setitem(SCALES, "smoke", changed)
    assert prepare("smoke", root=tmp_path, data_dir=data_dir, progress=False) == built
    after = json.loads((built / "build_config.json").read_text())
    assert after["warmup"]["max_steps"] == 4 != before["warmup"]["max_steps"]
    assert json.loads((built / "warmup.json").read_text())["warmup_steps"] == 4
    assert (built / "model.safetensors").read_bytes() != weights
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke"]


def test_threads_do_not_change_the_build_hash() -> None:
    spec = SCALES["proxy-1m"]
    more = dataclasses.replace(spec, warmup=dataclasses.replace(spec.warmup, threads=8))
    assert build.build_config(spec) == build.build_config(more)


def test_load_policy_names_the_missing_prepare_step(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="logra-repro prepare --scale proxy-1m"):
        load_policy("proxy-1m", root=tmp_path)
    with pytest.raises(ValueError, match="not a scale"):
        load_policy("no-such-thing")


def test_cli_prepare_for_a_hub_scale(capsys) -> None:
    assert main(["prepare", "--scale", "1.5b"]) == 0
    assert "Qwen/Qwen2.5-1.5B-Instruct" in capsys.readouterr().out
    assert main(["prepare", "--scale", "bogus"]) == 2
    assert "valid" in capsys.readouterr().err


def _tiny_model() -> tuple[Qwen2ForCausalLM, object]:
    tokenizer = char_tokenizer()
    spec = ScaleSpec("tiny", "test", arch=ProxyArchitecture(32, 2, 2, 64),
                     warmup=Warmup(max_steps=1))
    torch.manual_seed(0)
    return Qwen2ForCausalLM(build.qwen2_config(spec, tokenizer)), tokenizer


def test_batched_left_padded_generation_matches_one_by_one() -> None:
    model, tokenizer = _tiny_model()
    prompts = ["Q: 1+1?\nA: ", "Q: Ann has 12 pens. She loses 3.\nA: ", "Q: x\nA: "]
    batched = greedy_completions(model, tokenizer, prompts, max_new_tokens=10, batch_size=3)
    single = [greedy_completions(model, tokenizer, [p], 10, 1)[0] for p in prompts]
    assert batched == single


def test_evaluate_greedy_rejects_bad_input() -> None:
    model, tokenizer = _tiny_model()
    with pytest.raises(ValueError, match="to_prompts"):
        evaluate_greedy(model, tokenizer, datasets.Dataset.from_dict({"text": ["a"]}), 4, 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_completions(model, tokenizer, ["a"], 0, 2)


def test_warm_up_resumes_from_its_checkpoint(tmp_path, data_dir, monkeypatch) -> None:
    train = {t: to_sft(load_task(t, "train", data_dir).select(range(64)), t)
             for t in ("gsm-synth", "math-synth")}
    valid = to_prompts(load_task("gsm-synth", "test", data_dir).select(range(4)), "gsm-synth")
    config = Warmup(max_steps=6, batch_size=4, lr_warmup_steps=2, eval_every=3, eval_examples=4,
                    stop_accuracy=None, band=None, max_new_tokens=4, checkpoint_every=3)
    straight, tokenizer = _tiny_model()
    warm_up(straight, tokenizer, config, train, valid, tmp_path / "a.pt", "k", progress=False)

    save = warmup._save_checkpoint

    def crash_after_saving(*args):
        save(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(warmup, "_save_checkpoint", crash_after_saving)
    interrupted, _ = _tiny_model()
    with pytest.raises(KeyboardInterrupt):
        warm_up(interrupted, tokenizer, config, train, valid, tmp_path / "b.pt", "k",
                progress=False)
    monkeypatch.setattr(warmup, "_save_checkpoint", save)
    shutil.copy(tmp_path / "b.pt", tmp_path / "c.pt")
    for key, checkpoint, resumes in (("k", "b.pt", True), ("another build", "c.pt", False)):
        torch.manual_seed(1)
        fresh = Qwen2ForCausalLM(interrupted.config)  # the checkpoint must decide the weights
        result = warm_up(fresh, tokenizer, config, train, valid, tmp_path / checkpoint, key,
                         progress=False)
        assert result.steps == 6 and [h["step"] for h in result.history] == [3, 6]
        same = all(torch.equal(a, b) for a, b in zip(straight.parameters(), fresh.parameters(),
                                                     strict=True))
        assert same == resumes, key


def written_out(warmup_steps: int, total_steps: int, floor: float, step: int) -> float:
    """The schedule as the shipped proxies' warm-up and notebook 10's runs wrote it by hand."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


# (W, T, ρ): the smoke, proxy-1m and proxy-4m warm-ups, notebook 10's text and SFT runs
SCHEDULES = [(5, 20, 0.1), (50, 2000, 0.1), (50, 3000, 0.1), (30, 300, 0.1), (20, 200, 0.1),
             (2, 6, 0.1), (7, 13, 0.25)]


@pytest.mark.parametrize(("warmup_steps", "total_steps", "floor"), SCHEDULES)
def test_warmup_cosine_is_the_schedule_the_proxies_were_trained_with(
        warmup_steps, total_steps, floor) -> None:
    factor = warmup_cosine(warmup_steps, total_steps, floor)
    for step in range(total_steps + 1):  # bit for bit, every step a LambdaLR asks for
        assert factor(step) == written_out(warmup_steps, total_steps, floor, step), step


@pytest.mark.parametrize(("warmup_steps", "total_steps", "floor"), SCHEDULES)
def test_warmup_cosine_is_transformers_schedule_with_the_warm_up_one_step_ahead(
        warmup_steps, total_steps, floor) -> None:
    """After the warm-up both are the same cosine to ρ; during it transformers' is t/W, ours
    (t+1)/W: transformers' first step trains at lr 0, ours at lr/W. The proxies every GRPO
    figure starts from were warmed up with ours, so the step stays."""
    optimizer = torch.optim.SGD([torch.zeros(1)], lr=1.0)
    theirs = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, warmup_steps, total_steps, min_lr_rate=floor).lr_lambdas[0]
    ours = warmup_cosine(warmup_steps, total_steps, floor)
    for step in range(warmup_steps, total_steps + 1):
        assert ours(step) == pytest.approx(theirs(step), abs=1e-12)
    assert theirs(0) == 0.0 and ours(0) == 1 / warmup_steps
    for step in range(warmup_steps):
        assert theirs(step) == pytest.approx(step / warmup_steps, abs=1e-12)
        assert ours(step) == pytest.approx(theirs(step) + 1 / warmup_steps, abs=1e-12)
