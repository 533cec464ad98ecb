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
hold `embedding_rank`: the sketch rank of the input embedding and output head
(docs/design.md §1.4: they typically want r ≥ 64), in a param group of their own.

Metrics, averaged over each logging window like TRL's own (`trainer.state.log_history`):
`logra/predicted_kl` (KL̂ of the unscaled step, nats per token), `logra/gamma`, `logra/clipped`
(share of steps with γ < 1), `logra/kl_probed` (share of steps an exact JVP probe predicted),
`logra/kl_scale` (the calibration factor of the diagonal estimate), `logra/skipped_steps`
(cumulative).

The KL prediction means the same here as in `logra.rl`: at the start of training `LoGRAMetrics`
attaches the optimizer to the model (`LoGRA.attach`), so the default `kl_estimator="calibrated"`
(and "jvp") replays the last micro-batch of TRL's loss forward in a JVP probe. That forward asks
for log-probabilities through TRL's fused LM head (`fused_lm_head=True`, `labels`); the probe
drops those two keywords so the model returns its logits (`logits_inputs`), and counts the
completion tokens only: the positions whose next-token label is not -100 (`completion_mask`).
TRL samples at `temperature` and scores log-probabilities of logits / temperature; the probe
predicts the KL of the plain logits, the same at TRL's default temperature 1. Under FSDP2 the
probe is unavailable (sharded parameters): there report a measured KL with
`optimizer.observe_kl`, or the control warns once and does not act. TRL's default `beta=0`
loads no reference model, so TRL itself logs no KL to a reference then.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback
from trl import GRPOTrainer

from logra.optim import LoGRA


def unwrap(optimizer: Any) -> Any:
    """The optimizer inside Accelerate's `AcceleratedOptimizer` wrappers."""
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


TRL_LOSS_KEYWORDS = ("labels", "shift_labels", "fused_lm_head", "num_items_in_batch")


def logits_inputs(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """TRL's recorded loss-forward inputs without the keywords that select its fused LM head,
    so that the replayed forward returns logits."""
    return args, {k: v for k, v in kwargs.items() if k not in TRL_LOSS_KEYWORDS}


def completion_mask(args: tuple, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The logit positions that predict a completion token: position t where labels[t+1] is
    not -100 (TRL masks prompt and padding with -100), shape (batch, sequence)."""
    labels = kwargs.get("labels")
    if not isinstance(labels, torch.Tensor):
        mask = kwargs.get("attention_mask")
        return mask.bool() if isinstance(mask, torch.Tensor) else None
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = labels[:, 1:] != -100
    return mask


class LoGRAMetrics(TrainerCallback):
    """Attaches LoGRA to the model at the start of training (its KL probe replays TRL's loss
    forward) and logs `last_step` into the GRPO trainer's metrics after every optimizer step."""

    def __init__(self, trainer: GRPOTrainer) -> None:
        self.trainer = trainer

    def _optimizer(self) -> LoGRA:
        optimizer = unwrap(self.trainer.optimizer)
        if not isinstance(optimizer, LoGRA):
            raise TypeError(f"LoGRAMetrics needs a LoGRA optimizer, got {type(optimizer).__name__}")
        return optimizer

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        optimizer = self._optimizer()
        if optimizer.kl_estimator in ("calibrated", "jvp"):
            optimizer.attach(self.trainer.model, token_mask_fn=completion_mask,
                             inputs_fn=logits_inputs)

    def on_optimizer_step(self, args, state, control, **kwargs) -> None:
        last = self._optimizer().last_step
        metrics = self.trainer._metrics["train"]  # what GRPOTrainer.log averages and reports
        for key in ("predicted_kl", "gamma", "clipped", "kl_probed", "kl_scale", "skipped_steps"):
            metrics[f"logra/{key}"].append(float(last[key]))


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
