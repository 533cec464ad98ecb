"""LoGRA's update rules on the GRPO proxy (issue 13: measure the momentum rules there too).

The runs are notebook 09's uncontrolled LoGRA arm (`logra-nokl`: the KL control off, so the
rules are compared as they step) at one of its lrs, with `reconstruction` set to each rule of
the registry (`logra.optim.rules`), planned with the runs every RL notebook shares
(`grpo_runs.Run`): notebook 09's GRPO keys (proxy-1m, gsm-synth, 8 prompts × 16 completions,
100 steps, greedy pass@1 on 5,000 held-out problems and sampled on 2,000 × 4). The gain runs
are notebook 09's own (cached, not rerun).

Writes figures/grpo_rules.{csv,md}: per rule, the seed mean and range of the final KL to the
reference (mean of the last 10 steps), the reward over the last 10 steps, and the held-out
greedy accuracy after the last step. Accuracy on 5,000 problems moves about ±0.7 points by
where a policy's flipped answers land (figures/grpo_proxy_1m_seeds.md): a difference inside the
seeds' ranges is no difference.

The committed table is older: it was measured by this script as of 06edfbb in the earlier
regime (2 prompts × 4 completions, lr 1e-4, 200 steps), where no method learned (gain 36.0 % →
36.6 %), so it shows how far each rule drifts, not how it trains. Rerunning it here costs about
20 min per run on two cores (5 rules × 3 seeds, less notebook 09's cached gain run).

    .venv/bin/python scripts/grpo_rules.py                 # lr 3e-4, seeds 0-2
    .venv/bin/python scripts/grpo_rules.py --lr 1e-3       # notebook 09's other uncontrolled lr
"""

from __future__ import annotations

import argparse

import pandas as pd

from logra.experiments import kl_control as kc
from logra.experiments import report
from logra.experiments.grpo_runs import Run, grpo_job, prepare_inputs
from logra.experiments.jobs import run_jobs
from logra.optim.rules import RULES

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


def plan(cfg: kc.Config, lr: float, seeds: list[int]) -> dict[tuple[str, int], Run]:
    """The run of each registered rule at each seed: notebook 09's uncontrolled LoGRA at `lr`."""
    return {(rule, seed): Run(study="frontier", method="logra-nokl", lr=lr, seed=seed,
                              eval_every=cfg.steps, keys=(("reconstruction", rule),))
            for rule in RULES for seed in seeds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="default", help="notebook 09's scale")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--figures-dir", default=str(report.FIGURES_DIR))
    args = parser.parse_args()
    cfg = kc.config(args.scale)
    configs = {key: kc.grpo_config(cfg, run)
               for key, run in plan(cfg, args.lr, args.seeds).items()}
    first = next(iter(configs.values()))
    prepare_inputs(cfg.results_dir, [first.model], [first.task])
    results = run_jobs([(grpo_job, (c,)) for c in configs.values()], cfg.workers,
                       "grpo rules")
    table = summary(dict(zip(configs, results, strict=True)))
    report.save_table(table.round(4), "grpo_rules", args.figures_dir)
    print(report.to_markdown(table))


if __name__ == "__main__":
    main()
