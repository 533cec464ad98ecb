"""Tables as Markdown: `report.to_markdown` is pandas' `DataFrame.to_markdown` (tabulate's pipe
format) with the kit's cells: floats to 4 significant digits, NaN shown, "|" escaped."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from logra.experiments import report

FRAME = pd.DataFrame({
    "method": ["LoGRA | gain", "dense\nAdamW", "0.020"],  # a pipe, a newline, a number as text
    "test loss": [2.10123456, math.nan, 1.5e-7],
    "steps": [300, 200, 0],
    "clears spread": [True, False, True],
})


def test_a_frame_round_trips_through_its_markdown_table(read_markdown, tmp_path) -> None:
    report.save_table(FRAME, "t", tmp_path)
    header, *rows = read_markdown((tmp_path / "t.md").read_text())
    back = pd.DataFrame(rows, columns=header)
    assert header == list(FRAME.columns)
    assert list(back["method"]) == ["LoGRA | gain", "dense AdamW", "0.020"]
    assert np.allclose(back["test loss"].astype(float), FRAME["test loss"], rtol=5e-4,
                       equal_nan=True)
    assert list(back["test loss"]) == ["2.101", "nan", "1.5e-07"]  # 4 significant digits
    assert list(back["steps"].astype(int)) == list(FRAME["steps"])
    assert list(back["clears spread"]) == ["True", "False", "True"]


def test_the_table_is_padded_into_columns_and_takes_digits(read_markdown) -> None:
    text = report.to_markdown(FRAME, digits=2)
    lines = text.splitlines()
    assert len(lines) == 2 + len(FRAME) and len({len(line) for line in lines}) == 1
    assert lines[1].startswith("|:-")  # the alignment row
    assert read_markdown(text)[1][1] == "2.1"


def test_the_same_figure_is_written_to_the_same_bytes(tmp_path) -> None:
    """No creation date in the PDF: regenerating an unchanged figure leaves its files alone."""
    import time

    import matplotlib.pyplot as plt

    from logra.experiments.report import save_figure

    written = []
    for out in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        written.append([p.read_bytes() for p in save_figure(fig, "line", tmp_path / out)])
        time.sleep(1.1)  # a PDF's CreationDate has one-second resolution
    assert written[0] == written[1]
