"""The proxies' tokenizer: one token per character, as a Qwen2 tokenizer with no merges.

It is a byte-level BPE whose vocabulary is the byte symbols of printable ASCII and newline and
whose merge list is empty, so every character is one token (98 tokens with `<pad>` and `<eos>`;
characters outside the alphabet are dropped). It is built as `Qwen2Tokenizer` on purpose: for a
model whose config says `model_type: qwen2`, `AutoTokenizer.from_pretrained` (transformers 5)
always instantiates `Qwen2Tokenizer`, which rebuilds the normalizer, pre-tokenizer and decoder
its own way; any other tokenizer pipeline saved beside a Qwen2 model would load back changed.
Generation pads on the left; there is no bos token (as in Qwen2).
"""

from __future__ import annotations

from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

PAD, EOS = "<pad>", "<eos>"
SPECIAL_TOKENS = (PAD, EOS)
ALPHABET = "\n" + "".join(chr(code) for code in range(32, 127))


def byte_symbol(char: str) -> str:
    """The byte-level BPE symbol of an ASCII character (GPT-2's byte-to-unicode table)."""
    code = ord(char)
    if code > 126:
        raise ValueError(f"{char!r} is not ASCII")
    return char if code >= 33 else chr(256 + code)


def char_tokenizer() -> Qwen2Tokenizer:
    """A character-level tokenizer over `ALPHABET` with `<pad>` and `<eos>`."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({byte_symbol(char): len(SPECIAL_TOKENS) + i for i, char in enumerate(ALPHABET)})
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=None,
        bos_token=None,
        eos_token=EOS,
        pad_token=PAD,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
