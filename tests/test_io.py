"""Atomic writes: all or nothing, ordinary permissions."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from logra.io import atomic_path, write_frame, write_json, write_text


def test_a_failed_write_leaves_the_old_file_and_no_debris(tmp_path) -> None:
    path = write_text(tmp_path / "result.txt", "old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.txt"]


def test_results_are_ordinary_files(tmp_path) -> None:
    path = write_json(tmp_path / "m.json", {"a": 1})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~_current_umask()
    frame = pd.DataFrame({"x": [1, 2]})
    assert pd.read_csv(write_frame(tmp_path / "t.csv", frame)).equals(frame)
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        write_frame(tmp_path / "t.txt", frame)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
