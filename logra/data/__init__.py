"""Tasks: generated and hub datasets in their benchmark schemas, prompts, and grading."""

from logra.data.prompts import to_prompts, to_sft
from logra.data.tasks import TASKS, load_task

__all__ = ["TASKS", "load_task", "to_prompts", "to_sft"]
