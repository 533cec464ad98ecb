"""Memory accounting: exact optimizer-state bytes and a per-GPU budget for RL post-training.

    counted_state_bytes(model, "logra", rank=16)  bytes of state, from shapes alone (meta is fine)
    ARCHITECTURES["gemma-3-27b"].build()          a real architecture on the meta device
    model_stats(model, "adamw"); oom_step(...)    the node budget and where it runs out
"""

from logra.memory.architectures import (
    ARCHITECTURES,
    PublishedArchitecture,
    architecture,
    count_params,
)
from logra.memory.budget import (
    Assumptions,
    ModelShape,
    ModelStats,
    activation_bytes,
    budget,
    kv_cache_bytes,
    logits_bytes,
    max_fitting_length,
    model_stats,
    oom_step,
    peak_bytes,
    simulate,
    static_bytes,
)
from logra.memory.params import logra_param_groups, trainable_params, with_lora
from logra.memory.state import OPTIMIZERS, counted_state_bytes, state_table

__all__ = [
    "ARCHITECTURES", "OPTIMIZERS", "Assumptions", "ModelShape", "ModelStats",
    "PublishedArchitecture", "activation_bytes", "architecture", "budget", "count_params",
    "counted_state_bytes", "kv_cache_bytes", "logits_bytes", "logra_param_groups",
    "max_fitting_length", "model_stats", "oom_step", "peak_bytes", "simulate", "state_table",
    "static_bytes", "trainable_params", "with_lora",
]
