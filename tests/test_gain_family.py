"""The gain rule's factors for many matrices at once (`logra.optim.gain`): bit for bit those of
each matrix alone, one all-reduce per family, an optimizer step that does not depend on which
matrices share it, and moments packed in the family's buffers (`logra.optim.packing`) that
survive a checkpoint and a user's assignment."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch import nn

from logra.optim import LoGRA
from logra.optim import sketch as sk
from logra.optim.gain import Member, family_factors
from logra.optim.gate import StepGate
from logra.optim.moments import SKETCH_MOMENTS
from logra.optim.packing import DENSE_MOMENTS, FlatMoments, PackedMoments

K, R = 4, 3
# (stack size or None for a single matrix, m, n): widths shared and not, a stack among singles,
# row counts that leave the concatenation's rows at odd offsets
LAYOUT = [(None, 12, 7), (2, 12, 7), (None, 5, 9), (None, 31, 7), (3, 6, 9), (None, 9, 20)]
GROUP = dict(betas=(0.9, 0.99), eps=1e-8, lr=0.1, maximize=False)


def _matrices(seed: int) -> list[dict]:
    """Sketches and (nonzero) moments of every matrix of LAYOUT, one dict per matrix."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for batch, m, n in LAYOUT:
        for _ in range(batch or 1):
            moments = (torch.randn(K, n, generator=g), torch.rand(K, n, generator=g),
                       torch.randn(m, R, generator=g), torch.rand(m, R, generator=g))
            L, R_ = torch.randn(K, n, generator=g), torch.randn(m, R, generator=g)
            L[:, 0] = 0.0  # a dead column: its gain is 0, not NaN
            out.append(dict(L=L, R=R_, moments=moments, rows=m))
    return out


def _members(matrices: list[dict]) -> list[Member]:
    """LAYOUT's members over copies of `matrices` (stacks as the batched path stacks them)."""
    members, i = [], 0
    for batch, m, _ in LAYOUT:
        chunk = matrices[i:i + (batch or 1)]
        i += len(chunk)
        copies = [tuple(t.clone() for t in x["moments"]) for x in chunk]
        if batch is None:
            members.append(Member(L=chunk[0]["L"].clone(), R=chunk[0]["R"].clone(),
                                  moments=copies, rows=m))
        else:
            members.append(Member(L=torch.stack([x["L"] for x in chunk]),
                                  R=torch.stack([x["R"] for x in chunk]), moments=copies, rows=m))
    return members


def _alone(x: dict, group: dict, step: int, gate: StepGate) -> dict:
    """One matrix's moments and factors as the per-matrix formulas give them (`sketch`)."""
    m_L, v_L, m_R, v_R = (t.clone() for t in x["moments"])
    L, R_ = x["L"].clone(), x["R"].clone()
    sign = -1.0 if group["maximize"] else 1.0
    if group["maximize"]:
        L, R_ = L.neg(), R_.neg()
    beta1, beta2 = group["betas"]
    gate.update_moments([m_L, m_R], [v_L, v_R], [L, R_], beta1, beta2)
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    u_L = (m_L / bias1).div_((v_L / bias2).sqrt_().add_(group["eps"]))
    u_R = (m_R / bias1).div_((v_R / bias2).sqrt_().add_(group["eps"]))
    row_gain, col_gain = sk.gain_factors(L, R_, u_L, u_R)
    rho, kappa = sk.energies(v_R / bias2, v_L / bias2, rows=x["rows"])
    return dict(moments=(m_L, v_L, m_R, v_R), row_factor=row_gain * (-group["lr"] * sign),
                col_gain=col_gain, row_weight=rho / rho.sum().clamp_min(1e-30), col_weight=kappa)


def _per_matrix(factors: list, members: list[Member]) -> list[dict]:
    """The family's factors and moments, one dict per matrix (stacks unbound)."""
    out = []
    for f, member in zip(factors, members, strict=True):
        for b, moments in enumerate(member.moments):
            pick = (lambda t, b=b: t[b]) if member.stacked else (lambda t: t)
            out.append(dict(moments=moments, row_factor=pick(f.row_factor),
                            col_gain=pick(f.col_gain), row_weight=pick(f.row_weight),
                            col_weight=pick(f.col_weight)))
    return out


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("ok", [True, False])
def test_family_factors_are_bit_for_bit_each_matrix_alone(maximize: bool, ok: bool) -> None:
    """Moments, gains and Fisher weights of a family of singles and stacks of mixed shapes
    equal, exactly, what each matrix's own formulas give; a skipped step (ok False) leaves
    every moment as it was."""
    group = {**GROUP, "maximize": maximize}
    gate = StepGate(torch.tensor(ok))
    matrices = _matrices(0)
    members = _members(matrices)
    factors = family_factors(members, group, step=3, gate=gate)
    family = _per_matrix(factors, members)
    assert len(family) == len(matrices)
    for got, x in zip(family, matrices, strict=True):
        expected = _alone(x, group, 3, gate)
        for a, b in zip(got["moments"], expected["moments"], strict=True):
            assert torch.equal(a, b)
        for key in ("row_factor", "col_gain", "row_weight", "col_weight"):
            assert torch.equal(got[key], expected[key]), key
        if not ok:
            for a, b in zip(got["moments"], x["moments"], strict=True):
                assert torch.equal(a, b)
    assert all(f.col_gain[..., 0].eq(0).all() for f in factors)  # dead columns


def test_pinned_buffers_give_the_factors_of_copies() -> None:
    """The same family with its moments pinned as views of packed buffers (the optimizer's
    way) and packed into copies for the step (the sharded way): identical moments and
    factors, and the pinned matrices' moments are views that the update wrote through."""
    group, gate, matrices = GROUP, StepGate(torch.tensor(True)), _matrices(4)
    copied = _members(matrices)
    pinned = _members(matrices)
    packed = PackedMoments.gather([m for member in pinned for m in member.moments])
    expected = family_factors(copied, group, step=2, gate=gate)
    got = family_factors(pinned, group, step=2, gate=gate, packed=packed)
    for a, b in zip(_per_matrix(got, pinned), _per_matrix(expected, copied), strict=True):
        for key in ("row_factor", "col_gain", "row_weight", "col_weight"):
            assert torch.equal(a[key], b[key]), key
    own = [m for member in copied for m in member.moments]
    for views, moments in zip(packed.views, own, strict=True):
        for view, moment in zip(views, moments, strict=True):
            assert torch.equal(view, moment)
            assert view.untyped_storage().data_ptr() in {
                t.untyped_storage().data_ptr() for t in (packed.m_R, packed.v_R,
                                                          *packed.m_L.values(),
                                                          *packed.v_L.values())}


def _stepped(shapes: list[tuple[int, ...]], steps: int, seed: int = 5):
    """Parameters of `shapes`, LoGRA (gain) over them and `steps` steps of seeded gradients;
    the gradients of later steps come from the returned generator."""
    g = torch.Generator().manual_seed(seed)
    params = [nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    opt = LoGRA(params, lr=1e-2, rank=3, weight_decay=0.1, predicted_kl_threshold=None)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return params, opt, g


SHAPES = [(16, 12), (16, 12), (9, 30), (40, 12), (7,), (5,)]


def test_the_state_holds_views_of_the_family_buffers() -> None:
    params, opt, _ = _stepped(SHAPES, 2)
    sketched = [p for p in params if p.dim() == 2]
    bases = {name: {opt.state[p][name].untyped_storage().data_ptr() for p in sketched}
             for name in SKETCH_MOMENTS}
    # one buffer per moment for the rows, one per width (12 and 30) for the columns
    assert {name: len(b) for name, b in bases.items()} == {
        "exp_avg_L": 2, "exp_avg_sq_L": 2, "exp_avg_R": 1, "exp_avg_sq_R": 1}
    # each view holds its own matrix's moment, and the state's bytes are counted once each
    assert opt.state[sketched[2]]["exp_avg_L"].shape == (3, 30)
    assert opt.state[sketched[3]]["exp_avg_sq_R"].shape == (40, 3)
    assert sum(opt.state[p][name].nbytes for p in sketched for name in SKETCH_MOMENTS) == \
        4 * 2 * 3 * sum(m + n for m, n in (s for s in SHAPES if len(s) == 2))
    # the vectors' AdamW moments: two flat buffers, each vector's moments shaped as it
    vectors = [p for p in params if p.dim() == 1]
    for name in DENSE_MOMENTS:
        assert len({opt.state[p][name].untyped_storage().data_ptr() for p in vectors}) == 1
        assert [opt.state[p][name].shape for p in vectors] == [p.shape for p in vectors]


def test_a_checkpoint_and_an_assignment_repack_the_moments() -> None:
    """A state saved and loaded into a new optimizer, or a moment replaced by a user, is packed
    again at the next step from the values it holds: the run continues bit for bit."""
    params, opt, g = _stepped(SHAPES, 3)
    saved = copy.deepcopy(opt.state_dict())
    weights = [p.detach().clone() for p in params]
    later = [[torch.randn(p.shape, generator=g) for p in params] for _ in range(2)]

    def cont(params, opt):
        for grads in later:
            for p, grad in zip(params, grads, strict=True):
                p.grad = grad.clone()
            opt.step()
        return [p.detach().clone() for p in params]

    reference = cont(params, opt)
    resumed = [nn.Parameter(w.clone()) for w in weights]
    loaded = LoGRA(resumed, lr=1e-2, rank=3, weight_decay=0.1, predicted_kl_threshold=None)
    loaded.load_state_dict(saved)
    for a, b in zip(cont(resumed, loaded), reference, strict=True):
        assert torch.equal(a, b)
    assert len({loaded.state[p]["exp_avg_R"].untyped_storage().data_ptr()
                for p in resumed if p.dim() == 2}) == 1  # packed again

    again, opt_again, _ = _stepped(SHAPES, 3)
    first, vector = again[0], again[-1]
    opt_again.state[first]["exp_avg_L"] = opt_again.state[first]["exp_avg_L"].clone()
    opt_again.state[vector]["exp_avg_sq"] = opt_again.state[vector]["exp_avg_sq"].clone()
    for a, b in zip(cont(again, opt_again), reference, strict=True):
        assert torch.equal(a, b)


def _mlp_and_logra(seed: int, widths: tuple[int, ...]) -> tuple[nn.Module, LoGRA]:
    torch.manual_seed(seed)
    layers = [nn.Linear(a, b) for a, b in itertools.pairwise(widths)]
    model = nn.Sequential(*layers)
    return model, LoGRA(model.parameters(), lr=1e-2, rank=3, weight_decay=0.1,
                        predicted_kl_threshold=None)


def _train_mlp(model: nn.Module, opt: LoGRA, steps: range) -> None:
    for step in steps:
        x = torch.randn(8, model[0].in_features, generator=torch.Generator().manual_seed(step))
        opt.zero_grad(set_to_none=True)
        torch.tanh(model(x)).square().mean().backward()
        opt.step()


def test_a_distributed_checkpoint_of_packed_moments_resumes_and_writes_each_once(
    tmp_path,
) -> None:
    """torch.distributed.checkpoint (one process, the state_dict helpers DDP users call) saves
    the packed state's views as their own tensors: the checkpoint is as large as one of the same
    state held in separate tensors (no view writes its family's whole buffer), and a model and
    optimizer built from another seed, loaded from it, continue bit for bit."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    widths = (12, 16, 16, 16, 9)  # three matrices, two of one shape: views of shared buffers
    warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)

    def saved_bytes(model: nn.Module, opt: LoGRA, directory) -> int:
        dcp.save({"model": get_model_state_dict(model),
                  "optim": get_optimizer_state_dict(model, opt)}, checkpoint_id=directory)
        return sum(f.stat().st_size for f in directory.glob("*.distcp"))  # the tensor data

    model, opt = _mlp_and_logra(0, widths)
    _train_mlp(model, opt, range(3))
    weights = [p.detach().clone() for p in model.parameters()]
    shared = {opt.state[p]["exp_avg_R"].untyped_storage().data_ptr()
              for p in model.parameters() if p.dim() == 2}
    assert len(shared) == 1  # the state holds views of one buffer
    packed_bytes = saved_bytes(model, opt, tmp_path / "packed")
    assert packed_bytes >= sum(t.nbytes for s in opt.state.values() for t in s.values()
                               if torch.is_tensor(t))

    separate, separate_opt = _mlp_and_logra(0, widths)
    separate.load_state_dict(model.state_dict())
    separate_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # separate tensors until a step
    assert saved_bytes(separate, separate_opt, tmp_path / "separate") == packed_bytes

    _train_mlp(model, opt, range(3, 6))
    resumed, resumed_opt = _mlp_and_logra(1, widths)
    state = {"model": get_model_state_dict(resumed),
             "optim": get_optimizer_state_dict(resumed, resumed_opt)}
    dcp.load(state, checkpoint_id=tmp_path / "packed")
    set_model_state_dict(resumed, state["model"])
    set_optimizer_state_dict(resumed, resumed_opt, state["optim"])
    assert all(torch.equal(p, w) for p, w in zip(resumed.parameters(), weights, strict=True))
    _train_mlp(resumed, resumed_opt, range(3, 6))
    for a, b in zip(resumed.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_family_sums_its_row_energies_over_ranks_in_one_reduction() -> None:
    """Sharded rows: every matrix's Σρ goes through `reduce` once, together (one all-reduce for
    the family), and ρ/Σρ divides by the reduced sum."""
    calls = []

    def reduce(t: torch.Tensor) -> torch.Tensor:  # two ranks holding the same rows
        calls.append(t.shape)
        return t * 2

    matrices = _matrices(1)
    gate = StepGate(torch.tensor(True))
    factors = family_factors(_members(matrices), GROUP, step=2, gate=gate, reduce=reduce)
    assert calls == [torch.Size([len(matrices)])]
    for got, x in zip(_per_matrix(factors, _members(matrices)), matrices, strict=True):
        expected = _alone(x, GROUP, 2, gate)
        torch.testing.assert_close(got["row_weight"], expected["row_weight"] / 2,
                                   rtol=1e-6, atol=0)


@pytest.mark.parametrize("foreach", [None, False, True])
def test_a_step_does_not_depend_on_which_matrices_share_it(foreach: bool | None) -> None:
    """One optimizer over matrices of several shapes (one family) and one optimizer per matrix
    (families of one) reach bit-identical weights and moments."""
    g = torch.Generator().manual_seed(2)
    shapes = [(16, 12), (16, 12), (9, 30), (40, 12), (16, 12), (7,)]
    start = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(3)]

    def run(groups: list[list[int]]) -> list[nn.Parameter]:
        params = [nn.Parameter(w.clone()) for w in start]
        optimizers = [LoGRA([params[i] for i in members], lr=1e-2, rank=3, foreach=foreach,
                            weight_decay=0.1, predicted_kl_threshold=None)
                      for members in groups]
        for step in grads:
            for p, grad in zip(params, step, strict=True):
                p.grad = grad.clone()
            for opt in optimizers:
                opt.step()
        return params

    together = run([list(range(len(shapes)))])
    alone = run([[i] for i in range(len(shapes))])
    for a, b in zip(together, alone, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("ok", [True, False])
def test_the_gate_masks_as_where_does(ok: bool) -> None:
    """`StepGate.values` and `mask_` (multiply by keep, zero NaN and ∞) give exactly
    `torch.where(ok, x, 0)` on the finite x of a kept step, and zeros on a skipped one whatever
    x holds (NaN, ±∞, values whose square overflows)."""
    gate = StepGate(torch.tensor(ok))
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(3))
    if not ok:
        x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e30])
    expected = torch.where(gate.ok, x, 0.0)
    assert torch.equal(gate.values(x), expected)
    masked = x.clone()
    assert gate.mask_(masked) is masked
    assert torch.equal(masked, expected)


def test_a_unit_not_stepped_lets_its_buffers_go_and_a_failed_step_keeps_them() -> None:
    """The packings kept between steps are those of the units stepped last; a step that raises
    keeps the previous step's, so the next step reuses them."""
    params, opt, g = _stepped(SHAPES, 2)
    kept = dict(opt.packings._kept)
    assert len(kept) == 2  # the gain family and the batched vectors
    with pytest.raises(RuntimeError, match="in the step"), opt.packings.step():
        opt.packings.pinned(("other",), [{}], FlatMoments.gather, [torch.zeros(2)],
                             [torch.zeros(2)])
        raise RuntimeError("in the step")
    assert opt.packings._kept == kept
    for p in params[:-2]:  # the vectors get no gradient: their unit is not stepped
        p.grad = torch.randn(p.shape, generator=g)
    for p in params[-2:]:
        p.grad = None
    opt.step()
    assert len(opt.packings._kept) == 1
    assert next(iter(opt.packings._kept.values())) is next(
        v for v in kept.values() if isinstance(v, PackedMoments))  # reused, not packed again
