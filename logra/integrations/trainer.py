"""LoGRA in any Hugging Face `Trainer`: its predicted KL and γ in the trainer's logs.

    trainer = Trainer(model, args, train_dataset=data,
                      optimizers=(LoGRA(model.parameters(), lr=1e-6, rank=16,
                                        predicted_kl_threshold=0.02), None))
    add_logra_metrics(trainer)
    trainer.train()          # trainer.state.log_history rows hold logra/gamma, ...

`LoGRAMetrics` works on the public callback hooks only: at the start of training it attaches the
optimizer to the model (`LoGRA.attach`), so that the default `kl_estimator="calibrated"` (and
"jvp") replays the last micro-batch of the loss forward in its JVP probe; after each optimizer
step it reads `LoGRA.last_step`; in `on_log` it adds the logging window's values to the `logs`
of every callback after it (the `report_to` integrations: TensorBoard, W&B, ...) and to the
row `Trainer.log` has just appended to `trainer.state.log_history`. `add_logra_metrics` puts it
ahead of the reporting callbacks; a `LoGRAMetrics()` passed in `callbacks=` or added with
`add_callback` comes after them, and they then miss its keys.

Keys, over each logging window: `logra/predicted_kl` (mean KL̂ of the unscaled step, nats per
token), `logra/gamma` (mean γ), `logra/clipped` (share of steps with γ < 1), `logra/kl_probed`
(share of steps an exact JVP probe predicted), `logra/kl_scale` (mean calibration factor of the
diagonal estimate), `logra/skipped_steps` (cumulative, at the window's end).

The probe replays the forward without the loss keywords (`labels`, TRL's `fused_lm_head`, ...),
so that the model returns its logits (`logits_inputs`), over the positions that predict a
labelled token (`completion_mask`): a language model's loss tokens, GRPO's completion tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer, TrainerCallback

from logra.optim import LoGRA

LOSS_KEYWORDS = ("labels", "shift_labels", "fused_lm_head", "num_items_in_batch")
MEANS = ("predicted_kl", "gamma", "clipped", "kl_probed", "kl_scale")  # over the window
LATEST = ("skipped_steps",)  # cumulative counts: the window's last value


def unwrap(optimizer: Any) -> Any:
    """The optimizer inside Accelerate's `AcceleratedOptimizer` wrappers."""
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


def logits_inputs(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The recorded loss-forward inputs without the keywords that make the model compute a loss
    (or select TRL's fused LM head), so that the replayed forward returns logits."""
    return args, {k: v for k, v in kwargs.items() if k not in LOSS_KEYWORDS}


def completion_mask(args: tuple, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The logit positions that predict a labelled token: position t where labels[t+1] is
    not -100 (prompt and padding carry -100), shape (batch, sequence); without labels, the
    attention mask."""
    labels = kwargs.get("labels")
    if not isinstance(labels, torch.Tensor):
        mask = kwargs.get("attention_mask")
        return mask.bool() if isinstance(mask, torch.Tensor) else None
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = labels[:, 1:] != -100
    return mask


class LoGRAMetrics(TrainerCallback):
    """Attaches LoGRA to the model when training starts and logs its `last_step` (module
    docstring); public `TrainerCallback` hooks only."""

    def __init__(self) -> None:
        self.window: list[dict[str, Any]] = []

    @staticmethod
    def _logra(optimizer: Any) -> LoGRA:
        optimizer = unwrap(optimizer)
        if not isinstance(optimizer, LoGRA):
            raise TypeError(f"LoGRAMetrics needs a LoGRA optimizer, got {type(optimizer).__name__}")
        return optimizer

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs) -> None:
        logra = self._logra(optimizer)
        self.window = []
        if logra.kl_estimator in ("calibrated", "jvp"):
            logra.attach(model, token_mask_fn=completion_mask, inputs_fn=logits_inputs)

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs) -> None:
        self.window.append(self._logra(optimizer).last_step)  # read at on_log, not each step

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not self.window or logs is None:
            return
        metrics = {f"logra/{key}": sum(float(step[key]) for step in self.window) / len(self.window)
                   for key in MEANS}
        metrics.update({f"logra/{key}": float(self.window[-1][key]) for key in LATEST})
        self.window = []
        logs.update(metrics)  # what the reporting callbacks after this one receive
        if state.log_history:  # the row Trainer.log appended for these logs, before on_log
            state.log_history[-1].update(metrics)


def add_logra_metrics(trainer: Trainer) -> LoGRAMetrics:
    """Add `LoGRAMetrics` to `trainer` ahead of its other callbacks, so that the reporting
    integrations (`report_to`) receive LoGRA's keys; returns it."""
    callback = LoGRAMetrics()
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
