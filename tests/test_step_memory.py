"""Peak memory of `step()`, measured: the process's resident high-water mark around the steps.

Tensors this large are mmap'd by the allocator and returned on free, so any m×n temporary shows
up in the kernel's high-water mark (VmHWM). Each case runs in a fresh process with parameters and
gradients already resident; the mark is reset (/proc/self/clear_refs) before three steps, and
its growth over the resident size is the step's own peak memory: its persistent state plus
whatever temporaries it held at once. Linux only, like the CI machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MEASURE = r"""
import json, sys, torch
torch.set_num_threads(1)
from logra import LoGRA

def status(field):  # kB -> bytes, from the kernel's accounting of this process
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))

kind, dtype = sys.argv[1], getattr(torch, sys.argv[2])
torch.manual_seed(0)
weight = torch.nn.Parameter(torch.empty(4096, 4096, dtype=dtype).normal_(0, 0.02))
bias = torch.nn.Parameter(torch.zeros(4096, dtype=dtype))
params = [weight, bias]
if kind == "adamw":
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
else:
    opt = LoGRA(params, lr=1e-3, rank=16, reconstruction=kind)
for p in params:
    p.grad = torch.empty_like(p).normal_(0, 1e-3)
# one step of the same optimizer and path on a small matrix first: the code its kernels run
# (LAPACK's QR, pinv, ...) is paged in before the mark is reset, so that what grows after it
# is the step's memory, not the library's
small = [torch.nn.Parameter(torch.randn(4096, 64, dtype=dtype)),
         torch.nn.Parameter(torch.randn(64, dtype=dtype))]
warm = (torch.optim.AdamW(small, lr=1e-3, foreach=True) if kind == "adamw"
        else LoGRA(small, lr=1e-3, rank=16, reconstruction=kind, foreach=False))
for p in small:
    p.grad = torch.randn_like(p)
warm.step()
del small, warm
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the resident high-water mark (VmHWM) to the current size
before = status("VmRSS:")
for _ in range(3):
    opt.step()
state = sum(v.nbytes for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
print(json.dumps({"peak_growth": status("VmHWM:") - before, "state": state,
                  "matrix": weight.nbytes}))
"""


def measure(kind: str, dtype: str = "float32") -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", MEASURE, kind, dtype], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("kind", "dtype"),
                         [("gain", "float32"), ("nystrom", "float32"), ("gain", "bfloat16")])
def test_step_needs_its_state_and_blocks_not_a_matrix(kind: str, dtype: str) -> None:
    """docs/design.md §1.3: parameters + gradients + state + cache-sized blocks; no
    matrix-sized temporary."""
    m = measure(kind, dtype)
    fp32_matrix = 4096 * 4096 * 4
    assert m["state"] < 2_000_000  # 2·16·(4096+4096) fp32 moments + the bias's dense moments
    # Δ is evaluated in 1 MiB blocks, never whole: measured 4–11 MiB beyond the state (blocks,
    # P and Q, and glibc keeping freed blocks for reuse, which varies from run to run). The
    # bound, a third of an fp32 matrix (21 MiB), fails with a whole fp32 Δ (64 MiB) or a whole
    # fp32 copy of a bf16 gradient.
    assert m["peak_growth"] <= m["state"] + fp32_matrix // 3


def test_adamw_foreach_needs_temporaries_the_size_of_its_parameters() -> None:
    """The comparison that shows the measurement sees matrix-sized temporaries at all."""
    m = measure("adamw")
    assert m["state"] == 2 * 4 * (4096 * 4096 + 4096) + 2 * 4  # moments + two 0-d steps
    assert m["peak_growth"] >= m["state"] + m["matrix"] // 2
