"""KL divergences of a categorical policy: measured, and predicted for a given update.

For logits z(θ) over a vocabulary and an update Δ, the second-order expansion of the KL between
the old and the new policy is

    KL(π_θ ‖ π_{θ+Δ}) ≈ ½ Δᵀ F Δ = ½ E_tokens[ Σ_k p_k v_k² − (Σ_k p_k v_k)² ],   v = J Δ,

where J = ∂z/∂θ and F = Jᵀ (diag p − p pᵀ) J is the Fisher of the softmax. One forward-mode JVP
of the logits with tangent Δ (dual numbers of `torch.autograd.forward_ad`, the parameters swapped
in by `torch.func.functional_call`) gives v exactly, without forming J or F. The dual-number API
rather than `torch.func.jvp`: a functorch transform refuses models whose hooks call
`requires_grad_` (what `transformers`' `enable_input_require_grads` installs under gradient
checkpointing, as TRL's trainers do). This is the natural-gradient quadratic of TRPO (Schulman
et al. 2015) and ACKTR (Wu et al. 2017).

PyTorch's fused SDPA kernels have no forward-mode derivative, so the JVP runs under
`sdpa_kernel(SDPBackend.MATH)`, which every attention implementation of `transformers` accepts.
Nor do the kernels `torch.compile` generates (inductor calls out= variants such as `addmm_out`):
the JVP runs the eager module a compiled wrapper holds (`eager_module`), and under the compiler's
"force_eager" stance (torch ≥ 2.6) any compiled part inside it runs eagerly too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd import forward_ad
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel


def logits_of(output: Any) -> Tensor:
    """The logits of a model's output: the tensor itself, or its `.logits` (transformers), read
    as a categorical distribution over the last axis. An output with fewer than two axes or two
    classes holds no such distribution (a regression model's): a ValueError, not the softmax KL
    of a number that is no logit (over one class it would be 0, and never clip)."""
    logits = output if isinstance(output, Tensor) else getattr(output, "logits", None)
    if logits is None:
        raise TypeError(f"cannot find logits in a model output of type {type(output).__name__}")
    if logits.dim() < 2 or logits.shape[-1] < 2:
        raise ValueError(
            f"the KL probe reads a model output of shape {tuple(logits.shape)} as the logits of a "
            "categorical policy over its last axis, but it has fewer than two axes or classes (a "
            "regression model?). The predicted-KL control is for categorical policies: turn it "
            "off with predicted_kl_threshold=None")
    return logits


def eager_module(model: nn.Module) -> nn.Module:
    """The module a `torch.compile(module)` wrapper runs eagerly (its `_orig_mod`), else `model`."""
    original = getattr(model, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else model


def _eager() -> contextlib.AbstractContextManager:
    """Compiled code runs eagerly inside (torch ≥ 2.6: the "force_eager" stance), else nothing."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance else contextlib.nullcontext()


def _token_mean(values: Tensor, token_mask: Tensor | None) -> Tensor:
    """Mean of per-token values (shape …) over the tokens where token_mask (same shape) is true."""
    if token_mask is None:
        return values.mean()
    mask = token_mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def categorical_kl(
    logits_p: Tensor, logits_q: Tensor, token_mask: Tensor | None = None
) -> Tensor:
    """Mean per-token KL(p ‖ q) = Σ_k p_k (log p_k − log q_k), from full softmaxes, in fp32.

    logits_p, logits_q: (…, vocab); token_mask: (…) booleans, or None for every token.
    """
    log_p = torch.log_softmax(logits_p.float(), dim=-1)
    log_q = torch.log_softmax(logits_q.float(), dim=-1)
    per_token = (log_p.exp() * (log_p - log_q)).sum(dim=-1)
    return _token_mean(per_token, token_mask)


def fisher_quadratic(logits: Tensor, tangent: Tensor, token_mask: Tensor | None = None) -> Tensor:
    """½ E_tokens[Σ_k p_k v_k² − (Σ_k p_k v_k)²] for logits and v = tangent, both (…, vocab)."""
    p = torch.softmax(logits.float(), dim=-1)
    v = tangent.float()
    mean_v = (p * v).sum(dim=-1)
    per_token = (p * v.square()).sum(dim=-1) - mean_v.square()
    return 0.5 * _token_mean(per_token, token_mask)


def predicted_kl_jvp(
    model: nn.Module,
    delta: Mapping[str, Tensor],
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    token_mask: Tensor | None = None,
) -> Tensor:
    """½ Δᵀ F Δ of `model`'s categorical policy on one batch, by one forward-mode JVP.

    delta maps parameter names (as in `model.named_parameters()`) to update tensors of the same
    shapes; parameters not named keep their values and get no tangent. The model runs in eval
    mode for this pass (restored afterwards) so that dropout does not enter the prediction.
    """
    return fisher_quadratic(*logits_jvp(model, delta, args, kwargs), token_mask)


def logits_jvp(
    model: nn.Module,
    delta: Mapping[str, Tensor],
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """The logits z of `model(*args, **kwargs)` and their tangent v = J Δ, both (…, vocab).

    One forward-mode JVP (`predicted_kl_jvp` documents `delta` and the eval-mode pass).
    """
    kwargs = dict(kwargs or {})
    named = dict(model.named_parameters())
    unknown = sorted(set(delta) - set(named))
    if unknown:
        raise KeyError(f"delta names parameters the model does not have: {unknown[:5]}")
    was_training = model.training
    model.eval()
    try:
        with _eager(), sdpa_kernel(SDPBackend.MATH), forward_ad.dual_level():
            duals = {name: forward_ad.make_dual(named[name].detach(),
                                                tangent.to(named[name].dtype))
                     for name, tangent in delta.items()}
            logits = logits_of(functional_call(model, duals, args, kwargs))
            primal, tangent = forward_ad.unpack_dual(logits)
            return primal, tangent
    finally:
        model.train(was_training)


def batch_rows(
    args: tuple, kwargs: Mapping[str, Any], token_mask: Tensor | None, stride: int, offset: int
) -> tuple[tuple, dict[str, Any], Tensor | None]:
    """Every `stride`-th sequence of a batch from `offset`: rows offset, offset + stride, ….

    The batch size B is the first dimension of `input_ids` (or of the first tensor argument);
    every tensor argument, keyword and the token mask whose first dimension is B is sliced, the
    rest passed on as is. stride 1, or a batch of fewer than `stride` rows, keeps everything.
    """
    first = kwargs.get("input_ids")
    if not isinstance(first, Tensor):
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
    if stride <= 1 or first is None or first.dim() == 0 or first.shape[0] < stride:
        return args, dict(kwargs), token_mask
    size = first.shape[0]
    rows = torch.arange(offset % stride, size, stride, device=first.device)

    def pick(value: Any) -> Any:
        is_batched = isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == size
        return value.index_select(0, rows.to(value.device)) if is_batched else value

    return (tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()},
            pick(token_mask))


def token_count(logits: Tensor, token_mask: Tensor | None = None) -> Tensor:
    """The number of tokens a token mean over `logits` (…, vocab) runs over (fp32 scalar)."""
    if token_mask is None:
        return torch.tensor(float(logits.shape[:-1].numel()), device=logits.device)
    return token_mask.float().sum()


class BatchRecorder:
    """Remembers the inputs of a model's most recent forward pass (a forward pre-hook).

    Trainers such as `transformers.Trainer` and TRL call `optimizer.step()` with no arguments;
    the JVP predictor then replays the last batch the model saw. Tensors are kept by reference
    (no copy), detached. `token_mask_fn(args, kwargs)` may pick the tokens that count; by default
    the `attention_mask` keyword if present, else every token. `inputs_fn(args, kwargs)` may
    rewrite what is replayed, e.g. drop keywords that make a trainer's forward return something
    other than logits (TRL's `fused_lm_head=True`, `labels`); by default the inputs as recorded.
    """

    def __init__(
        self,
        model: nn.Module,
        token_mask_fn: Callable[[tuple, dict], Tensor | None] | None = None,
        inputs_fn: Callable[[tuple, dict], tuple[tuple, dict]] | None = None,
    ) -> None:
        self.model = model
        self.token_mask_fn = token_mask_fn or _attention_mask
        self.inputs_fn = inputs_fn
        self.args: tuple | None = None
        self.kwargs: dict[str, Any] = {}
        self._handle = model.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not torch.is_grad_enabled() and self.args is not None:
            return  # keep the training batch, not a later evaluation or generation pass
        self.args = tuple(_detach(a) for a in args)
        self.kwargs = {k: _detach(v) for k, v in kwargs.items()}

    @property
    def has_batch(self) -> bool:
        return self.args is not None

    def token_mask(self) -> Tensor | None:
        return self.token_mask_fn(self.args or (), self.kwargs)

    def replay(self) -> tuple[tuple, dict[str, Any]]:
        """The recorded (args, kwargs) to run the model on, through `inputs_fn` if given."""
        args, kwargs = self.args or (), self.kwargs
        return self.inputs_fn(args, kwargs) if self.inputs_fn else (args, kwargs)

    def remove(self) -> None:
        self._handle.remove()


def _attention_mask(args: tuple, kwargs: dict) -> Tensor | None:
    mask = kwargs.get("attention_mask")
    return mask.bool() if isinstance(mask, Tensor) and mask.dim() == 2 else None


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, Tensor) else value
