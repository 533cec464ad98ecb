"""An experiment run on several floating-point paths: each path in a process of its own whose
runs key and compute on that path, and a verdict that differs between paths printed as a tie."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from logra.experiments import floating_point as fp
from logra.experiments.jobs import run_jobs
from logra.models.determinism import floating_point_path

OTHER = "native" if fp.current() == "avx2" else "avx2"  # a path this process is not on


def _pin_variable() -> str | None:
    return os.environ.get("ATEN_CPU_CAPABILITY")


def _fail() -> None:
    raise ValueError("a planted failure")


def _pool_paths() -> list[str]:
    return run_jobs([(floating_point_path, ())] * 2, 2, "paths", progress=False)


def test_paths_are_named_and_checked() -> None:
    assert fp.environment("avx2")["ATEN_CPU_CAPABILITY"] == "avx2"
    assert fp.environment("native") == {"ATEN_CPU_CAPABILITY": None, "MKL_CBWR": None}
    with pytest.raises(ValueError, match="unknown floating-point path 'avx512'; valid: "
                                         r"\['avx2', 'strict', 'native'\]"):
        fp.available(["avx2", "avx512"])
    with pytest.raises(ValueError, match="repeat"):
        fp.available(["avx2", "avx2"])


def test_another_path_computes_in_a_process_on_that_path() -> None:
    value, ran_on = fp.run_under(OTHER, _pin_variable)
    assert value == fp.environment(OTHER)["ATEN_CPU_CAPABILITY"]
    assert ran_on != floating_point_path()  # its runs key apart from this process's
    assert os.environ.get("ATEN_CPU_CAPABILITY") == fp.environment(fp.current() or "native")[
        "ATEN_CPU_CAPABILITY"]  # this process's environment is as it was


def test_this_process_s_path_computes_here() -> None:
    here = fp.current()
    if here is None:
        pytest.skip("this process runs on a mix of pin variables")
    assert fp.run_under(here, floating_point_path) == (floating_point_path(),) * 2


def test_the_child_s_workers_inherit_its_path() -> None:
    workers, ran_on = fp.run_under(OTHER, _pool_paths)
    assert workers == [ran_on, ran_on]


def test_a_failure_on_another_path_is_raised_with_its_traceback() -> None:
    planted = rf"(?s)'{OTHER}' path failed.*ValueError: a planted failure"
    with pytest.raises(RuntimeError, match=planted):
        fp.run_under(OTHER, _fail)


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


def test_tables_of_other_rows_are_refused() -> None:
    other = _table(["reference", "no difference", "no difference"])
    other.loc[2, "optimizer"] = "D"
    with pytest.raises(ValueError, match="paths 'avx2' and 'native' hold other rows"):
        fp.verdicts({"avx2": _table(["a", "b", "c"]), "native": other})


def test_no_paths_run_once_here() -> None:
    assert fp.run_on_paths(None, len, "abc") == {fp.current() or "this process": 3}
