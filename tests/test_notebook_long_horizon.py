"""The long-horizon notebook end to end at smoke scale, its measurements, and the C11 rule."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

from logra.config import ConfigError
from logra.experiments import long_horizon as lh
from logra.experiments import long_horizon_report as lhr
from logra.experiments.report import VERDICTS
from logra.optim import LoGRA


@pytest.fixture(scope="module")
def executed(run_smoke_notebook, smoke_results):
    return run_smoke_notebook("05_long_horizon", results_dir=str(smoke_results))


# ---------------------------------------------------------------- the notebook


def test_notebook_writes_figure_table_and_claim(executed, assert_figure) -> None:
    assert (executed / "05_long_horizon.ipynb").exists()
    for suffix in (".png", ".pdf"):
        assert_figure(executed / f"long_horizon{suffix}")
    for name in ("long_horizon", "claims_long_horizon"):
        assert (executed / f"{name}.csv").exists() and (executed / f"{name}.md").exists(), name


def test_table_separates_state_drift_from_sketch_error(executed) -> None:
    table = pd.read_csv(executed / "long_horizon.csv", keep_default_na=False)
    cfg = lh.config("smoke")
    assert set(table.run) == {lh.run_name(p) for p in cfg.refresh_every}
    state = table[table.reconstruction == "(state)"].set_index(["run", "metric"])
    windows = [c for c in table.columns if c.split(" ")[0] in ("early", "safe", "late")]
    assert len(windows) == 3
    fixed = lh.run_name(None)
    # fixed projections: the state is the sketch of the dense momentum, to round-off
    assert (state.loc[(fixed, "state_drift"), windows].astype(float) < 1e-5).all()
    assert state.loc[(fixed, "rel_error"), windows].astype(float).to_numpy() == pytest.approx(
        state.loc[(fixed, "fresh_rel_error"), windows].astype(float).to_numpy(), rel=1e-4)
    cosines = table[table.metric.isin(["cosine", "update_cosine"])][windows].astype(float)
    assert ((cosines >= -1) & (cosines <= 1)).all().all()
    updates = table[table.metric == "update_cosine"]
    assert set(updates.reconstruction) == set(cfg.reconstructions)


def test_claim_row_c11(executed) -> None:
    claims = pd.read_csv(executed / "claims_long_horizon.csv")
    assert list(claims.claim) == ["C11"]
    assert claims.verdict[0] in VERDICTS
    assert "smoke" in claims.scale[0] and "state drift" in claims.reproduced[0]


# ---------------------------------------------------------------- measurements


def _matrices() -> list[nn.Parameter]:
    torch.manual_seed(0)
    return [nn.Parameter(torch.randn(48, 32)), nn.Parameter(torch.randn(32, 64)),
            nn.Parameter(torch.randn(32))]


def _grads(t: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(t)
    return [torch.randn(48, 32, generator=g), torch.randn(32, 64, generator=g),
            torch.randn(32, generator=g)]


def _shadowed(refresh_every: int | None, steps: int
              ) -> tuple[list[dict[str, float]], LoGRA, list[nn.Parameter]]:
    """LoGRA and a shadow AdamW on the same full-rank gradients; state metrics each step, the
    LoGRA and its parameters."""
    params, shadow_params = _matrices(), _matrices()
    opt = LoGRA(params, rank=4, lr=1e-3, predicted_kl_threshold=None,
                refresh_every=refresh_every)
    shadow = torch.optim.AdamW(shadow_params, lr=1e-3)
    out = []
    for t in range(1, steps + 1):
        for p, q, g in zip(params, shadow_params, _grads(t), strict=True):
            p.grad, q.grad = g, g.clone()
        opt.step()
        shadow.step()
        out.append(lh.state_metrics(opt, shadow, list(zip(params, shadow_params, strict=True))))
    return out, opt, params


def _energy_errors(opt: LoGRA, params: list[nn.Parameter], steps: int) -> list[float]:
    """energy_error rebuilt from the gradients: EMAs (β₂ = 0.999) of (PᵀG)², (GQ)² and G², the
    energies ρ = (n/r) Σ v_R, κ = (m/k) Σ v_L against the dense row and column sums of V."""
    matrices = [p for p in params if p.dim() == 2]
    moments = [dict(v_L=0.0, v_R=0.0, V=0.0) for _ in matrices]
    errors = []
    for t in range(1, steps + 1):
        squared_error = squared_norm = 0.0
        for p, moment, g in zip(matrices, moments, _grads(t), strict=False):
            P, Q = (x.double() for x in opt.projections(p))
            g = g.double()
            for name, x in (("v_L", P.T @ g), ("v_R", g @ Q), ("V", g)):
                moment[name] = 0.999 * moment[name] + 0.001 * x.square()
            (m, k), (n, r) = P.shape, Q.shape
            rho, kappa = (n / r) * moment["v_R"].sum(1), (m / k) * moment["v_L"].sum(0)
            row, col = moment["V"].sum(1), moment["V"].sum(0)
            squared_error += float((rho - row).square().sum() + (kappa - col).square().sum())
            squared_norm += float(row.square().sum() + col.square().sum())
        errors.append((squared_error / squared_norm) ** 0.5)
    return errors


def test_fixed_projections_hold_the_exact_sketch_of_the_dense_momentum() -> None:
    measured, opt, params = _shadowed(None, 30)
    for metrics, energy_error in zip(measured, _energy_errors(opt, params, 30), strict=True):
        assert metrics["state_drift"] < 1e-5  # also checks `projections` is the step's P, Q
        assert metrics["rel_error"] == pytest.approx(metrics["fresh_rel_error"], rel=1e-4)
        assert metrics["cosine"] == pytest.approx(metrics["fresh_cosine"], abs=1e-5)
        assert metrics["energy_error"] == pytest.approx(energy_error, rel=1e-4)


def test_a_refresh_puts_error_in_the_state_and_the_ema_forgets_it() -> None:
    metrics, _, _ = _shadowed(10, 40)
    assert metrics[9]["state_drift"] < 1e-5  # step 10: still the first projections
    assert metrics[10]["state_drift"] > 0.05  # step 11: moments carried through rank 4
    assert metrics[19]["state_drift"] < 0.5 * metrics[10]["state_drift"]  # β₁ decay


def test_probe_update_is_the_other_reconstructions_real_step() -> None:
    """The probe from gain's state equals a Nyström LoGRA fed the same stream."""
    weights = _matrices()
    gain_params, nystrom_params = _matrices(), _matrices()
    options = dict(rank=4, lr=1e-3, predicted_kl_threshold=None, weight_decay=0.0,
                   refresh_every=3)
    gain = LoGRA(gain_params, reconstruction="gain", **options)
    nystrom = LoGRA(nystrom_params, reconstruction="nystrom", **options)
    for t in range(1, 8):
        grads = _grads(t)
        probed = lh.probe_update(gain, "nystrom", weights, grads)
        for params, opt in ((gain_params, gain), (nystrom_params, nystrom)):
            with torch.no_grad():
                for p, w, g in zip(params, weights, grads, strict=True):
                    p.copy_(w)
                    p.grad = g
            opt.step()
        for a, b in zip(probed, nystrom_params, strict=True):
            torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-7)
    assert int(gain.state[gain_params[0]]["step"]) == 7  # the probes changed nothing of gain


def test_update_cosine() -> None:
    w = [torch.zeros(3), torch.ones(2)]
    a = [torch.tensor([1.0, 0, 0]), torch.ones(2)]
    assert lh.update_cosine(w, a, a) == pytest.approx(1.0)
    assert lh.update_cosine(w, a, [torch.tensor([-1.0, 0, 0]), torch.ones(2)]) == \
        pytest.approx(-1.0)
    assert lh.update_cosine(w, w, a) == 0.0


def test_measurement_grid() -> None:
    cfg = lh.config("smoke", steps=120, measure_every=25, log_points=5,
                    refresh_every=[None, 50])
    grid = lh.measurement_steps(cfg)
    assert grid == sorted(set(grid)) and grid[0] == 1 and grid[-1] == 120
    assert {25, 50, 75, 100, 51, 52, 101, 102} <= set(grid)
    assert all(1 <= s <= 120 for s in grid)


# ---------------------------------------------------------------- the C11 rule


def _frame(cos: dict[str, tuple[float, float]], drift: dict[str, tuple[float, float]],
           fresh: dict[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    """Hand-made measurements: per run, (safe, late) values, early = safe; steps of smoke."""
    cfg = lh.config("smoke")
    steps = {"early": cfg.early_window, "safe": cfg.safe_window,
             "late": cfg.late_window}
    fresh = fresh or cos
    rows = []
    for period in cfg.refresh_every:
        name = lh.run_name(period)
        for window, (lo, hi) in steps.items():
            k = 1 if window == "late" else 0
            for step in (lo, hi):
                for metric, values in (("cosine", cos), ("state_drift", drift),
                                       ("fresh_cosine", fresh)):
                    rows.append(dict(run=name, refresh_every=period or -1, reconstruction="",
                                     step=step, metric=metric, value=values[name][k]))
    return pd.DataFrame(rows, columns=list(lh.COLUMNS))


FIXED, REFRESH = lh.run_name(None), lh.run_name(30)


@pytest.mark.parametrize(("cos", "drift", "verdict"), [
    # the refresh run's state drifts and its momentum degrades
    ({FIXED: (0.8, 0.8), REFRESH: (0.8, 0.5)}, {FIXED: (1e-7, 1e-7), REFRESH: (0.01, 0.3)},
     "reproduced"),
    # the state drifts, the momentum's cosine does not suffer
    ({FIXED: (0.8, 0.8), REFRESH: (0.8, 0.79)}, {FIXED: (1e-7, 1e-7), REFRESH: (0.01, 0.3)},
     "partly"),
    # the momentum degrades, but in the fresh sketch alike: nothing accumulated
    ({FIXED: (0.8, 0.4), REFRESH: (0.8, 0.4)}, {FIXED: (1e-7, 1e-7), REFRESH: (0.01, 0.02)},
     "not reproduced"),
    ({FIXED: (0.8, 0.8), REFRESH: (0.8, 0.8)}, {FIXED: (1e-7, 1e-7), REFRESH: (1e-7, 1e-7)},
     "not reproduced"),
])
def test_c11_rule(cos: dict, drift: dict, verdict: str) -> None:
    row = lhr.c11_claim(_frame(cos, drift), lh.config("smoke"))
    assert row.claim == "C11" and row.verdict == verdict


def test_c11_needs_every_window() -> None:
    frame = _frame({FIXED: (0.8, 0.8), REFRESH: (0.8, 0.8)},
                   {FIXED: (1e-7, 1e-7), REFRESH: (1e-7, 1e-7)})
    cfg = lh.config("smoke")
    late = frame.step >= cfg.late_window[0]
    with pytest.raises(ValueError, match="windows"):
        lhr.c11_claim(frame[~late], cfg)


def test_config_scales_and_errors() -> None:
    smoke, default = lh.config("smoke"), lh.config("default")
    assert default["steps"] >= 10_000 and default["late_window"][0] >= 10_000
    assert default["late_window"][1] <= default["steps"]
    assert default["safe_window"] == [1000, 2500]
    assert smoke["steps"] < default["steps"] and smoke["late_window"][1] <= smoke["steps"]
    assert default["refresh_every"][0] is None
    with pytest.raises(ConfigError, match="unknown key"):
        lh.config("smoke", rnak=4)
