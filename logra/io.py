"""Atomic writes: a result file is either the old one or the complete new one, never half."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_frame(path: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """CSV or Parquet by the suffix of `path`."""
    path = Path(path)
    writers: dict[str, Callable[[Path], None]] = {
        ".csv": lambda p: frame.to_csv(p, index=False),
        ".parquet": lambda p: frame.to_parquet(p, index=False),
    }
    if path.suffix not in writers:
        raise ValueError(f"cannot write a table to {path}: use .csv or .parquet")
    with atomic_path(path) as tmp:
        writers[path.suffix](tmp)
    return path
