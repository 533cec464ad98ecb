"""`prepare` builds a proxy (or validates a hub scale); `load_policy` loads any scale.

A built proxy is a directory in Hugging Face format — `config.json`, weights, `tokenizer.json` —
plus `build_config.json` (everything that defines it; its hash decides whether to rebuild) and
`warmup.json` (steps, time, accuracies). It is saved into a temporary directory and renamed into
place, so `results/models/<scale>/` is either absent, the previous build, or the complete new one.

The kit ships the proxy-1m build every committed figure was made from (`shipped/`, package
data): a warm-up of 1,200 steps lands elsewhere on a CPU of another kind (floating point; see
`logra.models.determinism`), so `prepare` copies the shipped build when its config is current,
and warms up from scratch only when asked (`force=True`) or when the config changed.
`logra.models.rebuild` says whether a rebuild lands within the stated tolerance of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path

import datasets
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from logra import io
from logra.data import load_task, to_prompts, to_sft
from logra.data.registry import PROXY_TEMPLATE, SYNTH_TASKS
from logra.data.tasks import synth_key
from logra.models.evaluate import evaluate_greedy
from logra.models.ladder import SCALES, ScaleSpec, get_scale
from logra.models.tokenizer import ALPHABET, SPECIAL_TOKENS, char_tokenizer
from logra.models.warmup import warm_up
from logra.paths import results_root

MODELS_DIR = results_root() / "models"
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"  # builds that come with the package
BUILD_FORMAT = 1  # bump when the build procedure changes in a way the specs do not show


def build_config(spec: ScaleSpec) -> dict:
    """Everything that defines a proxy: architecture, warm-up, tokenizer, data, template."""
    warmup = asdict(spec.warmup)
    del warmup["threads"]  # how fast, not what
    return {
        "format": BUILD_FORMAT,
        "scale": spec.name,
        "architecture": asdict(spec.arch),
        "warmup": warmup,
        "tokenizer": {
            "alphabet": ALPHABET,
            "special": list(SPECIAL_TOKENS),
        },
        "data": {"tasks": list(SYNTH_TASKS), "key": synth_key(), "template": PROXY_TEMPLATE},
    }


def config_hash(config: dict) -> str:
    """A short stable hash of a build config (canonical JSON)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def is_current(directory: Path, config: dict) -> bool:
    """Whether `directory` holds a complete build of exactly `config`."""
    saved = directory / "build_config.json"
    if not saved.exists():
        return False
    return config_hash(json.loads(saved.read_text())) == config_hash(config)


def prepare(
    scale: str,
    root: str | Path = MODELS_DIR,
    force: bool = False,
    data_dir: str | Path | None = None,
    progress: bool = True,
    threads: int | None = None,
) -> Path | str:
    """The directory of proxy `scale` under `root`, built first unless a current build is there.

    A current build is the one at `root/scale`, else the shipped one (`SHIPPED_DIR`), which is
    copied there. `force=True` warms up from scratch whatever is there or shipped.
    For a hub scale (1.5b, 7b, 27b) this only validates the name and returns the hub id; nothing
    is downloaded. `data_dir` is where the generated tasks are cached (default results/data).
    `threads`: torch CPU threads of the warm-up (default: the scale's); how fast, not what, so
    it is outside the build hash (more threads may change the weights at round-off).
    """
    spec = get_scale(scale)
    if not spec.is_proxy:
        _check_threads(threads)
        return spec.hub_id
    return prepare_spec(spec, root, force, data_dir, progress, threads)


def prepare_spec(
    spec: ScaleSpec,
    root: str | Path = MODELS_DIR,
    force: bool = False,
    data_dir: str | Path | None = None,
    progress: bool = True,
    threads: int | None = None,
) -> Path:
    """`prepare` for a proxy given by its spec (e.g. the ladder's with another warm-up seed)."""
    _check_threads(threads)
    if not spec.is_proxy:
        raise ValueError(f"{spec.name} is a hub model ({spec.hub_id}), not a proxy to build")
    scale = spec.name
    target = Path(root) / scale
    config = build_config(spec)
    if not force and is_current(target, config):
        return target
    if not force and is_current(SHIPPED_DIR / scale, config):
        _install(lambda tmp: shutil.copytree(SHIPPED_DIR / scale, tmp, dirs_exist_ok=True),
                 target)
        return target
    before = torch.get_num_threads()
    torch.set_num_threads(threads or spec.warmup.threads)
    try:
        _build(spec, config, target, data_dir, progress)
    finally:
        torch.set_num_threads(before)
    return target


def _check_threads(threads: int | None) -> None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be an integer >= 1 or None, got {threads!r}")


def warmup_data(
    spec: ScaleSpec, data_dir: str | Path | None = None
) -> tuple[dict[str, datasets.Dataset], datasets.Dataset]:
    """The warm-up's SFT sets (task -> prompt/completion) and its held-out stop-check prompts.

    The last `eval_examples` rows of gsm-synth's train split are held out for the stop check.
    """
    w = spec.warmup
    raw = {task: load_task(task, "train", data_dir) for task in SYNTH_TASKS}
    kept = len(raw["gsm-synth"]) - w.eval_examples
    valid = to_prompts(raw["gsm-synth"].select(range(kept, kept + w.eval_examples)), "gsm-synth")
    raw["gsm-synth"] = raw["gsm-synth"].select(range(kept))
    return {task: to_sft(data, task) for task, data in raw.items()}, valid


def initial_policy(spec: ScaleSpec) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerBase]:
    """The proxy before its warm-up: weights drawn under `torch.manual_seed(warmup.seed)`."""
    tokenizer = char_tokenizer()
    torch.manual_seed(spec.warmup.seed)
    return Qwen2ForCausalLM(qwen2_config(spec, tokenizer)), tokenizer


def _build(
    spec: ScaleSpec, config: dict, target: Path, data_dir: str | Path | None, progress: bool
) -> None:
    """Warm up a fresh proxy, evaluate it on both test splits, save it atomically at `target`."""
    w = spec.warmup
    train, valid = warmup_data(spec, data_dir)
    model, tokenizer = initial_policy(spec)
    checkpoint = target.parent / f".{spec.name}.warmup" / "checkpoint.pt"
    result = warm_up(model, tokenizer, w, train, valid, checkpoint, config_hash(config), progress)
    accuracy = {}
    for task in SYNTH_TASKS:
        test = load_task(task, "test", data_dir)
        if w.test_examples is not None:
            test = test.select(range(min(w.test_examples, len(test))))
        accuracy[task] = evaluate_greedy(
            model, tokenizer, to_prompts(test, task), w.max_new_tokens, w.eval_batch_size
        )
    report = {
        "scale": spec.name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "warmup_steps": result.steps,
        "warmup_seconds": round(result.seconds, 1),
        "stopped_early": result.stopped_early,
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "test_accuracy": accuracy,
        "history": result.history,
    }
    if w.band is not None and not w.band[0] <= accuracy["gsm-synth"] <= w.band[1]:
        warnings.warn(
            f"{spec.name}: greedy gsm-synth test accuracy {accuracy['gsm-synth']:.3f} is outside "
            f"the band {w.band}; adjust its Warmup in logra/models/ladder.py",
            stacklevel=3,
        )
    _save(model, tokenizer, config, report, target)
    shutil.rmtree(checkpoint.parent, ignore_errors=True)


def qwen2_config(spec: ScaleSpec, tokenizer: PreTrainedTokenizerBase) -> Qwen2Config:
    """The Qwen2Config of a proxy: its architecture over the tokenizer's vocabulary."""
    heads = spec.arch.num_attention_heads
    return Qwen2Config(
        vocab_size=len(tokenizer),
        num_key_value_heads=heads,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **asdict(spec.arch),
    )


def _save(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: dict,
    report: dict,
    target: Path,
) -> None:
    """Save the model, tokenizer, report and config at `target`, atomically (`_install`)."""

    def write(tmp: Path) -> None:
        with _without_progress_bars():
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        io.write_json(tmp / "warmup.json", report)
        io.write_json(tmp / "build_config.json", config)

    _install(write, target)


def _install(fill: Callable[[Path], object], target: Path) -> None:
    """Fill a temporary sibling of `target` with `fill(tmp)`, then swap it into place by renames."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the build is a shared result
    try:
        fill(tmp)
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_policy(
    scale_or_path: str,
    dtype: torch.dtype = torch.float32,
    root: str | Path = MODELS_DIR,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model and tokenizer through `from_pretrained`, from a scale name, a directory or a hub id.

    A proxy scale resolves to `root/<scale>`, which must have been built by
    `logra-repro prepare --scale <scale>`; a hub scale resolves to its hub id. A local directory
    loads without transformers' "Loading weights" bar (one per load, dozens in a notebook); a
    hub id keeps its download bars.
    """
    source = _resolve(scale_or_path, Path(root))
    with _without_progress_bars() if Path(source).is_dir() else nullcontext():
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@contextmanager
def _without_progress_bars() -> Iterator[None]:
    """Transformers' (and the hub's) progress bars off inside, restored after."""
    enabled = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers.utils.logging.enable_progress_bar()


def _resolve(scale_or_path: str, root: Path) -> str:
    """A directory or hub id for `from_pretrained`."""
    if scale_or_path in SCALES:
        spec = SCALES[scale_or_path]
        if not spec.is_proxy:
            return spec.hub_id
        directory = root / scale_or_path
        if not (directory / "config.json").exists():
            raise FileNotFoundError(
                f"proxy {scale_or_path!r} is not built at {directory}; run "
                f"`logra-repro prepare --scale {scale_or_path}` first"
            )
        return str(directory)
    if Path(scale_or_path).is_dir():
        return scale_or_path
    if scale_or_path.count("/") == 1 and not scale_or_path.startswith((".", "/")):
        return scale_or_path  # a hub id such as Qwen/Qwen2.5-1.5B-Instruct
    raise ValueError(
        f"{scale_or_path!r} is not a scale ({list(SCALES)}), an existing directory, "
        "or a hub id of the form org/name"
    )
