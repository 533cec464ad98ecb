"""Experiment configs: `experiments/NAME.yaml` holds defaults and per-scale overrides.

Layout of a config file:

    defaults: {key: value, ...}          # every key the experiment accepts
    scales:
      smoke: {key: value, ...}           # seconds, for the tests
      default: {...}                     # what `make reproduce` runs on the CPU

Unknown keys, unknown scales and values of the wrong type fail before any compute, naming the
key and the valid choices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"


class ConfigError(ValueError):
    """A bad experiment configuration (unknown key, scale, or ill-typed value)."""


def load_config(name: str, scale: str = "default", **overrides: Any) -> dict[str, Any]:
    """Resolve experiments/NAME.yaml at `scale` with `overrides` on top."""
    path = EXPERIMENTS_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))
        raise ConfigError(f"unknown experiment {name!r}; known: {known}")
    spec = yaml.safe_load(path.read_text())
    defaults, scales = spec["defaults"], spec.get("scales", {})
    if scale not in scales:
        raise ConfigError(f"unknown scale {scale!r} for {name}; valid scales: {sorted(scales)}")
    config = dict(defaults)
    for source, values in ((f"scale {scale}", scales[scale] or {}), ("overrides", overrides)):
        for key, value in values.items():
            if key not in defaults:
                raise ConfigError(
                    f"unknown key {key!r} in {source} of {name}; valid keys: {sorted(defaults)}"
                )
            config[key] = _coerce(key, value, defaults[key])
    config["scale"] = scale
    return config


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Check `value` against the type of the default (ints may stand for floats)."""
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, list) and isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, type(default)):
        raise ConfigError(
            f"{key} must be {type(default).__name__} like {default!r}, got {value!r}"
        )
    return value
