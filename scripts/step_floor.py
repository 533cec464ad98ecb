"""Where a LoGRA step's time goes on a model of many small matrices, and how low eager can go.

Measurements on one CPU thread, each against `torch.optim.AdamW(foreach=True)` on the same
gradients in the same run (median over rounds):

    phases  LoGRA.step (gain rule, control off) split into its phases, timed by calling them
            in order as `step` does: the work list and the sketches, the finiteness flag, the
            moment and Δ updates, W ← W + Δ
    floor   the gain rule written for this model alone: its sketched matrices stacked by shape,
            their moments kept stacked, its vectors' AdamW moments flat, no gate, no report, no
            checks, LoGRA's projections (tests/test_step_floor.py: the same weights as LoGRA's
            step to fp32 round-off). Not LoGRA's step (it has none of its generality); on
            small matrices a lower bound on what an eager step of the same arithmetic costs
            (on large ones the stacked copies cost more than LoGRA's cache-blocked loop:
            proxy-16m floor 1.18×, LoGRA 0.68×)
    sketch GEMMs   the floor's gradient stacks and sketch GEMMs alone: what no rewrite of the
            rest of the step removes
    floor, compiled  (--compiled) the floor's step through `torch.compile` (inductor, one
            graph): what compiling the same arithmetic buys on this CPU

    python scripts/step_floor.py                  # proxy-1m, 100 rounds
    python scripts/step_floor.py --compiled       # and the compiled floor
    python scripts/step_floor.py --case proxy-16m --rounds 20

docs/design.md §1.5 quotes it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from logra.experiments import optimizer_cost as oc
from logra.optim import LoGRA, rules
from logra.optim.gate import StepGate, all_finite
from logra.optim.units import partition, sketch_shapes, slots_with_grad

BETAS, EPS, LR, WEIGHT_DECAY, RANK = (0.9, 0.999), 1e-8, 1e-4, 0.01, 16


def logra_phases(optimizer: LoGRA) -> dict[str, float]:
    """One control-off step of `optimizer`, its phases timed (seconds)."""
    times, start = {}, time.perf_counter()
    slots = slots_with_grad(optimizer.param_groups)
    units = partition(slots, optimizer.state)
    sketches = [rules.sketch(unit, optimizer.state, optimizer.projection_bank) for unit in units]
    times["work list and sketches"] = time.perf_counter() - start
    start = time.perf_counter()
    checked = [t for unit, sketch in zip(units, sketches, strict=True)
               for t in (sketch[-2:] if sketch else [s.grad for s in unit.slots])]
    gate = StepGate(all_finite(checked, None))
    times["finiteness flag"] = time.perf_counter() - start
    start = time.perf_counter()
    context = rules.StepContext(optimizer.state, optimizer.projection_bank, optimizer.packings,
                                gate)
    with optimizer.packings.step():
        updates = rules.unit_updates(units, sketches, context)
    times["moments and Δ"] = time.perf_counter() - start
    start = time.perf_counter()
    for update in updates:
        update.apply(1.0, gate)
    optimizer.projection_bank.end_step()
    times["W ← W + Δ"] = time.perf_counter() - start
    return times


class FloorStep:
    """The gain rule on one model's fixed layout (module docstring): the eager lower bound, or
    with `compiled=True` the same arithmetic through `torch.compile` (inductor, one graph; each
    matrix's W ← W + Δ − lr·λ·W written as one expression, which inductor fuses into one pass,
    where eager does best with two foreach adds over the stack)."""

    def __init__(self, model: nn.Module, compiled: bool = False) -> None:
        params = list(model.parameters())
        self.vectors = [p for p in params if p.dim() < 2]
        self.stacks: dict[tuple[int, int], list[nn.Parameter]] = {}
        for p in params:
            if p.dim() == 2:
                if sketch_shapes(p.shape, RANK) is None:
                    raise ValueError(f"a {tuple(p.shape)} matrix is too small to sketch at rank "
                                     f"{RANK}: LoGRA steps it as AdamW, which the floor does not")
                self.stacks.setdefault(tuple(p.shape), []).append(p)
        # LoGRA's own projections (they depend on the shape and the seed only)
        bank, group = LoGRA(params).projection_bank, {"seed": 0, "rank": RANK, "oversample": 0}
        pairs = {s: bank.pair(group, ps[0], 1) for s, ps in self.stacks.items()}
        self.P = {s: P for s, (P, _) in pairs.items()}
        self.Q = {s: Q for s, (_, Q) in pairs.items()}
        self.m_L = {s: torch.zeros(len(ps), RANK, s[1]) for s, ps in self.stacks.items()}
        self.v_L = {s: torch.zeros_like(m) for s, m in self.m_L.items()}
        rows = sum(s[0] * len(ps) for s, ps in self.stacks.items())
        self.m_R, self.v_R = torch.zeros(rows, RANK), torch.zeros(rows, RANK)
        numel = sum(v.numel() for v in self.vectors)
        self.m, self.v = torch.zeros(numel), torch.zeros(numel)
        # a tensor, so that a compiled step is not specialized to (and recompiled at) each count;
        # fp64 as Python computes LoGRA's bias corrections
        self.t = torch.zeros((), dtype=torch.float64)
        self.compiled = compiled
        self._update = torch.compile(self._step, fullgraph=True) if compiled else self._step

    @torch.no_grad()
    def step(self) -> None:
        self._update()

    @torch.no_grad()
    def sketch_gemms(self) -> None:
        """Only the first part of `step`: the gradient stacks and their sketches."""
        self._sketches()

    def _sketches(self) -> tuple[dict[tuple[int, int], Tensor], dict[tuple[int, int], Tensor],
                                 Tensor]:
        """The gradients stacked by shape (B×m×n), their L = Pᵀ G (B×k×n) by shape, and every
        R = G Q concatenated by rows (Σ B·m × r)."""
        grads, lefts, rights = {}, {}, []
        for shape, ps in self.stacks.items():
            G = torch.stack([p.grad for p in ps])
            grads[shape] = G
            lefts[shape] = torch.matmul(self.P[shape].T, G)
            rights.append(torch.matmul(G, self.Q[shape]).view(-1, RANK))
        return grads, lefts, torch.cat(rights)

    def _step(self) -> None:
        self.t += 1
        (beta1, beta2), lr = BETAS, LR
        bias1, bias2 = 1 - beta1**self.t, 1 - beta2**self.t
        grads, lefts, R = self._sketches()
        moments = [(self.m_R, self.v_R, R)] + [(self.m_L[s], self.v_L[s], lefts[s])
                                                for s in self.stacks]
        for m, v, x in moments:
            m.lerp_(x, 1 - beta1)
            v.mul_(beta2).addcmul_(x, x, value=1 - beta2)
        row_gain = _gain(self.m_R, self.v_R, R, -1, bias1, bias2)
        row = 0
        for shape, ps in self.stacks.items():
            G = grads[shape]
            col_gain = _gain(self.m_L[shape], self.v_L[shape], lefts[shape], -2, bias1, bias2)
            rows = row_gain[row:row + G.shape[0] * shape[0]].view(G.shape[0], shape[0])
            row += G.shape[0] * shape[0]
            if self.compiled:  # one expression per matrix: inductor makes it one pass
                for i, p in enumerate(ps):
                    delta = G[i] * (rows[i, :, None] * -lr) * col_gain[i, None, :]
                    p.add_(delta.add_(p, alpha=-lr * WEIGHT_DECAY))
                continue
            delta = G.mul_(rows[:, :, None] * -lr).mul_(col_gain[:, None, :])
            torch._foreach_add_(list(delta.unbind(0)), ps, alpha=-lr * WEIGHT_DECAY)
            torch._foreach_add_(ps, list(delta.unbind(0)))
        if not self.vectors:
            return
        g = torch.cat([v.grad.reshape(-1) for v in self.vectors])
        self.m.lerp_(g, 1 - beta1)
        self.v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        delta = (self.m / bias1).div_((self.v / bias2).sqrt_().add_(EPS)).mul_(-lr)
        torch._foreach_add_(self.vectors, list(delta.split([v.numel() for v in self.vectors])))


def _gain(m: Tensor, v: Tensor, x: Tensor, dim: int, bias1: Tensor, bias2: Tensor) -> Tensor:
    u = (m / bias1).div_((v / bias2).sqrt_().add_(EPS))
    return (u.square().sum(dim).sqrt_() / x.square().sum(dim).sqrt_()).sqrt_()


def measure(case: str, rounds: int, compiled: bool = False) -> dict[str, float]:
    """Median milliseconds of AdamW foreach, LoGRA's step, its phases, the floor, the floor's
    sketch GEMMs alone and (`compiled`) the compiled floor, whose compilation happens in the
    warm-up rounds."""
    torch.set_num_threads(1)
    template = oc.build_case(case)
    generator = torch.Generator().manual_seed(1)
    grads = [torch.randn(p.shape, generator=generator) * 1e-3 for p in template.parameters()]
    names = ["adamw", "logra", "floor", "sketch GEMMs"] + (["floor, compiled"] if compiled else [])
    models = {name: oc.build_case(case) for name in names}
    adamw = torch.optim.AdamW(models["adamw"].parameters(), lr=LR, foreach=True)
    logra = LoGRA(models["logra"].parameters(), lr=LR, rank=RANK, predicted_kl_threshold=None)
    steps: dict[str, Callable[[], object]] = {
        "adamw": adamw.step, "floor": FloorStep(models["floor"]).step,
        "sketch GEMMs": FloorStep(models["sketch GEMMs"]).sketch_gemms,
        "logra": lambda: logra_phases(logra)}
    if compiled:
        steps["floor, compiled"] = FloorStep(models["floor, compiled"], compiled=True).step
    samples: dict[str, list[float]] = {}
    for round_ in range(rounds + 3):
        for name, step in steps.items():
            oc.set_grads(models[name], grads)
            start = time.perf_counter()
            with torch.no_grad():
                phases = step()
            elapsed = time.perf_counter() - start
            if round_ < 3:
                continue
            samples.setdefault(name, []).append(elapsed)
            for phase, seconds in (phases.items() if name == "logra" else ()):
                samples.setdefault(f"  {phase}", []).append(seconds)
    if compiled:  # the same gradients, as many steps: the timing is of the same arithmetic
        for eager, fused in zip(models["floor"].parameters(),
                                models["floor, compiled"].parameters(), strict=True):
            torch.testing.assert_close(fused, eager, rtol=1e-5, atol=1e-7)
    return {name: 1e3 * statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="proxy-1m", help="a case of optimizer_cost")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--compiled", action="store_true",
                        help="also the floor through torch.compile (tens of seconds to compile)")
    args = parser.parse_args()
    times = measure(args.case, args.rounds, args.compiled)
    base = times["adamw"]
    print(f"{args.case}, one thread, median of {args.rounds} rounds (ms, × AdamW foreach)")
    for name, ms in times.items():
        print(f"{name:28s} {ms:8.3f}  {ms / base:5.2f}×")


if __name__ == "__main__":
    main()
