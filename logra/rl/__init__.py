"""RL post-training: GRPO with any optimizer of `logra.optimizers`, records, checkpoints, resume.

    logra.rl.grpo     group-normalized advantages, k3, the clipped surrogate loss
    logra.rl.rollout  sampling G completions per prompt, log-probabilities of sampled tokens
    logra.rl.config   resolving and validating experiments/grpo.yaml, the run directory
    logra.rl.runner   the loop, per-step records, manifest, checkpoints

Command line (the proxy on the CPU, then the reported 1.5B scale through the same code):

    logra-repro run experiments/grpo.yaml optimizer=logra seed=1
    logra-repro run experiments/grpo.yaml model=Qwen/Qwen2.5-1.5B-Instruct task=gsm8k
    logra-repro run experiments/grpo.yaml --scale 1.5b optimizer=logra    # GPU-sized settings

From Python (notebooks):

    from logra.rl import resolve, run_grpo, evaluations
    records = run_grpo(resolve(scale="smoke", optimizer="logra"))
    evaluations(records)        # step, eval_accuracy, kl at the evaluated steps

See docs/real_scale.md for the real-scale runs. The runner's names import transformers on first
use (`logra.lazy`): resolving a config does not.
"""

from logra.lazy import lazy_attributes
from logra.optimizers import OPTIMIZERS, build_optimizer, measured_state_bytes, wrap_model
from logra.rl.config import resolve, run_dir

__all__ = ["COLUMNS", "OPTIMIZERS", "build_optimizer", "evaluations", "measured_state_bytes",
           "resolve", "run_dir", "run_grpo", "wrap_model"]
__getattr__, __dir__ = lazy_attributes(globals(), {name: "logra.rl.runner" for name in (
    "COLUMNS", "evaluations", "run_grpo")})
