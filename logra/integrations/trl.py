"""LoGRA in TRL's `GRPOTrainer`, with its predicted KL and γ in the trainer's logs.

Two ways in:

    # 1. a ready-made optimizer (single process, DDP)
    trainer = GRPOTrainer(model, reward_funcs, args=config, train_dataset=data,
                          optimizers=(LoGRA(model.parameters(), lr=..., rank=16,
                                            predicted_kl_threshold=0.02), None))
    add_logra_metrics(trainer)      # logra.integrations.trainer: any Hugging Face Trainer

    # 2. the optimizer built by the trainer, after Accelerate has wrapped the model: the path
    #    `Trainer` allows under FSDP, where it refuses a ready-made optimizer
    trainer = LoGRAGRPOTrainer(model, reward_funcs, args=config, train_dataset=data,
                               logra=dict(rank=16, predicted_kl_threshold=0.02))

`LoGRAGRPOTrainer` takes lr, betas, eps and weight decay from the `GRPOConfig` (weight decay
off for biases and norms, as `Trainer` does) and everything else from `logra` (the KL control
on at the report's δ = 0.02 unless `logra` sets `predicted_kl_threshold`), which may also
hold `embedding_rank`: the sketch rank of the input embedding and output head
(docs/design.md §1.4: they typically want r ≥ 64), in a param group of their own.

Metrics: `LoGRAMetrics` (`logra.integrations.trainer`, public `Trainer` callback hooks only)
adds to each logging step's logs, and to `trainer.state.log_history`, `logra/predicted_kl` (KL̂
of the unscaled step, nats per token), `logra/gamma`, `logra/clipped` (share of steps with
γ < 1), `logra/kl_probed` (share of steps an exact JVP probe predicted), `logra/kl_scale` (the
calibration factor of the diagonal estimate), averaged over the logging window, and
`logra/skipped_steps` (cumulative).

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

from torch import nn
from trl import GRPOTrainer

from logra.integrations.trainer import add_logra_metrics
from logra.optim import REPORT_RL_SETTINGS, LoGRA


class LoGRAGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose `create_optimizer` builds LoGRA; logs `LoGRAMetrics` (ahead of the
    reporting callbacks, `add_logra_metrics`).

    Args: those of `GRPOTrainer` (except `optimizers`), plus `logra`: keyword arguments of
    `LoGRA` other than lr, betas, eps and weight_decay, which come from `args` (and with
    `predicted_kl_threshold` the report's 0.02 unless given), and optionally `embedding_rank`.
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
        add_logra_metrics(self)

    def create_optimizer(self, model: nn.Module | None = None) -> LoGRA:
        """LoGRA over the trainable parameters, grouped by (weight decay, embedding or not)."""
        if self.optimizer is None:
            model = self.model if model is None else model
            options = {"predicted_kl_threshold": REPORT_RL_SETTINGS["predicted_kl_threshold"],
                       **self.logra_options}
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
