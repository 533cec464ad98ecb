"""Rare tokens (claim C10, "subspace blindness"): does a rare token's small gradient survive?

The report says that rare but important tokens (minus signs, decimal points), whose gradient
mass is small, lose their signal in LoGRA's sketch. Two measurements, both with the optimizers'
real updates (`sketch_error_measures.make_optimizer`: AdamW, LoGRA "gain", LoGRA "nystrom", the
naive random projection; weight decay 0, no KL control):

(a) survival. An embedding-shaped gradient stream G_1..G_T ∈ R^{m×n} (m = vocabulary, n = hidden)
    made of a large common part and a small rare part:

        C_t = (1/N) Σ_p e_{i_p} (d_{i_p} + η·ξ_p)ᵀ     N positions, ids i_p ~ Zipf over the common
                                                        rows; d_i ~ N(0, B diag(σ²) Bᵀ), σ_j = j^-α
                                                        (the common tokens share a few dominant
                                                        hidden directions), ξ_p isotropic noise
        R_t = Σ_{s∈S} e_s (d_s + η·ξ_{s,t})ᵀ            the rare rows S, isotropic d_s
        G_t = C_t + a·R_t,  a² = share/(1−share) · Σ_t‖C_t‖² / Σ_t‖R_t‖²

    so the rare part holds `share` of the stream's gradient mass. Each optimizer starts from
    W_0 = 0 and takes T steps; with ĝ = Ḡ_S/‖Ḡ_S‖ the unit direction of the rare rows' mean
    gradient (rows S only), the displacement D = −W_T has

        rare_component = ⟨D_S, ĝ⟩ / ‖D‖_F     the share of the whole step that fixes the rare rows
        alignment      = cos(D_S, Ḡ_S)        whether the rare rows move the right way at all
        survival       = rare_component / rare_component(AdamW on the same stream)

    Survival 1: the rare tokens get as much of the step as under dense AdamW; 0: lost; < 0: moved
    the wrong way.

(b) steps to fix. A tiny Qwen2 LM (untied embeddings) learns a Markov-chain language over common
    tokens in which, in a fraction `rare_fraction` of sequences, a trigger token is followed by a
    rare token. First AdamW plants an error (`plant_steps`: the trigger is followed by "+", id 0);
    then every optimizer, from the same planted weights and on the same batches, trains on the
    correct data (the trigger is followed by "−", id 1) for `max_fix_steps` steps. Every
    `eval_every` steps: p(− | context ending in the trigger), mean over `eval_contexts` fixed
    contexts, and the share on which greedy decoding emits "−". Steps to fix: the first
    evaluation at which that share reaches `fixed_fraction` (NaN: never within the budget).
    The rare positions' share of the gradient mass at the start of the fix is measured too:
    ‖∇ℓ_rare‖² / ‖∇ℓ‖², ℓ_rare the rare positions' part of the token-mean loss.

`run(config)` returns a tidy frame, one row per number:

    experiment  "survival" | "fix"
    method      an update rule of RULES
    rank        sketch rank (-1 for AdamW)
    share       the rare part's share of gradient mass (survival; NaN for fix)
    seed
    step        evaluation step (fix; -1 elsewhere)
    metric      survival: "rare_component", "alignment", "survival"
                fix: "p_correct", "accuracy", "steps_to_fix", "rare_grad_share",
                     "planted_accuracy" (AdamW's share emitting "+" after planting)
    value
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

import pandas as pd
import torch
from pydantic import Field
from torch import Tensor, nn

from logra.config import TypedConfig, typed
from logra.experiments import sketch_error_measures as measures
from logra.experiments.typed import Betas, Count, Counts, NonNegative, Positive, Seeds, Shape, Share
from logra.models.random import random_qwen2

RULES = measures.RULES  # adamw, logra_gain, logra_nystrom, naive_projection
LOGRA_RULES = ("logra_gain", "logra_nystrom")
COLUMNS = ("experiment", "method", "rank", "share", "seed", "step", "metric", "value")
PLANTED, RARE, TRIGGER = 0, 1, 2  # token ids of the LM in (b); the rest are common


@typed
class Config(TypedConfig):
    """experiments/rare_tokens.yaml's keys (its comments say what each holds)."""

    EXPERIMENT: ClassVar[str] = "rare_tokens"
    scale: str
    seeds: Seeds
    betas: Betas
    vocab_shape: Shape
    rare_rows: Count
    common_tokens: Count
    zipf: Positive
    common_alpha: NonNegative
    noise: NonNegative
    stream_steps: Count
    shares: Annotated[list[Share], Field(min_length=1)]
    ranks: Counts
    rank_plot_share: Share
    survival_lr: Positive
    lm_vocab: Count
    lm_hidden: Count
    lm_intermediate: Count
    lm_layers: Count
    lm_heads: Count
    successors: Count
    seq_len: Count
    batch_size: Count
    rare_fraction: Share
    plant_steps: Count
    plant_lr: Positive
    fix_lr: Positive
    fix_rank: Count
    max_fix_steps: Count
    eval_every: Count
    eval_contexts: Count
    fixed_fraction: Share
    c10_survival: Positive
    c10_slowdown: Positive


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/rare_tokens.yaml at `scale`, with `overrides` on top, checked."""
    return Config.load(scale, **overrides)


# ---------------------------------------------------------------- (a) survival


def rare_stream(cfg: Config, share: float, seed: int) -> tuple[list[Tensor], Tensor]:
    """The stream G_1..G_T (m×n each) of the module docstring, and the rare rows S (indices)."""
    if not 0 < share < 1:
        raise ValueError(f"share must lie in (0, 1), got {share}")
    m, n = cfg.vocab_shape
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(m, generator=g)
    rare, common = order[:cfg.rare_rows], order[cfg.rare_rows:]
    sigma = torch.arange(1, n + 1, dtype=torch.float32).pow(-cfg.common_alpha)
    basis, _ = torch.linalg.qr(torch.randn(n, n, generator=g))
    scale = float(sigma.square().sum() / n) ** 0.5  # per-element size of an isotropic direction
    directions = (torch.randn(m, n, generator=g) * sigma) @ basis.T
    directions[rare] = torch.randn(len(rare), n, generator=g) * scale
    weights = torch.arange(1, len(common) + 1, dtype=torch.float64).pow(-cfg.zipf)
    tokens, noise = cfg.common_tokens, cfg.noise
    commons, rares = [], []
    for _ in range(cfg.stream_steps):
        ids = common[torch.multinomial(weights, tokens, True, generator=g)]
        hidden = directions[ids] + noise * scale * torch.randn(tokens, n, generator=g)
        commons.append(torch.zeros(m, n).index_add_(0, ids, hidden).div_(tokens))
        r = torch.zeros(m, n)
        r[rare] = directions[rare] + noise * scale * torch.randn(len(rare), n, generator=g)
        rares.append(r)
    c_mass = sum(float(c.square().sum()) for c in commons)
    r_mass = sum(float(r.square().sum()) for r in rares)
    a = math.sqrt(share / (1 - share) * c_mass / r_mass)
    return [c + a * r for c, r in zip(commons, rares, strict=True)], rare


def rare_metrics(displacement: Tensor, rows: Tensor, signal: Tensor) -> dict[str, float]:
    """rare_component and alignment (module docstring) of a displacement D (m×n) for the rare
    rows `rows` whose mean gradient is `signal` (|rows|×n)."""
    part = displacement[rows].double()
    unit = signal.double() / signal.double().norm()
    total = float(displacement.double().norm())
    along = float((part * unit).sum())
    return {
        "rare_component": along / total if total > 0 else 0.0,
        "alignment": along / float(part.norm()) if float(part.norm()) > 0 else 0.0,
    }


def survival_rows(cfg: Config, share: float, seed: int) -> list[dict[str, Any]]:
    """Every rule at every rank that LoGRA sketches on the stream of (share, seed)."""
    stream, rows = rare_stream(cfg, share, seed)
    signal = torch.stack(stream).mean(dim=0)[rows]
    shape = tuple(cfg.vocab_shape)
    runs = [("adamw", -1)] + [(rule, r) for r in cfg.ranks if measures.measurable(shape, r)
                              for rule in RULES[1:]]
    base = dict(experiment="survival", share=share, seed=seed, step=-1)
    out, reference = [], None
    for rule, rank in runs:
        updates = measures.applied_updates([stream], rule, max(rank, 1), cfg.survival_lr,
                                           tuple(cfg.betas))
        displacement = -torch.stack([u[0] for u in updates]).sum(dim=0)
        metrics = rare_metrics(displacement, rows, signal)
        if rule == "adamw":
            reference = metrics["rare_component"]
        metrics["survival"] = metrics["rare_component"] / reference
        out += [dict(base, method=rule, rank=rank, metric=k, value=v) for k, v in metrics.items()]
    return out


# ---------------------------------------------------------------- (b) steps to fix


def lm(cfg: Config, seed: int) -> nn.Module:
    """The tiny Qwen2 causal LM of (b), randomly initialised from `seed` (untied embeddings)."""
    return random_qwen2(
        vocab_size=cfg.lm_vocab, hidden_size=cfg.lm_hidden,
        intermediate_size=cfg.lm_intermediate, num_hidden_layers=cfg.lm_layers,
        num_attention_heads=cfg.lm_heads, num_key_value_heads=cfg.lm_heads,
        max_position_embeddings=max(64, cfg.seq_len), seed=seed,
    )


def transition_matrix(cfg: Config, seed: int) -> Tensor:
    """V×V next-token probabilities: every common token goes to `successors` random common
    tokens with probabilities ∝ 1/k (k = 1..successors); special tokens go anywhere common."""
    V, k = cfg.lm_vocab, cfg.successors
    g = torch.Generator().manual_seed(seed)
    probs = torch.zeros(V, V)
    weights = 1 / torch.arange(1, k + 1, dtype=torch.float32)
    for token in range(V):
        successors = 3 + torch.randperm(V - 3, generator=g)[:k]
        probs[token, successors] = weights / weights.sum()
    return probs


def markov_batch(probs: Tensor, batch: int, length: int, g: torch.Generator) -> Tensor:
    """(batch, length) walks of the chain from uniformly random common tokens."""
    V = probs.shape[0]
    ids = torch.empty(batch, length, dtype=torch.long)
    ids[:, 0] = torch.randint(3, V, (batch,), generator=g)
    for t in range(1, length):
        ids[:, t] = torch.multinomial(probs[ids[:, t - 1]], 1, generator=g).squeeze(1)
    return ids


def lm_batch(cfg: Config, probs: Tensor, target: int, g: torch.Generator) -> Tensor:
    """A training batch: chain walks where each sequence, with probability `rare_fraction`,
    holds "trigger → target" at a random position (the walk restarts after it)."""
    ids = markov_batch(probs, cfg.batch_size, cfg.seq_len, g)
    rare = torch.rand(cfg.batch_size, generator=g) < cfg.rare_fraction
    positions = torch.randint(1, cfg.seq_len - 1, (cfg.batch_size,), generator=g)
    for row in torch.nonzero(rare).flatten().tolist():
        j = int(positions[row])
        ids[row, j], ids[row, j + 1] = TRIGGER, target
    return ids


def eval_contexts(cfg: Config, probs: Tensor, seed: int) -> Tensor:
    """`eval_contexts` chain walks of seq_len/2 tokens ending in the trigger."""
    g = torch.Generator().manual_seed(seed + 7919)
    walks = markov_batch(probs, cfg.eval_contexts, cfg.seq_len // 2, g)
    walks[:, -1] = TRIGGER
    return walks


def token_losses(model: nn.Module, ids: Tensor) -> tuple[Tensor, Tensor]:
    """Per-position next-token cross-entropy (B, T−1) and the mask of positions after a trigger."""
    logits = model(input_ids=ids).logits[:, :-1]
    losses = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                         ids[:, 1:].reshape(-1), reduction="none")
    return losses.view(ids.shape[0], -1), ids[:, :-1] == TRIGGER


@torch.no_grad()
def next_token(model: nn.Module, contexts: Tensor, token: int) -> tuple[float, float]:
    """(mean p(token | context), share of contexts whose greedy next token is `token`)."""
    logits = model(input_ids=contexts).logits[:, -1]
    p = logits.softmax(dim=-1)[:, token]
    return float(p.mean()), float((logits.argmax(dim=-1) == token).float().mean())


def rare_gradient_share(model: nn.Module, ids: Tensor) -> float:
    """‖∇ℓ_rare‖² / ‖∇ℓ‖² on one batch: ℓ the token-mean loss, ℓ_rare its rare positions' part."""
    params = [p for p in model.parameters() if p.requires_grad]
    losses, mask = token_losses(model, ids)
    total = torch.autograd.grad(losses.mean(), params, retain_graph=True)
    rare = torch.autograd.grad((losses * mask).sum() / losses.numel(), params)
    return (sum(float(g.square().sum()) for g in rare)
            / sum(float(g.square().sum()) for g in total))


def plant(cfg: Config, seed: int) -> tuple[nn.Module, Tensor, Tensor]:
    """The model after AdamW learned "trigger → +" (the planted error), the chain, the contexts."""
    probs = transition_matrix(cfg, seed)
    model = lm(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.plant_lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    for _ in range(cfg.plant_steps):
        losses, _ = token_losses(model, lm_batch(cfg, probs, PLANTED, g))
        opt.zero_grad(set_to_none=True)
        losses.mean().backward()
        opt.step()
    return model, probs, eval_contexts(cfg, probs, seed)


def fix_rows(cfg: Config, seed: int) -> list[dict[str, Any]]:
    """Plant the error, then fix it with every rule from the same weights and batches."""
    planted, probs, contexts = plant(cfg, seed)
    state = {k: v.clone() for k, v in planted.state_dict().items()}
    base = dict(experiment="fix", share=math.nan, seed=seed)
    out = [dict(base, method="adamw", rank=-1, step=-1, metric="planted_accuracy",
                value=next_token(planted, contexts, PLANTED)[1])]
    for rule in RULES:
        model = lm(cfg, seed)
        model.load_state_dict(state)
        rank = -1 if rule == "adamw" else cfg.fix_rank
        opt = measures.make_optimizer(rule, list(model.parameters()), max(rank, 1), cfg.fix_lr,
                                      tuple(cfg.betas))
        g = torch.Generator().manual_seed(seed + 104729)
        fixed_at = math.nan
        for step in range(cfg.max_fix_steps + 1):
            if step % cfg.eval_every == 0:
                p, accuracy = next_token(model, contexts, RARE)
                out += [dict(base, method=rule, rank=rank, step=step, metric=k, value=v)
                        for k, v in (("p_correct", p), ("accuracy", accuracy))]
                if math.isnan(fixed_at) and accuracy >= cfg.fixed_fraction:
                    fixed_at = step
            if step == cfg.max_fix_steps:
                break
            ids = lm_batch(cfg, probs, RARE, g)
            if step == 0 and rule == "adamw":
                out.append(dict(base, method=rule, rank=rank, step=0, metric="rare_grad_share",
                                value=rare_gradient_share(model, ids)))
            losses, _ = token_losses(model, ids)
            opt.zero_grad(set_to_none=True)
            losses.mean().backward()
            opt.step()
        out.append(dict(base, method=rule, rank=rank, step=-1, metric="steps_to_fix",
                        value=fixed_at))
    return out


# ---------------------------------------------------------------- the run


def run(cfg: Config) -> pd.DataFrame:
    """(a) for every share and seed, (b) for every seed."""
    rows = []
    for seed in cfg.seeds:
        for share in cfg.shares:
            rows += survival_rows(cfg, share, seed)
        rows += fix_rows(cfg, seed)
    return pd.DataFrame(rows, columns=list(COLUMNS))
