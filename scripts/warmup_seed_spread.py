"""The headline GRPO numbers over warm-up seeds: is the warm-up a seed the verdicts survive?

For each warm-up seed, proxy-1m is warmed up with that seed (seed 0 is the shipped build, copied;
the others take about 10 minutes each on two cores), then notebook 04's C7 comparison runs on it
(dense AdamW and LoGRA at seed 0, each at the lr notebook 04's committed sweep chose,
figures/comparison_sweep.csv: 2 runs of 100 steps, about 25 minutes per warm-up seed on two
cores). Writes figures/warmup_seed_spread.{csv,md}: per
warm-up seed, the warm-up's stop step and test accuracy, the policy before RL, AdamW's and
LoGRA's held-out greedy and sampled pass@1, C7's two parts (LoGRA's paired difference to AdamW
per measure and whether it is significantly below; whether dense AdamW improved significantly
on the policy before RL) and its verdict by its own
rule (`comparison_report.c7_claim`); then the mean and the range over warm-up seeds of every number.

    .venv/bin/python scripts/warmup_seed_spread.py --seeds 0 1 2 3   # ~2 h on two cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pandas as pd

from logra.experiments import comparison, comparison_report, report
from logra.models.build import prepare_spec
from logra.models.ladder import get_scale
from logra.paths import results_root

RESULTS_DIR = results_root()


def row(seed: int, scale: str = "proxy-1m", results_dir: Path = RESULTS_DIR) -> dict:
    """Warm up `scale` with warm-up seed `seed`, run the C7 comparison on it at the lrs notebook
    04's committed sweep chose for `scale`, summarise; models and runs go under `results_dir`."""
    spec = get_scale(scale)
    spec = dataclasses.replace(spec, warmup=dataclasses.replace(spec.warmup, seed=seed))
    model = prepare_spec(spec, results_dir / "models" / "warmup-seeds" / f"seed{seed}",
                         progress=False)
    warmup = json.loads((model / "warmup.json").read_text())
    methods = ["adamw", "logra"]
    chosen = comparison.read_chosen(comparison.config("default", models=[scale],
                                                      methods=methods))["lr"]
    cfg = comparison.config("full", models=[str(model)], methods=methods, seeds=[0],
                            lr_grid={m: [chosen[(scale, m)]] for m in methods},
                            results_dir=str(results_dir))
    runs, problems = comparison.run(cfg)
    return summarise(seed, warmup, comparison_report.c7_pairs(runs, problems, cfg),
                     comparison_report.c7_claim(runs, problems, cfg).verdict)


def summarise(seed: int, warmup: dict, pairs: pd.DataFrame, verdict: str) -> dict:
    """One warm-up seed's row: its warm-up (`warmup.json`), C7's pairs
    (`comparison_report.c7_pairs`, one model) and verdict, split into C7's two parts: LoGRA's
    difference to AdamW on each measure with "matches" (k/n measures), and whether dense AdamW
    learned over the policy before RL (without which "reproduced" is capped at "partly")."""
    values = {"warm-up seed": seed, "warm-up steps": warmup["warmup_steps"],
              "warm-up test gsm-synth, %": 100 * warmup["test_accuracy"]["gsm-synth"]}
    for pair in pairs.itertuples():
        for method in ("base", "adamw", "logra"):
            values[f"{method} {pair.measure}, %"] = getattr(pair, method)
    for pair in pairs.itertuples():
        values[f"LoGRA − AdamW {pair.measure}, pts"] = pair.difference
    values["LoGRA matches AdamW"] = f"{int(pairs['matches'].sum())}/{len(pairs)}"
    values["AdamW above base"] = "yes" if pairs["adamw_learned"].any() else "no"
    values["C7 verdict"] = verdict
    return values


def spread_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-seed rows, then the mean and the range (max − min) of every number over the
    warm-up seeds, and for each verdict-like column "same" or "differs"."""
    words = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    numbers = frame.drop(columns=["warm-up seed", *words])
    agree = {c: "same" if frame[c].nunique() == 1 else "differs" for c in words}
    mean = {"warm-up seed": "mean", **numbers.mean().round(1).to_dict(), **dict.fromkeys(words, "")}
    spread = {"warm-up seed": "range", **(numbers.max() - numbers.min()).round(1).to_dict(),
              **agree}
    return pd.concat([frame.round(1).astype(object), pd.DataFrame([mean, spread])],
                     ignore_index=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--scale", default="proxy-1m")
    args = parser.parse_args(argv)
    frame = spread_rows(pd.DataFrame([row(seed, args.scale) for seed in args.seeds]))
    report.save_table(frame, "warmup_seed_spread")
    print(report.to_markdown(frame))


if __name__ == "__main__":
    main()
