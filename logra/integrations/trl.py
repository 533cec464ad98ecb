"""LoGRA in TRL's `GRPOTrainer`, with its predicted KL and γ in the trainer's metrics.

Two ways in:

    # 1. a ready-made optimizer (single process, DDP)
    trainer = GRPOTrainer(model, reward_funcs, args=config, train_dataset=data,
                          optimizers=(LoGRA(model.parameters(), lr=..., rank=16), None))
    trainer.add_callback(LoGRAMetrics(trainer))

    # 2. the optimizer built by the trainer, after Accelerate has wrapped the model: the path
    #    `Trainer` allows under FSDP, where it refuses a ready-made optimizer
    trainer = LoGRAGRPOTrainer(model, reward_funcs, args=config, train_dataset=data,
                               logra=dict(rank=16, predicted_kl_threshold=0.02))

`LoGRAGRPOTrainer` takes lr, betas, eps and weight decay from the `GRPOConfig` (weight decay
off for biases and norms, as `Trainer` does) and everything else from `logra`, which may also
hold `embedding_rank`: the sketch rank of the input embedding and output head (DESIGN §1.4: they
typically want r ≥ 64), in a param group of their own.

Metrics, averaged over each logging window like TRL's own (`trainer.state.log_history`):
`logra/predicted_kl` (KL̂ of the unscaled step), `logra/gamma`, `logra/clipped` (share of steps
with γ < 1), `logra/skipped_steps` (cumulative). Use `kl_estimator="diag"` (with a
`kl_calibration`): TRL's loss forward returns log-probabilities of the sampled tokens
(`fused_lm_head=True`), not the logits the JVP estimator replays the batch for. TRL's default
`beta=0` loads no reference model, so TRL itself logs no KL to a reference then.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import TrainerCallback
from trl import GRPOTrainer

from logra.optim import LoGRA


def unwrap(optimizer: Any) -> Any:
    """The optimizer inside Accelerate's `AcceleratedOptimizer` wrappers."""
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


class LoGRAMetrics(TrainerCallback):
    """After every optimizer step, LoGRA's `last_step` into the GRPO trainer's metrics."""

    def __init__(self, trainer: GRPOTrainer) -> None:
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs) -> None:
        optimizer = unwrap(self.trainer.optimizer)
        if not isinstance(optimizer, LoGRA):
            raise TypeError(f"LoGRAMetrics needs a LoGRA optimizer, got {type(optimizer).__name__}")
        last = optimizer.last_step
        metrics = self.trainer._metrics["train"]  # what GRPOTrainer.log averages and reports
        metrics["logra/predicted_kl"].append(float(last["predicted_kl"]))
        metrics["logra/gamma"].append(float(last["gamma"]))
        metrics["logra/clipped"].append(float(last["clipped"]))
        metrics["logra/skipped_steps"].append(float(last["skipped_steps"]))


class LoGRAGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose `create_optimizer` builds LoGRA; logs `LoGRAMetrics`.

    Args: those of `GRPOTrainer` (except `optimizers`), plus `logra`: keyword arguments of
    `LoGRA` other than lr, betas, eps and weight_decay, which come from `args`, and optionally
    `embedding_rank`.
    """

    def __init__(self, *args: Any, logra: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if kwargs.get("optimizers", (None, None))[0] is not None:
            raise ValueError("LoGRAGRPOTrainer builds its optimizer; pass LoGRA's options as "
                             "logra={...}, not optimizers=")
        fixed = {"lr", "betas", "eps", "weight_decay"} & set(logra or {})
        if fixed:
            raise ValueError(f"{sorted(fixed)} come from the GRPOConfig, not from logra=")
        self.logra_options = dict(logra or {})
        super().__init__(*args, **kwargs)
        self.add_callback(LoGRAMetrics(self))

    def create_optimizer(self, model: nn.Module | None = None) -> LoGRA:
        """LoGRA over the trainable parameters, grouped by (weight decay, embedding or not)."""
        if self.optimizer is None:
            model = self.model if model is None else model
            options = dict(self.logra_options)
            embedding_rank = options.pop("embedding_rank", None)
            embeddings = set()
            if embedding_rank is not None:
                modules = (model.get_input_embeddings(), model.get_output_embeddings())
                embeddings = {id(m.weight) for m in modules if m is not None}
            decay = set(self.get_decay_parameter_names(model))
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            groups = []
            for decayed in (True, False):
                for embedding in (False, True):
                    params = [(n, p) for n, p in named
                              if (n in decay) == decayed and (id(p) in embeddings) == embedding]
                    group = {"params": params,
                             "weight_decay": self.args.weight_decay if decayed else 0.0}
                    if embedding:
                        group["rank"] = embedding_rank
                    if params:
                        groups.append(group)
            self.optimizer = LoGRA(
                groups, lr=self.args.learning_rate,
                betas=(self.args.adam_beta1, self.args.adam_beta2), eps=self.args.adam_epsilon,
                **options,
            )
        return self.optimizer
