"""Which projections LoGRA keeps between steps (`cache_projections`: True by default, or False)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from logra.optim import LoGRA


def step_twice(device: str, cache: bool, refresh_every: int | None = None) -> LoGRA:
    """Two steps of a 64×48 and a 32×48 matrix on `device` (the meta device stands in for an
    accelerator: the control off, nothing is read on the host)."""
    params = [nn.Parameter(torch.randn(64, 48, device=device)),
              nn.Parameter(torch.randn(32, 48, device=device))]
    opt = LoGRA(params, rank=4, predicted_kl_threshold=None, cache_projections=cache,
                refresh_every=refresh_every)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    return opt


@pytest.mark.parametrize(("device", "cache", "kept"), [
    ("cpu", True, 3), ("meta", True, 3), ("cpu", False, 0), ("meta", False, 0),
])
def test_projections_are_kept_on_their_device_unless_told(device: str, cache: bool,
                                                          kept: int) -> None:
    # P of 64 rows, P of 32 rows, and the Q of 48 columns they share
    opt = step_twice(device, cache)
    assert len(opt.projection_bank.cached) == kept
    assert all(key.device == device for key in opt.projection_bank.cached)


def test_the_default_caches_and_none_is_refused() -> None:
    assert LoGRA([nn.Parameter(torch.zeros(8, 8))]).cache_projections is True
    with pytest.raises(ValueError, match="cache_projections must be True or False, got None"):
        LoGRA([nn.Parameter(torch.zeros(8, 8))], cache_projections=None)


def test_a_refresh_epoch_replaces_the_cached_projections() -> None:
    opt = step_twice("cpu", True, refresh_every=1)
    assert sorted(key.epoch for key in opt.projection_bank.cached) == [1, 1, 1]  # epoch 1 only


def test_cached_and_regenerated_projections_are_the_same() -> None:
    kept = step_twice("cpu", True)
    for key, projection in kept.projection_bank.cached.items():
        assert torch.equal(projection, kept.projection_bank.draw(*key))
