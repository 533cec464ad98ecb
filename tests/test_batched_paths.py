"""The batched (stacked) and the loop path: which one a tensor takes, and that they agree."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from logra.optim import LoGRA
from logra.optim.units import BATCH_MAX_NUMEL, CPU_BATCH_MAX_NUMEL, partition, slots_with_grad


@pytest.mark.parametrize(("device", "batched"), [("cpu", [True, False]), ("meta", [True, True])])
def test_foreach_none_batches_fewer_elements_on_the_cpu(device: str, batched: list[bool]) -> None:
    """A 256×256 matrix (2^16 elements) is batched anywhere; a 512×512 one (2^18) only off the
    CPU, where stacking copies cost more than the loop's Python time."""
    assert CPU_BATCH_MAX_NUMEL == 256 * 256 and BATCH_MAX_NUMEL == 512 * 512
    params = [nn.Parameter(torch.zeros(256, 256, device=device)),
              nn.Parameter(torch.zeros(512, 512, device=device))]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = LoGRA(params, rank=4)
    units = partition(slots_with_grad(opt.param_groups), opt.state)
    assert [unit.batched for unit in units] == batched


@pytest.mark.parametrize("reconstruction", ["gain", "nystrom"])
@pytest.mark.parametrize("threshold", [None, 1e-4])
def test_bf16_weights_with_decay_agree_on_both_paths(reconstruction: str,
                                                     threshold: float | None) -> None:
    """Weight decay read from bf16 parameters in place (no stacked fp32 copy) on the batched
    path gives the loop path's weights, to bf16 round-off."""
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(24, 40, generator=g).bfloat16() for _ in range(3)]
    grads = [[torch.randn(24, 40, generator=g).bfloat16() for _ in range(3)] for _ in range(4)]
    results = []
    for foreach in (False, True):
        params = [nn.Parameter(w.clone()) for w in start]
        opt = LoGRA(params, lr=1e-2, rank=4, weight_decay=2.0, foreach=foreach,
                    reconstruction=reconstruction, predicted_kl_threshold=threshold,
                    kl_estimator="diag")
        for step in grads:
            for p, grad in zip(params, step, strict=True):
                p.grad = grad.clone()
            opt.step()
        results.append([p.detach().float() for p in params])
        assert all(not torch.equal(p.float(), w.float()) for p, w in zip(params, start,
                                                                           strict=True))
    for loop, stacked in zip(*results, strict=True):
        torch.testing.assert_close(stacked, loop, rtol=1e-2, atol=1e-2)
