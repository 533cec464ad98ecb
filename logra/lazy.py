"""Package attributes imported on first use (PEP 562 module `__getattr__`).

`logra.data`, `logra.models` and `logra.rl` name their public functions at package level, but
the modules behind them import datasets or transformers (5–10 s). A package that lists such
names in `lazy_attributes` imports their module only when one is first read, so that the light
parts (the task and scale registries, a config check) load in the time torch takes, and a bad
config fails before the heavy imports.

Only the standard library: every layer of the package may import this module.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_attributes(namespace: dict[str, Any], sources: dict[str, str]
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module `__getattr__` and `__dir__` for the package whose globals are `namespace`:
    `name` of `sources` (name -> module) is imported from its module on first use and kept in
    `namespace`, any other name is an AttributeError; `dir(package)` (and so tab completion)
    lists the lazy names beside the loaded ones, without importing them."""
    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(import_module(sources[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *sources})

    return __getattr__, __dir__
