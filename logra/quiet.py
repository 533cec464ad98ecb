"""Narrow filters for third-party messages that tell a reader of a run or a notebook nothing.

Installed once when `logra` is imported (`install`); each matches one message by its text:

    TqdmWarning "IProgress not found"   tqdm.auto, imported by datasets, transformers and the kit
                                        in a Jupyter kernel without ipywidgets, falls back to
                                        text bars, which is what an executed notebook should
                                        hold (widget bars save as an empty placeholder)
    "Failed to load CPU gemm_4bit_forward"  bitsandbytes (imported by peft) on a CPU with
                                        AVX512-BF16 and without the optional `kernels` package:
                                        4-bit matmuls, which the kit never runs
    FutureWarning "`is_gradient_checkpointing` is deprecated"   transformers 5, read by peft's
                                        `get_peft_model` and TRL, not by the kit

Anything else from these libraries still shows. `no_dataset_bars` turns datasets' own bars
("Generating train split", "Map") off around the kit's internal conversions, which take under
a second on the kit's tasks; a hub download keeps its bar.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

BITSANDBYTES_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
GEMM_4BIT_MESSAGE = "Failed to load CPU gemm_4bit_forward"


def _not_gemm_4bit(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(GEMM_4BIT_MESSAGE)


def install() -> None:
    """Add the filters (idempotent: `warnings` and `logging` keep one copy of each)."""
    warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                            category=FutureWarning)
    logger = logging.getLogger(BITSANDBYTES_CPU_LOGGER)  # the logger bitsandbytes will use
    if _not_gemm_4bit not in logger.filters:
        logger.addFilter(_not_gemm_4bit)


@contextmanager
def no_dataset_bars() -> Iterator[None]:
    """datasets' progress bars off inside the block, as they were after it; left alone where
    the environment decides them (HF_DATASETS_DISABLE_PROGRESS_BARS set)."""
    import datasets

    if datasets.config.HF_DATASETS_DISABLE_PROGRESS_BARS is not None \
            or datasets.are_progress_bars_disabled():
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()
