"""Environment variables that pin torch's CPU floating point to one code path.

A CPU run of torch picks its kernels at run time: ATen's vectorised kernels by the instruction
set (`ATEN_CPU_CAPABILITY`, default: the best the CPU has), MKL's GEMMs by the CPU too (`MKL_CBWR`,
conditional numerical reproducibility), and both split work by thread count. Each choice
changes sums at round-off. The variables must be set before torch loads, so they belong in the
environment of a fresh process (`logra-repro reproduce` passes them to its notebooks' kernels).

Two pins (what scripts/warmup_determinism.py measures):

* `"strict"`: ATen's scalar `default` kernels and MKL's `COMPATIBLE` (SSE2) path, which every
  x86-64 CPU has;
* `"avx2"`: ATen's and MKL's AVX2 paths, which every x86-64 CPU since 2013–15 has; faster.

The thread count is pinned too (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`): a reduction split over
more threads adds in another order.
"""

from __future__ import annotations

PINS: dict[str, dict[str, str]] = {
    "strict": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE,STRICT"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"},
}


def pinned_environment(pin: str = "strict", threads: int = 1) -> dict[str, str]:
    """The environment variables of pin `pin` (a key of `PINS`) with `threads` threads."""
    if pin not in PINS:
        raise ValueError(f"unknown pin {pin!r}; valid pins: {list(PINS)}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    return {**PINS[pin], "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
