"""Tasks: generated and hub datasets in their benchmark schemas, prompts, and grading.

Every task is one `Task` of `logra.data.registry.TASKS` (name -> Task).
"""

from logra.data.prompts import to_prompts, to_sft
from logra.data.registry import TASKS, get_task
from logra.data.tasks import load_task

__all__ = ["TASKS", "get_task", "load_task", "to_prompts", "to_sft"]
