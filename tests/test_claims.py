"""The claims ledger collects every notebook's rows and shows untested claims."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from logra import cli, notebooks
from logra.experiments import claims, report

REPO = Path(__file__).resolve().parents[1]


def write_rows(directory, name: str, rows: list[report.ClaimRow]) -> None:
    report.save_claims(rows, name, directory)


def test_ledger_orders_all_twelve_and_marks_the_missing(tmp_path) -> None:
    write_rows(tmp_path, "b", [report.ClaimRow("C10", "r", "x", "s", "partly")])
    write_rows(tmp_path, "a", [report.ClaimRow("C2", "r", "y", "s", "not reproduced"),
                               report.ClaimRow("C1", "r", "z", "s", "reproduced")])
    table = claims.ledger(claims.collect(tmp_path))
    assert list(table["claim"]) == [f"C{i}" for i in range(1, 13)]
    assert table.set_index("claim").loc["C10", "source"] == "b"
    untested = table[table["verdict"] == claims.MISSING]["claim"]
    assert list(untested) == ["C3", "C4", "C5", "C6", "C7", "C8", "C9", "C11", "C12"]


def test_unknown_claim_ids_are_an_error(tmp_path) -> None:
    write_rows(tmp_path, "a", [report.ClaimRow("C13", "r", "x", "s", "partly")])
    with pytest.raises(ValueError, match="C13"):
        claims.ledger(claims.collect(tmp_path))


def test_bad_verdict_is_rejected_when_the_row_is_made() -> None:
    with pytest.raises(ValueError, match="verdict"):
        report.ClaimRow("C1", "r", "x", "s", "sort of")


def test_notebook_writes_the_ledger(tmp_path, read_markdown) -> None:
    write_rows(tmp_path, "memory", [report.ClaimRow("C1", "134 MB", "1 MB", "exact",
                                                    "reproduced")])
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- claims:start -->\nstale\n<!-- claims:end -->\noutro\n")
    notebooks.execute("00_claims", {"scale": "smoke", "figures_dir": str(tmp_path),
                                    "readme": str(readme)}, executed_dir=tmp_path)
    assert "stale" in readme.read_text()  # a smoke-scale ledger leaves the README alone ...
    notebooks.execute("00_claims", {"scale": "smoke", "figures_dir": str(tmp_path),
                                    "readme": str(readme), "rewrite_readme": True},
                      executed_dir=tmp_path)  # ... unless asked
    text = readme.read_text()
    assert "stale" not in text
    assert text.startswith("intro\n") and text.endswith("<!-- claims:end -->\noutro\n")
    block = text.split("<!-- claims:start -->\n")[1].split("<!-- claims:end -->")[0]
    intro, markdown = block.split("\n\n", 1)
    assert "`claims.md`" in intro  # where the measured numbers are: beside the README here
    header, first, *rest = read_markdown(markdown)
    assert header == ["claim", "reported", "verdict", "scale"]  # the measured prose stays out
    assert first == ["C1", "134 MB", "reproduced", "exact"] and len(rest) == 11
    assert "1 MB" not in block  # the measured numbers stay in claims.md
    rows = [line for line in markdown.strip().splitlines() if not line.startswith("| ---")]
    assert rows == ["| " + " | ".join(cells) + " |" for cells in [header, first, *rest]]  # unpadded
    table = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False)
    assert len(table) == 12 and table.loc[0, "verdict"] == "reproduced"
    assert read_markdown((tmp_path / "claims.md").read_text())[1][0] == "C1"


def test_readme_without_a_claims_block_is_an_error(tmp_path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no block here\n")
    with pytest.raises(ValueError, match="claims:start"):
        claims.update_readme(claims.ledger(claims.collect(tmp_path)), readme, "smoke", tmp_path)


def test_a_partial_check_takes_the_committed_rows_it_did_not_regenerate(tmp_path) -> None:
    """`collect(fresh, committed)`: a claim file fresh has wins; one only committed has is read
    from there, tagged with its own source; one only fresh has is kept."""
    fresh, committed = tmp_path / "fresh", tmp_path / "committed"
    write_rows(fresh, "a", [report.ClaimRow("C1", "r", "new", "s", "reproduced")])
    write_rows(fresh, "c", [report.ClaimRow("C3", "r", "only fresh", "s", "partly")])
    write_rows(committed, "a", [report.ClaimRow("C1", "r", "old", "s", "not reproduced")])
    write_rows(committed, "b", [report.ClaimRow("C2", "r", "kept", "s", "partly")])
    rows = claims.collect(fresh, committed).set_index("source")
    assert sorted(rows.index) == ["a", "b", "c"]
    assert rows.loc["a", "reproduced"] == "new" and rows.loc["b", "reproduced"] == "kept"
    assert list(claims.collect(fresh)["source"]) == ["a", "c"]  # without it: fresh alone


def test_a_check_of_the_ledger_alone_finds_it_current(tmp_path, capsys) -> None:
    """`reproduce --check --only 00_claims` rebuilds the ledger from HEAD's claim files and
    finds claims.csv and verdict_counts.csv identical to HEAD's (with no claim file
    regenerated, the ledger would read "not yet tested" twelve times and fail)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert cli.main(["reproduce", "--only", "00_claims", "--results-dir", str(tmp_path),
                     "--check"]) == 0
    out = capsys.readouterr().out
    assert "2 table(s) identical, 0 moved" in out, out  # claims.csv, verdict_counts.csv
