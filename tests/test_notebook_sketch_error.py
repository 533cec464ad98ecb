"""The sketch-error notebook end to end at smoke scale, and the measurements it is built from."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from logra.config import ConfigError
from logra.experiments import sketch_error as se
from logra.experiments import sketch_error_inputs as inputs
from logra.experiments import sketch_error_measures as measures
from logra.experiments.report import VERDICTS
from logra.experiments.sketch_error_plots import FIGURES
from logra.optim import sketch_shapes


@pytest.fixture(scope="module")
def executed(run_smoke_notebook):
    return run_smoke_notebook("01_sketch_error")


# ---------------------------------------------------------------- the notebook


def test_notebook_writes_every_figure_and_table(executed, assert_figure) -> None:
    assert (executed / "01_sketch_error.ipynb").exists()
    for name in FIGURES:
        for suffix in (".png", ".pdf"):
            assert_figure(executed / f"{name}{suffix}")
    for name in ("sketch_error", "sketch_error_direction", "sketch_error_aspect",
                 "sketch_error_training", "claims_sketch_error"):
        assert (executed / f"{name}.csv").exists() and (executed / f"{name}.md").exists(), name


def test_svd_is_the_floor_and_nystrom_is_exact_on_low_rank(executed) -> None:
    table = pd.read_csv(executed / "sketch_error.csv")
    ranks = se.config("smoke")["table_ranks"]
    assert set(table.method) == set(measures.METHODS)
    assert {"rank 8", "qwen2 layers", "qwen2 embed_tokens", "qwen2 lm_head"} <= set(table.input)
    for r in ranks:
        errors = table.pivot(index="input", columns="method", values=f"error r={r}")
        others = errors.drop(columns="svd")
        assert (errors["svd"].to_numpy()[:, None] <= others.to_numpy() + 1e-6).all(), r
        assert (table[f"cosine r={r}"].abs() <= 1 + 1e-6).all()
    rank8 = table[table.input == "rank 8"].set_index("method")
    assert rank8.at["nystrom_rtol0", "error r=8"] < 1e-3  # r = rank(M): the core is invertible
    assert rank8.at["nystrom_truncated", "error r=16"] < 1e-4  # r = 2·rank(M)
    assert rank8.at["nystrom_oversampled", "error r=16"] < 1e-4


def test_direction_and_training_tables_are_sane(executed) -> None:
    directions = pd.read_csv(executed / "sketch_error_direction.csv")
    assert set(directions.method) == set(measures.RULES[1:])
    values = directions.filter(like="cos vs AdamW").to_numpy()
    assert ((values >= -1) & (values <= 1)).all()
    training = pd.read_csv(executed / "sketch_error_training.csv").set_index("rule")
    assert set(training.index) == set(measures.RULES)
    assert training["final loss, least squares"]["adamw"] < 0.5  # it learned something
    assert training["test accuracy, mlp classifier"].between(0, 1).all()


def test_claim_row_c9(executed) -> None:
    claims = pd.read_csv(executed / "claims_sketch_error.csv")
    assert list(claims.claim) == ["C9"]
    assert claims.verdict[0] in VERDICTS
    assert "smoke" in claims.scale[0]


# ---------------------------------------------------------------- measurements


def test_reconstruct_svd_agrees_with_eckart_young() -> None:
    M = inputs.power_law_matrix(48, 32, 1.0, seed=0)
    formula = measures.svd_errors(M, [4, 8])
    for r in (4, 8):
        M_hat = measures.reconstruct(M, r, "svd", seed=0)
        assert measures.relative_error(M, M_hat) == pytest.approx(formula[r][0], rel=1e-4)
        assert measures.cosine(M, M_hat) == pytest.approx(formula[r][1], rel=1e-4)


def test_nystrom_methods_match_the_sketches() -> None:
    M = inputs.low_rank_matrix(64, 48, 4, seed=1)
    # no cutoff is exact at r = rank(M); with the default cutoff, at r = 2·rank(M)
    assert measures.relative_error(M, measures.reconstruct(M, 4, "nystrom_rtol0", seed=3)) < 1e-4
    for method in ("nystrom_truncated", "nystrom_oversampled"):
        assert measures.relative_error(M, measures.reconstruct(M, 8, method, seed=3)) < 1e-4, method
    assert measures.reconstruct(M, 40, "nystrom_oversampled", seed=0) is None  # k = 80 > m = 64


def test_one_sided_projection_keeps_r_over_m_of_a_random_matrix() -> None:
    M = torch.randn(512, 256, generator=torch.Generator().manual_seed(0))
    err = measures.relative_error(M, measures.reconstruct(M, 64, "projection", seed=0))
    assert err == pytest.approx(math.sqrt(1 - 64 / 512), abs=0.01)
    wide = M.T.contiguous()  # m < n: projects the larger (column) side
    assert measures.relative_error(wide, measures.reconstruct(wide, 64, "projection", seed=0)) == \
        pytest.approx(math.sqrt(1 - 64 / 512), abs=0.01)


def test_generators_have_the_promised_structure() -> None:
    assert torch.linalg.matrix_rank(inputs.low_rank_matrix(40, 30, 6, seed=0)) == 6
    s = torch.linalg.svdvals(inputs.power_law_matrix(40, 30, 2.0, seed=0))
    assert torch.allclose(s, torch.arange(1, 31, dtype=torch.float32).pow(-2.0), atol=1e-5)
    G = inputs.embedding_gradient(500, 16, tokens=64, zipf=1.1, seed=0)
    active = int((G.abs().sum(dim=1) > 0).sum())
    assert 1 <= active <= 64
    assert torch.linalg.matrix_rank(G) <= min(active, 16)
    assert torch.equal(G, inputs.embedding_gradient(500, 16, tokens=64, zipf=1.1, seed=0))


def test_reconstruction_rows_skip_ranks_logra_does_not_sketch() -> None:
    M = inputs.power_law_matrix(32, 16, 1.0, seed=0)
    rows = pd.DataFrame(measures.reconstruction_rows("reconstruction", "x", "x", M, [4, 8, 12],
                                               [0, 1], 1.0))
    measured = sorted(rows["rank"].unique())
    assert measured == [r for r in (4, 8, 12) if sketch_shapes((32, 16), r) is not None]
    assert set(rows.method) == set(measures.METHODS)
    assert (rows[rows.method == "svd"].seed == -1).all()


def test_applied_updates_follow_each_rule() -> None:
    g = torch.Generator().manual_seed(0)
    stream = [[torch.randn(64, 32, generator=g) for _ in range(3)]]
    adam = measures.applied_updates(stream, "adamw", 1, lr=1e-3, betas=(0.9, 0.999))
    # Adam's first step is −lr·sign(G) (up to ε)
    assert torch.allclose(adam[0][0], -1e-3 * stream[0][0].sign(), atol=1e-8)
    for rule in ("logra_gain", "logra_nystrom", "naive_projection"):
        updates = measures.applied_updates(stream, rule, 4, lr=1e-3, betas=(0.9, 0.999))
        assert len(updates) == 3 and updates[0][0].shape == (64, 32)
    gain = measures.applied_updates(stream, "logra_gain", 4, lr=1e-3, betas=(0.9, 0.999))
    for t in range(3):  # the gain rule is always a descent direction
        assert measures.cosine(gain[t][0], -stream[0][t]) > 0


def test_direction_rows_compare_with_adamw() -> None:
    g = torch.Generator().manual_seed(0)
    streams = {"w": [torch.randn(64, 32, generator=g) for _ in range(2)]}
    rows = pd.DataFrame(measures.direction_rows("x", streams, [4, 64], 1e-3, (0.9, 0.999)))
    assert set(rows["rank"]) == {4}  # rank 64 is not sketched on a 64×32 matrix
    assert set(rows.method) == set(measures.RULES[1:])
    assert rows.value.between(-1, 1).all()


def _aspect_frame(errors: dict[tuple[int, int], float]) -> pd.DataFrame:
    """A hand-made aspect sweep: {(aspect, rank): Nyström error}, SVD at half of it."""
    rows = []
    for (aspect, rank), err in errors.items():
        m, n = se.aspect_shape(262144, aspect)
        for method, value in (("nystrom_truncated", err), ("svd", err / 2)):
            rows.append(dict(experiment="aspect", input=f"{se.EMBEDDING} {m}×{n}",
                             matrix=f"{se.EMBEDDING} {m}×{n}", m=m, n=n, rank=rank,
                             method=method, seed=0, step=-1, metric="rel_error", value=value))
    return pd.DataFrame(rows, columns=list(se.COLUMNS))


@pytest.mark.parametrize(("errors", "verdict"), [
    ({(1, 16): 0.5, (16, 16): 0.8, (1, 64): 0.3, (16, 64): 0.32}, "reproduced"),
    ({(1, 16): 0.5, (16, 16): 0.8, (1, 64): 0.3, (16, 64): 0.6}, "partly"),
    ({(1, 16): 0.5, (16, 16): 0.55, (1, 64): 0.3, (16, 64): 0.3}, "not reproduced"),
    # errors above 1 are capped: two useless reconstructions show no aspect penalty
    ({(1, 16): 1.7, (16, 16): 2.5, (1, 64): 0.3, (16, 64): 0.3}, "not reproduced"),
])
def test_c9_rule(errors: dict, verdict: str) -> None:
    cfg = se.config("smoke")
    row = se.c9_claim(_aspect_frame(errors), cfg)
    assert row.claim == "C9" and row.verdict == verdict


def test_aspect_figure_has_a_facet_per_family_and_method_and_a_line_per_rank() -> None:
    errors = {(aspect, rank): 0.3 + 0.01 * aspect / rank for aspect in (1, 4, 16)
              for rank in (16, 64)}
    fig = FIGURES["sketch_error_aspect"](_aspect_frame(errors), se.config("smoke"))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3  # one family × (SVD, truncated, oversampled Nyström)
    for ax, drawn in zip(axes, (True, True, False), strict=True):  # no oversampled rows here
        lines = [line for line in ax.lines if len(line.get_xdata()) == 3]  # the ranks' lines
        assert len(lines) == (2 if drawn else 0)
    assert [t.get_text() for t in fig.legends[0].texts] == ["r = 16", "r = 64"]


def test_c9_needs_ranks_on_both_sides_of_64() -> None:
    with pytest.raises(ValueError, match="both sides"):
        se.c9_claim(_aspect_frame({(1, 16): 0.5, (16, 16): 0.8}), se.config("smoke"))


def test_config_scales_and_errors() -> None:
    smoke, default = se.config("smoke"), se.config("default")
    assert default["ranks"] == [4, 8, 16, 32, 64, 128]
    assert len(smoke["ranks"]) < len(default["ranks"]) and smoke["scale"] == "smoke"
    for ratio in default["aspect_ratios"]:
        m, n = se.aspect_shape(default["aspect_numel"], ratio)
        assert m * n == default["aspect_numel"] and m == ratio * n
    with pytest.raises(ConfigError, match="unknown key"):
        se.config("smoke", rank=3)
    with pytest.raises(ValueError, match="aspect"):
        se.aspect_shape(1000, 3)
