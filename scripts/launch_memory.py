"""What the memory accountant predicts per GPU for the real-scale launch configs.

For each `experiments/launch/trl_grpo_<scale>.yaml` on the node of
`experiments/launch/accelerate_fsdp2_8gpu.yaml`, the real architecture is built on the `meta`
device (nothing downloaded) and `logra.memory.budget` prices one GPU for dense AdamW and for
LoGRA at the config's rank, with the assumptions that describe that launch:

    FSDP2 full shard (zero3) over the node's GPUs; fp32 sharded parameters (the master weights,
    `weight_bytes=4`, no separate master copy) gathered one decoder layer at a time for bf16
    compute; fp32 sharded gradients; AdamW moments fp32; no reference model (TRL's beta = 0);
    activation checkpointing; one micro-batch = the completions a GPU scores per step; rollout
    by `generate` over the same completions, cache freed before training; prompt 512 tokens,
    response `max_completion_length`.

The accountant divides optimizer state evenly over the GPUs. LoGRA under FSDP2 keeps the left
moments m_L, v_L (k×n per matrix) replicated on every rank and shards the right ones by rows
(`logra.optim.distributed`): the column "LoGRA state, FSDP2 layout" is that per-rank amount
(rank 0, which holds the ⌈m/N⌉-row shards).

    python scripts/launch_memory.py            # Markdown table, as in docs/distributed.md
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from logra.memory import ARCHITECTURES, Assumptions, budget, max_fitting_length, model_stats
from logra.memory.budget import GIB, ROLLOUT, STATIC, TRAINING
from logra.memory.params import trainable_params
from logra.models import SCALES
from logra.optim import sketch_shapes

LAUNCH = Path(__file__).resolve().parents[1] / "experiments" / "launch"
# scale of the launch configs -> the `logra.memory` architecture of its hub model
ARCHITECTURE_OF = {"1.5b": "qwen2.5-1.5b", "7b": "qwen2.5-7b", "27b": "gemma-3-27b"}
PROMPT_TOKENS = 512


def assumptions(run: dict, gpus: int) -> Assumptions:
    return Assumptions(
        n_gpus=gpus, gpu_memory_gib=80.0, sharding="zero3", weight_bytes=4, grad_bytes=4,
        master_weights=False, reference_model=False, activation_checkpointing=True,
        micro_batch=run["per_device_train_batch_size"],
        rollout_sequences_per_gpu=run["per_device_train_batch_size"],
        prompt_length=PROMPT_TOKENS, initial_response_length=run["max_completion_length"],
        response_growth_per_step=0.0,
    )


def logra_fsdp2_state_bytes(model, rank: int, embedding_rank: int, gpus: int) -> int:
    """Rank 0's LoGRA state under FSDP2: replicated k×n moments, ⌈m/N⌉-row shards of the rest."""
    total = 0
    for p in trainable_params(model):
        r = embedding_rank if p.embedding else rank
        rows = math.ceil(p.shape[0] / gpus) if p.shape else 1
        shapes = sketch_shapes(p.shape, r)
        if shapes is None:  # dense AdamW moments, sharded like the parameter
            total += 2 * 4 * rows * math.prod(p.shape[1:]) + 4
        else:
            (k, n), (_, r) = shapes
            total += 2 * 4 * (k * n + rows * r) + 4
    return total


def rows(gpus: int) -> list[dict]:
    table = []
    for scale, architecture in ARCHITECTURE_OF.items():
        path = LAUNCH / f"trl_grpo_{scale}.yaml"
        run = yaml.safe_load(path.read_text())
        if run["model"] != SCALES[scale].hub_id:
            raise ValueError(f"{path.name} trains {run['model']}, not the {scale} scale's "
                             f"{SCALES[scale].hub_id} whose architecture is priced")
        arch = ARCHITECTURES[architecture]
        model = arch.build()
        a = assumptions(run, gpus)
        seq = PROMPT_TOKENS + run["max_completion_length"]
        row = dict(config=path.name, model=arch.label, seq=seq)
        for name, options in (("adamw", dict(state_dtype="float32")),
                              ("logra", dict(rank=run["rank"],
                                             embedding_rank=run["embedding_rank"]))):
            stats = model_stats(model, name, **options)
            parts = budget(stats, seq, a)
            static = sum(parts[k] for k in STATIC)
            training = sum(parts[k] for k in TRAINING)
            rollout = sum(parts[k] for k in ROLLOUT)
            row[f"{name}_state"] = parts["optimizer state"] / GIB
            row[f"{name}_static"] = static / GIB
            row[f"{name}_peak"] = (static + max(training, rollout)) / GIB
            row[f"{name}_max_seq"] = max_fitting_length(stats, a)
        row["logra_fsdp2_state"] = logra_fsdp2_state_bytes(
            model, run["rank"], run["embedding_rank"], gpus) / GIB
        row["training"], row["rollout"] = training / GIB, rollout / GIB
        row["capacity"] = a.capacity_bytes() / GIB
        table.append(row)
    return table


def main() -> None:
    accelerate = yaml.safe_load((LAUNCH / "accelerate_fsdp2_8gpu.yaml").read_text())
    gpus = accelerate["num_processes"]
    print(f"Per GPU, GiB, {gpus}x80 GB node (capacity after 4 GiB reserved: 76)\n")
    print("| config | model | prompt+response | AdamW state | LoGRA state (accountant / "
          "FSDP2 layout) | activations+logits | rollout KV | AdamW peak | LoGRA peak | "
          "longest sequence that fits, AdamW / LoGRA |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(gpus):
        print(f"| {r['config']} | {r['model']} | {r['seq']} | {r['adamw_state']:.2f} | "
              f"{r['logra_state']:.3f} / {r['logra_fsdp2_state']:.3f} | {r['training']:.2f} | "
              f"{r['rollout']:.2f} | {r['adamw_peak']:.1f} | {r['logra_peak']:.1f} | "
              f"{r['adamw_max_seq']:,} / {r['logra_max_seq']:,} |")


if __name__ == "__main__":
    main()
