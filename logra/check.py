"""Compare freshly regenerated tables with the committed ones, within stated tolerances.

Every `*.csv` of the committed figures directory is read as text and compared cell by cell with
the fresh file of the same name, by the rule the tolerance file gives its column:

* `exact`: the same text (counts, byte accountings, configurations, verdicts);
* `{abs: a, rel: r}`: numbers may move by |fresh − committed| ≤ a + r·|committed| (trained
  numbers). A text cell holding numbers ("32.5 ± 1.8") must keep its words, and each number
  moves within the tolerance;
* `report`: changes are listed and never fail (prose with numbers in it, wall times).

The tolerance file (YAML) maps file-name patterns to a rule for the whole file or to
`{default: RULE, columns: {column pattern: RULE}, key: [COLUMN, ...], rows: [{where: {COLUMN:
VALUE, ...}, rule: RULE}, ...]}`; the first pattern that matches a file applies, column patterns
are `fnmatch` patterns too, first match wins. A `rows` entry gives the rows whose committed cells
read VALUE in every named column their own rule for the columns that have a tolerance (their
numbers), e.g. a method whose result is round-off amplified by design; exact columns stay exact.
A file no pattern covers is compared exactly, and the report says so. Rows are compared in
order, or, with a `key`, matched by their key columns: then a row only one of the two tables has
is listed and does not fail (a learning-rate sweep extends its grid past an edge optimum, so
where a near-tie moves the optimum on another CPU the sweep gains or loses a row; the choice
itself is compared in the summary tables).

    python -m logra.check                       # figures/ against the figures of git HEAD
    python -m logra.check FRESH --committed DIR --tolerances figures/tolerances.yaml

exits 1 when anything is outside its tolerance, a table changed shape, or a verdict changed.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import math
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from logra.paths import FIGURES_SCALE, figures_dir, project_root

REPO = project_root()
FIGURES_DIR = figures_dir(FIGURES_SCALE)  # where `logra-repro reproduce` writes the committed ones
TOLERANCES = FIGURES_DIR / "tolerances.yaml"
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Rule:
    """How a column may move: `kind` exact, tolerance (abs + rel·|committed|) or report."""

    kind: str
    abs: float = 0.0
    rel: float = 0.0

    def __str__(self) -> str:
        return f"abs {self.abs:g} + rel {self.rel:g}" if self.kind == "tolerance" else self.kind


EXACT = Rule("exact")


def parse_rule(value: object, where: str) -> Rule:
    """A Rule from the tolerance file's `exact`, `report` or `{abs: a, rel: r}`."""
    if value in ("exact", "report"):
        return Rule(str(value))
    if isinstance(value, dict) and value and set(value) <= {"abs", "rel"}:
        bounds = {k: float(v) for k, v in value.items()}
        if any(not math.isfinite(v) or v < 0 for v in bounds.values()):
            raise ValueError(f"{where}: tolerances must be finite and >= 0, got {value!r}")
        return Rule("tolerance", **bounds)
    raise ValueError(f"{where}: a rule is 'exact', 'report' or {{abs: a, rel: r}}, got {value!r}")


@dataclass(frozen=True)
class FileRules:
    """The rules of one file pattern: a default, column-pattern overrides in order, and the
    columns that identify a row (none: rows are matched by position)."""

    default: Rule
    columns: tuple[tuple[str, Rule], ...] = ()
    key: tuple[str, ...] = ()
    rows: tuple[tuple[tuple[tuple[str, str], ...], Rule], ...] = ()  # (column, value)s -> rule

    def rule(self, column: str) -> Rule:
        for pattern, rule in self.columns:
            if column == pattern or fnmatch.fnmatchcase(column, pattern):
                return rule
        return self.default

    def row_rule(self, row: pd.Series) -> Rule | None:
        """The rule of the first `rows` entry whose values `row` (committed) holds, if any."""
        for where, rule in self.rows:
            if all(column in row and row[column] == value for column, value in where):
                return rule
        return None


def load_tolerances(path: str | Path = TOLERANCES) -> dict[str, FileRules]:
    """File pattern -> FileRules, in the file's order, from the tolerance YAML at `path`."""
    raw = yaml.safe_load(Path(path).read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("files"), dict):
        raise ValueError(f"{path}: expected a mapping with a 'files' mapping")
    rules: dict[str, FileRules] = {}
    for pattern, spec in raw["files"].items():
        where = f"{path}: {pattern}"
        if isinstance(spec, dict) and set(spec) & {"columns", "default", "key", "rows"}:
            unknown = set(spec) - {"default", "columns", "key", "rows"}
            if unknown:
                raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
            key = spec.get("key") or []
            if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
                raise ValueError(f"{where}: key must be a list of column names, got {key!r}")
            columns = tuple((str(col), parse_rule(rule, f"{where}: {col}"))
                            for col, rule in (spec.get("columns") or {}).items())
            rules[pattern] = FileRules(parse_rule(spec.get("default", "exact"), where), columns,
                                       tuple(key), _row_rules(spec.get("rows") or [], where))
        else:
            rules[pattern] = FileRules(parse_rule(spec, where))
    return rules


def _row_rules(entries: object, where: str) -> tuple:
    """The `rows` entries: [{where: {column: value}, rule: RULE}, ...] as FileRules.rows."""
    if not isinstance(entries, list):
        raise ValueError(f"{where}: rows must be a list of {{where, rule}} entries")
    rows = []
    for entry in entries:
        if (not isinstance(entry, dict) or set(entry) != {"where", "rule"}
                or not isinstance(entry["where"], dict) or not entry["where"]):
            raise ValueError(f"{where}: a rows entry is {{where: {{COLUMN: VALUE}}, rule: RULE}}, "
                             f"got {entry!r}")
        match = tuple((str(column), str(value)) for column, value in entry["where"].items())
        rows.append((match, parse_rule(entry["rule"], f"{where}: rows {dict(match)}")))
    return tuple(rows)


def rules_for(name: str, tolerances: dict[str, FileRules]) -> FileRules | None:
    """The rules of the first pattern that matches file `name`, None if none does."""
    for pattern, rules in tolerances.items():
        if fnmatch.fnmatchcase(name, pattern):
            return rules
    return None


@dataclass
class ColumnChange:
    """The cells of one column that differ: how many, the largest move, and one example."""

    file: str
    column: str
    rule: Rule
    cells: int = 0
    outside: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    example: tuple[int, str, str] = (0, "", "")  # row, committed, fresh: the worst cell

    def format(self) -> str:
        row, old, new = self.example
        size = (f"; largest move {self.max_abs:.3g} ({100 * self.max_rel:.3g} %)"
                if self.max_abs else "")
        status = f"{self.outside} outside" if self.outside else "within"
        return (f"{self.file} [{self.column}] ({self.rule}): {self.cells} cell(s) moved, "
                f"{status}{size}; e.g. row {row}: {_short(old)} -> {_short(new)}")


@dataclass
class FigureCheck:
    """What `check_figures` found; `ok` when nothing is outside its tolerance."""

    identical: list[str] = field(default_factory=list)
    changes: list[ColumnChange] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # changed shape or columns: no comparison
    unmatched_rows: list[str] = field(default_factory=list)  # keyed rows only one table has
    not_regenerated: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    unruled: list[str] = field(default_factory=list)  # compared exactly, no rule in the file

    @property
    def outside(self) -> list[ColumnChange]:
        return [change for change in self.changes if change.outside]

    @property
    def ok(self) -> bool:
        return not self.outside and not self.broken

    def format(self) -> str:
        """A plain-text report: failures first, then moves within tolerance, then the rest."""
        within = [c for c in self.changes if not c.outside]
        moved_files = sorted({c.file for c in self.changes})
        lines = [f"{len(self.identical)} table(s) identical, {len(moved_files)} moved, "
                 f"{len(self.outside)} column(s) outside tolerance, "
                 f"{len(self.broken)} changed shape"]
        for title, items in (
            ("OUTSIDE TOLERANCE", [c.format() for c in self.outside] + self.broken),
            ("moved within tolerance", [c.format() for c in within]),
            ("rows only one table has (matched by key)", self.unmatched_rows),
            ("not regenerated (committed only)", self.not_regenerated),
            ("new (no committed copy)", self.new),
            ("no rule in the tolerance file (compared exactly)", self.unruled),
        ):
            if items:
                lines += [f"{title}:", *(f"  {item}" for item in items)]
        lines.append("verdict: " + ("same within the stated tolerances" if self.ok else
                                    "DIFFERENT beyond the stated tolerances"))
        return "\n".join(lines)


def _short(text: str, width: int = 60) -> str:
    return repr(text if len(text) <= width else text[:width - 1] + "…")


def _numbers(text: str) -> tuple[str, list[float]]:
    """The words of `text` with every number replaced by #, and the numbers."""
    return NUMBER.sub("#", text), [float(n) for n in NUMBER.findall(text)]


def compare_cell(committed: str, fresh: str, rule: Rule) -> tuple[bool, float, float]:
    """(within, largest absolute move, its relative size) of one cell under `rule`.

    Under a tolerance both cells must read as the same words around their numbers; 'nan' and
    empty cells must stay as they are.
    """
    if committed == fresh:
        return True, 0.0, 0.0
    if rule.kind == "report":
        return True, 0.0, 0.0
    if rule.kind == "exact":
        return False, 0.0, 0.0
    (old_words, old), (new_words, new) = _numbers(committed), _numbers(fresh)
    if old_words != new_words or len(old) != len(new):
        return False, 0.0, 0.0
    within, worst, worst_rel = True, 0.0, 0.0
    for a, b in zip(old, new, strict=True):
        move = abs(b - a)
        within &= move <= rule.abs + rule.rel * abs(a)
        if move > worst:
            worst, worst_rel = move, move / abs(a) if a else math.inf
    return within, worst, worst_rel


def match_rows(name: str, committed: pd.DataFrame, fresh: pd.DataFrame, key: tuple[str, ...]
               ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]] | str:
    """The rows both tables have, in the committed table's order of `key`, and the rows only
    one of them has ("committed only: KEY" / "fresh only: KEY"); or why the tables cannot be
    matched (a key column missing, a key repeated within a table)."""
    missing = [k for k in key if k not in committed.columns]
    if missing:
        return f"{name}: key columns {missing} not in the table"
    old_keys, new_keys = (list(zip(*(t[k] for k in key), strict=True))
                          for t in (committed, fresh))
    if len(set(old_keys)) != len(old_keys) or len(set(new_keys)) != len(new_keys):
        return f"{name}: the key {list(key)} repeats within a table"
    position = {k: i for i, k in enumerate(new_keys)}
    shared = [i for i, k in enumerate(old_keys) if k in position]
    committed_keys = set(old_keys)
    unmatched = ([f"{name}: committed only: {k}" for k in old_keys if k not in position]
                 + [f"{name}: fresh only: {k}" for k in new_keys if k not in committed_keys])
    return (committed.iloc[shared].reset_index(drop=True),
            fresh.iloc[[position[old_keys[i]] for i in shared]].reset_index(drop=True), unmatched)


def compare_table(name: str, committed: pd.DataFrame, fresh: pd.DataFrame,
                  rules: FileRules) -> tuple[list[ColumnChange], list[str]] | str:
    """The changed columns of one table and the keyed rows only one table has, or why the
    tables cannot be compared (shape, columns)."""
    if list(committed.columns) != list(fresh.columns):
        gone = [c for c in committed.columns if c not in fresh.columns]
        added = [c for c in fresh.columns if c not in committed.columns]
        return f"{name}: columns changed (gone {gone}, new {added})"
    unmatched: list[str] = []
    if rules.key:
        matched = match_rows(name, committed, fresh, rules.key)
        if isinstance(matched, str):
            return matched
        committed, fresh, unmatched = matched
    if len(committed) != len(fresh):
        return f"{name}: {len(committed)} rows committed, {len(fresh)} fresh"
    changes = []
    row_rules = [rules.row_rule(row) for _, row in committed.iterrows()]
    for column in committed.columns:
        rule = rules.rule(column)
        change = ColumnChange(name, column, rule)
        for row, (old, new) in enumerate(zip(committed[column], fresh[column], strict=True)):
            if old == new:
                continue
            cell_rule = rule
            if rule.kind == "tolerance" and row_rules[row] is not None:
                cell_rule = row_rules[row]
            within, move, rel = compare_cell(old, new, cell_rule)
            change.cells += 1
            change.outside += not within
            if change.cells == 1 or move > change.max_abs or (not within and change.outside == 1):
                change.example = (row, old, new)
            if move > change.max_abs:
                change.max_abs, change.max_rel = move, rel
        if change.cells:
            changes.append(change)
    return changes, unmatched


def check_figures(
    fresh_dir: str | Path,
    committed_dir: str | Path = FIGURES_DIR,
    tolerances: dict[str, FileRules] | str | Path = TOLERANCES,
) -> FigureCheck:
    """Compare every committed `*.csv` with its fresh copy under the tolerance rules."""
    fresh_dir, committed_dir = Path(fresh_dir), Path(committed_dir)
    for directory in (fresh_dir, committed_dir):
        if not directory.is_dir():
            raise FileNotFoundError(f"no figures directory {directory}")
    if not isinstance(tolerances, dict):
        tolerances = load_tolerances(tolerances)
    report = FigureCheck()
    committed_names = sorted(p.name for p in committed_dir.glob("*.csv"))
    report.new = sorted({p.name for p in fresh_dir.glob("*.csv")} - set(committed_names))
    for name in committed_names:
        if not (fresh_dir / name).exists():
            report.not_regenerated.append(name)
            continue
        rules = rules_for(name, tolerances)
        if rules is None:
            report.unruled.append(name)
            rules = FileRules(EXACT)
        committed, fresh = (pd.read_csv(d / name, dtype=str, keep_default_na=False)
                            for d in (committed_dir, fresh_dir))
        result = compare_table(name, committed, fresh, rules)
        if isinstance(result, str):
            report.broken.append(result)
            continue
        changes, unmatched = result
        report.changes += changes
        report.unmatched_rows += unmatched
        if not changes and not unmatched:
            report.identical.append(name)
    return report


def committed_figures(revision: str, target: Path, repo: Path = REPO) -> Path:
    """Extract figures/*.csv of git `revision` into `target`; returns target/figures."""
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", revision,
                              "figures"], capture_output=True, check=False)
    if archive.returncode:
        raise ValueError(f"git archive {revision} figures failed: {archive.stderr.decode()}")
    figures = target / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".csv"):
                (figures / Path(member.name).name).write_bytes(tar.extractfile(member).read())
    return figures


def main(argv: list[str] | None = None) -> int:
    """The command line: 0 within tolerance, 1 outside, 2 bad input."""
    parser = argparse.ArgumentParser(prog="python -m logra.check", description=__doc__.split(
        "\n")[0])
    parser.add_argument("fresh", nargs="?", default=str(FIGURES_DIR),
                        help="the regenerated figures directory (default figures/)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--committed", help="the committed figures directory")
    source.add_argument("--revision", default="HEAD",
                        help="git revision whose figures/ are the committed ones (default HEAD)")
    parser.add_argument("--tolerances", default=str(TOLERANCES), help="the tolerance YAML")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            committed = (Path(args.committed) if args.committed
                         else committed_figures(args.revision, Path(tmp)))
            report = check_figures(args.fresh, committed, args.tolerances)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.format())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
