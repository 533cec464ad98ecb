"""LoGRA on two CPU ranks (gloo): DDP with and without the sketch hook, FSDP2, DCP checkpoints.

Each test spawns two processes (`torch.multiprocessing.spawn`) that run one function of this
module and save what it returns; the test compares that with a single-process run. One spawn
per test keeps the start-up cost (importing torch twice) to a few seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from logra import LoGRA
from logra.optim.comm_hook import register_sketch_hook

WORLD = 2
STEPS = 10
TOL = 1e-5

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


# ------------------------------------------------------------------ launching ranks

def _rank_main(rank: int, fn: Callable, out: Path, args: tuple) -> None:
    torch.set_num_threads(1)
    # a file rendezvous: no port is picked here and taken by another process before the ranks
    # bind it (gloo's own connections get their ports from the OS)
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank,
                            world_size=WORLD)
    try:
        torch.save(fn(rank, *args), out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks inherit OMP_NUM_THREADS=1; the variable is restored after the test."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def on_ranks(fn: Callable, tmp_path: Path, *args) -> list:
    """fn(rank, *args) on WORLD gloo ranks; the list of what each returned."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank_main, args=(fn, tmp_path, args), nprocs=WORLD, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def local_half(t: torch.Tensor, rank: int) -> torch.Tensor:
    """Rank `rank`'s contiguous share of a global batch."""
    return t.chunk(WORLD)[rank]


# ------------------------------------------------------------------ DDP and the sketch hook

def wide_mlp(width: int = 512) -> nn.Module:
    """Two width×width matrices LoGRA sketches at r = 16, and a 10-row head it does not."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 10))


def classification_batch(step: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)


def mixed_groups(model: nn.Module) -> list[dict]:
    """The two square matrices with Nyström (compressible), everything else with gain."""
    square = [model[2].weight, model[4].weight]
    rest = [p for p in model.parameters() if all(p is not q for q in square)]
    return [{"params": square, "reconstruction": "nystrom"}, {"params": rest}]


def make_logra(params, **options) -> LoGRA:
    # a budget that clips every step, so that γ < 1 is part of what must agree
    return LoGRA(params, **{**dict(lr=3e-3, rank=16, predicted_kl_threshold=1e-6,
                                   kl_estimator="diag", weight_decay=0.01, seed=3,
                                   refresh_every=4), **options})


def train_classifier(
    model: nn.Module, opt: LoGRA, rank: int | None, kl_model: nn.Module | None = None,
) -> list[float]:
    """STEPS steps on the global batch (rank None) or on this rank's half; the γs.

    With `kl_model`, the JVP estimator predicts on the step's batch, counting only the examples
    with label < 6 (so the ranks' halves hold different numbers of "tokens").
    """
    gammas = []
    for step in range(STEPS):
        x, y = classification_batch(step)
        if rank is not None:
            x, y = local_half(x, rank), local_half(y, rank)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if kl_model is not None:
            opt.set_kl_batch(kl_model, x, token_mask=y < 6)
        opt.step()
        gammas.append(opt.last_step["gamma"])
    return gammas


def weights_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def ddp_runs(rank: int) -> dict:
    """Dense all-reduce and sketch-hook runs of the same model and batches, a JVP-controlled
    run, and byte counts."""
    results = {}
    for hook in (False, True):
        model = wide_mlp()
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = make_logra(mixed_groups(model))
        state = register_sketch_hook(ddp, opt) if hook else None
        gammas = train_classifier(ddp, opt, rank)
        results["hook" if hook else "dense"] = dict(
            weights=weights_of(model), gammas=gammas, ratio=state.ratio if hook else 1.0,
        )
    model = wide_mlp()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = make_logra(mixed_groups(model), **JVP, process_group=dist.group.WORLD)
    register_sketch_hook(ddp, opt)
    gammas = train_classifier(ddp, opt, rank, kl_model=model)
    results["jvp"] = dict(weights=weights_of(model), gammas=gammas)

    for width in (512, 2048):  # bytes of one step on bias-free square matrices, all compressed
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(3)])
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = LoGRA(model.parameters(), rank=16, reconstruction="nystrom")
        state = register_sketch_hook(ddp, opt)
        ddp(torch.randn(4, width)).square().mean().backward()
        results[f"bytes_{width}"] = (state.sent_bytes, state.dense_bytes)
    return results


JVP = dict(kl_estimator="jvp", predicted_kl_threshold=1e-3)


def test_ddp_sketch_hook_matches_dense_all_reduce_and_single_process(tmp_path: Path) -> None:
    ranks = on_ranks(ddp_runs, tmp_path)
    model = wide_mlp()
    opt = make_logra(mixed_groups(model))
    single_gammas = train_classifier(model, opt, None)
    single = weights_of(model)

    dense, hook = ranks[0]["dense"], ranks[0]["hook"]
    for r in range(1, WORLD):  # every rank holds the same weights
        assert max_diff(ranks[r]["dense"]["weights"], dense["weights"]) == 0
        assert max_diff(ranks[r]["hook"]["weights"], hook["weights"]) == 0
    assert max_diff(dense["weights"], single) < TOL  # DDP = one process with the global batch
    assert max_diff(hook["weights"], dense["weights"]) < TOL  # the hook changes nothing
    assert max(single_gammas) < 1.0  # the KL control clipped every step, and γ agreed
    assert dense["gammas"] == pytest.approx(single_gammas, rel=1e-4)
    assert hook["gammas"] == pytest.approx(single_gammas, rel=1e-4)
    # the Nyström matrices travel as r·(m + n) sketch numbers, gain matrices and biases in full
    numbers = sum(p.numel() for p in model.parameters())
    square = 512 * 512
    assert hook["ratio"] == pytest.approx((numbers - 2 * square + 2 * 16 * 1024) / numbers)
    print(f"sketch hook, mixed model: {hook['ratio']:.2%} of dense bytes; max |Δw| "
          f"hook vs dense {max_diff(hook['weights'], dense['weights']):.1e}, "
          f"DDP vs one process {max_diff(dense['weights'], single):.1e}")

    # the JVP estimator (with the hook): each rank predicts on its own half, token-weighted
    model = wide_mlp()
    opt = make_logra(mixed_groups(model), **JVP)
    jvp_gammas = train_classifier(model, opt, None, kl_model=model)
    assert max_diff(ranks[0]["jvp"]["weights"], weights_of(model)) < TOL
    assert ranks[0]["jvp"]["gammas"] == pytest.approx(jvp_gammas, rel=1e-4)
    assert max(jvp_gammas) < 1.0

    r = 16
    for width in (512, 2048):
        sent, dense_bytes = ranks[0][f"bytes_{width}"]
        assert dense_bytes == 3 * width * width * 4
        assert sent == 3 * (r * width + width * r) * 4  # fp32 L and R, nothing else
        print(f"sketch hook, r={r}, {width}x{width}: {sent / dense_bytes:.2%} of dense bytes")
    assert ranks[0]["bytes_512"][0] / ranks[0]["bytes_512"][1] == pytest.approx(2 * r / 512)
    assert ranks[0]["bytes_2048"][0] / ranks[0]["bytes_2048"][1] < 0.02


# ------------------------------------------------------------------ FSDP2

def uneven_mlp(seed: int = 0) -> nn.Module:
    """Row counts that split unevenly over two ranks (33 → 17 + 16, 3 → 2 + 1, 1 → 1 + 0)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(48, 96), nn.LayerNorm(96), nn.GELU(), nn.Linear(96, 33),
                         nn.GELU(), nn.Linear(33, 3), nn.GELU(), nn.Linear(3, 1))


FSDP_CONFIGS = {
    # batched (foreach) path, gain rule
    "gain": dict(reconstruction="gain"),
    # per-matrix loop, Nyström with oversampling, projections refreshed every 4 steps
    "nystrom": dict(reconstruction="nystrom", oversample=1, refresh_every=4, foreach=False),
}


def fsdp_logra(model: nn.Module, name: str) -> LoGRA:
    return LoGRA(model.parameters(), lr=1e-2, rank=2, predicted_kl_threshold=5e-6,
                 kl_estimator="diag", weight_decay=0.01, seed=5, **FSDP_CONFIGS[name])


def regression_batch(step: int, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(200 + step)
    return torch.randn(n, 48, generator=g), torch.randn(n, 1, generator=g)


def train_regression(model: nn.Module, opt: LoGRA, rank: int | None, steps: range) -> list:
    gammas = []
    for step in steps:
        x, y = regression_batch(step)
        if rank is not None:
            x, y = local_half(x, rank), local_half(y, rank)
        loss = (model(x) - y).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        gammas.append(opt.last_step["gamma"])
    return gammas


def sharded(seed: int) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    model = uneven_mlp(seed)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}


def fsdp_runs(rank: int, checkpoint_dir: Path) -> dict:
    """Each config 10 steps straight; the gain config also saved at 5 and resumed into a model
    and optimizer built from another seed."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    results = {}
    for name in FSDP_CONFIGS:
        model = sharded(seed=0)
        opt = fsdp_logra(model, name)
        gammas = train_regression(model, opt, rank, range(STEPS // 2))
        if name == "gain":
            dcp.save({"model": get_model_state_dict(model),
                      "optim": get_optimizer_state_dict(model, opt)}, checkpoint_id=checkpoint_dir)
            sketched = opt.state[model[3].weight]
            results["moment_placements"] = {k: str(v.placements) for k, v in sketched.items()
                                            if hasattr(v, "placements")}
        gammas += train_regression(model, opt, rank, range(STEPS // 2, STEPS))
        results[name] = dict(weights=full_weights(model), gammas=gammas)

    model = sharded(seed=0)
    opt = LoGRA(model.parameters(), kl_estimator="jvp", predicted_kl_threshold=0.02)
    model(torch.ones(2, 48)).sum().backward()
    with pytest.raises(NotImplementedError, match="jvp"):
        opt.step()
    results["jvp_refused_before_any_change"] = not opt.state

    model = sharded(seed=1)
    opt = fsdp_logra(model, "gain")
    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    dcp.load(state, checkpoint_id=checkpoint_dir)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, opt, state["optim"])
    gammas = train_regression(model, opt, rank, range(STEPS // 2, STEPS))
    results["resumed"] = dict(weights=full_weights(model), gammas=gammas)
    return results


def test_fsdp2_matches_single_process_and_resumes_from_a_sharded_checkpoint(
    tmp_path: Path,
) -> None:
    (tmp_path / "ranks").mkdir()
    ranks = on_ranks(fsdp_runs, tmp_path / "ranks", tmp_path / "checkpoint")
    for name in FSDP_CONFIGS:
        model = uneven_mlp()
        opt = fsdp_logra(model, name)
        gammas = train_regression(model, opt, None, range(STEPS))
        single = {n: p.detach() for n, p in model.named_parameters()}
        for r in range(WORLD):
            run = ranks[r][name]
            assert max_diff(run["weights"], single) < TOL, (name, r)
            assert run["gammas"] == pytest.approx(gammas, rel=1e-4)
        assert max(gammas) < 1.0  # the control clipped every step: the all-reduced KL̂ mattered
        assert all(math.isfinite(g) for g in gammas)
        print(f"FSDP2 {name}: max |Δw| vs one process "
              f"{max(max_diff(ranks[r][name]['weights'], single) for r in range(WORLD)):.1e}")

    resumed, straight = ranks[0]["resumed"], ranks[0]["gain"]
    assert max_diff(resumed["weights"], straight["weights"]) < TOL
    print(f"FSDP2 resumed at {STEPS // 2}: max |Δw| at {STEPS} "
          f"{max_diff(resumed['weights'], straight['weights']):.1e}")
    assert resumed["gammas"] == pytest.approx(straight["gammas"][STEPS // 2:], rel=1e-5)
    assert ranks[0]["jvp_refused_before_any_change"]
    assert ranks[0]["moment_placements"] == {
        "exp_avg_L": "(Replicate(),)", "exp_avg_sq_L": "(Replicate(),)",
        "exp_avg_R": "(Shard(dim=0),)", "exp_avg_sq_R": "(Shard(dim=0),)",
    }


# ------------------------------------------------------------------ the GRPO harness under DDP

def even_length(text: str, gold: str) -> float:
    """The reward stand-in of tests/test_rl_runs.py (the smoke proxy solves nothing)."""
    return float(len(text) % 2 == 0)


def grpo_rank(rank: int, config: dict):
    from logra.rl import runner

    runner.reward = even_length
    return runner.run_grpo(config, progress=False)


@pytest.mark.slow
def test_ddp_grpo_equals_one_process_with_the_same_global_batch(tmp_path: Path,
                                                                monkeypatch) -> None:
    from logra.models import prepare
    from logra.rl import config as cfg
    from logra.rl import runner

    data = tmp_path / "data"
    model = prepare("smoke", root=tmp_path / "models", data_dir=data, progress=False)
    base = dict(model=str(model), data_dir=str(data), optimizer="logra", kl_estimator="jvp",
                predicted_kl_threshold=1e-3, steps=STEPS, eval_every=STEPS,
                checkpoint_every=STEPS, run_name="ddp")
    (tmp_path / "ranks").mkdir()
    ranks = on_ranks(grpo_rank, tmp_path / "ranks",
                     cfg.resolve("grpo", "smoke", results_dir=str(tmp_path / "two"), **base))
    monkeypatch.setattr(runner, "reward", even_length)
    config = cfg.resolve("grpo", "smoke", results_dir=str(tmp_path / "one"), **base)
    single = runner.run_grpo(config, progress=False)

    def weights(results: str) -> dict[str, torch.Tensor]:
        path = cfg.run_dir(config.replace(results_dir=results)) / runner.CHECKPOINT_FILE
        return torch.load(path, weights_only=False)["policy"]

    error = max_diff(weights(str(tmp_path / "two")), weights(str(tmp_path / "one")))
    print(f"DDP GRPO, {STEPS} steps: max |Δw| vs one process {error:.1e}")
    assert error < TOL
    columns = [c for c in runner.COLUMNS if c not in runner.TIMING_COLUMNS]
    for records in ranks:
        pd.testing.assert_frame_equal(records[columns], single[columns], check_exact=False,
                                      rtol=1e-4, atol=1e-6)
    train = single.iloc[1:]
    assert (train["grad_norm"] > 0).sum() > STEPS // 2 and (train["gamma"] < 1).any()


# ------------------------------------------------------------------ single-process pieces

def test_min_norm_matrix_has_the_sketches_and_loses_only_the_doubly_orthogonal_part() -> None:
    from logra.optim import sketch as sk
    from logra.optim.comm_hook import min_norm_with_sketches

    G = torch.randn(40, 30, generator=torch.Generator().manual_seed(0))
    P, Q = sk.orthonormal_projection(40, 6, 1), sk.orthonormal_projection(30, 5, 2)
    L, R = P.T @ G, G @ Q
    X = min_norm_with_sketches(P, Q, L, R)
    torch.testing.assert_close(P.T @ X, L)
    torch.testing.assert_close(X @ Q, R)
    I_m, I_n = torch.eye(40, dtype=G.dtype), torch.eye(30, dtype=G.dtype)
    torch.testing.assert_close(X, G - (I_m - P @ P.T) @ G @ (I_n - Q @ Q.T))


def test_only_nystrom_matrices_are_compressible_with_the_steps_projections() -> None:
    model = wide_mlp(width=64)
    opt = make_logra(mixed_groups(model), rank=4)
    plans = opt.sketch_only_projections(list(model.parameters()))
    compressible = [p is model[2].weight or p is model[4].weight for p in model.parameters()]
    assert [plan is not None for plan in plans] == compressible
    assert opt.sketch_only_projections([torch.zeros(64, 64)]) == [None]  # not in the optimizer
    P, Q = plans[2]
    assert P.shape == (64, 4) and Q.shape == (64, 4)
    train_classifier(model, opt, None)  # 10 steps, refresh every 4: now in epoch 2
    P_next, _ = opt.sketch_only_projections([model[2].weight])[0]
    epoch = opt.projection_bank.epoch(STEPS + 1)
    assert epoch == 2
    expected = opt.projection_bank.draw(3, 0, 64, 4, epoch, "cpu")
    torch.testing.assert_close(P_next, expected)


def test_register_sketch_hook_refuses_what_it_cannot_serve() -> None:
    model = wide_mlp(width=64)
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        register_sketch_hook(model, make_logra(model.parameters()))


def test_a_shard_without_rows_views_as_a_matrix() -> None:
    from logra.optim.updates import as_matrix

    assert as_matrix(torch.zeros(0, 4, 3, 3)).shape == (0, 36)


def test_a_bare_cuda_device_becomes_an_indexed_one(monkeypatch) -> None:
    """`torch.cuda.set_device` refuses a bare "cuda" (torch 2.11, seen on an H200: the GRPO
    runner failed at start with device="cuda"); one process takes the current CUDA device,
    each of several ranks its LOCAL_RANK's."""
    from logra.rl.distributed import DataParallel

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert DataParallel().device(torch.device("cuda")) == torch.device("cuda", 3)
    assert DataParallel().device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    assert DataParallel().device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert DataParallel(rank=1, world=2).device(torch.device("cuda")) == torch.device("cuda", 1)
