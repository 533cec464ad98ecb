"""LoGRA's update rules on the GRPO proxy (issue 13: measure the momentum rules there too).

The runs are the uncontrolled LoGRA arm of notebook 09's δ sweep (proxy-1m, gsm-synth, 2 prompts
× 4 completions, lr 1e-4, 200 steps, greedy accuracy on 5,000 held-out problems, seeds 0-2), with
`reconstruction` set to each rule; the gain runs are notebook 09's own (cached, not rerun). The
KL control is off, so the rules are compared as they step.

Writes figures/grpo_rules.{csv,md}: per rule, the seed mean and range of the final KL to the
reference (mean of the last 10 steps), the reward over the last 10 steps, and the held-out
accuracy after the last step. Accuracy on 5,000 problems moves about ±0.7 points by where a
policy's flipped answers land (figures/grpo_proxy_1m_seeds.md): a difference inside the seeds'
ranges is no difference.

    .venv/bin/python scripts/grpo_rules.py        # ~20 min on two cores with the gain runs cached
"""

from __future__ import annotations

import argparse

import pandas as pd

from logra.experiments import kl_control as kc
from logra.experiments import report
from logra.experiments.grpo_runs import grpo_job, prepare_inputs
from logra.experiments.jobs import run_jobs

RULES = ("gain", "nystrom", "blend", "subspace", "channel")
LAST = 10  # steps averaged for the final KL and reward


def summary(frames: dict[tuple[str, int], pd.DataFrame]) -> pd.DataFrame:
    """One row per rule: mean and range over seeds of final KL, reward and accuracy."""
    rows = []
    for (rule, seed), records in frames.items():
        train = records[records["step"] >= 1]
        evals = records[records["eval_accuracy"].notna()]
        rows.append(dict(rule=rule, seed=seed, final_kl=train["kl"].tail(LAST).mean(),
                         reward=train["reward"].tail(LAST).mean(),
                         accuracy=100 * float(evals["eval_accuracy"].iloc[-1]),
                         start=100 * float(evals["eval_accuracy"].iloc[0])))
    per_run = pd.DataFrame(rows)
    table = per_run.groupby("rule", sort=False).agg(
        seeds=("seed", "count"), final_kl=("final_kl", "mean"),
        kl_min=("final_kl", "min"), kl_max=("final_kl", "max"), reward=("reward", "mean"),
        accuracy=("accuracy", "mean"), acc_min=("accuracy", "min"),
        acc_max=("accuracy", "max"), start=("start", "mean")).reset_index()
    return table.rename(columns={
        "final_kl": "final KL (mean)", "kl_min": "KL min", "kl_max": "KL max",
        "reward": "reward (last 10)", "accuracy": "accuracy % (mean)", "acc_min": "acc. min",
        "acc_max": "acc. max", "start": "accuracy % at step 0"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="default", help="notebook 09's scale")
    parser.add_argument("--figures-dir", default=str(report.FIGURES_DIR))
    args = parser.parse_args()
    cfg = kc.config(args.scale)
    runs = {(rule, seed): kc.Run("sweep", "logra", None, cfg["lr"], seed, "",
                                 (("reconstruction", rule),))
            for rule in RULES for seed in cfg["seeds"]}
    configs = {key: kc.grpo_config(cfg, run) for key, run in runs.items()}
    first = next(iter(configs.values()))
    prepare_inputs(cfg, [first["model"]], [first["task"]])
    results = run_jobs([(grpo_job, (c,)) for c in configs.values()], cfg["workers"],
                       "grpo rules")
    table = summary(dict(zip(configs, results, strict=True)))
    report.save_table(table.round(4), "grpo_rules", args.figures_dir)
    print(report.to_markdown(table))


if __name__ == "__main__":
    main()
