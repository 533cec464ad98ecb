"""LoGRA reproduction kit: low-rank gradient sketches with predicted-KL step control."""

from logra import provenance, quiet  # noqa: F401  provenance: read below

quiet.install()  # before any import of tqdm.auto, peft or bitsandbytes
# `provenance` has read the package's sources on import, before any of them ran: the code
# that keys cached results is the code this process loaded

from logra.optim import REPORT_RL_SETTINGS, LoGRA, RandomProjectionAdam  # noqa: E402

__all__ = ["REPORT_RL_SETTINGS", "LoGRA", "RandomProjectionAdam"]
__version__ = "0.1.0"
