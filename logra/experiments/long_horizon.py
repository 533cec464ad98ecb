"""Long horizon (claim C11): does LoGRA's sketched momentum drift from the dense momentum?

The report says that "beyond 10,000 steps, accumulated sketch error drifts the momentum; runs of
1,000–2,500 steps are safe". Here the smallest policy of the ladder (`model`, the smoke proxy by
default) is trained for `steps` ≥ 10,000 steps by LoGRA on a next-token loss over packed task text
(`batch_size` × `seq_len` tokens per step), and beside it

  * one LoGRA per `refresh_every` setting (None: fixed projections) and
  * a shadow `torch.optim.AdamW` with the same hyperparameters

step on the *same* gradient from the *same* weights W_t: before each step every optimizer's copy
of the weights is reset to the policy's, and afterwards the policy takes the update of the first
LoGRA (reconstruction `reconstructions[0]`, refresh `refresh_every[0]`). The LoGRA moments do not
depend on the reconstruction, so the update another reconstruction would apply from the same
state is obtained, at the measurement steps, by a probe: a LoGRA with that reconstruction loaded
with a copy of the state and stepped once on the same gradient. KL control is off
(`predicted_kl_threshold=None`): this is supervised training, and γ would only rescale steps.
Projections are cached (`cache_projections=True`): the same P, Q, drawn once per refresh epoch
instead of every step, which changes nothing but the time.

What is compared, at measurement step t, over every matrix LoGRA sketches (sums over matrices,
so the numbers are of the whole model; M, V are the shadow's exp_avg and exp_avg_sq, m×n each;
P m×r and Q n×r the projections of the LoGRA state's current refresh epoch; rtol LoGRA's):

    M̂      = m_R (Pᵀ m_R)^† m_L                      Nyström first moment from LoGRA's own state
    M̂_fresh = (MQ) (Pᵀ M Q)^† (Pᵀ M)                  the same from a fresh sketch of the true M
    rel_error       ‖M̂ − M‖ / ‖M‖                   and  fresh_rel_error for M̂_fresh
    cosine          ⟨M̂, M⟩ / (‖M̂‖ ‖M‖)              and  fresh_cosine for M̂_fresh
    state_drift     ‖(m_L − PᵀM, m_R − MQ)‖ / ‖(PᵀM, MQ)‖
    energy_error    ‖(ρ − V1, κ − Vᵀ1)‖ / ‖(V1, Vᵀ1)‖ with ρ, κ = `sketch.energies(v_R, v_L)`
    update_cosine   cos(ΔW_LoGRA, ΔW_AdamW) of the applied updates (per reconstruction)

Why the split matters: the first moment is linear in the gradients, so with fixed projections
m_L = Pᵀ M and m_R = M Q exactly (state_drift is fp32 round-off), whatever the number of steps;
the Nyström error is then a *sketch error* of the momentum of the moment, the same a fresh sketch
has (rel_error = fresh_rel_error), and can only change because M changes. State error can enter
only through a refresh, which carries the moments into new projections through the rank-r
reconstruction (`sketch.transport_first_moment`, `transport_second_moment`); the EMA then forgets
it at the rate β₁ᵗ (β₂ᵗ for the second moment), so it cannot pile up over more than ~1/(1−β)
steps. "Accumulated drift" is what state_drift measures; "constant sketch error" is what the
fresh sketch of the same M has.

`run(config)` returns a tidy frame: one row per number, columns

    run             "refresh=None", "refresh=500", ... (the shadow AdamW is the reference)
    refresh_every   the run's refresh period (-1: none)
    reconstruction  "gain" | "nystrom" for update_cosine, "" for the state metrics
    step            optimizer step t (1-based)
    metric          one of METRICS, or "loss" (the policy's training loss, run "policy")
    value
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import pandas as pd
import torch
from pydantic import Field
from torch import Tensor, nn

from logra.config import TypedConfig, typed
from logra.experiments.typed import Betas, Count, ModelScale, NonNegative, Positive, Task, Window
from logra.optim import LoGRA
from logra.optim import sketch as sk
from logra.optimizers import Reconstruction

COLUMNS = ("run", "refresh_every", "reconstruction", "step", "metric", "value")
STATE_METRICS = ("rel_error", "fresh_rel_error", "cosine", "fresh_cosine", "state_drift",
                 "energy_error")
METRICS = (*STATE_METRICS, "update_cosine")
POLICY = "policy"
NO_REFRESH = -1


@typed
class Config(TypedConfig):
    """experiments/long_horizon.yaml's keys (its comments say what each holds)."""

    EXPERIMENT: ClassVar[str] = "long_horizon"
    scale: str
    seed: int
    model: ModelScale
    task: Task
    text_rows: Count
    batch_size: Count
    seq_len: Count
    steps: Count
    lr: Positive
    betas: Betas
    eps: Positive
    weight_decay: NonNegative
    rank: Count
    reconstructions: Annotated[list[Reconstruction], Field(min_length=1)]
    refresh_every: Annotated[list[Count | None], Field(min_length=1)]  # None: fixed projections
    measure_every: Count
    log_points: Count
    early_window: Window
    safe_window: Window
    late_window: Window
    c11_threshold: Positive
    results_dir: str


def config(scale: str = "default", **overrides: Any) -> Config:
    """experiments/long_horizon.yaml at `scale`, with `overrides` on top, checked."""
    return Config.load(scale, **overrides)


def run_name(refresh_every: int | None) -> str:
    """The `run` label of a refresh setting."""
    return f"refresh={refresh_every}"


# ---------------------------------------------------------------- the gradient stream


def packed_text(cfg: Config, tokenizer) -> Tensor:
    """The first `text_rows` task rows (prompt + solution + eos), token ids packed end to end
    and cut into chunks: (chunks, seq_len) int64."""
    from logra.data import load_task, to_sft

    rows = load_task(cfg.task, "train", Path(cfg.results_dir) / "data")
    rows = rows.select(range(cfg.text_rows))
    sft = to_sft(rows, cfg.task)[:]
    texts = [p + c for p, c in zip(sft["prompt"], sft["completion"], strict=True)]
    ids = [i for seq in tokenizer(texts)["input_ids"] for i in (*seq, tokenizer.eos_token_id)]
    chunks = len(ids) // cfg.seq_len
    return torch.tensor(ids[:chunks * cfg.seq_len]).view(chunks, cfg.seq_len)


def measurement_steps(cfg: Config) -> list[int]:
    """Steps to measure at: every `measure_every`, `log_points` log-spaced from 1, and the first
    two steps of every refresh epoch (where transported state error is largest)."""
    steps = cfg.steps
    grid = set(range(cfg.measure_every, steps + 1, cfg.measure_every))
    grid |= {int(s) for s in np.unique(np.geomspace(1, steps, cfg.log_points).round())}
    for period in cfg.refresh_every:
        if period is not None:
            grid |= {s + d for s in range(period, steps, period) for d in (1, 2) if s + d <= steps}
    return sorted(grid)


# ---------------------------------------------------------------- measurements


def sketched(opt: LoGRA) -> list[Tensor]:
    """The parameters LoGRA keeps sketch moments for (in optimizer order)."""
    return [p for g in opt.param_groups for p in g["params"] if "exp_avg_L" in opt.state[p]]


def state_metrics(opt: LoGRA, shadow: torch.optim.Optimizer,
                  pairs: list[tuple[Tensor, Tensor]]) -> dict[str, float]:
    """STATE_METRICS (module docstring) over the sketched matrices of `opt`.

    `pairs` maps each LoGRA parameter to its shadow AdamW parameter (same shape, same gradients).
    """
    shadow_of = {id(p): s for p, s in pairs}
    sums: dict[str, float] = dict.fromkeys(
        ("err", "norm", "dot", "hat", "f_err", "f_dot", "f_hat", "drift", "sk_norm",
         "e_err", "e_norm"), 0.0)
    for p in sketched(opt):
        state, dense = opt.state[p], shadow.state[shadow_of[id(p)]]
        m = p.shape[0]
        M = dense["exp_avg"].reshape(m, -1).double()
        V = dense["exp_avg_sq"].reshape(m, -1).double()
        P, Q = (t.double() for t in opt.projections(p))
        m_L, m_R = state["exp_avg_L"].double(), state["exp_avg_R"].double()
        rtol = next(g["rtol"] for g in opt.param_groups if any(q is p for q in g["params"]))
        M_hat = sk.nystrom(m_R, m_L, P, rtol)
        L_true, R_true = P.T @ M, M @ Q
        fresh = sk.nystrom(R_true, L_true, P, rtol)
        rho, kappa = sk.energies(state["exp_avg_sq_R"].double(), state["exp_avg_sq_L"].double())
        row, col = V.sum(dim=1), V.sum(dim=0)
        for key, value in (
            ("err", (M_hat - M).square().sum()), ("norm", M.square().sum()),
            ("dot", (M_hat * M).sum()), ("hat", M_hat.square().sum()),
            ("f_err", (fresh - M).square().sum()), ("f_dot", (fresh * M).sum()),
            ("f_hat", fresh.square().sum()),
            ("drift", (m_L - L_true).square().sum() + (m_R - R_true).square().sum()),
            ("sk_norm", L_true.square().sum() + R_true.square().sum()),
            ("e_err", (rho - row).square().sum() + (kappa - col).square().sum()),
            ("e_norm", row.square().sum() + col.square().sum()),
        ):
            sums[key] += float(value)
    return {
        "rel_error": _ratio(sums["err"], sums["norm"]),
        "fresh_rel_error": _ratio(sums["f_err"], sums["norm"]),
        "cosine": sums["dot"] / math.sqrt(sums["hat"] * sums["norm"]) if sums["hat"] else 0.0,
        "fresh_cosine": (sums["f_dot"] / math.sqrt(sums["f_hat"] * sums["norm"])
                         if sums["f_hat"] else 0.0),
        "state_drift": _ratio(sums["drift"], sums["sk_norm"]),
        "energy_error": _ratio(sums["e_err"], sums["e_norm"]),
    }


def _ratio(squared_error: float, squared_norm: float) -> float:
    return math.sqrt(squared_error / squared_norm) if squared_norm > 0 else math.nan


def update_cosine(before: list[Tensor], a: list[Tensor], b: list[Tensor]) -> float:
    """cos(A − W, B − W) of two updates from the same weights W (lists of tensors, flattened)."""
    da = torch.cat([(x - w).detach().flatten().double() for x, w in zip(a, before, strict=True)])
    db = torch.cat([(x - w).detach().flatten().double() for x, w in zip(b, before, strict=True)])
    denom = float(da.norm() * db.norm())
    return float(da @ db) / denom if denom > 0 else 0.0


def probe_update(opt: LoGRA, reconstruction: str, weights: list[Tensor], grads: list[Tensor]
                 ) -> list[Tensor]:
    """Weights after one step of a LoGRA with `reconstruction` from a copy of `opt`'s state
    (taken *before* `opt` steps), on the same weights and gradients. Nothing of `opt` changes."""
    params = [nn.Parameter(w.detach().clone()) for w in weights]
    state = copy.deepcopy(opt.state_dict())
    for group in state["param_groups"]:
        group["reconstruction"] = reconstruction
    probe = LoGRA(params, rank=opt.param_groups[0]["rank"], predicted_kl_threshold=None,
                  refresh_every=opt.refresh_every, reconstruction=reconstruction)
    probe.load_state_dict(state)
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    probe.step()
    return [p.detach() for p in params]


# ---------------------------------------------------------------- the run


Run = tuple[int | None, list[nn.Parameter], LoGRA]  # refresh period, its weights, the optimizer


def measurement_rows(t: int, runs: list[Run], shadow: torch.optim.Optimizer,
                     shadow_params: list[nn.Parameter], before: list[Tensor], driver_rec: str,
                     probed: dict[tuple[int | None, str], list[Tensor]]) -> list[dict[str, Any]]:
    """The state metrics of every run and the update cosine of every reconstruction at step t.

    `before` are the weights all optimizers stepped from; after the step each run's weights
    hold its driver-reconstruction update, `probed[(period, rec)]` the other reconstructions'.
    """
    rows = []
    for period, params, opt in runs:
        base = dict(run=run_name(period), step=t,
                    refresh_every=NO_REFRESH if period is None else period)
        pairs = list(zip(params, shadow_params, strict=True))
        for metric, value in state_metrics(opt, shadow, pairs).items():
            rows.append(dict(base, reconstruction="", metric=metric, value=value))
        sketched_ids = {id(p) for p in sketched(opt)}
        pick = [i for i, p in enumerate(params) if id(p) in sketched_ids]
        updates = {driver_rec: params,
                   **{rec: after for (p, rec), after in probed.items() if p == period}}
        for rec, after in updates.items():
            value = update_cosine([before[i] for i in pick], [after[i] for i in pick],
                                  [shadow_params[i] for i in pick])
            rows.append(dict(base, reconstruction=rec, metric="update_cosine", value=value))
    return rows


def _policy(cfg: Config) -> tuple[nn.Module, Any]:
    """Model and tokenizer of the proxy `model`, under <results_dir>/models (built first if
    missing: seconds for smoke)."""
    from logra.models import load_policy, prepare

    results = Path(cfg.results_dir)
    return load_policy(str(prepare(cfg.model, root=results / "models",
                                   data_dir=results / "data", progress=False)))


def run(cfg: Config) -> pd.DataFrame:
    """Train the policy for `steps` steps and measure every optimizer on the grid (docstring)."""
    torch.manual_seed(cfg.seed)
    model, tokenizer = _policy(cfg)
    model.train()
    chunks = packed_text(cfg, tokenizer)
    weights = list(model.parameters())
    hyper = dict(lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                 weight_decay=cfg.weight_decay)
    driver_rec, *probes = cfg.reconstructions
    runs: list[Run] = []
    for period in cfg.refresh_every:
        params = [nn.Parameter(w.detach().clone()) for w in weights]
        runs.append((period, params, LoGRA(params, rank=cfg.rank, seed=cfg.seed,
                                           predicted_kl_threshold=None, refresh_every=period,
                                           reconstruction=driver_rec, cache_projections=True,
                                           **hyper)))
    shadow_params = [nn.Parameter(w.detach().clone()) for w in weights]
    shadow = torch.optim.AdamW(shadow_params, **hyper)
    grid = set(measurement_steps(cfg))
    batches = torch.Generator().manual_seed(cfg.seed)
    rows: list[dict[str, Any]] = []
    for t in range(1, cfg.steps + 1):
        ids = chunks[torch.randint(len(chunks), (cfg.batch_size,), generator=batches)]
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = [w.grad for w in weights]
        measure = t in grid
        before = [w.detach().clone() for w in weights] if measure else []
        for params in [shadow_params, *(params for _, params, _ in runs)]:
            with torch.no_grad():
                torch._foreach_copy_(params, weights)
            for p, g in zip(params, grads, strict=True):
                p.grad = g
        probed = {}
        if measure:
            probed = {(period, rec): probe_update(opt, rec, before, grads)
                      for period, _, opt in runs for rec in probes}
        shadow.step()
        for _, _, opt in runs:
            opt.step()
        with torch.no_grad():
            torch._foreach_copy_(weights, runs[0][1])
        if measure:
            rows.append(dict(run=POLICY, refresh_every=NO_REFRESH, reconstruction="", step=t,
                             metric="loss", value=loss.item()))
            rows += measurement_rows(t, runs, shadow, shadow_params, before, driver_rec, probed)
    return pd.DataFrame(rows, columns=list(COLUMNS))
