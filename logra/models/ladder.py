"""The scale ladder: `smoke`, CPU proxies trained here, and the reported hub models.

A proxy is a Qwen2-architecture model trained from scratch by supervised warm-up (see
`logra.models.warmup`) on a mixture of gsm-synth and math-synth, so one policy can be evaluated
on both. Its `ProxyArchitecture` and `Warmup` fully define it: they are what `build_config.json`
hashes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProxyArchitecture:
    """Qwen2Config fields of a proxy (the vocabulary comes from the tokenizer)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    tie_word_embeddings: bool = True


@dataclass(frozen=True)
class Warmup:
    """Supervised warm-up: train until greedy gsm-synth accuracy on held-out rows reaches
    `stop_accuracy` (checked every `eval_every` steps) or `max_steps` run out.

    `band` is where the final greedy gsm-synth test accuracy should land for RL to have room;
    landing outside it warns. `threads` is an execution setting, not part of the build hash.
    """

    max_steps: int
    batch_size: int = 32
    lr: float = 3e-3
    lr_warmup_steps: int = 50
    weight_decay: float = 0.01
    math_fraction: float = 0.5  # share of steps that train on math-synth (the rest: gsm-synth)
    eval_every: int = 100
    eval_examples: int = 200  # held-out gsm-synth train rows used for the stop check
    stop_accuracy: float | None = 0.35
    band: tuple[float, float] | None = (0.15, 0.60)
    test_examples: int | None = None  # rows of each test split in the final report; None = all
    max_new_tokens: int = 48
    eval_batch_size: int = 100
    checkpoint_every: int = 100
    seed: int = 0
    threads: int = 1


@dataclass(frozen=True)
class ScaleSpec:
    """One rung of the ladder: a proxy built here (`arch`, `warmup`) or a hub model (`hub_id`)."""

    name: str
    description: str
    hub_id: str | None = None
    arch: ProxyArchitecture | None = None
    warmup: Warmup | None = None

    @property
    def is_proxy(self) -> bool:
        return self.hub_id is None


SCALES: dict[str, ScaleSpec] = {
    spec.name: spec
    for spec in (
        ScaleSpec(
            "smoke",
            "tiny Qwen2 (24k parameters), seconds of warm-up, accuracy ~0; for the tests",
            arch=ProxyArchitecture(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64),
            warmup=Warmup(max_steps=20, batch_size=8, lr_warmup_steps=5, eval_every=10,
                          eval_examples=8, stop_accuracy=None, band=None, test_examples=16,
                          max_new_tokens=24, eval_batch_size=16, checkpoint_every=10),
        ),
        ScaleSpec(
            "proxy-1m",
            "Qwen2, 1.06M parameters (4 layers × 128), character vocabulary; minutes on a core",
            arch=ProxyArchitecture(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                                   intermediate_size=512),
            warmup=Warmup(max_steps=2000),
        ),
        ScaleSpec(
            "proxy-4m",
            "Qwen2, 4.22M parameters (4 layers × 256), character vocabulary",
            arch=ProxyArchitecture(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                   intermediate_size=1024),
            warmup=Warmup(max_steps=3000, lr=2e-3),
        ),
        ScaleSpec(
            "proxy-16m",
            "Qwen2, 16.8M parameters (4 layers × 512), character vocabulary; built on request",
            arch=ProxyArchitecture(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                                   intermediate_size=2048),
            warmup=Warmup(max_steps=3000, lr=1e-3),
        ),
        ScaleSpec("1.5b", "the reported 1.5B scale", hub_id="Qwen/Qwen2.5-1.5B-Instruct"),
        ScaleSpec("7b", "the reported 7B scale", hub_id="Qwen/Qwen2.5-7B-Instruct"),
        ScaleSpec("27b", "the reported 27B scale", hub_id="google/gemma-3-27b-it"),
    )
}


def get_scale(name: str) -> ScaleSpec:
    """The spec of scale `name`; ValueError naming the valid scales otherwise."""
    if name not in SCALES:
        raise ValueError(f"unknown scale {name!r}; valid scales: {list(SCALES)}")
    return SCALES[name]
