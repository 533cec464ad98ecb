"""Experiment tracking of a GRPO run beside its CSV: the scalars of each step's record in
TensorBoard (`torch.utils.tensorboard`), when the config says `tensorboard: true`.

Each numeric column of a record (`logra.rl.runner` documents them) becomes the scalar of that
name at global step `step`; non-finite values (an optimizer without LoGRA's report, a step
without an evaluation) are left out. The events go to <run_dir>/tensorboard. A resumed run
purges the events past its checkpoint, so the curves hold each step once, as records.csv does:

    tensorboard --logdir results/runs
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"


class TensorBoardLog:
    """A `SummaryWriter` over <directory>/tensorboard that takes the run's records."""

    def __init__(self, directory: Path, resumed_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # the events an interrupted run wrote past its checkpoint (step `resumed_step`) go
        self.writer = SummaryWriter(str(directory / TENSORBOARD_DIR),
                                    purge_step=resumed_step + 1 if resumed_step else 0)

    def write(self, record: dict[str, Any]) -> None:
        """The record's finite numbers (bools as 0/1) as scalars at its `step`."""
        step = int(record["step"])
        for key, value in record.items():
            if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                self.writer.add_scalar(key, float(value), step)

    def close(self) -> None:
        self.writer.close()
