"""Environment variables that pin torch's CPU floating point to one code path.

A CPU run of torch picks its kernels at run time: ATen's vectorised kernels by the instruction
set (`ATEN_CPU_CAPABILITY`, default: the best the CPU has), MKL's GEMMs by the CPU too (`MKL_CBWR`,
conditional numerical reproducibility), and both split work by thread count. Each choice
changes sums at round-off. The variables must be set before torch loads, so they belong in the
environment of a fresh process: set them in `os.environ` before torch is imported, or before
the notebooks' kernels start.

Two pins:

* `"avx2"` (the default): ATen's and MKL's AVX2 paths, which every x86-64 CPU since 2013–15
  has; as fast as the default on an AMD CPU (whose MKL path is AVX2 anyway);
* `"strict"`: ATen's `default` kernels (no explicit SIMD) and MKL's `COMPATIBLE` path, for
  CPUs without AVX2; about twice as slow (110 s against 56 s for 40 warm-up steps here).

The thread count is pinned too (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`: `PIN_THREADS`, the
reference machine's two, whatever the machine's core count). MKL's `STRICT` mode gives its GEMMs
the same result whatever the thread count, but only them (?gemm, ?symm, ?hemm, ?trsm: oneMKL
Developer Guide, "Reproducibility Conditions"); an SVD or a QR repeats only at a fixed count:
Fira's SFT runs of notebook 10 end 0.9-1.4 % apart with two torch threads instead of one. The
kit's training workers run one thread each; the pinned count is for what a notebook computes in
its own process.

Measured (scripts/warmup_determinism.py --matrix: 40 warm-up steps of proxy-1m, SHA-256 of the
weights, on a 2-core AMD EPYC with AVX-512, torch 2.13 CPU with MKL 2024.2): ATen's instruction
set changes the weights (AVX-512, AVX2 and default: three hashes), MKL's `COMPATIBLE` path
changes them, `MKL_CBWR=AVX2` does not (MKL already takes that path on this CPU; on an Intel
AVX-512 CPU it would not), `ONEDNN_MAX_CPU_ISA` and `MKL_ENABLE_INSTRUCTIONS` do not, nor do
1 and 2 threads. Under either pin the emulated AVX2-only machine and 2 threads give the pin's
hash. Across machines the pin is not enough: on an AMD EPYC under it, notebook 03's GRPO tables
and notebook 10's text tables moved within their tolerances from the committed ones, made on a
machine that was not recorded, while notebook 10's SFT base pretrained elsewhere
(docs/reproducibility.md).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

PIN_THREADS = 2  # threads of a pinned process: the reference machine's cores

PINS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"},
    "strict": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE,STRICT"},
}


def pinned_environment(pin: str = "avx2", threads: int = PIN_THREADS) -> dict[str, str]:
    """The environment variables of pin `pin` (a key of `PINS`) with `threads` threads."""
    if pin not in PINS:
        raise ValueError(f"unknown pin {pin!r}; valid pins: {list(PINS)}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    return {**PINS[pin], "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def _first_cpu() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo as key -> value (Linux), else empty."""
    cpuinfo = Path("/proc/cpuinfo")
    first: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        if not line.strip():
            break  # the first processor's block
        key, _, value = line.partition(":")
        first[key.strip()] = value.strip()
    return first


# As this process started: MKL reads MKL_CBWR once, when it initializes, so a later change of
# the variable does not change the path (and must not change the key); likewise the vendor.
_MKL_CBWR_AT_START = os.environ.get("MKL_CBWR")
_VENDOR = _first_cpu().get("vendor_id")
# A GPU task on a Ray cluster computes on its GPU; its driver names the results by the driver's
# path, which the task is given here so that both build the same keys (logra.experiments.
# ray_backend). Unset everywhere else.
PATH_OVERRIDE = "LOGRA_FLOATING_POINT_PATH"
_PATH_AT_START = os.environ.get(PATH_OVERRIDE)


def floating_point_path() -> str:
    """The floating-point code path this process computes on, as a cached result's key holds it
    (`logra.provenance.fingerprint`): the instruction set ATen dispatches to
    (`torch.backends.cpu.get_cpu_capability()`, which `ATEN_CPU_CAPABILITY` chose when torch
    loaded), MKL's path (`MKL_CBWR` as the process started; unset: MKL picks by CPU) and the
    CPU's vendor (MKL promises one result under `MKL_CBWR` across Intel CPUs only, and an AMD
    EPYC under the pin pretrained another SFT base: docs/reproducibility.md). Not in it: the
    CPU model, and thread counts (the kit's training workers run one thread each; what a
    notebook computes in its own process, such as notebook 10's SFT base, runs on the pin's
    threads, or the process's own without it). A pinned and an unpinned run of the same config
    give other numbers, so neither may be read back as the other. A Ray GPU task reports its
    driver's path (`PATH_OVERRIDE`)."""
    import torch

    if _PATH_AT_START:
        return _PATH_AT_START
    return (f"aten={torch.backends.cpu.get_cpu_capability()},mkl_cbwr={_MKL_CBWR_AT_START},"
            f"vendor={_VENDOR}")


def machine() -> dict[str, str | None]:
    """What a run's numbers hang on beyond its config, code and library versions: the CPU
    (vendor, model name, family/model/stepping of /proc/cpuinfo on Linux, since a virtual
    machine's model name can be as bare as "Intel(R) Xeon(R) Processor"; else
    `platform.processor()`), the instruction set ATen dispatches to
    (`torch.backends.cpu.get_cpu_capability()`), and each variable a pin sets as this process
    sees it (None: unset). A manifest holds it, so that two runs that differ can be told apart
    by machine (docs/reproducibility.md)."""
    import torch

    first = _first_cpu()
    cpu = " ".join(first[k] for k in ("vendor_id", "model name") if k in first)
    if {"cpu family", "model", "stepping"} <= set(first):
        cpu += f" (family {first['cpu family']}, model {first['model']}, " \
               f"stepping {first['stepping']})"
    return {"cpu": cpu or platform.processor() or None,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            **{key: os.environ.get(key) for key in pinned_environment()}}
