"""Policies: the scale ladder, proxy building (warm-up), loading, and greedy evaluation.

`SCALES` is light; the rest imports transformers on first use (`logra.lazy`).
"""

from logra.lazy import lazy_attributes
from logra.models.ladder import SCALES

__all__ = ["SCALES", "evaluate_greedy", "greedy_completions", "load_policy", "prepare"]
__getattr__, __dir__ = lazy_attributes(globals(), {"load_policy": "logra.models.build",
                                          "prepare": "logra.models.build",
                                          "evaluate_greedy": "logra.models.evaluate",
                                          "greedy_completions": "logra.models.evaluate"})
