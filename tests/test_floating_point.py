"""An experiment run on several floating-point paths: each path in a process of its own whose
runs key and compute on that path, and a verdict that differs between paths printed as a tie."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from logra.cli import PIN_MARK
from logra.experiments import floating_point as fp
from logra.experiments.jobs import run_jobs
from logra.models.determinism import floating_point_path, pinned_environment

OTHER = "native" if fp.current() == "avx2" else "avx2"  # a path this process is not on


def _pin_variables() -> tuple[str | None, ...]:
    return tuple(os.environ.get(key) for key in
                 ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS", PIN_MARK, "LOGRA_BACKEND"))


def _fail() -> None:
    raise ValueError("a planted failure")


def _die() -> None:
    os._exit(3)


def _pool_paths() -> list[str]:
    return run_jobs([(floating_point_path, ())] * 2, 2, "paths", progress=False)


def test_paths_are_named_and_checked() -> None:
    assert fp.environment("avx2") == {**pinned_environment("avx2"), PIN_MARK: "avx2"}
    assert fp.environment("native") == {"ATEN_CPU_CAPABILITY": None, "MKL_CBWR": None,
                                        PIN_MARK: None}
    with pytest.raises(ValueError, match="unknown floating-point path 'avx512'; valid: "
                                         r"\['avx2', 'strict', 'native'\]"):
        fp.checked(["avx2", "avx512"])
    with pytest.raises(ValueError, match="repeat"):
        fp.checked(["avx2", "avx2"])


def test_another_path_computes_in_a_process_started_as_reproduce_pin_would() -> None:
    before = dict(os.environ)
    values, ran_on = fp.run_under(OTHER, _pin_variables)
    expected = fp.environment(OTHER)
    assert values == (expected["ATEN_CPU_CAPABILITY"], expected["MKL_CBWR"],
                      expected.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")),
                      expected[PIN_MARK], "local")
    assert ran_on != floating_point_path()  # its runs key apart from this process's
    assert dict(os.environ) == before  # this process's environment is as it was


def test_this_process_s_path_computes_in_this_process() -> None:
    here = fp.current()
    if here is None:
        pytest.skip("this process runs on a mix of pin variables")
    assert fp.run_under(here, os.getpid) == (os.getpid(), floating_point_path())


def test_the_child_s_workers_inherit_its_path() -> None:
    workers, ran_on = fp.run_under(OTHER, _pool_paths)
    assert workers == [ran_on, ran_on]


def test_a_failure_on_another_path_is_raised_with_its_traceback() -> None:
    planted = rf"(?s)'{OTHER}' path failed.*ValueError: a planted failure"
    with pytest.raises(RuntimeError, match=planted):
        fp.run_under(OTHER, _fail)
    with pytest.raises(RuntimeError, match=rf"'{OTHER}' path ended without a result \(exit "
                                           r"code 3\)"):
        fp.run_under(OTHER, _die)


def test_off_x86_the_paths_are_not_compared(monkeypatch, capsys) -> None:
    monkeypatch.setattr(fp.platform, "machine", lambda: "arm64")
    assert fp.run_on_paths(["avx2", "native"], os.getpid) == {
        fp.current() or "this process": os.getpid()}
    assert "not compared: the pins are x86's and this CPU is arm64" in capsys.readouterr().out


def _table(verdicts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"optimizer": ["A", "B", "C"], "loss": [1.0, 2.0, 3.0],
                         "verdict": verdicts})


def test_a_verdict_that_differs_between_paths_is_printed_as_a_tie() -> None:
    tables = {"avx2": _table(["reference", "lower than A", "no difference"]),
              "native": _table(["reference", "no difference", "no difference"])}
    tables["native"]["loss"] += 0.5
    printed = fp.verdicts(tables)
    assert printed["verdict"].tolist() == ["reference", fp.FLIPS, "no difference"]
    assert printed["loss"].tolist() == [1.0, 2.0, 3.0]  # the first path's numbers
    assert tables["avx2"]["verdict"][1] == "lower than A"  # the inputs are left alone
    listed = fp.verdict_table({"summary": tables})
    assert listed.columns.tolist() == ["table", "row", "avx2", "native", "printed"]
    assert listed.loc[1].tolist() == ["summary", "B", "lower than A", "no difference", fp.FLIPS]
    assert fp.verdicts({"avx2": tables["avx2"]}).equals(tables["avx2"])
    # a reference row is the first path's, whatever another path takes as its reference
    tables["native"].loc[0, "verdict"] = "no difference"
    assert fp.verdicts(tables)["verdict"][0] == "reference"


def test_tables_of_other_rows_are_refused() -> None:
    other = _table(["reference", "no difference", "no difference"])
    other.loc[2, "optimizer"] = "D"
    with pytest.raises(ValueError, match="paths 'avx2' and 'native' hold other rows"):
        fp.verdicts({"avx2": _table(["a", "b", "c"]), "native": other})


def test_no_paths_run_once_here() -> None:
    assert fp.run_on_paths(None, len, "abc") == {fp.current() or "this process": 3}
