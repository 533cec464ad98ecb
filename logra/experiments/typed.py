"""The types experiment configs declare their keys with (`logra.config.TypedConfig`).

A key's type says what it accepts: a range (`Count`: an integer ≥ 1), a choice from a registry
(`Task`, `ModelScale`; `Method` reads `logra.methods.METHODS` as each config is built, since a
method may be added at run time), or both in a list (`Seeds`: a non-empty list of integers). The
pydantic dataclass of each experiment reads them; a value outside is a `ConfigError` naming the
key before any compute. The packaged YAMLs' values pass through unchanged, types included
(`tests/test_experiment_configs.py`), so the hashes of cached results read the same values.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from logra.config import as_number
from logra.data import TASKS
from logra.methods import METHODS
from logra.models import SCALES
from logra.optimizers import (  # the optimizer settings' ranges, shared by every config
    Count,
    NonNegative,  # noqa: F401  (re-exported: experiments declare keys with it)
    Positive,
)
from logra.rl import config as grpo

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
# Keys of experiments/grpo.yaml an RL experiment sets (`grpo_runs.grpo_config` reads them from
# its config; null in its YAML keeps grpo.yaml's value). The GRPO config checks the rest when
# each run's is built.
GRPO_KEYS = ("model", "task", "lr", "rank", "prompts_per_step", "group_size", "max_new_tokens",
             "eval_every", "eval_prompts", "eval_batch_size", "eval_samples",
             "eval_sampled_prompts", "results_dir")
# GRPO keys a setting laid on top of an experiment's may not set, and why: what every run of
# the experiment shares (its inputs are prepared, and the policy before RL evaluated, once) ...
SHARED_KEYS = dict.fromkeys(
    ("scale", "model", "task", "data_dir", "results_dir"),
    "is shared by every run of the experiment (its inputs are prepared, and the policy before "
    "RL evaluated, once for all)")
# ... and what its study plans for each run (`grpo_runs.Run`, `grpo_runs.grpo_config`, a probe)
PLANNED_KEYS = {
    **dict.fromkeys(("seed", "steps", "lr", "eval_every", "optimizer", "predicted_kl_threshold",
                     "drift_probe_every", "drift_probe_prompts"),
                    "is set by the study itself, not by a setting"),
    "run_name": "names a run's directory: every seed of the setting would share one"}
GRPOCount = Count | None


def _grpo_key_types() -> dict[str, TypeAdapter]:
    """Each GRPO key (a field of `logra.rl.config.GRPOConfig`) and what it accepts, checked as
    strictly as the config checks it."""
    strict = ConfigDict(strict=True)
    fields = grpo.GRPOConfig.__pydantic_fields__.items()
    return {name: TypeAdapter(Annotated[(info.annotation, *info.metadata)] if info.metadata
                              else info.annotation, config=strict)
            for name, info in fields}


GRPO_KEY_TYPES = _grpo_key_types()


def grpo_keys(*, only: Collection[str] | None = None, reserved: Mapping[str, str],
              none_keeps: bool = False) -> Any:
    """The type (an `Annotated` dict) of GRPO keys set on top of an experiment's: each key a
    field of `logra.rl.config.GRPOConfig` (of `only` where given) that `reserved` does not hold
    (key -> why not), each value one the key accepts, a number written "1e-4" read as one
    (`logra.config.as_number`); with `none_keeps`, None too (grpo.yaml's value). A
    PydanticCustomError names the key otherwise. The rules that tie keys together are checked
    when a run's whole config is built."""
    allowed = [k for k in (GRPO_KEY_TYPES if only is None else only) if k not in reserved]

    def check(keys: dict[str, Any]) -> dict[str, Any]:
        checked = {}
        for name, value in keys.items():
            if name not in allowed:
                raise PydanticCustomError("grpo_key", "{name} {why}", {
                    "name": repr(name), "why": reserved.get(name) or _unknown(name, allowed)})
            checked[name] = value = as_number(value)
            if value is None and none_keeps:
                continue
            try:
                GRPO_KEY_TYPES[name].validate_python(value)
            except ValidationError as err:
                problems = dict.fromkeys(e["msg"][:1].lower() + e["msg"][1:]
                                         for e in err.errors())
                raise PydanticCustomError("grpo_value", "{name}: {problem}",
                                          {"name": name, "problem": " or ".join(problems)}
                                          ) from None
        return checked
    return Annotated[dict[str, Any], AfterValidator(check)]


def _unknown(name: str, allowed: list[str]) -> str:
    """Why GRPO key `name`, not reserved, is refused: not one of `allowed` (with the close
    matches)."""
    if name in GRPO_KEY_TYPES:
        return f"is not a key this experiment sets: one of {allowed}"
    near = difflib.get_close_matches(name, allowed, n=3)
    return ("is not a key of experiments/grpo.yaml"
            + (f" (did you mean {', '.join(near)}?)" if near else ""))


# a setting's GRPO keys on top of what its study plans (a budget setting)
GRPOKeys = grpo_keys(reserved={**SHARED_KEYS, **PLANNED_KEYS})
# an RL experiment's own GRPO keys, overridden for one of its runs (the calibration run)
ExperimentGRPOKeys = grpo_keys(only=GRPO_KEYS, reserved=SHARED_KEYS, none_keeps=True)
