"""The README and docs/results.md tell the truth: the README's first example runs as written,
and the numbers they quote from a notebook's tables are the committed tables' numbers."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from logra.experiments.floating_point import FLIPS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
RESULTS = (REPO / "docs" / "results.md").read_text()
FIGURES = REPO / "figures"


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    following = re.search(r"^##? ", README[start + 3:], flags=re.MULTILINE)
    return README[start:start + 3 + following.start()] if following else README[start:]


def test_the_summary_of_results_quotes_only_numbers_of_docs_results() -> None:
    """Each of the README's one-line results quotes no number that its study's section of
    docs/results.md (where the tests below check them against the committed tables) does not
    state as written: a bullet naming notebooks is read against their sections, one naming no
    notebook against the section of its title."""
    summary = _section("What the notebooks found")
    sections = dict(part.split("\n", 1) for part in re.split(r"^## ", RESULTS, flags=re.M)[1:])
    number = r"[−+]?\d+(?:,\d{3})*(?:\.\d+)?"
    bullets = re.findall(r"^\* \*\*(.*?)\*\*(.*?)(?=^\* |\n\n|\Z)", summary, flags=re.M | re.S)
    assert len(bullets) == 5
    quoted = 0
    for title, bullet in bullets:
        named = re.match(r"\s*\(notebooks? (\d\d)(?: and (\d\d))?\)", bullet)
        if named:
            notebooks = [f"notebook {n}" for n in named.groups() if n]
            bullet = bullet[named.end():]
            text = "".join(body for heading, body in sections.items()
                           if any(n in heading.replace("notebooks 03 and 09", "notebook 03 "
                                                       "notebook 09") for n in notebooks))
        else:
            text = sections[title]
        assert text, title
        numbers = [n for n in re.findall(rf"{number}(?: to {number})?", bullet)
                   if not re.fullmatch(r"[135]", n)]  # "C5", "3 seeds", "lr 1e-3"
        quoted += len(numbers)
        missing = [n for n in numbers
                   if not re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d,]|\.\d)", text)]
        assert not missing, (title, missing)
    assert quoted >= 6  # the gains of notebooks 11 and 04 at least


def test_the_first_loop_runs_as_written() -> None:
    """The python block of "The first five minutes", with a small transformers model, a loader
    and a loss: every step is predicted, and the control reports its scale."""
    (code,) = re.findall(r"```python\n(.*?)```", _section("The first five minutes"), re.DOTALL)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2)
    model = Qwen2ForCausalLM(config)
    loader = [{"input_ids": torch.randint(0, 50, (4, 12))} for _ in range(3)]

    def loss_fn(output, batch):
        return torch.nn.functional.cross_entropy(output.logits[:, :-1].reshape(-1, 50),
                                                 batch["input_ids"][:, 1:].reshape(-1))

    before = [p.detach().clone() for p in model.parameters()]
    scope = {"model": model, "loader": loader, "loss_fn": loss_fn}
    exec(compile(code, "README.md", "exec"), scope)
    step = scope["optimizer"].last_step
    assert math.isfinite(float(step["predicted_kl"])) and float(step["predicted_kl"]) > 0
    assert 0 < float(step["gamma"]) <= 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _points(value: float) -> str:
    return f"{value:.1f}"


@pytest.fixture(scope="module")
def regime() -> pd.DataFrame:
    return pd.read_csv(FIGURES / "rl_regime.csv")


def test_notebook_11_numbers_are_the_committed_tables(regime) -> None:
    text = RESULTS
    text = text[text.index("## Does GRPO learn here?"):]
    greedy = f"{regime['greedy_before'].iloc[0]:.2f} % → " + "–".join(
        _points(v) for v in (regime["greedy_after"].min(), regime["greedy_after"].max()))
    sampled = f"{regime['sampled_before'].iloc[0]:.1f} % → " + "–".join(
        _points(v) for v in (regime["sampled_after"].min(), regime["sampled_after"].max()))
    assert greedy in text and sampled in text, (greedy, sampled)
    for column in ("greedy_gain", "sampled_gain"):
        gains = f"+{_points(regime[column].min())} to +{_points(regime[column].max())} points"
        assert gains in text, gains
    assert f"holds on {int(regime['passes'].sum())} of the {len(regime)} seeds" in text


def test_notebook_04_numbers_are_the_committed_tables() -> None:
    """Every row of docs/results.md's comparison table quotes figures/comparison.csv: greedy and
    sampled pass@1, the differences to dense AdamW, and the state."""
    table = pd.read_csv(FIGURES / "comparison.csv", dtype=str).set_index("method")
    text = RESULTS
    text = text[text.index("## LoRA vs dense AdamW vs LoGRA where RL learns"):]
    rows = {"policy before RL": "| policy before RL |", "dense AdamW": "| dense AdamW (",
            "LoGRA gain + KL control": "| LoGRA + KL control (", "LoRA": "| LoRA r8 α16 ("}
    for method, start in rows.items():
        line = next(row for row in text.splitlines() if row.startswith(start))
        t = table.loc[method]
        assert f"| {t['greedy pass@1, %']} % | {t['sampled pass@1, %']} % |" in line, line
        if method not in ("policy before RL", "dense AdamW"):
            diffs = [t[c].split()[0].replace("-", "−") for c in ("greedy vs dense, pts",
                                                                  "sampled vs dense, pts")]
            assert f"| {diffs[0]} / {diffs[1]} " in line, (line, diffs)
        if method != "policy before RL":
            assert f"{float(t['optimizer state, MB']):.2f} MB" in line, line


# docs/results.md's name of each row of notebook 10's table -> the tables' optimizer label
QUALITY_ROWS = {
    "AdamW": "AdamW", "8-bit AdamW": "8-bit AdamW", "Adafactor": "Adafactor",
    "Adam-mini": "Adam-mini", "GaLore (r 16)": "GaLore", "APOLLO (r 16)": "APOLLO",
    "APOLLO-Mini": "APOLLO-Mini", "Fira (r 16)": "Fira", "LoRA (r 16, sft only)": "LoRA",
    "naive projection (r 16)": "naive projection",
    "**LoGRA gain (r 16, default)**": "LoGRA (gain)", "LoGRA nystrom": "LoGRA (nystrom)",
    "LoGRA blend": "LoGRA (blend)", "LoGRA subspace": "LoGRA (subspace)",
    "LoGRA gain, dense embeddings": "LoGRA (gain, dense embeddings)",
    "… and projections refreshed as APOLLO's": "LoGRA (gain, dense embeddings, refreshed)",
    "LoGRA channel (APOLLO's rule)": "LoGRA (channel)",
    "LoGRA channel with APOLLO's recipe": "LoGRA (channel, APOLLO's recipe)",
}
VERDICTS = {"reference": "", "no difference": "no difference", "lower than AdamW": "lower",
            "higher than AdamW": "higher", FLIPS: FLIPS}


def _ratio(value: float) -> str:
    return "1" if value == 1 else f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The markdown table under `header` in `text`: first cell -> the other cells."""
    lines = text[text.index(header):].splitlines()[2:]
    rows = {}
    for line in lines:
        if not line.startswith("|"):
            break
        first, *cells = [c.strip() for c in line.strip("|").split("|")]
        rows[first] = cells
    return rows


def test_notebook_10_numbers_are_the_committed_tables() -> None:
    """Every row of docs/results.md's training-quality table quotes figures/training_quality.csv
    (text) and training_quality_sft.csv: the test loss, the verdict against AdamW and the state
    ratio, and every optimizer of the two tables has a row."""
    tables = {task: pd.read_csv(FIGURES / f"training_quality{suffix}.csv").set_index("optimizer")
              for task, suffix in (("text", ""), ("sft", "_sft"))}
    text = RESULTS
    text = text[text.index("## Training quality at equal memory"):]
    rows = _table_rows(text, "| optimizer | text loss |")
    assert set(rows) == set(QUALITY_ROWS)
    assert set(QUALITY_ROWS.values()) == set(tables["text"].index) | set(tables["sft"].index)
    for name, cells in rows.items():
        label, ratios = QUALITY_ROWS[name], []
        for (loss, verdict), table in zip((cells[0:2], cells[2:4]), tables.values(), strict=True):
            if label not in table.index:
                assert loss == verdict == "", (name, cells)
                continue
            row = table.loc[label]
            quoted = float(loss.split()[0])  # 3 decimals of a table rounded to 4
            assert abs(quoted - row["test loss"]) <= 0.00055, (name, loss, row["test loss"])
            assert verdict == VERDICTS[row["verdict"]], (name, verdict, row["verdict"])
            ratios.append(_ratio(row["state / AdamW"]))
        assert cells[4] == " / ".join(ratios), (name, cells[4], ratios)


def _signed(value: float) -> str:
    return f"{value:+.1f}".replace("-", "−")


def test_notebook_09_budget_numbers_are_the_committed_table() -> None:
    """docs/results.md's drift-budget paragraph quotes figures/kl_control_budget.csv: final and
    highest probed KL, greedy and sampled pass@1, and the paired differences."""
    table = pd.read_csv(FIGURES / "kl_control_budget.csv").set_index("setting")
    text = RESULTS
    text = text[text.index("**Drift budget**"):]
    text = " ".join(text[:text.index("\n\n")].split())  # the paragraph, on one line
    free, budget = table.loc["no control"], table.loc["drift budget B = 0.03"]
    fixed, adaptive = table.loc["fixed β = 0.04 (GRPO's penalty)"], table.loc[
        "adaptive β (target 0.03)"]
    vs_free, vs_budget = "Δ vs no control (pts)", "Δ vs drift budget B = 0.03 (pts)"
    quoted = [
        f"final KL {free['final KL, seed min']:.3f}–{free['final KL, seed max']:.3f} over the "
        f"seeds",
        f"greedy {free['greedy pass@1 (%)']:.2f} %",
        f"(highest {budget['highest probed KL']:.3f}) and ends at "
        f"{budget['final KL to ref, mean']:.3f} with greedy {budget['greedy pass@1 (%)']:.1f} % "
        f"and sampled {budget['sampled pass@1 (%)']:.1f} %",
        f"({_signed(budget[f'greedy: {vs_free}'])} and {_signed(budget[f'sampled: {vs_free}'])} "
        f"points against no control",
        f"ends at {adaptive['final KL to ref, mean']:.3f} but",
        f"(probes up to {adaptive['highest probed KL']:.3f}), greedy "
        f"{adaptive['greedy pass@1 (%)']:.1f} %",
        f"{fixed['final KL to ref, mean']:.3f} (probes up to {fixed['highest probed KL']:.3f}), "
        f"greedy {fixed['greedy pass@1 (%)']:.1f} %",
        f"({_signed(fixed[f'greedy: {vs_budget}'])} greedy",
        f"{_signed(fixed[f'sampled: {vs_budget}'])} sampled",
        f"({_signed(adaptive[f'greedy: {vs_budget}'])} greedy",
        f"{_signed(adaptive[f'sampled: {vs_budget}'])} sampled",
    ]
    missing = [q for q in quoted if q not in text]
    assert not missing, missing


def test_notebook_09_seed_band_numbers_are_the_committed_tables() -> None:
    """docs/results.md's seed-bands paragraph quotes figures/kl_control_bands.csv and
    kl_control_bands_lr_matched.csv: each point's KL and pass@1 with its seeds' range, the
    paired differences of the control against the lr cut and against no control."""
    bands = pd.read_csv(FIGURES / "kl_control_bands.csv")
    matched = pd.read_csv(FIGURES / "kl_control_bands_lr_matched.csv").set_index("measure")
    text = RESULTS
    text = text[text.index("**Seed bands"):]
    text = " ".join(text[:text.index("\n\n")].split())
    cut, free, held = (bands.iloc[i] for i in range(3))
    assert (cut["lr"], free["lr"], held["lr"], held["δ"]) == (3e-4, 1e-3, 1e-3, "0.005")
    greedy, sampled = matched.loc["greedy"], matched.loc["sampled"]

    def point(r: pd.Series) -> str:
        return (f"greedy {r['greedy pass@1 (%)']:.1f} % with seeds "
                f"{r['greedy pass@1 (%), seed min']:.1f}–{r['greedy pass@1 (%), seed max']:.1f}, "
                f"sampled {r['sampled pass@1 (%)']:.1f} %")
    spread = {k: r["greedy pass@1 (%), seed max"] - r["greedy pass@1 (%), seed min"]
              for k, r in (("cut", cut), ("held", held))}
    quoted = [
        f"(final KL {held['final KL to ref']:.3f}, {point(held)})",
        f"(KL {cut['final KL to ref']:.3f}, {point(cut)})",
        f"by {-greedy['Δ vs nearest (pts)']:.1f} greedy points",
        f"se {greedy['Δ vs nearest, se']:.2f}",
        f"and {-sampled['Δ vs nearest (pts)']:.1f} sampled points",
        " / ".join(_signed(m["control − lr cut (pts)"]) for m in (greedy, sampled)) + " points",
        "from steps " + " and ".join(", ".join(free["first step with KL > 0.1"].split(" / "))
                                     .rsplit(", ", 1)),
        f"final KL {free['final KL to ref, seed min']:.2f}–{free['final KL to ref, seed max']:.2f}",
        f"greedy {free['greedy pass@1 (%), seed min']:.1f}–"
        f"{free['greedy pass@1 (%), seed max']:.1f} %",
        f"{greedy['Δ vs no control at this lr (pts)']:.1f} greedy and "
        f"{sampled['Δ vs no control at this lr (pts)']:.1f} sampled points higher",
        f"({spread['cut']:.1f} greedy points against the control's {spread['held']:.1f})",
    ]
    assert greedy["Δ vs nearest (pts)"] < 0 < greedy["Δ vs nearest, p (Holm)"] < 0.01
    assert sampled["Δ vs nearest, p (Holm)"] > 0.01  # "no difference at α = 0.01"
    missing = [q for q in quoted if q not in text]
    assert not missing, missing


def test_notebook_10_equal_bytes_numbers_are_the_committed_tables() -> None:
    """docs/results.md's equal-bytes bullet quotes figures/training_quality*_equal_bytes.csv: every
    optimizer's mean loss at the bytes, and every paired difference with its interval."""
    text = RESULTS
    text = text[text.index("* **At equal memory LoGRA's best ties"):]
    text = " ".join(text[:text.index("\n* ")].split())
    numbers = [float(x.replace("−", "-")) for x in re.findall(r"[−+]?\d+\.\d+", text)]
    pairs = [(float(a.replace("−", "-")), float(b))
             for a, b in re.findall(r"([−+]?\d+\.\d+) ± (\d+\.\d+)", text)]

    def quoted(value: float) -> bool:  # 3 decimals of a table rounded to 4
        return any(abs(value - n) <= 0.00055 for n in numbers)

    for suffix in ("", "_sft"):
        table = pd.read_csv(FIGURES / f"training_quality{suffix}_equal_bytes.csv")
        loss = next(c for c in table.columns if c.startswith("test loss at"))
        delta = next(c for c in table.columns if c.startswith("Δ vs"))
        for row in table.to_dict("records"):
            assert quoted(row[loss]), (suffix, row["optimizer"], row[loss])
            if isinstance(row[delta], str) and row[delta].strip():
                mean, half = (float(x) for x in row[delta].split(" ± "))
                assert any(abs(mean - a) <= 0.00055 and abs(half - b) <= 0.00055
                           for a, b in pairs), (suffix, row["optimizer"], row[delta])


def test_notebook_10_rank_numbers_are_the_committed_tables() -> None:
    """docs/results.md's bullet on what keeps LoGRA from leading quotes the rank tables
    (figures/training_quality*_ranks.csv): APOLLO's and Fira's loss at ranks 4 / 16 / 64 on
    both benchmarks, GaLore's on text, and Fira's seed range at equal bytes."""
    text = RESULTS
    text = text[text.index("* **What keeps LoGRA from leading"):]
    text = " ".join(text[:text.index("\n* ")].split())
    ranks = {task: pd.read_csv(FIGURES / f"training_quality{suffix}_ranks.csv")
             for task, suffix in (("text", ""), ("sft", "_sft"))}

    def losses(task: str, optimizer: str) -> list[str]:
        rows = ranks[task][ranks[task]["optimizer"] == optimizer].sort_values("rank")
        assert list(rows["rank"]) == [4, 16, 64], (task, optimizer)
        return [f"{loss:.3f}" for loss in rows["test loss"]]

    text_part, sft_part = text.split("on SFT", 1)
    for optimizer in ("APOLLO", "Fira"):
        assert f"{optimizer} {' / '.join(losses('text', optimizer))}" in text_part, optimizer
        assert f"{optimizer} {' / '.join(losses('sft', optimizer))}" in sft_part, optimizer
        assert losses("sft", optimizer)[1] == min(losses("sft", optimizer))  # "rank 16 best"
    assert "from {} to {} to {} on text".format(*losses("text", "GaLore")) in text
    fira = [float(x) for x in losses("text", "Fira")]
    assert f"{(fira[1] - fira[2]) / 2:.3f} per doubling" in text
    equal = pd.read_csv(FIGURES / "training_quality_equal_bytes.csv").set_index("optimizer")
    low, high = (float(x) for x in equal.loc["Fira", "seed range"].split("–"))
    assert f"({low:.3f}–{high:.3f})" in text


def test_notebook_10_rank_64_numbers_are_the_committed_tables() -> None:
    """docs/results.md's bullet on LoGRA's rank-64 rows quotes the rank tables: the recipe's
    loss and rate at ranks 64 and 16 on text, its state there, gain's rate, and SFT's state
    share and rate at rank 64."""
    text = RESULTS
    text = text[text.index("* **LoGRA's rank-64 rows"):]
    text = " ".join(text[:text.index("\n* ")].split())
    ranks = {task: pd.read_csv(FIGURES / f"training_quality{suffix}_ranks.csv")
             .set_index(["optimizer", "rank"]) for task, suffix in (("text", ""), ("sft", "_sft"))}
    recipe = ranks["text"].loc["LoGRA (channel, APOLLO's recipe)"]
    assert (f"({recipe.loc[64, 'test loss']:.3f} at lr {recipe.loc[64, 'best lr']:.2g}, against "
            f"{recipe.loc[16, 'test loss']:.3f} at rank 16)") in text
    assert (f"{recipe.loc[64, 'state MB']:.2f} MB of state, "
            f"{recipe.loc[64, 'state / AdamW']:.2f} of AdamW's") in text
    gain = ranks["text"].loc["LoGRA (gain)"]
    assert f"{gain.loc[64, 'best lr']:.2g} for gain" in text
    sft = ranks["sft"].loc["LoGRA (gain)"]
    assert (f"rank 64: {sft.loc[64, 'state / AdamW']:.2f} of AdamW's state, rate "
            f"{sft.loc[64, 'best lr']:.2g}") in text


def test_notebook_10_best_configuration_numbers_are_the_committed_tables() -> None:
    """docs/results.md's bullet on LoGRA's best configuration against AdamW quotes
    figures/training_quality*.csv: the paired difference with its interval, both losses, the
    ratio, Holm's p and the state share, on text and SFT."""
    text = RESULTS
    text = text[text.index("* **LoGRA's best configuration against AdamW**"):]
    text = " ".join(text[:text.index("\n* ")].split())
    best = "LoGRA (channel, APOLLO's recipe)"
    for suffix in ("", "_sft"):
        table = pd.read_csv(FIGURES / f"training_quality{suffix}.csv").set_index("optimizer")
        row, adamw = table.loc[best], table.loc["AdamW"]
        delta = row["Δ vs AdamW (95 % CI)"].replace("-", "−")
        quoted = (f"{delta} nats", f"({row['test loss']:.3f} against {adamw['test loss']:.3f}",
                  f"{row['loss / AdamW']:.3f}×", f"Holm p {row['p (Holm)']:.2g})",
                  f"{100 * row['state / AdamW']:.0f} %")
        missing = [q for q in quoted if q not in text]
        assert not missing, (suffix, missing)
        assert row["verdict"] == ("lower than AdamW" if suffix == "" else FLIPS)


def _lr(value: float) -> str:
    """A learning rate as the README writes it: 3e-4, 1e-2."""
    return f"{value:.0e}".replace("e-0", "e-")


def test_notebook_09_naive_sweep_numbers_are_the_committed_tables() -> None:
    """docs/results.md's paragraph on the naive projection's own lrs quotes
    figures/kl_control_naive_sweep.csv and its claim row: the best lr and its gains, the lr
    where it runs away and when, the collapsed runs' KL, and the verdict."""
    sweep = pd.read_csv(FIGURES / "kl_control_naive_sweep.csv").set_index("lr")
    claim = pd.read_csv(FIGURES / "claims_kl_control_naive_sweep.csv").iloc[0]
    text = RESULTS
    text = text[text.index("**The naive projection at its own learning rates**"):]
    text = " ".join(text[:text.index("\n\n")].split())
    best = sweep["sampled pass@1 (%)"].idxmax()
    away = sweep[sweep["first step with KL > 0.1"] != "never"].index.min()
    collapsed = sweep[sweep["greedy pass@1 (%)"] == 0]
    quoted = [
        f"learns best at {_lr(best)} (sampled {_signed(sweep.loc[best, 'sampled gain (pts)'])} "
        f"points",
        f"greedy {_signed(sweep.loc[best, 'greedy gain (pts)'])})",
        f"runs away at {_lr(away)} (smoothed KL above 0.1 from step "
        f"{sweep.loc[away, 'first step with KL > 0.1']}, greedy "
        f"{_signed(sweep.loc[away, 'greedy gain (pts)'])} points)",
        f"collapses from {_lr(collapsed.index.min())} (KL up to "
        + " and ".join(f"{kl:.1f}" for kl in collapsed["peak KL"]),
        f"it explodes at {away / best:.0f}× that lr",
        f"**C5 at its best lr: {claim['verdict']}.**",
    ]
    missing = [q for q in quoted if q not in text]
    assert not missing, missing
    assert f"best lr {best:g}" in claim["reproduced"]


def _power_of_ten(value: float) -> str:
    """3330816.0 -> "3·10⁶": the README's way of writing a factor to one digit."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}·10" + "".join(
        "⁰¹²³⁴⁵⁶⁷⁸⁹"[int(d)] if d != "-" else "⁻" for d in str(int(exponent)))


def test_notebook_03_calibration_numbers_are_the_committed_tables() -> None:
    """The README's and docs/kl_control.md's numbers for the KL predictors are
    figures/kl_calibration.csv's (the default's subsampled probe, the whole-batch JVP, the raw
    diagonal) and kl_calibration_schedule.csv's (the diagonal refitted from the default's
    sparser probes, or from the measured KL fed back)."""
    from logra.experiments import kl_trajectories_report as ktr

    table = pd.read_csv(FIGURES / "kl_calibration.csv").set_index("predictor")
    schedule = pd.read_csv(FIGURES / "kl_calibration_schedule.csv", dtype={"probe every": str})
    median, within = "median measured/predicted", "steps within 4× (%)"
    default, full = table.loc[ktr.DEFAULT_PREDICTOR], table.loc[ktr.FULL_PREDICTOR]
    raw = table.loc[ktr.RAW_PREDICTOR]
    probed = schedule[schedule["calibration from"] == "JVP probes"]
    sparse = probed[(probed["probe"] == ktr.DEFAULT_PROBE)
                    & probed["probe every"].isin(["5", "10", "20"])][within]
    fed = schedule[schedule["calibration from"] != "JVP probes"][within]
    assert len(sparse) and len(fed)
    text = " ".join(_section("The optimizer").split())
    assert (f"a median measured/predicted of {default[median]:.2f} and lands within 4× on "
            f"{default[within]:.0f} % of steps") in text
    assert f"the diagonal estimate alone is {_power_of_ten(raw[median])} times" in text
    assert f"within 4× on only {sparse.min():.0f}–{sparse.max():.0f} % of steps" in text
    docs = " ".join((REPO / "docs" / "kl_control.md").read_text().split())
    assert (f"median measured/predicted {default[median]:.2f}; {default[within]:.0f} % of steps "
            f"within 4×") in docs
    assert f"| the batch | {full[median]:.2f}; {full[within]:.0f} % |" in docs
    assert f"| {_power_of_ten(raw[median])} times too small" in docs
    assert (f"rank correlation {raw['Spearman ρ']:.2f}, log-log slope {raw['log-log slope']:.1f}"
            in docs)
    assert f"every 5–20 steps it lands within 4× on {sparse.min():.0f}–{sparse.max():.0f} %" in docs
    assert f"fed back every step on {fed.min():.0f}–{fed.max():.0f} %" in docs
