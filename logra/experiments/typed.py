"""The types experiment configs declare their keys with (`logra.config.TypedConfig`).

A key's type says what it accepts: a range (`Count`: an integer ≥ 1), a choice from a registry
(`Task`, `ModelScale`; `Method` reads `logra.methods.METHODS` as each config is built, since a
method may be added at run time), or both in a list (`Seeds`: a non-empty list of integers). The
pydantic dataclass of each experiment reads them; a value outside is a `ConfigError` naming the
key before any compute. The packaged YAMLs' values pass through unchanged, types included
(`tests/test_experiment_configs.py`), so the hashes of cached results read the same values.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from logra.data import TASKS
from logra.methods import METHODS
from logra.models import SCALES
from logra.optimizers import (  # the optimizer settings' ranges, shared by every config
    Count,
    NonNegative,  # noqa: F401  (re-exported: experiments declare keys with it)
    Positive,
)

NonNegativeInt = Annotated[int, Field(ge=0)]
Share = Annotated[float, Field(gt=0, le=1)]
Seeds = Annotated[list[int], Field(min_length=1)]
Counts = Annotated[list[Count], Field(min_length=1)]
Window = Annotated[list[int], Field(min_length=2, max_length=2)]  # [first, last] step
Shape = Annotated[list[Count], Field(min_length=2, max_length=2)]  # [rows, columns]
Betas = Annotated[list[Annotated[float, Field(ge=0, lt=1)]], Field(min_length=2, max_length=2)]


def registered(registry: Mapping[str, Any]) -> Callable[[str], str]:
    """A check that a name is in `registry` when the config is built, not when this module was
    imported: a method added to `logra.methods.METHODS` later is accepted at once."""
    def check(name: str) -> str:
        if name not in registry:
            raise PydanticCustomError("unregistered", "input should be one of {valid}",
                                      {"valid": list(registry)})
        return name
    return check


Task = Literal[tuple(TASKS)]
Method = Annotated[str, AfterValidator(registered(METHODS))]
ModelScale = Literal[tuple(SCALES)]  # a model of `logra.models.SCALES`
# a path, kept as text (what the YAML holds); a `pathlib.Path` given from Python is accepted
PathText = Annotated[str, BeforeValidator(lambda v: os.fspath(v) if isinstance(v, os.PathLike)
                                          else v)]
Workers = NonNegativeInt  # runs in parallel: 0 one per CPU core, 1 in-process
Level = Annotated[float, Field(gt=0, lt=1)]  # a significance level α
LRs = Annotated[list[Positive], Field(min_length=1)]  # a learning-rate grid
Methods = Annotated[list[Method], Field(min_length=1)]
# A GRPO key an RL experiment sets (`logra.experiments.grpo_runs.GRPO_KEYS`); None keeps
# experiments/grpo.yaml's value. The GRPO config checks the rest when each run's is built.
GRPOCount = Count | None
