"""The claims ledger collects every notebook's rows and shows untested claims."""

from __future__ import annotations

import pandas as pd
import pytest

from logra import notebooks
from logra.experiments import claims, report


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
    header, first, *rest = read_markdown(block.split("\n\n", 1)[1])
    assert header == ["claim", "reported", "reproduced", "scale", "verdict"]
    assert first == ["C1", "134 MB", "1 MB", "exact", "reproduced"] and len(rest) == 11
    table = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False)
    assert len(table) == 12 and table.loc[0, "verdict"] == "reproduced"
    assert read_markdown((tmp_path / "claims.md").read_text())[1][0] == "C1"


def test_readme_without_a_claims_block_is_an_error(tmp_path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no block here\n")
    with pytest.raises(ValueError, match="claims:start"):
        claims.update_readme(claims.ledger(claims.collect(tmp_path)), readme, "smoke")
