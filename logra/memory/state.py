"""Exact optimizer-state bytes from parameter shapes alone.

`counted_state_bytes(model, optimizer, **options)` counts the bytes of every tensor an optimizer
keeps between steps, for a model whose parameters may live on the `meta` device. Notation: a matrix
parameter W ∈ R^{m×n} (a tensor of more dims is viewed as shape[0] × rest, as LoGRA does), N its
number of elements, b(·) bytes per element, r the rank. Per parameter:

    adamw      2·N·b(state) + 4                  exp_avg, exp_avg_sq (dtype of the parameter, as
                                                 torch.optim.AdamW allocates, or `state_dtype`),
                                                 a 0-d fp32 `step` tensor; +N·b with amsgrad
    logra      2·4·(k·n + m·r) + 4               exp_avg_{L,R}, exp_avg_sq_{L,R} in fp32, L: k×n
                                                 (k = r + oversample), R: m×r, 0-d fp32 `step`
                                                 (`epoch` is an int, 0 bytes); 1-D, small or
                                                 unsketched parameters: 2·4·N + 4 (dense AdamW).
                                                 Which is which: `logra.optim.sketch_shapes`
    naive      2·4·(r·n or m·r) + 4              one-sided projection of the larger side
                                                 (`logra.optim.projected_shape`); else 2·4·N + 4
    lora       adamw over the adapter parameters of `peft` (A: r×n, B: m×r per targeted linear);
               the frozen base has no state
    galore     b·(r·n) + 2·b·(m·r)  if m ≥ n     (Zhao et al. 2024, GaLoreAdamW with proj_type
               b·(m·r) + 2·b·(r·n)  otherwise    "std": the SVD projection is stored, the
                                                 moments live in the projected space; r is
                                                 capped at min(m, n)); non-projected: 2·b·N;
                                                 `step` is an int (0 bytes)
    apollo     as galore (random projection, r not capped) + a 0-d norm-growth-limiter scalar
               (Zhu et al. 2024, APOLLOAdamW). The paper regenerates the projection from its seed
               (state 2·b·r·max(m, n)); the reference code stores it: `store_projection`
    flora      4·(m·r) + 4·(m + n)               (Hao et al. 2024) momentum compressed along the
                                                 input side by a seeded projection (regenerated,
                                                 not stored) + Adafactor's factored second moment;
                                                 + 4·m·r with `accumulate` (compressed gradient
                                                 accumulator); 1-D: 4·2·N. Formula only.
    adafactor  b·(N/n + N/m) + 4                 (Shazeer & Stern 2018; torch.optim.Adafactor)
                                                 row and column second-moment factors (for a
                                                 tensor: N/shape[-1] + N/shape[-2]), 0-d fp32
                                                 `step`; 1-D: b·N + 4; + b·N with `momentum`
                                                 (the paper's optional β₁, absent from torch's)
    adamw8bit  2·N + 2·4·⌈N/256⌉                 (Dettmers et al. 2022; bitsandbytes AdamW8bit)
                                                 uint8 moments, fp32 absmax per 256-block, and
                                                 two 256-entry fp32 quantile maps shared by all
                                                 parameters (2,048 bytes once); parameters with
                                                 N < 4096 keep fp32 moments, 2·4·N; `step` is int

Embeddings (the input embedding and the output head, see `params.embedding_params`) get
`embedding_rank` under LoGRA (None: dense) and stay dense under GaLore and APOLLO unless
`project_embeddings`. The 0-d `step` tensors are counted (4 bytes each) so that the total agrees
to the byte with the state a real optimizer holds; pass `include_step=False` for the moments
alone (the report's 2·r·(m+n)·4 bytes per matrix).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
from torch import nn

from logra.memory.params import ParamInfo, is_peft_model, trainable_params, with_lora
from logra.optim import projected_shape, sketch_shapes

OPTIMIZERS = (
    "adamw", "logra", "naive", "lora", "galore", "apollo", "flora", "adafactor", "adamw8bit",
)
STEP_BYTES = 4  # a 0-d fp32 `step` tensor
SHARED = "(shared)"  # key of state shared by all parameters in `state_table`
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def counted_state_bytes(model: nn.Module, optimizer: str, **options) -> int:
    """Bytes of optimizer state for `model`'s trainable parameters; see the module docstring."""
    return sum(state_table(model, optimizer, **options).values())


def state_table(model: nn.Module, optimizer: str, **options) -> dict[str, int]:
    """Bytes of state per parameter name (plus `SHARED` for state common to all parameters)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {list(OPTIMIZERS)}")
    if optimizer == "lora":
        return _lora(model, **_checked(_lora, options))
    rule = _RULES[optimizer]
    return rule(trainable_params(model), **_checked(rule, options))


def as_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """A torch dtype from a dtype or its name ("float32", "bf16", ...); None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def _checked(rule: Callable, options: dict) -> dict:
    valid = [name for name, p in inspect.signature(rule).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown options {unknown} for this optimizer; valid: {valid}")
    for key in ("rank", "embedding_rank", "min_8bit_size", "blocksize"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{key} must be an int >= 1, got {value!r}")
    return options


def _matrix(shape: tuple[int, ...]) -> tuple[int, int]:
    return shape[0], math.prod(shape[1:])


def _adamw(
    params: list[ParamInfo], *, state_dtype: torch.dtype | str | None = None,
    amsgrad: bool = False, include_step: bool = True,
) -> dict[str, int]:
    dtype = as_dtype(state_dtype)
    moments = 3 if amsgrad else 2
    return {p.name: moments * p.numel * (dtype or p.dtype).itemsize + STEP_BYTES * include_step
            for p in params}


def _logra(
    params: list[ParamInfo], *, rank: int = 16, embedding_rank: int | None = 64,
    oversample: int = 0, include_step: bool = True,
) -> dict[str, int]:
    table = {}
    for p in params:
        r = embedding_rank if p.embedding else rank
        shapes = None if r is None else sketch_shapes(p.shape, r, oversample)
        if shapes is None:
            numbers = p.numel
        else:
            (k, n), (m, r_) = shapes
            numbers = k * n + m * r_
        table[p.name] = 2 * 4 * numbers + STEP_BYTES * include_step
    return table


def _naive(params: list[ParamInfo], *, rank: int = 16, include_step: bool = True) -> dict[str, int]:
    return {p.name: 2 * 4 * math.prod(projected_shape(p.shape, rank) or p.shape)
            + STEP_BYTES * include_step for p in params}


def _lora(
    model: nn.Module, *, rank: int | None = None, target_modules: str | list[str] | None = None,
    state_dtype: torch.dtype | str | None = None, include_step: bool = True,
) -> dict[str, int]:
    """AdamW over the adapters: those of a PeftModel, or those peft would add to a plain model."""
    if is_peft_model(model):
        if rank is not None or target_modules is not None:
            raise ValueError("model already has LoRA adapters: rank and target_modules apply "
                             "only to a plain model")
        adapted = model
    else:
        adapted = with_lora(model, rank or 16, target_modules or "all-linear")
    return _adamw(trainable_params(adapted), state_dtype=state_dtype, include_step=include_step)


def _projected_bytes(
    params: list[ParamInfo], project_embeddings: bool, matrix_bytes: Callable[[int, int, int], int],
) -> dict[str, int]:
    """GaLore-style accounting: dense Adam moments (2·b·numel) for every tensor that is not
    projected (1-D, or an embedding unless `project_embeddings`), `matrix_bytes(b, big, small)`
    for each projected matrix (b the dtype's bytes, big ≥ small its sides)."""
    table = {}
    for p in params:
        b = p.dtype.itemsize
        if len(p.shape) < 2 or (p.embedding and not project_embeddings):
            table[p.name] = 2 * b * p.numel
            continue
        m, n = _matrix(p.shape)
        big, small = (m, n) if m >= n else (n, m)
        table[p.name] = matrix_bytes(b, big, small)
    return table


def _galore(
    params: list[ParamInfo], *, rank: int = 16, project_embeddings: bool = False,
) -> dict[str, int]:
    def matrix_bytes(b: int, big: int, small: int) -> int:
        r = min(rank, small)
        return b * r * small + 2 * b * r * big
    return _projected_bytes(params, project_embeddings, matrix_bytes)


def _apollo(
    params: list[ParamInfo], *, rank: int = 16, project_embeddings: bool = False,
    store_projection: bool = True, norm_limiter: bool = True,
) -> dict[str, int]:
    def matrix_bytes(b: int, big: int, small: int) -> int:
        return b * rank * small * store_projection + 2 * b * rank * big + b * norm_limiter
    return _projected_bytes(params, project_embeddings, matrix_bytes)


def _flora(params: list[ParamInfo], *, rank: int = 16, accumulate: bool = False) -> dict[str, int]:
    table = {}
    for p in params:
        if len(p.shape) < 2:
            table[p.name] = 4 * 2 * p.numel
            continue
        m, n = _matrix(p.shape)
        compressed = m * min(rank, n)
        table[p.name] = 4 * (compressed * (1 + accumulate) + m + n)
    return table


def _adafactor(
    params: list[ParamInfo], *, state_dtype: torch.dtype | str | None = None,
    momentum: bool = False, include_step: bool = True,
) -> dict[str, int]:
    dtype = as_dtype(state_dtype)
    table = {}
    for p in params:
        b = (dtype or p.dtype).itemsize
        factored = len(p.shape) >= 2
        numbers = p.numel // p.shape[-1] + p.numel // p.shape[-2] if factored else p.numel
        table[p.name] = b * (numbers + p.numel * momentum) + STEP_BYTES * include_step
    return table


def _adamw8bit(
    params: list[ParamInfo], *, min_8bit_size: int = 4096, blocksize: int = 256,
) -> dict[str, int]:
    table = {}
    for p in params:
        if p.numel >= min_8bit_size:
            table[p.name] = 2 * p.numel + 2 * 4 * -(-p.numel // blocksize)
        else:
            table[p.name] = 2 * 4 * p.numel
    if any(p.numel >= min_8bit_size for p in params):
        table[SHARED] = 2 * 256 * 4
    return table


_RULES: dict[str, Callable[..., dict[str, int]]] = {
    "adamw": _adamw, "logra": _logra, "naive": _naive, "galore": _galore, "apollo": _apollo,
    "flora": _flora, "adafactor": _adafactor, "adamw8bit": _adamw8bit,
}
