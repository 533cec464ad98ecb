"""The method registry: every optimizer setting the kit trains and draws, by one name.

A method is an optimizer of `logra.optimizers` (its builder, package and flags) with preset
settings on top, and how every table and figure names and draws it. Each optimizer is a method
of its own name with no preset; the other entries are presets of one:

    adamw           dense torch AdamW (the reference every RL claim is measured against)
    adamw-kl        dense AdamW with LoGRA's predicted-KL step control (LoGRA, sketch=False)
    logra           LoGRA, gain reconstruction, predicted-KL control (δ from the experiment)
    logra-nystrom   LoGRA, truncated Nyström reconstruction, control on
    logra-nokl      LoGRA, gain reconstruction, no control
    naive           the naive one-sided random projection (RandomProjectionAdam)
    lora            LoRA adapters through `peft`, AdamW on the adapters
    galore, apollo, apollo-mini, fira, adafactor, adamw8bit, adam-mini   published baselines

Colours: one per method, the same in every figure of the kit; a method with no colour of its own
takes its optimizer's. Adding a method is one entry here (tests/test_methods.py adds one and
finds it in a GRPO sweep plan, the memory table and a figure's palette).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from logra.optimizers import REGISTRY, OptimizerSpec


@dataclass(frozen=True)
class Method:
    """One named optimizer setting: `optimizer` (a key of `logra.optimizers.REGISTRY`) with
    `settings` on top, and how figures draw it."""

    name: str
    optimizer: str
    label: str
    color: str = ""  # "": the optimizer's colour
    settings: Mapping[str, Any] = field(default_factory=dict)  # preset keys beyond `optimizer`
    style: str = "-"  # line style: dashed where a curve may lie on another method's
    cost: float = 1.0  # step time relative to dense AdamW (schedules the longest runs first)

    def __post_init__(self) -> None:
        if self.optimizer not in REGISTRY:
            raise ValueError(f"method {self.name!r}: optimizer {self.optimizer!r} is not one of "
                             f"{list(REGISTRY)}")
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        if not self.color:
            object.__setattr__(self, "color", REGISTRY[self.optimizer].color)

    @property
    def spec(self) -> OptimizerSpec:
        """The optimizer's registry entry."""
        return REGISTRY[self.optimizer]

    @property
    def controllable(self) -> bool:
        """The optimizer has the predicted-KL step control (its δ can be swept)."""
        return self.spec.kl_control

    @property
    def controlled(self) -> bool:
        """The control acts in this method's runs: controllable, and the preset does not turn
        it off."""
        return self.controllable and self.settings.get("predicted_kl_threshold", True) is not None

    @property
    def short(self) -> str:
        """The label without "+ KL control" (tables that give δ beside it)."""
        return self.label.removesuffix(" + KL control")


def _methods(*entries: Method) -> dict[str, Method]:
    methods = {m.name: m for m in entries}
    for name in REGISTRY:  # every optimizer is a method of its own name
        methods.setdefault(name, Method(name, name, REGISTRY[name].label))
    colors = [m.color for m in methods.values()]
    clash = sorted({c for c in colors if colors.count(c) > 1})
    if clash:
        raise ValueError(f"methods share the colours {clash}: one colour per method")
    return methods


METHODS: dict[str, Method] = _methods(
    Method("adamw", "adamw", "dense AdamW"),
    Method("adamw-kl", "adamw-kl", "dense AdamW + KL control", cost=1.3, style="--"),
    Method("logra", "logra", "LoGRA gain + KL control", cost=1.3),
    Method("logra-nystrom", "logra", "LoGRA Nyström + KL control", color="lightcoral",
           settings={"reconstruction": "nystrom"}, cost=1.6),
    Method("logra-nokl", "logra", "LoGRA gain, no control", color="magenta",
           settings={"predicted_kl_threshold": None}, style="--"),
    Method("naive", "naive", "naive random projection", cost=1.5),
    Method("lora", "lora", "LoRA", cost=1.5),
    Method("galore", "galore", "GaLore", cost=1.1),
    Method("apollo", "apollo", "APOLLO"),
    Method("adafactor", "adafactor", "Adafactor"),
)


def get_method(name: str) -> Method:
    """The method `name`; ValueError naming the valid ones otherwise."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods: {list(METHODS)}")
    return METHODS[name]


def palette(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """label -> colour of the methods `names`, for seaborn's `palette=`."""
    return {get_method(n).label: get_method(n).color for n in names}
