"""Policies: the scale ladder, proxy building (warm-up), loading, and greedy evaluation."""

from logra.models.build import load_policy, prepare
from logra.models.evaluate import evaluate_greedy, greedy_completions
from logra.models.ladder import SCALES

__all__ = ["SCALES", "evaluate_greedy", "greedy_completions", "load_policy", "prepare"]
