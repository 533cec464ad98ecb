"""The two benchmarks of the training-quality notebook, behind one interface.

    text  byte-level pretraining from scratch of a `transformers` Llama on Shakespeare's plays
          (`logra.data.text`): random windows of `context` bytes, the loss on every next byte;
          held-out splits are whole plays
    sft   supervised fine-tuning of a pretrained base on a task it has not seen: the base is
          the `sft_model` proxy's Qwen2 architecture trained once with AdamW on the reference
          solutions of `sft_base_task` (math-synth: other questions, the same characters;
          `sft_base_steps` steps at `sft_base_lr`, warm-up and cosine decay as every run),
          cached under <results_dir>/training_quality/; every run starts from it (or, with
          `sft_base_per_seed`, from the base pretrained with the run's own seed) and fine-tunes
          on gsm-synth reference solutions, the loss on the completion only. Validation is the
          last `sft_validation_rows` rows of gsm-synth's train split, test the first
          `sft_test_rows` rows of its test split, and no training row asks a held-out question
          (gsm-synth's train split repeats a few)

Each gives the model a run starts from (freshly initialized from the seed for text, the base
for sft, the seed then drawing what the optimizer draws: LoRA's adapters, projections), the
batch of every step (a function of the seed alone, so every optimizer sees the same data in the
same order), the training loss of a batch, and the mean held-out loss per target token on fixed
examples (no sampling noise between runs).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

from logra.data.text import (
    VOCAB_SIZE,
    evaluation_starts,
    load_corpus,
    training_batches,
    windows,
)
from logra.quiet import no_dataset_bars

if TYPE_CHECKING:  # the experiment's config; training_quality imports this module
    from logra.experiments.training_quality import Config

TASKS = ("text", "sft")


class Benchmark(Protocol):
    def model(self, seed: int) -> nn.Module: ...
    def batch(self, seed: int, step: int) -> Any: ...
    def loss(self, model: nn.Module, batch: Any) -> Tensor: ...
    def heldout_loss(self, model: nn.Module, split: str) -> float: ...


def benchmark(cfg: Config) -> Benchmark:
    """The benchmark `cfg.task` names, built once per process (a worker trains many runs)."""
    if cfg.task not in TASKS:
        raise ValueError(f"unknown task {cfg.task!r}; valid: {list(TASKS)}")
    keys = TEXT_KEYS if cfg.task == "text" else (*SFT_KEYS, "seeds", "data_dir", "results_dir")
    # (data_dir and results_dir say where, not what; seeds, which bases to pretrain up front)
    return _cached(cfg.task, json.dumps({k: cfg[k] for k in keys}, sort_keys=True))


TEXT_KEYS = ("corpus", "heldout", "hidden_size", "intermediate_size", "layers", "heads",
             "context", "batch_size", "steps", "validation_windows", "test_windows")
SFT_KEYS = ("sft_model", "batch_size", "steps", "sft_validation_rows", "sft_test_rows",
            "sft_base_task", "sft_base_steps", "sft_base_lr", "sft_base_per_seed",
            "min_lr_ratio", "clip")
BASE_KEYS = ("sft_model", "batch_size", "sft_base_task", "sft_base_steps", "sft_base_lr",
             "min_lr_ratio", "clip")  # what the sft base depends on
BASE_SEED = 0  # the one sft base's initialization and data order (without sft_base_per_seed)


@functools.lru_cache(maxsize=2)
def _cached(task: str, settings: str) -> Benchmark:
    """The benchmark of `settings`, a JSON object of the keys it depends on (`benchmark`),
    which the benchmark classes read as a mapping."""
    cfg = json.loads(settings)
    return TextBenchmark(cfg) if task == "text" else SftBenchmark(cfg)


class TextBenchmark:
    """Byte-level pretraining on a corpus (see the module docstring)."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.corpus = load_corpus(cfg["corpus"], cfg["heldout"])
        self.context = cfg["context"]
        self.evaluation = {split: evaluation_starts(self.corpus.split(split),
                                                    cfg[f"{split}_windows"], self.context)
                           for split in ("validation", "test")}
        self._plans: dict[int, Tensor] = {}

    def model(self, seed: int) -> nn.Module:
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = self.cfg
        config = LlamaConfig(
            vocab_size=VOCAB_SIZE, hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["layers"],
            num_attention_heads=cfg["heads"], num_key_value_heads=cfg["heads"],
            max_position_embeddings=self.context, tie_word_embeddings=False,
        )
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)

    def batch(self, seed: int, step: int) -> tuple[Tensor, Tensor]:
        if seed not in self._plans:
            self._plans[seed] = training_batches(self.corpus.train, self.cfg["steps"],
                                                 self.cfg["batch_size"], self.context, seed)
        return windows(self.corpus.train, self._plans[seed][step], self.context)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor],
             reduction: str = "mean") -> Tensor:
        inputs, targets = batch
        logits = model(input_ids=inputs).logits
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                           reduction=reduction)

    @torch.no_grad()
    def heldout_loss(self, model: nn.Module, split: str) -> float:
        model.eval()
        total, count = 0.0, 0
        tokens = self.corpus.split(split)
        for chunk in self.evaluation[split].split(self.cfg["batch_size"]):
            batch = windows(tokens, chunk, self.context)
            total += self.loss(model, batch, reduction="sum").item()
            count += batch[1].numel()
        model.train()
        return total / count


class SftBenchmark:
    """The proxies' supervised warm-up task (see the module docstring)."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        from logra.data import load_task, to_sft
        from logra.models.tokenizer import char_tokenizer

        self.cfg = cfg
        self.tokenizer = char_tokenizer()
        train = load_task("gsm-synth", "train", cfg["data_dir"])
        kept = len(train) - cfg["sft_validation_rows"]
        if kept < 1:
            raise ValueError(f"sft_validation_rows {cfg['sft_validation_rows']} leaves no "
                             f"training rows of {len(train)}")
        test = load_task("gsm-synth", "test", cfg["data_dir"], test_rows=cfg["sft_test_rows"])
        validation = to_sft(train.select(range(kept, len(train))), "gsm-synth")[:]
        test = to_sft(test.select(range(cfg["sft_test_rows"])), "gsm-synth")[:]
        held = set(validation["prompt"]) | set(test["prompt"])
        rows = to_sft(train.select(range(kept)), "gsm-synth")
        # gsm-synth draws its train rows independently: a few repeat a held-out question
        with no_dataset_bars():
            rows = rows.filter(lambda row: row["prompt"] not in held)[:]
        self.rows = {"train": rows, "validation": validation, "test": test}
        for seed in dict.fromkeys(map(self.base_seed, cfg["seeds"])):
            self.pretrained_base(seed)  # here, before any worker starts (`benchmark`)

    def base_seed(self, seed: int) -> int:
        """The seed of the base a run of `seed` fine-tunes: its own with `sft_base_per_seed`
        (the base then varies with the seeds, and a verdict paired by seed averages over
        bases), else `BASE_SEED` (one base: a seed the run seeds do not vary)."""
        return seed if self.cfg["sft_base_per_seed"] else BASE_SEED

    def _architecture(self) -> nn.Module:
        """The `sft_model` proxy's Qwen2 architecture, initialized from torch's global RNG."""
        from transformers import Qwen2ForCausalLM

        from logra.models.build import qwen2_config
        from logra.models.ladder import get_scale

        return Qwen2ForCausalLM(qwen2_config(get_scale(self.cfg["sft_model"]), self.tokenizer))

    def model(self, seed: int) -> nn.Module:
        """The pretrained base of `seed` (`base_seed`: one base for every seed by default);
        torch's RNG is then seeded with `seed` for what the optimizer draws (LoRA's adapters)."""
        from safetensors.torch import load_model

        base = self.base_seed(seed)
        path = self.pretrained_base(base)  # trained here only for a seed the config did not list
        torch.manual_seed(base)
        model = self._architecture()
        load_model(model, path)
        torch.manual_seed(seed)
        return model

    def base_path(self, seed: int) -> Path:
        """<results_dir>/training_quality/sft-base-<digest>.safetensors of the base pretrained
        with `seed`: the digest covers the base's settings, its seed and the code that trains
        it."""
        from logra.provenance import fingerprint

        cfg = self.cfg
        keys = {k: cfg[k] for k in BASE_KEYS}
        keys.update(seed=seed, code=fingerprint("experiments/quality_data.py"))
        digest = hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]
        return Path(cfg["results_dir"]) / "training_quality" / f"sft-base-{digest}.safetensors"

    def pretrained_base(self, seed: int) -> Path:
        """`base_path(seed)`, the base pretrained first if it is not there (`_pretrain_base`)."""
        path = self.base_path(seed)
        if not path.exists():
            self._pretrain_base(seed)
        return path

    def _pretrain_base(self, seed: int) -> None:
        """Train the base of `seed` (its initialization and data order; AdamW at `sft_base_lr`,
        `sft_base_steps` steps of `batch_size` solutions of `sft_base_task`, warm-up over a
        tenth of them then cosine decay to `min_lr_ratio`, gradients clipped to `clip`) and
        write it atomically to `base_path(seed)`."""
        from safetensors.torch import save_model
        from tqdm.auto import tqdm

        from logra import io
        from logra.data import load_task, to_sft
        from logra.models.warmup import collate, warmup_cosine

        cfg = self.cfg
        task, steps = cfg["sft_base_task"], cfg["sft_base_steps"]
        rows = to_sft(load_task(task, "train", cfg["data_dir"]), task)[:]
        torch.manual_seed(seed)
        model = self._architecture()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["sft_base_lr"], weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, warmup_cosine(max(1, steps // 10), steps, cfg["min_lr_ratio"]))
        generator = torch.Generator().manual_seed(seed)
        for _ in tqdm(range(steps), desc=f"sft base {seed}: AdamW on {task}", leave=False):
            picked = torch.randint(len(rows["prompt"]), (cfg["batch_size"],),
                                   generator=generator).tolist()
            batch = collate(self.tokenizer, [rows["prompt"][r] for r in picked],
                            [rows["completion"][r] for r in picked])
            loss = model(**batch).loss
            if not math.isfinite(loss.item()):
                raise RuntimeError(f"the sft base diverged (loss {loss.item()}): lower "
                                   f"sft_base_lr ({cfg['sft_base_lr']})")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
        with io.atomic_path(self.base_path(seed)) as tmp:
            save_model(model, str(tmp))

    def _collate(self, split: str, rows: list[int]) -> dict[str, Tensor]:
        from logra.models.warmup import collate

        columns = self.rows[split]
        return collate(self.tokenizer, [columns["prompt"][r] for r in rows],
                       [columns["completion"][r] for r in rows])

    def batch(self, seed: int, step: int) -> dict[str, Tensor]:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        rows = torch.randint(len(self.rows["train"]["prompt"]), (self.cfg["batch_size"],),
                             generator=generator)
        return self._collate("train", rows.tolist())

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return model(**batch).loss

    @torch.no_grad()
    def heldout_loss(self, model: nn.Module, split: str) -> float:
        """Completion-token loss over every held-out row (token-weighted mean)."""
        model.eval()
        total, count = 0.0, 0
        size, chunk = len(self.rows[split]["prompt"]), 4 * self.cfg["batch_size"]
        for start in range(0, size, chunk):
            batch = self._collate(split, list(range(start, min(size, start + chunk))))
            logits = model(input_ids=batch["input_ids"],
                           attention_mask=batch["attention_mask"]).logits[:, :-1]
            labels = batch["labels"][:, 1:]
            total += nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                                 ignore_index=-100, reduction="sum").item()
            count += int((labels != -100).sum())
        model.train()
        return total / count
