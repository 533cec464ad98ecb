"""LoGRA as a torch optimizer: state, parity with AdamW, checkpoints, bad input, dtypes."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

from logra import LoGRA, RandomProjectionAdam
from logra.optim import sketch as sk
from logra.optim import sketch_shapes
from logra.optim.units import partition, slots_with_grad


def mixed_model(seed: int = 0) -> nn.Module:
    """Matrices of several shapes, a 4-D tensor, biases and a norm: every code path."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(48, 96), nn.LayerNorm(96), nn.GELU(), nn.Linear(96, 64), nn.GELU(),
        nn.Unflatten(1, (4, 4, 4)), nn.Conv2d(4, 40, 3, padding=1), nn.Flatten(),
        nn.Linear(640, 10),
    )


def batch(seed: int, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 48, generator=g), torch.randint(0, 10, (n,), generator=g)


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range) -> list[float]:
    losses = []
    for i in steps:
        x, y = batch(i)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def sketched(opt: LoGRA, p: torch.Tensor) -> bool:
    return "exp_avg_L" in opt.state[p]


def test_projections_are_the_ones_the_first_moment_sketch_lives_in() -> None:
    """Fixed projections: m_L = Pᵀ M and m_R = M Q with M = Σ_t (1-β1) β1^(T-t) G_t."""
    torch.manual_seed(0)
    w, bias = nn.Parameter(torch.zeros(48, 40)), nn.Parameter(torch.zeros(40))
    opt = LoGRA([w, bias], lr=1e-3, rank=4, oversample=2, predicted_kl_threshold=None)
    with pytest.raises(ValueError, match="no sketch moments"):
        opt.projections(w)  # before the first step
    grads = [torch.randn(48, 40) for _ in range(4)]
    for g in grads:
        w.grad, bias.grad = g, torch.randn(40)
        opt.step()
    P, Q = opt.projections(w)
    assert P.shape == (48, 6) and Q.shape == (40, 4)
    torch.testing.assert_close(P.T @ P, torch.eye(6), atol=1e-5, rtol=0)
    M = sum(0.1 * 0.9 ** (3 - t) * g for t, g in enumerate(grads))
    torch.testing.assert_close(opt.state[w]["exp_avg_L"], P.T @ M, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(opt.state[w]["exp_avg_R"], M @ Q, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="no sketch moments"):
        opt.projections(bias)  # a vector is not sketched
    with pytest.raises(ValueError, match="not in this optimizer"):
        opt.projections(nn.Parameter(torch.zeros(3, 3)))


def test_projections_follow_the_refresh_epoch() -> None:
    """refresh_every=2: steps 3 and 4 share P (m_L4 = β1 m_L3 + (1-β1) Pᵀ G4); step 5 draws anew."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.zeros(48, 40))
    opt = LoGRA([w], lr=1e-3, rank=4, refresh_every=2, predicted_kl_threshold=None)
    seen = []
    for _ in range(5):
        w.grad = torch.randn(48, 40)
        opt.step()
        seen.append((opt.projections(w), opt.state[w]["exp_avg_L"].clone(), w.grad.clone()))
    (P3, _), m_L3, _ = seen[2]
    (P4, _), m_L4, G4 = seen[3]
    (P5, _), _, _ = seen[4]
    assert torch.equal(P3, P4) and not torch.allclose(P4, P5)
    torch.testing.assert_close(m_L4, 0.9 * m_L3 + 0.1 * P4.T @ G4, atol=1e-6, rtol=1e-5)

def test_state_of_a_4096_square_matrix_is_exactly_the_sketch_moments() -> None:
    w = nn.Parameter(torch.zeros(4096, 4096))
    opt = LoGRA([w], lr=1e-3, rank=16)
    w.grad = torch.randn(4096, 4096)
    opt.step()
    state = opt.state[w]
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    moments = sum(v.numel() for k, v in tensors.items() if k != "step")
    assert moments == 2 * 16 * (4096 + 4096)
    assert sum(v.nbytes for k, v in tensors.items() if k != "step") == 1_048_576
    assert tensors["step"].numel() == 1  # plus one scalar step counter, and an int epoch
    assert set(state) == {"step", "epoch", "exp_avg_L", "exp_avg_sq_L", "exp_avg_R",
                          "exp_avg_sq_R"}
    assert all(v.dtype == torch.float32 for v in tensors.values())


def test_which_parameters_are_sketched() -> None:
    model = mixed_model()
    opt = LoGRA(model.parameters(), lr=1e-3, rank=8)
    train(model, opt, range(1))
    by_shape = {tuple(p.shape): sketched(opt, p) for p in model.parameters()}
    assert by_shape[(96, 48)] and by_shape[(64, 96)] and by_shape[(40, 4, 3, 3)]
    assert not by_shape[(96,)]  # 1-D: dense AdamW
    assert by_shape[(10, 640)]  # 8·640 + 10·8 = 5,200 < 6,400 numbers: worth sketching
    assert sketch_shapes((40, 4, 3, 3), 8) == ((8, 36), (40, 8))
    assert sketch_shapes((10, 640), 12) is None  # rank above the short side
    assert sketch_shapes((32, 32), 16) is None  # 16·64 = 32·32: a sketch saves nothing
    assert sketch_shapes((33, 32), 16) == ((16, 32), (33, 16))
    assert sketch_shapes((64, 64), 8, oversample=8) == ((16, 64), (64, 8))


@pytest.mark.usefixtures("deterministic_algorithms")
def test_dense_groups_match_adamw() -> None:
    ref_model, model = mixed_model(), mixed_model()
    ref = torch.optim.AdamW(ref_model.parameters(), lr=3e-3, weight_decay=0.1, foreach=False)
    opt = LoGRA(model.parameters(), lr=3e-3, weight_decay=0.1, sketch=False,
                predicted_kl_threshold=None)
    train(ref_model, ref, range(20))
    train(model, opt, range(20))
    for a, b in zip(ref_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)


def test_control_that_does_not_clip_changes_nothing() -> None:
    free, controlled = mixed_model(), mixed_model()
    opt_free = LoGRA(free.parameters(), lr=1e-3, predicted_kl_threshold=None)
    opt_ctl = LoGRA(controlled.parameters(), lr=1e-3, predicted_kl_threshold=1e6)
    train(free, opt_free, range(5))
    train(controlled, opt_ctl, range(5))
    assert opt_ctl.last_step["gamma"] == 1.0 and not opt_ctl.last_step["clipped"]
    for a, b in zip(free.parameters(), controlled.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("reconstruction", ["gain", "nystrom"])
def test_checkpoint_round_trip_is_bit_identical(reconstruction: str) -> None:
    kwargs = dict(lr=1e-3, rank=4, reconstruction=reconstruction, refresh_every=3, seed=7)
    straight = mixed_model()
    opt = LoGRA(straight.parameters(), **kwargs)
    train(straight, opt, range(10))

    first = mixed_model()
    opt1 = LoGRA(first.parameters(), **kwargs)
    train(first, opt1, range(5))
    buffer = io.BytesIO()
    torch.save({"model": first.state_dict(), "optim": opt1.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    resumed = mixed_model(seed=123)  # different init: everything must come from the checkpoint
    resumed.load_state_dict(saved["model"])
    opt2 = LoGRA(resumed.parameters(), **kwargs)
    opt2.load_state_dict(saved["optim"])
    train(resumed, opt2, range(5, 10))
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_state_dict_holds_only_tensors_ints_and_hyperparameters() -> None:
    model = mixed_model()
    opt = LoGRA(model.parameters(), lr=1e-3, rank=4, cache_projections=True)
    train(model, opt, range(2))
    state = opt.state_dict()
    for per_param in state["state"].values():
        for value in per_param.values():
            assert isinstance(value, (torch.Tensor, int))
    sketch_sizes = {tuple(v.shape) for s in state["state"].values() for v in s.values()
                    if isinstance(v, torch.Tensor)}
    assert (96, 48) not in sketch_sizes and (48, 4) not in sketch_sizes  # no P, Q stored
    assert isinstance(state["skipped_steps"], int)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_gradient_changes_nothing_and_is_counted(bad: float) -> None:
    """With the control on, which takes the skipped step's counters back (test_step_syncs: the
    same with it off, counters aside)."""
    model = mixed_model()
    opt = LoGRA(model.parameters(), lr=1e-3, rank=4, predicted_kl_threshold=0.02)
    train(model, opt, range(2))
    weights = copy.deepcopy(list(model.parameters()))
    state = copy.deepcopy(opt.state_dict())
    x, y = batch(99)
    nn.functional.cross_entropy(model(x), y).backward()
    model[3].weight.grad[0, 0] = bad
    opt.step()
    assert opt.last_step["skipped"] and opt.skipped_steps == 1
    assert opt.last_step["skipped_steps"] == 1
    for a, b in zip(weights, model.parameters(), strict=True):
        assert torch.equal(a, b)
    after = opt.state_dict()
    for key, per_param in state["state"].items():
        for name, value in per_param.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, after["state"][key][name]), name


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [
        (dict(rank=0), "rank"), (dict(rank=2.5), "rank"), (dict(lr=-1.0), "lr"),
        (dict(betas=(1.0, 0.999)), "betas"), (dict(betas=(0.9, -0.1)), "betas"),
        (dict(eps=0.0), "eps"), (dict(predicted_kl_threshold=0.0), "predicted_kl_threshold"),
        (dict(predicted_kl_threshold=-1.0), "predicted_kl_threshold"),
        (dict(weight_decay=-1.0), "weight_decay"), (dict(reconstruction="svd"), "reconstruction"),
        (dict(kl_estimator="exact"), "kl_estimator"), (dict(rtol=1.5), "rtol"),
        (dict(oversample=-1), "oversample"), (dict(refresh_every=0), "refresh_every"),
        (dict(amsgrad=True), "amsgrad"),
    ],
)
def test_bad_hyperparameters_name_the_argument(kwargs: dict, culprit: str) -> None:
    with pytest.raises(ValueError, match=culprit):
        LoGRA(mixed_model().parameters(), **kwargs)


@pytest.mark.parametrize(("kwargs", "culprit"), [
    (dict(lr="1e-3"), "lr must be a number.*YAML"), (dict(betas=0.9), "betas must be a pair"),
    (dict(betas=(0.9, "0.99")), "betas must be a pair"), (dict(eps="1e-8"), "eps must be"),
    (dict(lr=True), "lr must be a number"), (dict(seed=1.5), "seed must be an int"),
    (dict(sketch="no"), "sketch must be a bool"),
])
def test_ill_typed_hyperparameters_name_the_argument(kwargs: dict, culprit: str) -> None:
    """A value of the wrong type is a ValueError too, as the README promises for every bad
    hyperparameter (not a TypeError a caller catching ValueError would miss)."""
    with pytest.raises(ValueError, match=culprit):
        LoGRA(mixed_model().parameters(), **kwargs)


def test_positional_arguments_follow_adamw() -> None:
    """LoGRA(params, lr, betas, eps, weight_decay) as AdamW; the rest keyword-only."""
    model = mixed_model()
    opt = LoGRA(model.parameters(), 1e-3, (0.8, 0.99), 1e-6, 0.05)
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        1e-3, (0.8, 0.99), 1e-6, 0.05)
    with pytest.raises(TypeError):
        LoGRA(model.parameters(), 1e-3, (0.9, 0.999), 1e-8, 0.01, False, 16)


def test_an_adamw_state_is_refused_before_anything_changes() -> None:
    model = mixed_model()
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, model[0].in_features)).sum().backward()
    adamw.step()
    opt = LoGRA(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="another optimizer"):
        opt.load_state_dict(adamw.state_dict())
    assert not opt.state and opt.param_groups[0]["rank"] == 16


def test_bad_group_is_rejected_before_it_joins() -> None:
    model = mixed_model()
    opt = LoGRA(list(model.parameters())[:2], lr=1e-3)
    with pytest.raises(ValueError, match="rank"):
        opt.add_param_group({"params": list(model.parameters())[2:], "rank": -3})
    assert len(opt.param_groups) == 1


def test_sparse_and_complex_gradients_raise_before_any_change() -> None:
    emb = nn.Embedding(50, 8, sparse=True)
    dense = nn.Parameter(torch.randn(16, 16))
    opt = LoGRA([dense, *emb.parameters()], lr=1e-3, rank=2)
    dense.grad = torch.randn(16, 16)
    emb(torch.tensor([1, 2])).sum().backward()
    before = dense.detach().clone()
    with pytest.raises(TypeError, match="sparse gradients"):
        opt.step()
    assert torch.equal(dense, before) and len(opt.state) == 0
    with pytest.raises(TypeError, match="complex"):
        LoGRA([nn.Parameter(torch.randn(4, 4, dtype=torch.complex64))])


def test_bf16_parameters_keep_fp32_state_and_train() -> None:
    model = mixed_model().to(torch.bfloat16)
    opt = LoGRA(model.parameters(), lr=3e-3, rank=8)
    first = last = None
    for i in range(30):
        x, y = batch(i % 4)
        loss = nn.functional.cross_entropy(model(x.bfloat16()).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
        last = loss.item()
    assert last < 0.7 * first
    for p in model.parameters():
        assert p.dtype == torch.bfloat16
        for value in opt.state[p].values():
            if isinstance(value, torch.Tensor):
                assert value.dtype == torch.float32
    # load_state_dict must not cast the fp32 moments down to the parameters' bf16
    opt2 = LoGRA(model.parameters(), lr=3e-3, rank=8)
    opt2.load_state_dict(opt.state_dict())
    assert all(v.dtype == torch.float32 for s in opt2.state.values() for v in s.values()
               if isinstance(v, torch.Tensor))


def test_lr_scheduler_closure_and_set_to_none() -> None:
    model = mixed_model()
    opt = LoGRA(model.parameters(), lr=1e-2, rank=4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    x, y = batch(0)

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    losses = []
    for _ in range(3):
        losses.append(float(opt.step(closure)))
        scheduler.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.5**3)
    assert losses[-1] < losses[0]
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())
    opt.step()  # no gradients: a no-op, not an error
    # after a step with lr = 0 (and no weight decay) nothing moves
    frozen = LoGRA(model.parameters(), lr=0.0, rank=4)
    before = [p.detach().clone() for p in model.parameters()]
    frozen.step(closure)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_projections_are_regenerated_identically_or_cached() -> None:
    a, b = mixed_model(), mixed_model()
    opt_a = LoGRA(a.parameters(), lr=1e-3, rank=4, seed=3, cache_projections=False)
    opt_b = LoGRA(b.parameters(), lr=1e-3, rank=4, seed=3)
    train(a, opt_a, range(4))
    train(b, opt_b, range(4))
    assert opt_b.projection_bank.cached and not opt_a.projection_bank.cached
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_different_seeds_give_different_trajectories() -> None:
    a, b = mixed_model(), mixed_model()
    train(a, LoGRA(a.parameters(), lr=1e-2, rank=4, seed=0), range(3))
    train(b, LoGRA(b.parameters(), lr=1e-2, rank=4, seed=1), range(3))
    assert not torch.equal(a[0].weight, b[0].weight)


def test_per_group_rank_and_dense_group() -> None:
    model = mixed_model()
    first, second = model[0], model[3]
    opt = LoGRA([{"params": first.parameters(), "rank": 12},
                 {"params": second.parameters(), "sketch": False}], lr=1e-3, rank=4)
    train(model, opt, range(1))
    assert opt.state[first.weight]["exp_avg_L"].shape == (12, 48)
    assert opt.state[second.weight]["exp_avg"].shape == (64, 96)


def test_maximize_ascends() -> None:
    w = nn.Parameter(torch.zeros(32, 32))
    opt = LoGRA([w], lr=1e-2, rank=4, maximize=True, predicted_kl_threshold=None,
                weight_decay=0.0)
    target = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        opt.zero_grad()
        (w * target).sum().backward()
        opt.step()
    assert float((w * target).sum()) > 0


def test_naive_projection_updates_stay_in_the_fixed_subspace() -> None:
    w = nn.Parameter(torch.zeros(64, 24))
    opt = RandomProjectionAdam([w], lr=1e-2, rank=4, weight_decay=0.0, seed=5)
    for i in range(6):
        opt.zero_grad()
        w.grad = torch.randn(64, 24, generator=torch.Generator().manual_seed(i))
        opt.step()
    P = sk.orthonormal_projection(64, 4, sk.seed_for(5, 0, 0, 0))
    residual = w - P @ (P.T @ w)  # the part of W outside span(P)
    assert float(residual.norm()) < 1e-5 * float(w.norm())
    assert opt.state[w]["exp_avg"].shape == (4, 24)
    assert torch.linalg.matrix_rank(w.detach()) == 4


def test_naive_projection_compresses_the_larger_side() -> None:
    wide = nn.Parameter(torch.zeros(16, 80))
    opt = RandomProjectionAdam([wide], lr=1e-2, rank=4)
    wide.grad = torch.randn(16, 80)
    opt.step()
    assert opt.state[wide]["exp_avg"].shape == (16, 4)


@pytest.mark.parametrize(
    ("kwargs", "atol"),
    [(dict(), 1e-6), (dict(maximize=True, refresh_every=7), 1e-6),
     (dict(kl_estimator="diag", predicted_kl_threshold=1e-9), 1e-6),  # clipped every step
     # The sketches agree bitwise; batched and single pinv (SVD) differ in the last bits, which
     # the Nyström core's pseudo-inverse amplifies over 20 steps at lr 1e-2.
     (dict(reconstruction="nystrom", oversample=2), 1e-5)],
    ids=["gain", "maximize-refresh", "clipped", "nystrom"],
)
def test_batched_and_loop_paths_agree(kwargs: dict, atol: float) -> None:
    """foreach=True (stacked matmuls, _foreach_*) against foreach=False (per-parameter loop)."""
    def build() -> nn.Module:
        torch.manual_seed(0)  # three 32×32 matrices, so a stack has B = 3
        return nn.Sequential(mixed_model(), nn.Linear(10, 32), nn.Linear(32, 32),
                             nn.Linear(32, 32), nn.Linear(32, 10))

    def run(foreach: bool) -> tuple[nn.Module, LoGRA]:
        model = build()
        opt = LoGRA(model.parameters(), lr=1e-2, rank=4, foreach=foreach, **kwargs)
        train(model, opt, range(20))
        return model, opt

    loop, loop_opt = run(False)
    stacked, stacked_opt = run(True)
    for a, b in zip(loop.parameters(), stacked.parameters(), strict=True):
        torch.testing.assert_close(b, a, atol=atol, rtol=0)
    assert loop_opt.last_step["gamma"] == pytest.approx(stacked_opt.last_step["gamma"], rel=1e-5)
    x, y = batch(0)
    nn.functional.cross_entropy(stacked(x), y).backward()
    units = partition(slots_with_grad(stacked_opt.param_groups), stacked_opt.state)
    assert any(u.batched and u.sketched and len(u.slots) > 1 for u in units)


def seeded_projections(*seeds: int, shape: tuple[int, int] = (48, 40)) -> list[tuple]:
    """(P, Q) of one matrix per seed, each in its own param group, after a step (rank 4,
    oversample 2: P is 48×6, Q 40×4)."""
    params = [nn.Parameter(torch.zeros(shape)) for _ in seeds]
    opt = LoGRA([dict(params=[p], seed=s) for p, s in zip(params, seeds, strict=True)], lr=1e-3,
                rank=4, oversample=2, predicted_kl_threshold=None)
    for p in params:
        p.grad = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    opt.step()
    return [opt.projections(p) for p in params]


def test_each_projection_follows_its_group_s_seed() -> None:
    """The same seed draws the same P and Q, in one optimizer or two; another seed draws both
    anew (a Q drawn from a fixed seed would keep one side of every sketch the same)."""
    (P3, Q3), (P5, Q5), (P3_again, Q3_again) = seeded_projections(3, 5, 3)
    ((P3_alone, Q3_alone),) = seeded_projections(3)
    assert P3.shape == (48, 6) and Q3.shape == (40, 4)
    for same in ((P3, P3_again), (Q3, Q3_again), (P3, P3_alone), (Q3, Q3_alone)):
        assert torch.equal(*same)
    # distinct random projections: far from equal, not just different in the last bit
    assert (P3 - P5).abs().max() > 0.1 and (Q3 - Q5).abs().max() > 0.1
