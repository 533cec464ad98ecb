"""Optimizers: LoGRA, the naive random-projection ablation, and KL probes. Imports only torch."""

from logra.optim import kl, sketch
from logra.optim.control import KLControlled
from logra.optim.logra import REPORT_RL_SETTINGS, LoGRA
from logra.optim.naive import RandomProjectionAdam, projected_shape
from logra.optim.units import sketch_shapes

__all__ = ["REPORT_RL_SETTINGS", "KLControlled", "LoGRA", "RandomProjectionAdam", "kl",
           "projected_shape", "sketch", "sketch_shapes"]
