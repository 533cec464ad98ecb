"""Which CPU settings change a proxy's warm-up at round-off (issue 17's probe).

Runs the first `--steps` steps of a proxy's supervised warm-up with the kit's own functions
(`logra.models.build.warmup_data`, `initial_policy`, `logra.models.warmup.warm_up`: the real
data, initialisation, AdamW and schedule) and prints the SHA-256 of the weights and the mean
training loss. The first 50 steps are the learning-rate ramp, which does not depend on
`max_steps`, so 40 steps here are the first 40 steps of the real build.

`--matrix` runs one fresh process per setting, one after another (the settings are environment
variables read when torch, MKL and oneDNN load), and prints a Markdown table. The settings:

* the instruction set of ATen's kernels (`ATEN_CPU_CAPABILITY`: default / avx2 / avx512);
* MKL's code path (`MKL_CBWR`, conditional numerical reproducibility: COMPATIBLE / AVX2);
* an emulated AVX2-only machine: ATen, MKL (`MKL_ENABLE_INSTRUCTIONS`) and oneDNN
  (`ONEDNN_MAX_CPU_ISA`) all limited to AVX2;
* the thread count (1 or 2);
* the pins of `logra.models.determinism`, on this machine and on the emulated AVX2 one.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/warmup_determinism.py --matrix   # ~5 min, 1 core
    OMP_NUM_THREADS=1 .venv/bin/python scripts/warmup_determinism.py --steps 40  # one setting
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "ONEDNN_MAX_CPU_ISA": "AVX2"}
# What an AVX2-only machine would not have, kept under a pin (the pin sets ATen's and MKL's path).
AVX2_HARDWARE = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def settings() -> list[tuple[str, dict[str, str], int]]:
    """(name, environment, threads) of every setting `--matrix` compares."""
    from logra.models.determinism import pinned_environment

    def pin(name: str, threads: int = 1) -> dict[str, str]:
        return pinned_environment(name, threads)

    return [
        ("default (AVX-512 machine)", {}, 1),
        ("2 threads", {}, 2),
        ("ATEN_CPU_CAPABILITY=avx512", {"ATEN_CPU_CAPABILITY": "avx512"}, 1),
        ("ATEN_CPU_CAPABILITY=avx2", {"ATEN_CPU_CAPABILITY": "avx2"}, 1),
        ("ATEN_CPU_CAPABILITY=default", {"ATEN_CPU_CAPABILITY": "default"}, 1),
        ("MKL_CBWR=COMPATIBLE", {"MKL_CBWR": "COMPATIBLE"}, 1),
        ("MKL_CBWR=AVX2", {"MKL_CBWR": "AVX2"}, 1),
        ("emulated AVX2 machine", AVX2_MACHINE, 1),
        ("pin strict", pin("strict"), 1),
        ("pin strict, emulated AVX2 machine", {**pin("strict"), **AVX2_HARDWARE}, 1),
        ("pin strict, 2 threads", pin("strict", 2), 2),
        ("pin avx2", pin("avx2"), 1),
        ("pin avx2, emulated AVX2 machine", {**pin("avx2"), **AVX2_HARDWARE}, 1),
        ("pin avx2, 2 threads", pin("avx2", 2), 2),
    ]


def weights_hash(model) -> str:
    """SHA-256 (first 16 hex digits) of every tensor of the state dict, in key order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def probe(scale: str, steps: int, threads: int, data_dir: str | None) -> dict:
    """Warm up `scale` for `steps` steps here; its weights' hash, mean loss and seconds."""
    import torch

    from logra.models.build import initial_policy, warmup_data
    from logra.models.ladder import get_scale
    from logra.models.warmup import warm_up

    torch.set_num_threads(threads)
    spec = get_scale(scale)
    # stop after `steps`; the one stop check at the end reads one prompt for one token
    config = dataclasses.replace(spec.warmup, max_steps=steps, eval_every=steps,
                                 checkpoint_every=steps + 1, stop_accuracy=None,
                                 max_new_tokens=1)
    if steps > spec.warmup.lr_warmup_steps:
        print(f"note: past step {spec.warmup.lr_warmup_steps} the schedule depends on max_steps; "
              "these are not the real build's steps", file=sys.stderr)
    train, valid = warmup_data(spec, data_dir)
    model, tokenizer = initial_policy(spec)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = warm_up(model, tokenizer, config, train, valid.select(range(1)),
                         Path(tmp) / "checkpoint.pt", "probe", progress=False)
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "loss": result.history[-1]["loss"],
        "weights": weights_hash(model),
        "seconds": round(time.perf_counter() - start, 1),
    }


def matrix(args: argparse.Namespace) -> None:
    """Every setting in a fresh process, one after another; a Markdown table of the results."""
    print("| setting | ATen kernels | threads | mean loss | weights (SHA-256) | s |")
    print("|---|---|---|---|---|---|")
    for name, env, threads in settings():
        command = [sys.executable, __file__, "--scale", args.scale, "--steps", str(args.steps),
                   "--threads", str(threads)]
        if args.data_dir:
            command += ["--data-dir", args.data_dir]
        base = {k: v for k, v in os.environ.items()
                if k not in {*AVX2_MACHINE, "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS"}}
        env = {"OMP_NUM_THREADS": str(threads), **env}
        out = subprocess.run(command, env={**base, **env},
                             check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        print(f"| {name} | {row['capability']} | {row['threads']} | {row['loss']:.9f} | "
              f"`{row['weights']}` | {row['seconds']} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="proxy-1m")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None, help="generated tasks' cache (results/data)")
    parser.add_argument("--matrix", action="store_true", help="every setting, one by one")
    args = parser.parse_args(argv)
    if args.matrix:
        matrix(args)
    else:
        print(json.dumps(probe(args.scale, args.steps, args.threads, args.data_dir)))


if __name__ == "__main__":
    main()
