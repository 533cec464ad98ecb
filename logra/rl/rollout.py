"""Rollouts: sample G completions per prompt, and score sampled tokens under any policy.

Sampling is `model.generate` with pure ancestral sampling (temperature 1, no top-k/top-p, no
repetition penalty, whatever the model's generation config says), so the sampled tokens are
drawn from exactly the π_θ whose log-probabilities the loss uses. Each row draws with its own
generator by the Gumbel-max trick (argmax of logits + Gumbel noise is a draw from their softmax),
seeded from (seed, row index in the step's batch): which other rows share the `generate` call
does not change a completion, so data-parallel ranks that each sample their share of the prompts
draw what one process sampling the whole batch draws. Prompts are left-padded;
sequences are (B, P + T) = prompt (P, padded) followed by the completion (T, padded to the
batch's longest). The response mask keeps a completion's tokens up to and including its first
end-of-sequence token (every token when it was cut at `max_new_tokens`).

Scoring runs one forward on prompt + completion with the positions that generation used
(`cumsum(attention_mask) − 1`, as `generate` computes them under left padding) and keeps only the
T + 1 last logits (`logits_to_keep`): the logits at P−1 … P+T−2 predict the completion tokens.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedTokenizerBase

from logra.optim.kl import logits_of


@dataclass(frozen=True)
class Rollout:
    """A batch of sampled completions, ready to be scored.

    input_ids, attention_mask, position_ids: (B, P + T); response_mask: (B, T) booleans;
    completions: the B decoded completions (special tokens dropped, text after EOS excluded).
    """

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    response_mask: Tensor
    completions: list[str]

    @property
    def response_tokens(self) -> Tensor:
        """(B, T) the completion tokens."""
        return self.input_ids[:, -self.response_mask.shape[1]:]

    def model_inputs(self) -> dict[str, Tensor | int]:
        """Keyword arguments of the scoring forward (see `completion_logits`)."""
        return dict(
            input_ids=self.input_ids,
            attention_mask=self.attention_mask,
            position_ids=self.position_ids,
            logits_to_keep=self.response_mask.shape[1] + 1,
        )

    def logits_mask(self) -> Tensor:
        """(B, T + 1) the response mask aligned with the kept logits (the last predicts nothing)."""
        return torch.cat([self.response_mask, torch.zeros_like(self.response_mask[:, :1])], dim=1)


def end_token_ids(model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every token id that ends a completion: the tokenizer's EOS and the generation config's."""
    ids = {tokenizer.eos_token_id}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos is not None:
        ids.update(config_eos)
    ids.discard(None)
    if not ids:
        raise ValueError("the tokenizer has no eos_token_id and the model's generation config none")
    return sorted(ids)


def response_mask(completion_ids: Tensor, end_ids: list[int]) -> Tensor:
    """(B, T) booleans: True up to and including the first end token of each row."""
    is_end = torch.isin(completion_ids, torch.tensor(end_ids, device=completion_ids.device))
    ends_before = is_end.long().cumsum(dim=1) - is_end.long()  # end tokens strictly before t
    return ends_before == 0


def row_seed(seed: int, row: int) -> int:
    """A 63-bit generator seed for row `row` of a batch sampled with `seed`."""
    digest = hashlib.sha256(f"rollout/{seed}/{row}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class RowGumbel(LogitsProcessor):
    """Adds to each row's logits Gumbel noise −log(−log U) from that row's own generator.

    Greedy decoding of the result samples from softmax(logits), row by row independently of the
    batch. Scores come back in fp32 (bf16 would round the noise).
    """

    def __init__(self, seeds: list[int], device: torch.device) -> None:
        self.generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        vocab = scores.shape[-1]
        uniform = torch.stack([torch.rand(vocab, generator=g, device=scores.device)
                               for g in self.generators])
        return scores.float() - torch.log(-torch.log(uniform))


@torch.no_grad()
def sample(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    group_size: int,
    max_new_tokens: int,
    seed: int = 0,
    first_row: int = 0,
) -> Rollout:
    """`group_size` completions of every prompt, each group contiguous (B = len(prompts)·G).

    Row i draws from a generator seeded by (`seed`, `first_row` + i): a rank sampling rows
    [first_row, first_row + B) of a larger batch draws what the whole batch would (up to
    round-off in the logits of differently padded batches).
    """
    end_ids = end_token_ids(model, tokenizer)
    repeated = [prompt for prompt in prompts for _ in range(group_size)]
    batch = tokenizer(repeated, return_tensors="pt", padding=True, padding_side="left")
    device = next(model.parameters()).device
    batch = batch.to(device)
    gumbel = RowGumbel([row_seed(seed, first_row + i) for i in range(len(repeated))], device)
    was_training = model.training
    model.eval()
    try:
        sequences = model.generate(
            **batch,
            do_sample=False,  # greedy on logits + Gumbel noise: sampling (module docstring)
            logits_processor=LogitsProcessorList([gumbel]),
            repetition_penalty=1.0,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=end_ids,
        )
    finally:
        model.train(was_training)
    prompt_len = batch["input_ids"].shape[1]
    completion_ids = sequences[:, prompt_len:]
    mask = response_mask(completion_ids, end_ids)
    texts = tokenizer.batch_decode(completion_ids.masked_fill(~mask, tokenizer.pad_token_id),
                                   skip_special_tokens=True)
    attention_mask = torch.cat([batch["attention_mask"], mask.long()], dim=1)
    return Rollout(
        input_ids=sequences,
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask),
        response_mask=mask,
        completions=texts,
    )


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions as `generate` assigns them under left padding: cumsum(mask) − 1, pads at 1."""
    positions = attention_mask.long().cumsum(dim=1) - 1
    return positions.masked_fill(attention_mask == 0, 1)


def completion_logits(model: nn.Module, rollout: Rollout) -> Tensor:
    """(B, T, vocab) the logits that predict each completion token, from one forward."""
    return logits_of(model(**rollout.model_inputs()))[:, :-1]


def token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    """(B, T) log-softmax of `logits` (B, T, vocab) at `tokens` (B, T), in fp32."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
