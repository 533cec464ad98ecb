"""Issue 4's acceptance run: GRPO on the proxy-1m policy with each optimizer, and dense AdamW
over three seeds against the warm-up policy's held-out greedy accuracy.

Every run is `logra-repro run experiments/grpo.yaml` at the default scale (proxy-1m, gsm-synth,
8 prompts × 8 completions, 48 new tokens, lr 1e-4, β = 0, one torch thread) for 200 steps,
evaluated greedily on the first 500 test problems every 50 steps. Runs are cached under
results/runs/<name>/ and resumed, so rerunning this script only computes what is missing
(from nothing: about 1.5 hours on one core; LoGRA with the JVP estimator is the slowest).

Writes (for proxy-1m) figures/grpo_proxy_1m.{csv,md}: accuracy and KL to the reference at each
evaluation, per run; figures/grpo_proxy_1m_seeds.{csv,md}: dense AdamW's seeds (mean, spread
and gain over the warm-up policy, with the verdict of the rule below); and
figures/grpo_proxy_1m_paired.{csv,md}: each final policy against the warm-up policy, problem by
problem.

Rule: GRPO "raises accuracy beyond the seed spread" at a step when the seed mean's gain over the
warm-up policy is larger than the seeds' range (max − min) there.

Both policies answer the same 500 problems, so the paired test says more than the accuracies:
of the problems on which they disagree, `gained` flipped to correct and `lost` to wrong; p is
the exact two-sided sign test of gained vs lost (McNemar's exact test).

    python scripts/grpo_proxy_report.py                   # proxy-1m
    python scripts/grpo_proxy_report.py --model proxy-4m  # builds proxy-4m first if needed
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

from logra import rl
from logra.data.grading import reward
from logra.experiments import report
from logra.models import greedy_completions, prepare
from logra.rl import resolve, run_dir, run_grpo
from logra.rl.runner import CHECKPOINT_FILE, Trainer

STEPS = 200
# run name suffix -> overrides of experiments/grpo.yaml (default scale)
METHODS: dict[str, dict[str, object]] = {
    "adamw-s0": dict(optimizer="adamw", seed=0),
    "adamw-s1": dict(optimizer="adamw", seed=1),
    "adamw-s2": dict(optimizer="adamw", seed=2),
    "lora": dict(optimizer="lora"),
    "logra-kl0.02": dict(optimizer="logra", predicted_kl_threshold=0.02),
    "logra-nokl": dict(optimizer="logra", predicted_kl_threshold=None),
    "naive": dict(optimizer="naive"),
}
ADAMW_SEEDS = ("adamw-s0", "adamw-s1", "adamw-s2")


def configs(model: str) -> dict[str, dict[str, object]]:
    """Run name ("proxy1m-adamw-s0", ...) -> its resolved config, for every method."""
    prefix = model.replace("-", "")
    return {f"{prefix}-{suffix}": resolve("experiments/grpo.yaml", "default", model=model,
                                          run_name=f"{prefix}-{suffix}", steps=STEPS, **overrides)
            for suffix, overrides in METHODS.items()}


def run_all(runs: dict[str, dict[str, object]]) -> dict[str, pd.DataFrame]:
    """Each run's per-step records (computed, resumed or read from the cache)."""
    return {name: run_grpo(config, progress=True) for name, config in runs.items()}


def correct_answers(config: dict[str, object], trained: bool) -> list[bool]:
    """Per held-out problem: does the run's final policy (or, untrained, the warm-up policy)
    answer it correctly, greedily? The policy is rebuilt exactly as the run built it."""
    trainer = Trainer(config, progress=False)
    if trained:
        trainer.load(run_dir(config) / CHECKPOINT_FILE)
    prompts = trainer.test_prompts
    completions = greedy_completions(trainer.policy, trainer.tokenizer, list(prompts["prompt"]),
                                     config["max_new_tokens"], config["eval_batch_size"])
    return [reward(text, gold) == 1 for text, gold in zip(completions, prompts["gold"],
                                                          strict=True)]


def sign_test(gained: int, lost: int) -> float:
    """Exact two-sided p-value of `gained` successes in gained + lost fair coin flips."""
    n, k = gained + lost, min(gained, lost)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def paired(runs: dict[str, dict[str, object]]) -> pd.DataFrame:
    """Each run's final policy against the warm-up policy, problem by problem."""
    before = correct_answers(next(iter(runs.values())), trained=False)
    rows = []
    for name, config in runs.items():
        after = correct_answers(config, trained=True)
        gained = sum(a and not b for a, b in zip(after, before, strict=True))
        lost = sum(b and not a for a, b in zip(after, before, strict=True))
        rows.append(dict(run=name, step=STEPS, problems=len(after),
                         warmup_accuracy=sum(before) / len(before),
                         accuracy=sum(after) / len(after), gained=gained, lost=lost,
                         p_value=sign_test(gained, lost)))
    return pd.DataFrame(rows)


def evaluations(records: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per run and evaluation step: accuracy, KL to the reference, seconds per step."""
    tables = []
    for name, frame in records.items():
        table = rl.evaluations(frame).rename(columns={"eval_accuracy": "accuracy"})
        table.insert(0, "run", name)
        table["seconds_per_step"] = frame.loc[frame["step"] > 0, "seconds"].mean()
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def seed_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Dense AdamW's seeds at each evaluation step, against the warm-up policy (step 0)."""
    adamw = table[table["run"].str.endswith(ADAMW_SEEDS)]
    warmup = float(adamw.loc[adamw["step"] == 0, "accuracy"].iloc[0])
    rows = []
    for step, group in adamw[adamw["step"] > 0].groupby("step"):
        accuracy = group["accuracy"]
        gain, spread = accuracy.mean() - warmup, accuracy.max() - accuracy.min()
        rows.append(dict(step=step, seeds=len(group), warmup=warmup, mean=accuracy.mean(),
                         sd=accuracy.std(), min=accuracy.min(), max=accuracy.max(), gain=gain,
                         spread=spread, clears_spread=bool(gain > spread)))
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="proxy-1m", help="a proxy scale (logra.models.SCALES)")
    model = parser.parse_args().model
    runs = configs(model)  # a bad model name fails here, before anything is built
    prepare(model)  # cached: builds the proxy policy only if it is missing
    table = evaluations(run_all(runs))
    summary = seed_summary(table)
    flips = paired(runs)
    name = "grpo_" + model.replace("-", "_")
    report.save_table(table, name)
    report.save_table(summary, f"{name}_seeds")
    report.save_table(flips, f"{name}_paired")
    print(report.to_markdown(table.pivot(index="run", columns="step", values="accuracy")
                               .reset_index()))
    print(report.to_markdown(summary))
    print(report.to_markdown(flips))


if __name__ == "__main__":
    main()
