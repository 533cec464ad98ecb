"""LoGRA reproduction kit: low-rank gradient sketches with predicted-KL step control."""

from logra import quiet

quiet.install()  # before any import of tqdm.auto, peft or bitsandbytes

from logra.optim import LoGRA, RandomProjectionAdam  # noqa: E402

__all__ = ["LoGRA", "RandomProjectionAdam"]
__version__ = "0.1.0"
