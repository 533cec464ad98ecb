"""Every GPU check of the optimizer step in one run (under 10 minutes on one H100/H200).

    python scripts/gpu_checks.py --out results/gpu_checks            # on a CUDA GPU
    python scripts/gpu_checks.py --device cpu --tiny --out /tmp/c    # the same code, seconds

Sections, each writing NAME.csv and NAME.md under --out (a failing section writes its
traceback to NAME.error and the others still run; the exit status is then 1):

    benchmark    the optimizer-cost benchmark (`logra.experiments.optimizer_cost`) with bf16
                 parameters: a 4096×4096 matrix, a Qwen2.5-1.5B decoder layer, proxy-16m and
                 proxy-1m; ratios to AdamW foreach and fused, the control's cost per estimator,
                 and on CUDA allocated and step-peak memory beside the accountant's prediction
    projections  regenerating LoGRA's projections every step against caching them
    syncs        host synchronizations inside LoGRA's step, counted by
                 `torch.cuda.set_sync_debug_mode("warn")` (CUDA only; NaN on the CPU)
    memory       `scripts/gpu_memory_check.py`: peak memory of an RL-shaped step of a randomly
                 initialised Qwen2.5-1.5B against `logra.memory`'s prediction
    jvp          the JVP probe's cost on a Qwen2.5-1.5B-shaped random model of a few layers,
                 against a forward and a forward + backward on the same batch
    grpo         a few GRPO steps of proxy-1m (`logra.rl`) with AdamW and LoGRA: seconds/step
    compiled     LoGRA with the KL control on a `torch.compile`d causal LM (a small random Qwen2)
                 against the same model eager: the probe runs, the step clips, seconds/step

`--tiny` shrinks every size (a 256² matrix, the smoke proxy, a two-layer 64-wide Qwen2) so that
the tests run the whole script on the CPU in seconds; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

# this checkout's logra and gpu_memory_check, whatever `logra` is installed from
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from logra.experiments import optimizer_cost as oc  # noqa: E402
from logra.experiments.report import save_table  # noqa: E402
from logra.optim.kl import predicted_kl_jvp  # noqa: E402

SECTIONS = ("benchmark", "projections", "syncs", "memory", "jvp", "grpo", "compiled")
TINY_QWEN = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory the tables are written to")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--tiny", action="store_true", help="every size tiny (the tests)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run these sections only")
    args = parser.parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA GPU here (use --device cpu --tiny)")
    return args


# ---------------------------------------------------------------- sections


def benchmark(args: argparse.Namespace) -> pd.DataFrame:
    cases = (["square-256", "smoke"] if args.tiny
             else ["square-4096", "qwen2.5-1.5b-layer", "proxy-16m", "proxy-1m"])
    cfg = oc.config("default", device=args.device, dtype="bfloat16", cases=cases,
                    sweep_sizes=[], table_cases=cases, logra_ranks=[16],
                    rounds=2 if args.tiny else 9, warmup_rounds=1 if args.tiny else 3,
                    kl_batch=[2, 16] if args.tiny else [8, 256],
                    optimizers=["adamw", "adamw-fused", "logra"] if args.tiny else [])
    frame = oc.run(cfg)
    return oc.ratio_table(frame, cases)


def projections(args: argparse.Namespace) -> pd.DataFrame:
    cases = (["square-256", "smoke"] if args.tiny
             else ["square-4096", "qwen2.5-1.5b-layer", "proxy-16m", "proxy-1m"])
    cfg = oc.config("default", device=args.device, dtype="bfloat16")
    return pd.DataFrame([oc.projection_cost(case, 16, cfg) for case in cases])


NOTICE = "is a prototype feature"  # torch's notice when the sync debug mode is switched on
EXPECTED_SYNCS = {"none": 0, "diag": 1}  # LoGRA.step's promise: none without the control, one with


def syncs(args: argparse.Namespace) -> pd.DataFrame:
    """Synchronizing CUDA calls per LoGRA step (after a first step), control off and on; fails
    when a step makes more than `EXPECTED_SYNCS` (the CPU tests cannot see syncs inside kernels)."""
    case = "smoke" if args.tiny else "proxy-16m"
    rows = []
    for estimator, expected in EXPECTED_SYNCS.items():
        model = oc.build_case(case, args.device, "bfloat16")
        optimizer = oc.logra_with_control(model, 1e-4, 16, estimator, [])
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        optimizer.step()
        calls, where = _synchronizing_calls(optimizer.step, args.device)
        rows.append(dict(case=case, control=estimator, expected=expected,
                         synchronizing_calls=calls, where=where))
    frame = pd.DataFrame(rows)
    over = frame[frame["synchronizing_calls"] > frame["expected"]]  # NaN off CUDA: never
    if len(over):
        raise RuntimeError(f"LoGRA's step synchronized more than it promises:\n{over}")
    return frame


def _synchronizing_calls(fn: Callable[[], object], device: str) -> tuple[float, str]:
    """How many synchronizing CUDA calls `fn` makes (NaN off CUDA: nothing to count), and the
    lines of Python that made them (file:line, "; "-joined)."""
    if torch.device(device).type != "cuda":
        fn()
        return float("nan"), ""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # torch's own notice on entering the mode ("Synchronization debug mode is a prototype
    # feature and does not yet detect all synchronizing operations") is not a synchronization
    syncs = [w for w in caught if "synchronizing" in str(w.message)
             and NOTICE not in str(w.message)]
    return float(len(syncs)), "; ".join(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)


def memory(args: argparse.Namespace) -> pd.DataFrame:
    import gpu_memory_check as gmc

    argv = ["--rollouts", "2", "--prompt", "8", "--response", "8", "--micro-batch", "2",
            "--rank", "4", "--embedding-rank", "8"] if args.tiny else []
    check_args = gmc.parse_args(argv)
    config = gmc.policy_config()
    if args.tiny:
        for key, value in TINY_QWEN.items():
            setattr(config, key, value)
    rows = gmc.check(check_args, config, torch.device(args.device))
    frame = pd.DataFrame(rows, columns=["optimizer", "phase", "measured_gib", "predicted_gib"])
    frame["measured_over_predicted"] = frame["measured_gib"] / frame["predicted_gib"]
    return frame


def jvp(args: argparse.Namespace) -> pd.DataFrame:
    """Median seconds of a forward, a forward + backward and the JVP probe (½ΔᵀFΔ) on one batch
    of a Qwen2.5-1.5B-shaped random model (4 of its 28 layers; bf16), and their ratios."""
    from transformers import AutoModelForCausalLM

    from logra.memory import architecture

    config = architecture("qwen2.5-1.5b").config()
    config.num_hidden_layers = 4
    if args.tiny:
        for key, value in TINY_QWEN.items():
            setattr(config, key, value)
    device = torch.device(args.device)
    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                 attn_implementation="sdpa")
    sequences, tokens = (2, 16) if args.tiny else (4, 512)
    ids = torch.randint(1, config.vocab_size, (sequences, tokens), device=device)
    delta = {name: torch.randn_like(p) * 1e-4 for name, p in model.named_parameters()}

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids)

    def forward_backward() -> None:
        model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)

    def probe() -> None:
        predicted_kl_jvp(model, delta, kwargs={"input_ids": ids})

    rows = []
    for name, fn in (("forward", forward), ("forward+backward", forward_backward),
                     ("jvp probe", probe)):
        fn()  # warm-up
        seconds = statistics.median(oc.timed(fn, device) for _ in range(3))
        rows.append({"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                     "batch": f"{sequences}x{tokens}", "pass": name, "ms": 1e3 * seconds})
    frame = pd.DataFrame(rows)
    backward = frame.set_index("pass").loc["forward+backward", "ms"]
    frame["over_forward_backward"] = frame["ms"] / backward
    return frame


def grpo(args: argparse.Namespace) -> pd.DataFrame:
    """Seconds per GRPO step of proxy-1m (smoke with --tiny) with AdamW, LoGRA (control off)
    and LoGRA with the default calibrated control."""
    from logra.models import prepare
    from logra.rl import config as rl_config
    from logra.rl import runner

    out = Path(args.out) / "grpo"
    scale = "smoke" if args.tiny else "default"
    model = prepare("smoke" if args.tiny else "proxy-1m", root=out / "models",
                    data_dir=out / "data", progress=False)
    steps = 2 if args.tiny else 4
    rows = []
    for name, options in (("adamw", dict(optimizer="adamw")),
                          ("logra-none", dict(optimizer="logra", predicted_kl_threshold=None)),
                          ("logra-calibrated", dict(optimizer="logra"))):
        config = rl_config.resolve(
            scale=scale, model=str(model), data_dir=str(out / "data"),
            results_dir=str(out / "runs"), run_name=name, device=args.device, steps=steps,
            eval_every=steps, eval_prompts=8, eval_batch_size=8, checkpoint_every=steps,
            **options)
        records = runner.run_grpo(config, progress=False)
        timed = records[records["step"] > 1]  # the first step compiles and allocates
        rows.append(dict(optimizer=name, steps=steps, seconds_per_step=timed["seconds"].median(),
                         reward=records["reward"].iloc[-1]))
    frame = pd.DataFrame(rows)
    frame["ratio_to_adamw"] = frame["seconds_per_step"] / rows[0]["seconds_per_step"]
    return frame


def compiled(args: argparse.Namespace) -> pd.DataFrame:
    """LoGRA with the KL control (δ small enough to clip every step) on a small random Qwen2,
    eager and under `torch.compile`, `attach`ed to the module the loop calls: per step whether
    the JVP probe ran, γ, the KL the step was allowed, and its seconds (the first compiled step
    compiles). Fails when a compiled step is not probed or not clipped."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from logra import LoGRA

    device = torch.device(args.device)
    sizes = TINY_QWEN if args.tiny else dict(hidden_size=512, intermediate_size=1408,
                                               num_hidden_layers=4, num_attention_heads=8,
                                               num_key_value_heads=2, vocab_size=32000)
    batch = (2, 16) if args.tiny else (8, 256)
    rows = []
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        torch._dynamo.reset()
        model = AutoModelForCausalLM.from_config(Qwen2Config(**sizes)).to(device)
        called = torch.compile(model) if mode == "compiled" else model
        optimizer = LoGRA(model.parameters(), lr=1e-3, rank=8, predicted_kl_threshold=1e-6)
        optimizer.attach(called)
        for step in range(4):
            ids = torch.randint(1, sizes["vocab_size"], batch, device=device,
                                generator=torch.Generator(device).manual_seed(step))
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            called(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            last = optimizer.last_step
            rows.append(dict(mode=mode, step=step + 1, probed=bool(last["kl_probed"]),
                             gamma=float(last["gamma"]), clipped=bool(last["clipped"]),
                             applied_kl=float(last["applied_kl"]),
                             seconds=time.perf_counter() - start))
    frame = pd.DataFrame(rows)
    steps = frame[frame["mode"] == "compiled"]
    if not steps["clipped"].all() or not steps["probed"].any():
        raise RuntimeError(f"the control did not act on the compiled model:\n{frame}")
    return frame


# ---------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1 if args.tiny else torch.get_num_threads())
    device = torch.device(args.device)
    environment = (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    summary = [f"# GPU checks on {environment}, torch {torch.__version__}"
               f"{' (tiny sizes: the numbers mean nothing)' if args.tiny else ''}", ""]
    failed = []
    for name in args.only:
        start = time.perf_counter()
        try:
            frame = globals()[name](args)
        except Exception:  # one section's failure must not lose the others' measurements
            (out / f"{name}.error").write_text(traceback.format_exc())
            failed.append(name)
            summary.append(f"- {name}: FAILED ({name}.error)")
            print(traceback.format_exc(), file=sys.stderr)
            continue
        save_table(frame, name, out)
        summary.append(f"- {name}: {time.perf_counter() - start:.0f} s ({name}.md)")
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
