"""The claims ledger: every notebook's claim rows in one table, C1–C12 in order.

Each notebook that tests a claim writes figures/claims_NAME.{csv,md} (`report.save_claims`).
`collect` reads them all and `ledger` orders them by claim id and marks the claims no notebook
has tested yet, so the table shows every claim of ../shared/CLAIMS.md exactly once per row
written about it, and a missing one is visible rather than silently absent.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from logra.experiments.report import ClaimRow

CLAIM_IDS = tuple(f"C{i}" for i in range(1, 13))
MISSING = "not yet tested"


def collect(figures_dir: str | Path) -> pd.DataFrame:
    """Concatenate figures_dir/claims_*.csv, each row tagged with the file it came from."""
    frames = []
    for path in sorted(Path(figures_dir).glob("claims_*.csv")):
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        frames.append(frame.assign(source=path.stem.removeprefix("claims_")))
    if not frames:
        return pd.DataFrame(columns=[*ClaimRow.__dataclass_fields__, "source"])
    return pd.concat(frames, ignore_index=True)


def ledger(rows: pd.DataFrame) -> pd.DataFrame:
    """All twelve claims in order; claims with no row get one saying they are untested.

    Rows whose claim id is not C1–C12 are an error: they would not belong in this table.
    """
    unknown = sorted(set(rows["claim"]) - set(CLAIM_IDS))
    if unknown:
        raise ValueError(f"claim rows with unknown ids {unknown}; valid: {list(CLAIM_IDS)}")
    missing = [c for c in CLAIM_IDS if c not in set(rows["claim"])]
    placeholders = pd.DataFrame({"claim": missing, "reported": "", "reproduced": MISSING,
                                 "scale": "", "verdict": MISSING, "source": ""})
    table = pd.concat([rows, placeholders], ignore_index=True)
    order = {c: i for i, c in enumerate(CLAIM_IDS)}
    return table.sort_values("claim", key=lambda s: s.map(order), kind="stable").reset_index(
        drop=True)
