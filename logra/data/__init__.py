"""Tasks: generated and hub datasets in their benchmark schemas, prompts, and grading.

Every task is one `Task` of `logra.data.registry.TASKS` (name -> Task). `load_task`,
`to_prompts` and `to_sft` import datasets on first use (`logra.lazy`).
"""

from logra.data.registry import TASKS, get_task
from logra.lazy import lazy_attributes

__all__ = ["TASKS", "get_task", "load_task", "to_prompts", "to_sft"]
__getattr__, __dir__ = lazy_attributes(globals(), {"load_task": "logra.data.tasks",
                                          "to_prompts": "logra.data.prompts",
                                          "to_sft": "logra.data.prompts"})
