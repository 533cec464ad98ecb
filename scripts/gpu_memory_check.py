"""Measured against predicted: one RL-shaped step of a Qwen2.5-1.5B-shaped policy on one GPU.

For dense AdamW and for LoGRA in turn, on a randomly initialised bf16 Qwen2.5-1.5B (the real
architecture, no download) with a frozen reference copy:

    warm-up   one training step on random tokens, so the optimizer state exists
    static    memory allocated between steps (weights, gradients kept as zeros, state, reference)
    rollout   `generate` of R sequences, prompt + response tokens (the KV cache)
    training  reference log-probs (no grad), policy forward, a GRPO-style loss, backward
    step      `optimizer.step()`

and prints, per phase, `torch.cuda.max_memory_allocated` beside what `logra.memory.budget`
predicts for the same setting (one GPU, no sharding, bf16 weights and gradients, no fp32 master
copy, AdamW moments in the parameters' bf16 as torch keeps them, LoGRA's in fp32), and the ratio.
The simulator does not model the optimizer step's temporaries: the "step" row shows them.

    python scripts/gpu_memory_check.py                      # about 2 minutes on one H100/H200
    python scripts/gpu_memory_check.py --no-checkpointing --micro-batch 2

`check(args, config, device)` runs the same on any transformers config and device
(`scripts/gpu_checks.py` calls it; on the CPU nothing is measured, the measured column is NaN).
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import time

import torch

from logra.memory import (
    Assumptions,
    architecture,
    budget,
    logra_param_groups,
    model_stats,
)
from logra.memory.budget import GIB, STATIC, TRAINING
from logra.optim import LoGRA


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizers", nargs="+", default=["adamw", "logra"],
                        choices=["adamw", "logra"])
    parser.add_argument("--rollouts", type=int, default=16, help="sequences generated at once")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens")
    parser.add_argument("--response", type=int, default=768, help="response tokens")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per backward")
    parser.add_argument("--no-checkpointing", action="store_true",
                        help="keep every activation instead of recomputing each layer")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--embedding-rank", type=int, default=64)
    return parser.parse_args(argv)


def policy_config():
    """Qwen2.5-1.5B's transformers config, as the check builds it (no EOS: full-length rollouts)."""
    config = architecture("qwen2.5-1.5b").config()
    config.pad_token_id, config.eos_token_id = 0, None
    return config


def build_policy(config, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    with device:
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                attn_implementation="sdpa")


def token_logprobs(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """log π(token | prefix) for every position but the first; fp32 logits and log-softmax."""
    logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def training_step(policy, reference, optimizer, ids: torch.Tensor) -> None:
    """A GRPO-shaped step: reference log-probs, clipped-ratio loss with a KL penalty, backward."""
    with torch.no_grad():
        ref = token_logprobs(reference, ids)
    logp = token_logprobs(policy, ids)
    advantages = torch.randn(ids.shape[0], 1, device=ids.device)
    ratio = torch.exp(logp - logp.detach())
    kl = torch.exp(ref - logp) - (ref - logp) - 1  # k3 estimator of KL(π ‖ π_ref)
    loss = (-(ratio * advantages) + 0.04 * kl).mean()
    loss.backward()


def peak(fn, device: torch.device) -> float:
    """Run fn; return the peak allocated GiB during it (NaN off CUDA: nothing to read)."""
    if device.type != "cuda":
        fn()
        return math.nan
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / GIB


def predicted(name: str, args: argparse.Namespace, seq: int, config) -> dict[str, float]:
    """The simulator's static, rollout and training peaks (GiB) for this script's setting."""
    a = Assumptions(
        n_gpus=1, sharding="none", reserved_gib=0.0, weight_bytes=2, grad_bytes=2,
        master_weights=False, reference_model=True, micro_batch=args.micro_batch,
        activation_checkpointing=not args.no_checkpointing, rollout_sequences_per_gpu=args.rollouts,
        prompt_length=args.prompt, initial_response_length=args.response,
    )
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    options = ({"rank": args.rank, "embedding_rank": args.embedding_rank} if name == "logra"
               else {})
    parts = budget(model_stats(meta, name, **options), seq, a)
    static = sum(parts[k] for k in STATIC)
    return {
        "static": static / GIB,
        "rollout": (static + parts["kv cache"]) / GIB,
        "training": (static + sum(parts[k] for k in TRAINING)) / GIB,
        "step": static / GIB,
    }


def measure(name: str, args: argparse.Namespace, device: torch.device,
            config) -> dict[str, float]:
    torch.manual_seed(0)
    policy = build_policy(config, device)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    if not args.no_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if name == "adamw":
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    else:
        optimizer = LoGRA(logra_param_groups(policy, args.rank, args.embedding_rank), lr=1e-6,
                          predicted_kl_threshold=0.02)
    seq = args.prompt + args.response
    vocab = policy.config.vocab_size
    batch = torch.randint(1, vocab, (args.micro_batch, seq), device=device)

    policy.train()
    training_step(policy, reference, optimizer, batch)  # warm-up: the state now exists
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)  # gradient buffers stay, as in DeepSpeed/FSDP
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
    measured = {"static": torch.cuda.memory_allocated() / GIB if device.type == "cuda"
                else math.nan}

    prompts = torch.randint(1, vocab, (args.rollouts, args.prompt), device=device)
    policy.eval()
    rollout: dict[str, torch.Tensor] = {}

    def generate() -> None:
        with torch.no_grad():
            rollout["ids"] = policy.generate(
                prompts, max_new_tokens=args.response, min_new_tokens=args.response,
                do_sample=True, use_cache=True, pad_token_id=0)

    start = time.perf_counter()
    measured["rollout"] = peak(generate, device)
    print(f"  {name}: generated {tuple(rollout['ids'].shape)} in "
          f"{time.perf_counter() - start:.0f} s")
    ids = rollout.pop("ids")[: args.micro_batch]
    policy.train()
    measured["training"] = peak(lambda: training_step(policy, reference, optimizer, ids),
                                device)
    measured["step"] = peak(optimizer.step, device)
    return measured  # the models and the state go with this frame


def check(args: argparse.Namespace, config, device: torch.device
          ) -> list[tuple[str, str, float, float]]:
    """(optimizer, phase, measured GiB, predicted GiB) for every optimizer and phase."""
    seq = args.prompt + args.response
    rows = []
    for name in args.optimizers:
        start = time.perf_counter()
        measured = measure(name, args, device, config)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        expected = predicted(name, args, seq, config)
        print(f"  {name}: done in {time.perf_counter() - start:.0f} s")
        rows += [(name, phase, measured[phase], expected[phase]) for phase in measured]
    return rows


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    device = torch.device("cuda")
    seq = args.prompt + args.response
    print(f"Qwen2.5-1.5B bf16, {args.rollouts} rollouts × {seq} tokens, micro-batch "
          f"{args.micro_batch}, checkpointing {not args.no_checkpointing}, on "
          f"{torch.cuda.get_device_name()}")
    rows = check(args, policy_config(), device)
    print(f"\n{'optimizer':<10}{'phase':<10}{'measured GiB':>14}{'predicted GiB':>15}"
          f"{'measured/predicted':>20}")
    for name, phase, got, want in rows:
        print(f"{name:<10}{phase:<10}{got:>14.2f}{want:>15.2f}{got / want:>20.3f}")
    print("\n'step' is predicted as static memory alone: the simulator leaves out the "
          "optimizer step's temporaries (it runs after the activations are freed).")


if __name__ == "__main__":
    main()
