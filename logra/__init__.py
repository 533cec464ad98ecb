"""LoGRA reproduction kit: low-rank gradient sketches with predicted-KL step control."""

from logra.optim import LoGRA, RandomProjectionAdam

__all__ = ["LoGRA", "RandomProjectionAdam"]
__version__ = "0.1.0"
