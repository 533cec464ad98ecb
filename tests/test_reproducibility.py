"""Reproducibility across machines: the shipped proxy, the rebuild check, the CPU pins, and the
figure check (`logra.check`) on synthetic tables. Nothing here writes into the repository."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from logra import check
from logra.models import SCALES, build, prepare
from logra.models.determinism import PIN_THREADS, pinned_environment
from logra.models.rebuild import RebuildTolerance, compare_builds
from logra.models.rebuild import main as rebuild_main

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SHIPPED = build.SHIPPED_DIR / "proxy-1m"


# --- the shipped proxy -----------------------------------------------------------------------

def test_the_shipped_proxy_1m_is_a_current_build() -> None:
    config = build.build_config(SCALES["proxy-1m"])
    assert build.is_current(SHIPPED, config)
    report = json.loads((SHIPPED / "warmup.json").read_text())
    assert report["warmup_steps"] == 1200  # the policy every committed figure starts from
    assert report["test_accuracy"]["gsm-synth"] == pytest.approx(0.358)


def test_the_shipped_files_are_package_data() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["logra.models"]
    files = [p.relative_to(build.SHIPPED_DIR.parent).as_posix() for p in SHIPPED.iterdir()]
    assert {"model.safetensors", "build_config.json", "warmup.json"} <= {Path(f).name
                                                                          for f in files}
    assert all(any(fnmatch.fnmatch(f, pattern) for pattern in patterns) for f in files)


def test_prepare_copies_the_shipped_build_instead_of_warming_up(tmp_path, monkeypatch) -> None:
    def no_build(*args, **kwargs):
        raise AssertionError("warmed up although a current build is shipped")

    monkeypatch.setattr(build, "_build", no_build)
    target = prepare("proxy-1m", root=tmp_path)
    assert target == tmp_path / "proxy-1m"
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in SHIPPED.iterdir())
    assert (target / "model.safetensors").read_bytes() == (SHIPPED / "model.safetensors"
                                                           ).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proxy-1m"]  # no temporary left
    assert prepare("proxy-1m", root=tmp_path) == target  # now current there


def test_force_or_a_changed_config_warms_up_from_scratch(tmp_path, monkeypatch) -> None:
    built = []
    monkeypatch.setattr(build, "_build", lambda spec, config, target, *a: built.append(spec))
    prepare("proxy-1m", root=tmp_path / "forced", force=True)
    assert [spec.name for spec in built] == ["proxy-1m"]
    assert not (tmp_path / "forced" / "proxy-1m").exists()  # the fake build wrote nothing
    spec = SCALES["proxy-1m"]
    changed = dataclasses.replace(spec, warmup=dataclasses.replace(spec.warmup, lr=1e-3))
    monkeypatch.setitem(SCALES, "proxy-1m", changed)
    prepare("proxy-1m", root=tmp_path / "changed")
    assert built[-1] is changed and len(built) == 2


# --- the rebuild check -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def test_a_smoke_rebuild_with_other_threads_lands_within_tolerance(tmp_path, data_dir) -> None:
    one = prepare("smoke", root=tmp_path / "one", data_dir=data_dir, progress=False, threads=1)
    two = prepare("smoke", root=tmp_path / "two", data_dir=data_dir, progress=False, threads=2)
    comparison = compare_builds(two, one)
    assert comparison.within, comparison.format()
    assert "warmup_steps" in comparison.compared
    assert {"loss at step 10", "loss at step 20"} <= set(comparison.compared)
    itself = compare_builds(one, one)
    assert itself.within and all(ref == new for ref, new in itself.compared.values())

    report = json.loads((one / "warmup.json").read_text())
    moved = tmp_path / "moved"
    shutil.copytree(one, moved)
    report["warmup_steps"] += 300
    report["test_accuracy"]["gsm-synth"] += 0.16
    report["history"][-1]["loss"] *= 1.2
    (moved / "warmup.json").write_text(json.dumps(report))
    comparison = compare_builds(moved, one)
    assert comparison.outside == ["warmup_steps", "test accuracy gsm-synth (%)",
                                  "loss at step 20"]
    assert "OUTSIDE" in comparison.format()
    assert compare_builds(moved, one, RebuildTolerance(steps=300, accuracy_points=16.1,
                                                       loss_relative=0.21)).within
    assert rebuild_main([str(moved), str(one)]) == 1
    assert rebuild_main([str(one), str(one)]) == 0

    config = json.loads((one / "build_config.json").read_text())
    config["warmup"]["lr"] *= 2
    (moved / "build_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="different configurations"):
        compare_builds(moved, one)
    with pytest.raises(FileNotFoundError, match="it has no build_config"):
        compare_builds(tmp_path, one)


# --- the CPU pins ----------------------------------------------------------------------------

def test_pins_name_their_settings_and_reject_bad_input() -> None:
    strict = pinned_environment("strict", threads=2)
    assert strict == {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE,STRICT",
                      "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert pinned_environment("avx2") == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT",
                                          "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    with pytest.raises(ValueError, match="unknown pin 'avx512'"):
        pinned_environment("avx512")
    with pytest.raises(ValueError, match="threads"):
        pinned_environment("strict", threads=0)


def test_the_strict_pin_reaches_torch_in_a_fresh_process_and_its_record() -> None:
    """The pin sets torch's kernels and threads, and `machine()` (a run manifest's record of
    the machine) reports what the process runs under, the pin's variables included."""
    env = {**os.environ, **pinned_environment("strict")}
    out = subprocess.run(
        [sys.executable, "-c", "import json, torch; from logra.models.determinism import machine;"
                               "print(torch.backends.cpu.get_cpu_capability(), "
                               "torch.get_num_threads(), json.dumps(machine()))"],
        env=env, capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    assert out[:2] == ["DEFAULT", str(PIN_THREADS)]
    record = json.loads(out[2])
    assert record["cpu_capability"] == "DEFAULT" and record["cpu"]
    assert {k: record[k] for k in pinned_environment("strict")} == pinned_environment("strict")


def test_the_warm_up_probe_is_deterministic_in_one_setting(load_script, data_dir) -> None:
    probe = load_script("warmup_determinism").probe
    first, second = (probe("smoke", 3, 1, str(data_dir)) for _ in range(2))
    assert first["weights"] == second["weights"] and first["loss"] == second["loss"]
    assert len(first["weights"]) == 16 and first["threads"] == 1


# --- the figure check ------------------------------------------------------------------------

TOLERANCES = {
    "claims*.csv": check.FileRules(check.EXACT, (("reproduced", check.Rule("report")),)),
    "runs.csv": check.FileRules(check.EXACT, (("accuracy", check.Rule("tolerance", abs=2.0)),
                                              ("kl", check.Rule("tolerance", rel=0.5)),
                                              ("seconds", check.Rule("report")))),
    "bytes.csv": check.FileRules(check.EXACT),
}


def write_tables(directory: Path, accuracy=(36.5, 37.0), kl=(0.01, 0.02), verdict="partly",
                 state=(1048576, 134217728), text="KL 0.01 vs 0.02",
                 summary="37.3 ± 1.5") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"method": ["logra", "adamw"], "accuracy": accuracy, "kl": kl,
                  "seconds": [0.4, 0.5], "summary": [summary, "32.5 ± 1.8"]}
                 ).to_csv(directory / "runs.csv", index=False)
    pd.DataFrame({"claim": ["C7"], "reproduced": [text], "verdict": [verdict]}
                 ).to_csv(directory / "claims.csv", index=False)
    pd.DataFrame({"optimizer": ["logra", "adamw"], "bytes": state}
                 ).to_csv(directory / "bytes.csv", index=False)
    return directory


def test_identical_tables_are_clean(tmp_path) -> None:
    report = check.check_figures(write_tables(tmp_path / "new"), write_tables(tmp_path / "old"),
                                 TOLERANCES)
    assert report.ok and report.identical == ["bytes.csv", "claims.csv", "runs.csv"]
    assert not report.changes and "3 table(s) identical" in report.format()


def test_moves_inside_the_tolerance_are_listed_and_pass(tmp_path) -> None:
    old = write_tables(tmp_path / "old")
    new = write_tables(tmp_path / "new", accuracy=(38.0, 37.0), kl=(0.014, 0.02),
                       text="KL 0.5 vs 0.9")
    pd.read_csv(new / "runs.csv").assign(seconds=[9.0, 9.0]).to_csv(new / "runs.csv",
                                                                      index=False)
    report = check.check_figures(new, old, TOLERANCES)
    assert report.ok and report.identical == ["bytes.csv"]
    moved = {(c.file, c.column): c for c in report.changes}
    assert set(moved) == {("runs.csv", "accuracy"), ("runs.csv", "kl"), ("runs.csv", "seconds"),
                          ("claims.csv", "reproduced")}
    assert moved["runs.csv", "accuracy"].max_abs == pytest.approx(1.5)
    assert moved["runs.csv", "kl"].max_rel == pytest.approx(0.4)
    assert moved["runs.csv", "seconds"].cells == 2 and not moved["runs.csv", "seconds"].outside
    text = report.format()
    assert "moved within tolerance" in text and "OUTSIDE" not in text
    assert "largest move 1.5" in text and "same within the stated tolerances" in text


def test_a_verdict_change_or_a_move_beyond_tolerance_fails(tmp_path) -> None:
    old = write_tables(tmp_path / "old")
    report = check.check_figures(write_tables(tmp_path / "verdict", verdict="reproduced"), old,
                                 TOLERANCES)
    assert not report.ok
    assert [(c.file, c.column, c.example) for c in report.outside] == [
        ("claims.csv", "verdict", (0, "partly", "reproduced"))]
    report = check.check_figures(write_tables(tmp_path / "far", accuracy=(39.0, 37.0),
                                              state=(1048580, 134217728)), old, TOLERANCES)
    assert {(c.file, c.column) for c in report.outside} == {("runs.csv", "accuracy"),
                                                            ("bytes.csv", "bytes")}
    assert "DIFFERENT beyond the stated tolerances" in report.format()


def test_numbers_inside_text_move_within_tolerance_only_with_the_same_words(tmp_path) -> None:
    rule = check.Rule("tolerance", abs=2.0)
    assert check.compare_cell("37.3 ± 1.5", "38.1 ± 1.9", rule)[0]
    assert not check.compare_cell("37.3 ± 1.5", "40.1 ± 1.9", rule)[0]
    assert not check.compare_cell("37.3 ± 1.5", "37.3 (1.5)", rule)[0]
    assert not check.compare_cell("nan", "37.3", rule)[0]
    within, move, rel = check.compare_cell("1e-06", "3e-06", check.Rule("tolerance", abs=1e-5))
    assert within and move == pytest.approx(2e-6) and rel == pytest.approx(2.0)


def test_shape_changes_missing_new_and_unruled_files_are_reported(tmp_path) -> None:
    old = write_tables(tmp_path / "old")
    new = write_tables(tmp_path / "new")
    pd.read_csv(new / "runs.csv").iloc[:1].to_csv(new / "runs.csv", index=False)
    pd.read_csv(new / "bytes.csv").rename(columns={"bytes": "B"}).to_csv(new / "bytes.csv",
                                                                        index=False)
    (old / "gone.csv").write_text("a\n1\n")
    (old / "other.csv").write_text("a\n1\n")
    (new / "other.csv").write_text("a\n2\n")
    (new / "added.csv").write_text("a\n1\n")
    report = check.check_figures(new, old, TOLERANCES)
    assert not report.ok
    assert report.broken == ["bytes.csv: columns changed (gone ['bytes'], new ['B'])",
                             "runs.csv: 2 rows committed, 1 fresh"]
    assert report.not_regenerated == ["gone.csv"] and report.new == ["added.csv"]
    assert report.unruled == ["other.csv"]
    assert [(c.file, c.outside) for c in report.changes] == [("other.csv", 1)]


def test_keyed_rows_are_matched_by_key_and_a_changed_grid_is_listed(tmp_path) -> None:
    sweep = {"optimizer": ["AdamW", "AdamW", "APOLLO", "APOLLO"], "lr": [0.001, 0.003, 0.01, 0.03],
             "loss": [2.10, 2.20, 2.04, 2.05], "chosen": [True, False, True, False]}
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    pd.DataFrame(sweep).to_csv(tmp_path / "old" / "sweep.csv", index=False)
    moved = pd.DataFrame(sweep).iloc[[2, 3, 0, 1]]  # another row order, one more learning rate
    moved = pd.concat([moved, pd.DataFrame({"optimizer": ["APOLLO"], "lr": [0.09],
                                            "loss": [2.30], "chosen": [False]})])
    moved.loc[moved["lr"] == 0.03, "loss"] = 2.06
    moved.to_csv(tmp_path / "new" / "sweep.csv", index=False)
    rules = {"sweep.csv": check.FileRules(check.EXACT, (("loss", check.Rule("tolerance",
                                                                            rel=0.01)),),
                                          key=("optimizer", "lr"))}
    report = check.check_figures(tmp_path / "new", tmp_path / "old", rules)
    assert report.ok and report.unmatched_rows == ["sweep.csv: fresh only: ('APOLLO', '0.09')"]
    assert [(c.column, c.cells, c.example) for c in report.changes] == [
        ("loss", 1, (3, "2.05", "2.06"))]
    assert "rows only one table has" in report.format()
    moved.iloc[1:].to_csv(tmp_path / "new" / "sweep.csv", index=False)  # APOLLO 0.01 gone
    report = check.check_figures(tmp_path / "new", tmp_path / "old", rules)
    assert report.ok and report.unmatched_rows == ["sweep.csv: committed only: ('APOLLO', '0.01')",
                                                   "sweep.csv: fresh only: ('APOLLO', '0.09')"]
    moved.assign(lr=0.5).to_csv(tmp_path / "new" / "sweep.csv", index=False)  # a repeated key
    assert "repeats" in check.check_figures(tmp_path / "new", tmp_path / "old", rules).broken[0]
    unkeyed = {"sweep.csv": check.FileRules(check.EXACT)}
    assert not check.check_figures(tmp_path / "new", tmp_path / "old", unkeyed).ok


def test_a_key_in_the_tolerance_file_is_a_list_of_columns(tmp_path) -> None:
    path = tmp_path / "tolerances.yaml"
    path.write_text("files:\n  sweep.csv: {key: [optimizer, lr], columns: {loss: {rel: 0.1}}}\n")
    rules = check.load_tolerances(path)["sweep.csv"]
    assert rules.key == ("optimizer", "lr") and rules.default == check.EXACT
    path.write_text("files:\n  sweep.csv: {key: optimizer}\n")
    with pytest.raises(ValueError, match="key must be a list"):
        check.load_tolerances(path)


def test_a_rows_rule_reports_the_numbers_of_the_rows_it_names(tmp_path) -> None:
    """A method whose numbers are round-off amplified by design is listed, not failed; the
    other rows keep the column's tolerance, and the exact columns stay exact everywhere."""
    path = tmp_path / "tolerances.yaml"
    path.write_text("files:\n  errors.csv:\n    default: {rel: 0.001}\n"
                    "    columns: {method: exact}\n"
                    "    rows: [{where: {method: rtol0}, rule: report}]\n")
    rules = check.load_tolerances(path)
    for directory, errors in (("old", [0.62, 0.50]), ("new", [0.87, 0.50])):
        (tmp_path / directory).mkdir()
        pd.DataFrame({"method": ["rtol0", "truncated"], "error": errors}).to_csv(
            tmp_path / directory / "errors.csv", index=False)
    assert check.check_figures(tmp_path / "new", tmp_path / "old", rules).ok
    pd.DataFrame({"method": ["rtol0", "truncated"], "error": [0.87, 0.51]}).to_csv(
        tmp_path / "new" / "errors.csv", index=False)  # the other row still has its tolerance
    assert not check.check_figures(tmp_path / "new", tmp_path / "old", rules).ok
    pd.DataFrame({"method": ["rtol1", "truncated"], "error": [0.62, 0.50]}).to_csv(
        tmp_path / "new" / "errors.csv", index=False)  # the row's own exact column
    assert not check.check_figures(tmp_path / "new", tmp_path / "old", rules).ok
    path.write_text("files:\n  errors.csv: {rows: [{method: rtol0}]}\n")
    with pytest.raises(ValueError, match="a rows entry is"):
        check.load_tolerances(path)


def test_the_command_line_exits_by_the_verdict(tmp_path, capsys) -> None:
    old = write_tables(tmp_path / "old")
    rules = tmp_path / "tolerances.yaml"
    rules.write_text("files:\n  'claims*.csv': {default: exact, columns: {reproduced: report}}\n"
                     "  runs.csv: {default: exact, columns: {accuracy: {abs: 2},"
                     " kl: {rel: 0.5}, seconds: report}}\n  bytes.csv: exact\n")
    new = write_tables(tmp_path / "new", accuracy=(37.5, 37.0))
    assert check.main([str(new), "--committed", str(old), "--tolerances", str(rules)]) == 0
    far = write_tables(tmp_path / "far", accuracy=(40.0, 37.0))
    assert check.main([str(far), "--committed", str(old), "--tolerances", str(rules)]) == 1
    assert "runs.csv [accuracy]" in capsys.readouterr().out
    assert check.main([str(tmp_path / "nowhere"), "--committed", str(old)]) == 2
    rules.write_text("files:\n  runs.csv: {default: approximately}\n")
    assert check.main([str(new), "--committed", str(old), "--tolerances", str(rules)]) == 2
    assert "runs.csv" in capsys.readouterr().err


def test_every_committed_table_has_a_rule_and_matches_itself() -> None:
    tolerances = check.load_tolerances()
    names = sorted(p.name for p in check.FIGURES_DIR.glob("*.csv"))
    assert names and [n for n in names if check.rules_for(n, tolerances) is None] == []
    report = check.check_figures(check.FIGURES_DIR, check.FIGURES_DIR, tolerances)
    assert report.ok and report.identical == names


def test_a_partial_reproduction_s_wall_times_are_listed_not_failed(tmp_path) -> None:
    """`reproduce --only` adds a notebook's row to the committed wall-time table, and a full run
    has every notebook's: the committed tolerances list rows only one table has, and a step's
    seconds are reported, not compared."""
    old, new = tmp_path / "committed", tmp_path / "fresh"
    old.mkdir()
    new.mkdir()
    header = "step,seconds,minutes,scale,cpus,date\n"
    (old / "reproduce_time_default.csv").write_text(
        header + "prepare,576.3,9.6,default,2,2026-11-29\ntotal,576.3,9.6,default,2,2026-11-29\n")
    (new / "reproduce_time_default.csv").write_text(
        header + "prepare,12.0,0.2,default,16,2026-12-02\n09_kl_control,900.0,15.0,default,16,"
        "2026-12-02\ntotal,912.0,15.2,default,16,2026-12-02\n")
    report = check.check_figures(new, old, check.load_tolerances())
    assert report.ok, report.format()
    assert report.unmatched_rows == [
        "reproduce_time_default.csv: fresh only: ('09_kl_control',)"]
    assert {c.column for c in report.changes} == {"seconds", "minutes", "cpus", "date"}


def test_the_committed_figures_of_a_git_revision(tmp_path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    figures = check.committed_figures("HEAD", tmp_path)
    assert (figures / "claims.csv").exists()
    with pytest.raises(ValueError, match="no-such-revision"):
        check.committed_figures("no-such-revision", tmp_path / "x")
