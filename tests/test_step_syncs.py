"""Host synchronizations inside `LoGRA.step()`: none with the KL control off, one with it on.

A CUDA-free proxy: every Python-level read of a tensor's value on the host (`item`, `tolist`,
`cpu`, `numpy`, `bool`, `float`, `int`, `index`) is counted while `step()` runs, except on the
step counters, which live on the host as `torch.optim.AdamW`'s do (reading them is no device
synchronization), and the finiteness flag's read by `StepGate` (it reads the flag of a CPU step
only, where that is no synchronization either; on an accelerator it leaves it on the device,
`test_the_gate_reads_only_a_cpu_flag`). Reads inside C++ kernels are not seen here;
`scripts/gpu_checks.py` checks the step on a GPU with `torch.cuda.set_sync_debug_mode`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from logra.optim import LoGRA
from logra.optim.gate import StepGate

CPU_FLAG_READ = StepGate.__post_init__.__code__  # `StepGate.kept`, for CPU flags only
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextmanager
def host_reads(exempt: list[torch.Tensor]) -> Iterator[list[str]]:
    """Record the name of every host read of a tensor not in `exempt` (by identity)."""
    reads: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def counting(name: str, method):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code
            if not any(self is t for t in exempt) and caller is not CPU_FLAG_READ:
                reads.append(name)
            return method(self, *args, **kwargs)
        return read

    for name, method in originals.items():
        setattr(torch.Tensor, name, counting(name, method))
    try:
        yield reads
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)


def policy() -> nn.Module:
    """Logits over 40 tokens: an embedding, batched and loop-path matrices, 1-D biases."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(40, 64), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 40))


def reads_per_step(opt: LoGRA, model: nn.Module, ids: torch.Tensor, steps: int = 3) -> list[int]:
    counts = []
    for step in range(steps + 1):
        opt.zero_grad()
        nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1).flatten()).backward()
        if step == 0:  # the first step creates the state (and the step counters)
            opt.step()
            continue
        counters = [s["step"] for s in opt.state.values()]
        with host_reads(counters) as reads:
            opt.step()
        counts.append(len(reads))
    return counts


def build(model: nn.Module, **options) -> LoGRA:
    matrices = [p for p in model.parameters() if p.dim() == 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": matrices[:2]}, {"params": matrices[2:], "foreach": False},
              {"params": vectors}]
    return LoGRA(groups, lr=1e-2, rank=4, **options)


@pytest.mark.parametrize("reconstruction", ["gain", "nystrom", "blend"])
@pytest.mark.parametrize(
    ("options", "limit"),
    [
        (dict(predicted_kl_threshold=None), 0),
        (dict(predicted_kl_threshold=0.02, kl_estimator="diag"), 1),
        (dict(predicted_kl_threshold=0.02, kl_estimator="jvp"), 1),
        (dict(predicted_kl_threshold=0.02, kl_estimator="calibrated", kl_probe_every=2), 1),
    ],
)
def test_host_reads_per_step(reconstruction: str, options: dict, limit: int) -> None:
    model = policy()
    ids = torch.randint(0, 40, (4, 12), generator=torch.Generator().manual_seed(1))
    opt = build(model, reconstruction=reconstruction, **options)
    if options.get("kl_estimator") in ("jvp", "calibrated"):
        opt.set_kl_batch(model, ids)
    assert reads_per_step(opt, model, ids) == [limit] * 3


def test_a_skipped_step_with_the_control_off_changes_nothing_and_is_counted() -> None:
    """With the control off the finiteness flag stays on the device: the step is masked there
    (weights and moments as they were) and counted when `skipped_steps` is read."""
    model = policy()
    ids = torch.randint(0, 40, (4, 12), generator=torch.Generator().manual_seed(1))
    opt = build(model, predicted_kl_threshold=None)
    reads_per_step(opt, model, ids, steps=1)
    weights = [p.detach().clone() for p in model.parameters()]
    moments = {(i, k): v.clone() for i, s in enumerate(opt.state.values())
               for k, v in s.items() if k.startswith("exp_avg")}
    opt.zero_grad()
    nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1).flatten()).backward()
    model[3].weight.grad[0, 0] = math.nan
    opt.step()
    assert opt.last_step["skipped"] is True and opt.last_step["gamma"] == 0.0
    assert opt.skipped_steps == 1 and opt.last_step["skipped_steps"] == 1
    assert opt.state_dict()["skipped_steps"] == 1
    for before, p in zip(weights, model.parameters(), strict=True):
        assert torch.equal(before, p)
    for (i, k), before in moments.items():
        assert torch.equal(before, list(opt.state.values())[i][k]), k
    reads_per_step(opt, model, ids, steps=1)  # the next sane step proceeds
    assert opt.last_step["skipped"] is False and opt.skipped_steps == 1


@pytest.mark.parametrize(("threshold", "reads"), [(None, 3), (1e-3, 0)])
def test_last_step_reads_as_python_scalars_with_the_control_on_or_off(threshold, reads) -> None:
    """γ, the skip and the count are a float, a bool and an int either way; with the control
    off they wait on the device (the step reads nothing) until the caller reads them."""
    model = policy()
    ids = torch.randint(0, 40, (4, 12), generator=torch.Generator().manual_seed(1))
    opt = build(model, predicted_kl_threshold=threshold, kl_estimator="diag")
    assert reads_per_step(opt, model, ids, steps=1) == [0 if threshold is None else 1]
    record = opt.last_step
    with host_reads([]) as counted:
        values = [record[key] for key in ("gamma", "skipped", "skipped_steps")]
        assert [record[key] for key in ("gamma", "skipped", "skipped_steps")] == values
    assert len(counted) == reads  # each read once, then kept
    assert [type(v) for v in values] == [float, bool, int] and values == [1.0, False, 0]
    assert dict(record) == {key: record[key] for key in record}


def test_skips_counted_on_the_device_ride_along_with_the_control_s_one_read() -> None:
    """Steps without control count their skips on the device; once a schedule turns the control
    on, that count is read with the flag and the prediction (one read per step, not two) and
    stays exact."""
    model = policy()
    ids = torch.randint(0, 40, (4, 12), generator=torch.Generator().manual_seed(1))
    opt = build(model, predicted_kl_threshold=None, kl_estimator="diag")
    reads_per_step(opt, model, ids, steps=1)
    opt.zero_grad()
    nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1).flatten()).backward()
    model[3].weight.grad[0, 0] = math.nan
    opt.step()  # skipped, counted on the device
    for group in opt.param_groups:
        group["predicted_kl_threshold"] = 1e-3
    opt.zero_grad()
    nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1).flatten()).backward()
    with host_reads([s["step"] for s in opt.state.values()]) as reads:
        opt.step()  # the first controlled step reads the pending count too
    assert len(reads) == 1
    assert opt.skipped_steps == 1 and opt.last_step["skipped_steps"] == 1
    assert reads_per_step(opt, model, ids, steps=2) == [1, 1]


def test_the_gate_reads_only_a_cpu_flag() -> None:
    """On the CPU the flag's value is read once (no synchronization there) and a kept step
    skips the identity gating; on another device (meta stands in) it is never read."""
    kept = StepGate(torch.ones((), dtype=torch.bool))
    x = torch.tensor([1.0, -2.0])
    assert kept.kept and kept.values(x) is x
    skipped = StepGate(torch.zeros((), dtype=torch.bool))
    assert not skipped.kept and torch.equal(skipped.values(x), torch.zeros(2))
    assert torch.equal(skipped.mask_(torch.tensor([math.nan, 3.0])), torch.zeros(2))
    assert torch.equal(kept.mask_(torch.tensor([math.inf, 3.0])), torch.tensor([0.0, 3.0]))
    with pytest.raises(RuntimeError):  # a meta tensor has no value to read ...
        bool(torch.ones((), dtype=torch.bool, device="meta"))
    elsewhere = StepGate(torch.ones((), dtype=torch.bool, device="meta"))  # ... nor is it read
    assert not elsewhere.kept
