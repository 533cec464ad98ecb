"""Checks of the optimizers' param-group hyperparameters, each error naming its argument.

`check_adamw` covers what LoGRA and the naive projection share with `torch.optim.AdamW` (lr,
betas, eps, weight_decay), `check_sketch` LoGRA's sketch keys, and `check_kl_control` the keys of
LoGRA's predicted-KL step control (`KL_CONTROL_KEYS`). A bad value, of the wrong type (a string
read from a config, a bare float for betas) or out of range, is a ValueError naming the argument
and the value, as torch's optimizers raise for bad values. `check_saved_groups`,
called by `load_state_dict` before it changes anything, refuses another optimizer's state (its
groups lack the optimizer's keys), and `check_saved_shapes` a state of another rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor

from logra.optim.rules import RULES, rule

RECONSTRUCTIONS = tuple(RULES)  # the kit's own rules (`logra.optim.rules`), by name
KL_ESTIMATORS = ("calibrated", "diag", "jvp")
# The step control's hyperparameters. They live in the param groups like lr, but the control is
# global (one γ for the whole step, from a prediction summed over every group), so every group
# must hold the same value of each (`common_kl_control`).
KL_CONTROL_KEYS = ("predicted_kl_threshold", "kl_estimator", "kl_calibration", "kl_probe_every",
                   "kl_probe_stride", "kl_drift_budget", "kl_drift_window")


def is_number(value: Any) -> bool:
    """An int or float, not a bool (nor a string that reads as a number)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_adamw(group: dict[str, Any]) -> None:
    """lr ≥ 0 (a number or a one-element Tensor), betas a pair in [0, 1), eps > 0,
    weight_decay ≥ 0."""
    lr = group["lr"]
    if isinstance(lr, Tensor):
        if lr.numel() != 1:
            raise ValueError("lr as a Tensor must have one element")
    elif not is_number(lr):
        raise ValueError(f"lr must be a number or a one-element Tensor, got {type(lr).__name__} "
                         f"{lr!r}" + (" (YAML 1.1 reads 1e-6 as a string: write 1.0e-6)"
                                      if isinstance(lr, str) else ""))
    if not float(lr) >= 0:
        raise ValueError(f"Invalid learning rate (lr): {float(lr)}")
    betas = group["betas"]
    if not isinstance(betas, tuple | list) or len(betas) != 2 \
            or not all(is_number(b) or isinstance(b, Tensor) for b in betas):
        raise ValueError(f"betas must be a pair of numbers (beta1, beta2), got {betas!r}")
    if not all(0.0 <= float(b) < 1.0 for b in betas):
        raise ValueError(f"Invalid betas: {betas} (each must lie in [0, 1))")
    for key in ("eps", "weight_decay"):
        if not is_number(group[key]):
            raise ValueError(f"{key} must be a number, got {type(group[key]).__name__} "
                             f"{group[key]!r}")
    if not group["eps"] > 0:
        raise ValueError(f"Invalid eps: {group['eps']} (must be > 0: a zero column of a "
                         "sketch would divide 0 by 0)")
    if not group["weight_decay"] >= 0:
        raise ValueError(f"Invalid weight_decay: {group['weight_decay']} (must be ≥ 0)")


def check_saved_groups(saved_groups: list[dict[str, Any]], keys: Iterable[str], optimizer: str,
                       kept: str) -> None:
    """ValueError naming the first saved param group that lacks any of `keys` (the group keys
    `optimizer` saves): such a state is another optimizer's, torch.optim.AdamW's say, and holds
    dense moments where `optimizer` keeps `kept` ("sketches of the moments")."""
    for i, group in enumerate(saved_groups):
        missing = sorted(set(keys) - set(group))
        if missing:
            raise ValueError(
                f"state_dict param group {i} lacks {optimizer}'s keys {missing}: it is not a "
                f"{optimizer} state but another optimizer's (torch.optim.AdamW?). {optimizer} "
                f"keeps {kept}, not the dense moments such a state holds; start {optimizer} from "
                "a fresh state")


def check_saved_shapes(saved_groups: list[dict[str, Any]], groups: list[dict[str, Any]],
                       keys: tuple[str, ...] = ("rank", "oversample")) -> None:
    """ValueError naming the first param group saved with another value of `keys` (the
    hyperparameters that size the moments) than the optimizer's group: the saved moments have
    the saved rank's shapes, and loading them would quietly make the optimizer that rank (and
    its memory that rank's)."""
    for i, (saved, group) in enumerate(zip(saved_groups, groups, strict=False)):
        for key in keys:
            if saved[key] != group[key]:
                raise ValueError(
                    f"state_dict param group {i} was saved with {key}={saved[key]!r}, but this "
                    f"optimizer's group {i} has {key}={group[key]!r}: the saved sketch moments "
                    f"have {key} {saved[key]!r}'s shapes. Build the optimizer with "
                    f"{key}={saved[key]!r} to resume, or start {key}={group[key]!r} from a fresh "
                    "state")


def check_int(name: str, value: Any, least: int) -> None:
    """`value` an int (not a bool) ≥ `least`, else a ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"Invalid {name}: {value!r} (must be an int ≥ {least})")


def check_sketch(group: dict[str, Any]) -> None:
    """rank ≥ 1, oversample ≥ 0, a registered reconstruction rule, rtol in [0, 1), sketch a bool."""
    check_int("rank", group["rank"], 1)
    check_int("oversample", group["oversample"], 0)
    rule(group["reconstruction"])  # a registered rule, or a ValueError naming them
    if not is_number(group["rtol"]) or not 0 <= group["rtol"] < 1:
        raise ValueError(f"Invalid rtol: {group['rtol']!r} (must lie in [0, 1))")
    if not isinstance(group["sketch"], bool):
        raise ValueError(f"sketch must be a bool, got {group['sketch']!r}")


def check_kl_control(group: dict[str, Any]) -> None:
    """δ and the drift budget > 0 or None, a known estimator, a calibration > 0, the probe
    schedule and the drift window ints ≥ 1."""
    for key in ("predicted_kl_threshold", "kl_drift_budget"):
        value = group[key]
        if value is not None and not (is_number(value) and value > 0):
            raise ValueError(f"{key} must be a number > 0 or None, got {value!r}")
    if group["kl_estimator"] not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, "
                         f"got {group['kl_estimator']!r}")
    if not (is_number(group["kl_calibration"]) and group["kl_calibration"] > 0):
        raise ValueError(f"kl_calibration must be a number > 0, got {group['kl_calibration']!r}")
    for key in ("kl_probe_every", "kl_probe_stride", "kl_drift_window"):
        check_int(key, group[key], 1)


def common_kl_control(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The KL-control settings every group shares, checked; ValueError naming the key on which
    groups disagree (the control scales the whole step by one γ, so one δ must hold for all)."""
    first = groups[0]
    for key in KL_CONTROL_KEYS:
        values = [group[key] for group in groups]
        if any(value != first[key] for value in values):
            raise ValueError(
                f"param groups disagree on {key}: {values}. LoGRA's KL control scales the "
                "whole step by one factor γ, from one prediction over every group, so each "
                f"group must hold the same {key}; set it in every group")
    settings = {key: first[key] for key in KL_CONTROL_KEYS}
    check_kl_control(settings)
    return settings
