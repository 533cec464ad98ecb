"""The README tells the truth: its first example runs as written, and the numbers it quotes
from a notebook's tables are the committed tables' numbers."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
FIGURES = REPO / "figures"


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    following = re.search(r"^##? ", README[start + 3:], flags=re.MULTILINE)
    return README[start:start + 3 + following.start()] if following else README[start:]


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
    text = _section("Running things")
    text = text[text.index("### Does GRPO learn here?"):]
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
    """Every row of the README's comparison table quotes figures/comparison.csv: greedy and
    sampled pass@1, the differences to dense AdamW, and the state."""
    table = pd.read_csv(FIGURES / "comparison.csv", dtype=str).set_index("method")
    text = _section("Running things")
    text = text[text.index("### LoRA vs dense AdamW vs LoGRA where RL learns"):]
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
