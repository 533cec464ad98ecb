"""Experiment configs: reading a config file and resolving a scale of it.

Layout of a config file:

    defaults: {key: value, ...}          # every key the experiment accepts
    scales:
      smoke: {key: value, ...}           # seconds, for the tests
      default: {...}                     # what `make reproduce` runs on the CPU

An experiment is named (`grpo`: the packaged `experiments/grpo.yaml`) or given as a path to any
file of that layout (a copy edited outside the repository included); a file without `scales`
has the one scale `default`. Unknown keys, unknown scales and values of the wrong type fail
before any compute, naming the key and the valid choices.

With a `base` (a packaged experiment), a file lies on top of it and holds only the keys it
changes (`defaults: {}` for none). A scale resolves as the base's defaults, the base's scale,
the file's defaults, the file's scale, then the overrides. A file with `scales:` runs those
and `default` only (a full copy of the base resolves as the copy alone would); a file without
runs at every scale of the base, its defaults over each.

The packaged configs are `logra/resources/experiments` (see `logra.paths`). Only the standard
library and, when a file is read, yaml (pydantic when a typed config is declared or built):
every layer of the package may import this module.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from logra.paths import FIGURES_SCALE, RESOURCES_DIR

if TYPE_CHECKING:
    from pydantic import ValidationError

EXPERIMENTS_DIR = RESOURCES_DIR / "experiments"
CONFIG_SUFFIXES = (".yaml", ".yml")


class ConfigError(ValueError):
    """A bad experiment configuration (unknown key, scale, or ill-typed value)."""


def packaged_experiments() -> list[str]:
    """The names of the packaged experiment configs."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))


def config_path(experiment: str | os.PathLike) -> Path:
    """The file of `experiment`: an existing config file as given, or the packaged config of a
    bare name (`grpo` or `grpo.yaml`)."""
    path = Path(experiment).expanduser()
    if path.suffix in CONFIG_SUFFIXES and path.is_file():
        return path
    if len(path.parts) == 1 and path.suffix in ("", *CONFIG_SUFFIXES):
        packaged = EXPERIMENTS_DIR / f"{path.stem}.yaml"
        if packaged.is_file():
            return packaged
    raise ConfigError(f"unknown experiment {str(experiment)!r}: no such config file, and the "
                      f"packaged experiments are {packaged_experiments()}")


def _parse(path: Path) -> dict[str, Any]:
    """The YAML of a config file; ConfigError naming the file if it has no defaults."""
    import yaml  # a reproduction dependency: `import logra` and the CLI's help need only torch

    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"cannot parse {path}: {err}") from err
    if not isinstance(spec, dict) or not isinstance(spec.get("defaults"), dict):
        raise ConfigError(f"{path} has no `defaults:` mapping (see logra.config)")
    return spec


def read_spec(experiment: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """(defaults, scales) of a config file; ConfigError naming the file if it has no defaults."""
    return _split(_parse(config_path(experiment)))


def _split(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(defaults, scales) of a parsed config; a file without `scales` has the one `default`."""
    scales = spec.get("scales") or {FIGURES_SCALE: {}}
    return _numbers(spec["defaults"]), {name: _numbers(values or {})
                                        for name, values in scales.items()}


# A number as YAML 1.1 (PyYAML) leaves it a string: an exponent without a dot, `1e-4`.
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def as_number(value: Any) -> Any:
    """`value`, or the float a string such as "1e-4" stands for (YAML 1.1 reads an exponent
    without a dot as a string; YAML 1.2 and Python read it as the number a user meant)."""
    if isinstance(value, str) and NUMBER.fullmatch(value) and any(c in value for c in "eE."):
        return float(value)
    return value


def _numbers(values: dict[str, Any]) -> dict[str, Any]:
    return {key: as_number(value) for key, value in values.items()}


def scales_of(experiment: str | os.PathLike) -> list[str]:
    """The scales `experiment` defines, in file order."""
    return list(read_spec(experiment)[1])


def load_config(experiment: str | os.PathLike, scale: str = "default", *,
                base: str | None = None, **overrides: Any) -> dict[str, Any]:
    """Resolve `experiment` (a name or a config file) at `scale` with `overrides` on top; with
    `base`, on top of that packaged experiment (module docstring)."""
    path = config_path(experiment)
    name = path.stem
    spec = _parse(path)
    defaults, scales = _split(spec)
    layers = [(f"defaults of {name}", defaults)]
    known = sorted(scales)
    if base is not None and path.resolve() != config_path(base).resolve():
        base_defaults, base_scales = read_spec(base)
        name = str(path)  # the user's file, by its path: it may share the base's name
        layers = [(f"defaults of the packaged {base}", base_defaults),
                  (f"scale {scale} of the packaged {base}", base_scales.get(scale) or {}),
                  (f"defaults of {name}", defaults)]
        known = sorted({*scales, FIGURES_SCALE} if spec.get("scales") else base_scales)
        defaults = base_defaults
    if scale not in known:
        raise ConfigError(f"unknown scale {scale!r} for {name}; valid scales: {known}")
    layers += [(f"scale {scale} of {name}", scales.get(scale) or {}), ("overrides", overrides)]
    config = dict(defaults)
    for source, values in layers:
        for key, value in values.items():
            if key not in defaults:
                raise ConfigError(
                    f"unknown key {key!r} in {source}; valid keys: {sorted(defaults)}"
                )
            config[key] = coerce(key, value, defaults[key])
    config["scale"] = scale
    return config


def coerce(key: str, value: Any, default: Any) -> Any:
    """`value` checked against the type of `default`, the key's value in the config's
    defaults: an int given for a float becomes a float, a tuple for a list a list; anything
    else of another type is a ConfigError naming `key`. A None on either side passes."""
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


C = TypeVar("C", bound="TypedConfig")


class TypedConfig(Mapping[str, Any]):
    """Base of an experiment's typed config: every key of `experiments/<EXPERIMENT>.yaml` and
    the `scale`, one field each, whose type says what the key accepts (its range, its
    `Literal` choices). A subclass is a frozen, strict pydantic dataclass (decorated with
    `typed`); construction validates once (`from_mapping`, `load`),
    `replace` makes a checked copy. The values live in the YAML alone: no field has a default.

    Code reads its fields (`cfg.seeds`). A config reads as a read-only mapping of its fields
    too (`cfg[key]`, `{**cfg}`, `cfg == {...}`), so tables, hashes and JSON take it as the
    dict it replaces.
    """

    EXPERIMENT: ClassVar[str]  # the packaged config file's name

    @classmethod
    def key_names(cls) -> tuple[str, ...]:
        """The config's keys, in the class's order."""
        return _field_names(cls)

    def __getitem__(self, key: str) -> Any:
        if key not in _field_names(type(self)):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_field_names(type(self)))

    def __len__(self) -> int:
        return len(_field_names(type(self)))

    @classmethod
    def from_mapping(cls: type[C], values: Mapping[str, Any]) -> C:
        """The config of `values` (every key, no other); ConfigError naming the first bad key."""
        with named_errors(cls.key_names(), "missing key {key!r}: the config of " + cls.EXPERIMENT
                          + " sets every key of experiments/" + cls.EXPERIMENT + ".yaml"):
            return cls(**values)

    @classmethod
    def load(cls: type[C], scale: str = "default", **overrides: Any) -> C:
        """experiments/<EXPERIMENT>.yaml at `scale` with `overrides` on top, validated."""
        return cls.from_mapping(load_config(cls.EXPERIMENT, scale, **overrides))

    def replace(self: C, **changes: Any) -> C:
        """A copy with `changes`, validated again; ConfigError naming the first bad key."""
        return self.from_mapping({**self, **changes})


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


def typed(cls: type[C]) -> type[C]:
    """Class decorator of a TypedConfig: a frozen, strict pydantic dataclass (`true` is no
    integer, `"1e-3"` no number), with no unknown key and the mapping's equality (a config
    equals the dict of its items)."""
    from pydantic.dataclasses import dataclass  # the repro extra: only typed configs need it

    return dataclass(frozen=True, eq=False, config={"strict": True, "extra": "forbid"})(cls)


@contextmanager
def named_errors(keys: Collection[str], missing: str) -> Iterator[None]:
    """Inside: a typed config's construction. Pydantic's ValidationError leaves as a ConfigError
    whose message begins with the first bad key: what that key accepts, the valid `keys` for an
    unknown one, `missing` (formatted with `key`) for an absent one; a ConfigError raised by a
    rule of the config's `__post_init__` as it was worded."""
    from pydantic import ValidationError  # the repro extra: only typed configs need it

    try:
        yield
    except ValidationError as err:
        raise _config_error(err, keys, missing) from None


def _config_error(err: ValidationError, keys: Collection[str], missing: str) -> ConfigError:
    first = err.errors()[0]
    if first["type"] == "value_error" and isinstance(first["ctx"]["error"], ConfigError):
        return first["ctx"]["error"]  # a rule of __post_init__, worded already
    key = str(first["loc"][0]) if first["loc"] else "config"
    if first["type"] == "unexpected_keyword_argument":
        return ConfigError(f"unknown key {key!r}; valid keys: {sorted(keys)}")
    if first["type"] == "missing":
        return ConfigError(missing.format(key=key))
    # a union (int | float) fails once per member: "a valid integer or a valid number"
    said = list(dict.fromkeys(e["msg"][0].lower() + e["msg"][1:] for e in err.errors()
                              if e["loc"][:1] == first["loc"][:1]))
    prefix = "input should be "
    if all(text.startswith(prefix) for text in said):
        said = [prefix + " or ".join(text.removeprefix(prefix) for text in said)]
    return ConfigError(f"{key}: {'; '.join(said)}, got {first['input']!r}")
