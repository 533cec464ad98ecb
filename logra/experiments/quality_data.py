"""The two benchmarks of the training-quality notebook, behind one interface.

    text  byte-level pretraining from scratch of a `transformers` Llama on Shakespeare's plays
          (`logra.data.text`): random windows of `context` bytes, the loss on every next byte;
          held-out splits are whole plays
    sft   the proxy policies' warm-up task (`logra.models.warmup`): supervised fine-tuning from
          scratch of the `sft_model` proxy's Qwen2 architecture on gsm-synth reference solutions,
          the loss on the completion only; validation is the last `sft_validation_rows` rows of
          the train split, test the first `sft_test_rows` rows of the test split, and no
          training row asks a held-out question (gsm-synth's train split repeats a few)

Each gives a freshly initialized model, the batch of every step (a function of the seed alone,
so every optimizer sees the same data in the same order), the training loss of a batch, and the
mean held-out loss per target token on fixed examples (no sampling noise between runs).
"""

from __future__ import annotations

import functools
import json
from typing import Any, Protocol

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

TASKS = ("text", "sft")


class Benchmark(Protocol):
    def model(self, seed: int) -> nn.Module: ...
    def batch(self, seed: int, step: int) -> Any: ...
    def loss(self, model: nn.Module, batch: Any) -> Tensor: ...
    def heldout_loss(self, model: nn.Module, split: str) -> float: ...


def benchmark(cfg: dict[str, Any]) -> Benchmark:
    """The benchmark `cfg["task"]` names, built once per process (a worker trains many runs)."""
    if cfg["task"] not in TASKS:
        raise ValueError(f"unknown task {cfg['task']!r}; valid: {list(TASKS)}")
    keys = TEXT_KEYS if cfg["task"] == "text" else (*SFT_KEYS, "data_dir")  # where, not what
    return _cached(cfg["task"], json.dumps({k: cfg[k] for k in keys}, sort_keys=True))


TEXT_KEYS = ("corpus", "heldout", "hidden_size", "intermediate_size", "layers", "heads",
             "context", "batch_size", "steps", "validation_windows", "test_windows")
SFT_KEYS = ("sft_model", "batch_size", "steps", "sft_validation_rows", "sft_test_rows")


@functools.lru_cache(maxsize=2)
def _cached(task: str, settings: str) -> Benchmark:
    cfg = json.loads(settings)
    return TextBenchmark(cfg) if task == "text" else SftBenchmark(cfg)


class TextBenchmark:
    """Byte-level pretraining on a corpus (see the module docstring)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
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

    def __init__(self, cfg: dict[str, Any]) -> None:
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

    def model(self, seed: int) -> nn.Module:
        from transformers import Qwen2ForCausalLM

        from logra.models.build import qwen2_config
        from logra.models.ladder import get_scale

        torch.manual_seed(seed)
        return Qwen2ForCausalLM(qwen2_config(get_scale(self.cfg["sft_model"]), self.tokenizer))

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
