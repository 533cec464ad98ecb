"""The GRPO loop: rollouts, updates, tidy per-step records, manifest, checkpoints and resume.

One step t = 1 … steps:
  1. seed torch and `random` from (seed, t); draw `prompts_per_step` training prompts;
  2. sample G completions of each with the current policy π_θ (`rollout.sample`) and grade them;
  3. score the completions under π_θ (with gradients) and the frozen reference π_ref;
  4. `updates_per_batch` times: the GRPO loss (`grpo.grpo_loss`), backward, gradient norm,
     and the optimizer's step (an optimizer with the KL control first gets the batch it
     wants: `logra.optim.KLControlled`), then
     the trainer's `update_hooks`;
  5. measure the KL between the policy before and after the update on the same tokens;
  6. every `eval_every` steps: greedy accuracy on the first `eval_prompts` test prompts (a
     generated task's test split extends past its 500 with more held-out problems);
  7. every `drift_probe_every` steps (when set): KL(π_θ ‖ π_ref) on a fixed held-out probe.

Records (one row per step; row 0 holds the evaluation before training):

    step             rollout step (0: before training)
    reward           mean reward of the B = prompts_per_step·G completions
    reward_std       their standard deviation
    train_accuracy   share of completions graded correct (= reward for the 0/1 reward)
    zero_std_groups  share of groups whose rewards are all equal (no learning signal)
    solved_groups    share of groups with at least one correct completion (pass@G of the step's
                     prompts: what a group can learn from)
    completion_tokens mean completion length in tokens (EOS included)
    kl               exact mean per-token KL(π_θ ‖ π_ref) from full softmaxes on the sampled
                     completions, π_θ being the policy that sampled them (`categorical_kl`)
    kl_k3            the k3 estimate of the same KL from the sampled tokens only
    step_kl          exact mean per-token KL(π_before ‖ π_after) of this step's update
    loss, surrogate, clip_fraction   from `grpo_loss` (means over the step's updates)
    grad_norm        L2 norm of the gradient of every trainable parameter, before the update
    predicted_kl, applied_kl, gamma, clipped, skipped, skipped_steps, diag_kl, kl_probed,
    kl_scale, threshold
                     the optimizer's `last_step` (LoGRA only; NaN otherwise): the KL̂ the
                     control used (nats/token), γ²·KL̂, γ, ..., the raw diagonal estimate, whether
                     an exact JVP probe made the prediction, the calibration factor after it, and
                     the step's KL budget (δ, or less under a drift budget)
    beta             the weight of the k3 penalty in this step's loss (fixed, or adaptive)
    state_bytes      bytes of tensors in the optimizer's state
                     (`logra.optimizers.measured_state_bytes`)
    tokens           non-padding tokens of prompt + completion in the batch
    seconds          wall time of the step (evaluation excluded)
    eval_accuracy, eval_sampled, eval_seconds   greedy and sampled (temperature 1,
                     `eval_samples` per problem) held-out pass@1 after this step, and their time;
                     each problem's outcome goes to problems.csv (`logra.rl.evaluation`)
    drift_kl         KL(π_θ ‖ π_ref) per token after this step on the drift probe: the first
                     `drift_probe_prompts` test prompts, G completions each, sampled with the same
                     seeds at every probe (`Trainer.probe_drift`); NaN between probes

Determinism: everything random in a step is seeded from (seed, step), and a checkpoint holds the
trainable weights, the optimizer, the RNG states and the records so far; a rerun of the same
config resumes from it and writes the records an uninterrupted run would have written.

Data parallel: under `torchrun --nproc_per_node=N` each rank samples and trains on its share of
the step's prompts (`prompts_per_step` a multiple of N) and the run equals one process with the
same global batch (`logra.rl.distributed`); rank 0 writes the records and checkpoints.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import torch
from torch.optim import Optimizer
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from logra import io
from logra.config import ConfigError
from logra.data import load_task, to_prompts
from logra.data.grading import reward
from logra.models import SCALES, load_policy, prepare
from logra.models.determinism import floating_point_path, machine
from logra.optim import KLControlled
from logra.optim.kl import categorical_kl
from logra.optimizers import build_optimizer, measured_state_bytes, spec, wrap_model
from logra.paths import checkout_root
from logra.provenance import fingerprint
from logra.quiet import no_dataset_bars
from logra.rl import config as cfg
from logra.rl.distributed import DataParallel
from logra.rl.evaluation import PROBLEM_COLUMNS, held_out, summary
from logra.rl.grpo import AdaptiveKLController, group_advantages, grpo_loss
from logra.rl.rollout import Rollout, completion_logits, sample, token_logprobs
from logra.rl.tracking import TensorBoardLog

COLUMNS = (
    "step", "reward", "reward_std", "train_accuracy", "zero_std_groups", "solved_groups",
    "completion_tokens",
    "kl", "kl_k3", "step_kl", "loss", "surrogate", "clip_fraction", "grad_norm", "predicted_kl",
    "applied_kl", "gamma", "clipped", "skipped", "skipped_steps", "diag_kl", "kl_probed",
    "kl_scale", "threshold", "beta", "state_bytes", "tokens", "seconds", "eval_accuracy",
    "eval_sampled", "eval_seconds", "drift_kl",
)
TIMING_COLUMNS = ("seconds", "eval_seconds")
RECORDS_FILE, MANIFEST_FILE, CHECKPOINT_FILE = "records.csv", "manifest.json", "checkpoint/state.pt"
PROBLEMS_FILE = "problems.csv"  # step, problem, greedy, sampled: each evaluation problem by problem
PACKAGES = ("torch", "transformers", "peft", "datasets", "math-verify", "logra", "galore-torch",
            "apollo-torch")


PROBE_STEP = -1  # the drift probe samples with step_seed(seed, PROBE_STEP), never a step's seed
EVAL_STEP = -2  # sampled pass@1 draws with step_seed(0, EVAL_STEP) in every run


def step_seed(seed: int, step: int) -> int:
    """A 63-bit seed for step `step` of a run seeded `seed`."""
    digest = hashlib.sha256(f"grpo/{seed}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


UpdateHook = Callable[["Trainer", Rollout, dict[str, torch.Tensor]], None]
"""Called after every optimizer step with the trainer, the step's rollout and the trainable
weights as they were before the step (name -> tensor); the trainer's weights are the updated
ones, and a hook that changes them must put them back."""


class Trainer:
    """Policy, reference, optimizer and data of one run; `step(t)` returns the record of step t.

    `update_hooks` are called after every optimizer step (`UpdateHook`); the pre-step weights
    are copied for them only when there are any.
    """

    def __init__(self, config: cfg.GRPOConfig, progress: bool = True,
                 update_hooks: Sequence[UpdateHook] = ()) -> None:
        self.config = config
        self.update_hooks = tuple(update_hooks)
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.dp = DataParallel.from_environment(torch.device(device))
        self.dp.shard(config.prompts_per_step, "prompts_per_step")  # fails before any compute
        self.device = self.dp.device(torch.device(device))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        dtype = getattr(torch, config.dtype)
        model = config.model
        results = Path(config.results_dir)
        with self.dp.main_first():  # one rank builds the proxy
            self.source = str(prepare(model, root=results / "models",
                                      data_dir=cfg.data_dir(config),
                                      progress=progress and self.dp.is_main)
                              if model in SCALES else model)
        policy, self.tokenizer = load_policy(self.source, dtype)
        self.reference, _ = load_policy(self.source, dtype)
        self.reference.requires_grad_(False).eval().to(self.device)
        torch.manual_seed(config.seed)  # LoRA's adapter initialization
        settings = config.optimizer_settings()
        self.policy = wrap_model(config.optimizer, policy, settings).to(self.device).eval()
        self.optimizer = build_optimizer(config.optimizer, self.policy, settings)
        if isinstance(self.optimizer, KLControlled):  # the JVP's KL prediction: every rank's batch
            self.optimizer.process_group = self.dp.group
        self.trained = self.dp.wrap(self.policy)  # the gradient forward (DDP under N ranks)
        self.kl_controller = (AdaptiveKLController(config.beta, config.kl_target,
                                                   config.kl_horizon)
                              if config.kl_target is not None else None)
        self.trainable = {n: p for n, p in self.policy.named_parameters() if p.requires_grad}
        self.drift_bound = 0.0  # K̂ of `track_drift`, for kl_drift_source: probe
        self.saved_problems: pd.DataFrame | None = None  # a loaded checkpoint's (`load`)
        with self.dp.main_first():  # one rank generates and caches the data
            self.train_prompts = self._prompts("train")
            test = self._prompts("test")
        if len(test) < config.eval_prompts:
            raise ConfigError(f"eval_prompts={config.eval_prompts} but the test split of "
                              f"{config.task} has {len(test)} problems")
        self.test_prompts = test.select(range(config.eval_prompts))

    def _prompts(self, split: str) -> datasets.Dataset:
        """`prompt`, `gold` of a split, wrapped in the chat template when configured and present."""
        config = self.config
        rows = load_task(config.task, split, cfg.data_dir(config),
                         test_rows=config.eval_prompts)
        prompts = to_prompts(rows, config.task)
        if config.use_chat_template and self.tokenizer.chat_template:
            with no_dataset_bars():
                prompts = prompts.map(
                    lambda row: {"prompt": chat(self.tokenizer, row["prompt"])})
        return prompts

    # ------------------------------------------------------------------ one step

    def step(self, t: int) -> dict[str, Any]:
        """Rollout, update(s) and measurements of step t (1-based)."""
        c = self.config
        start = time.perf_counter()
        seed = step_seed(c.seed, t)
        torch.manual_seed(seed)
        random.seed(seed)
        order = torch.randperm(len(self.train_prompts),
                               generator=torch.Generator().manual_seed(seed))
        share = self.dp.shard(c.prompts_per_step, "prompts_per_step")
        batch = self.train_prompts.select(order[share].tolist())  # this rank's prompts
        rollout = sample(self.policy, self.tokenizer, list(batch["prompt"]), c.group_size,
                         c.max_new_tokens, seed=seed, first_row=share.start * c.group_size)
        golds = [gold for gold in batch["gold"] for _ in range(c.group_size)]
        rewards = torch.tensor([reward(text, gold)
                                for text, gold in zip(rollout.completions, golds, strict=True)])
        advantages = group_advantages(rewards, c.group_size).to(self.device)
        rewards = self.dp.gather(rewards)  # every rank's, for the records of the global batch
        lengths = self.dp.gather(rollout.response_mask.sum(dim=1))
        (tokens,) = self.dp.sum(float(rollout.attention_mask.sum()))
        record = dict(
            step=t, reward=float(rewards.mean()), reward_std=float(rewards.std()),
            train_accuracy=float((rewards == 1).float().mean()),
            zero_std_groups=float((rewards.view(-1, c.group_size).std(dim=1) == 0)
                                  .float().mean()),
            solved_groups=float((rewards.view(-1, c.group_size).amax(dim=1) == 1)
                                .float().mean()),
            completion_tokens=float(lengths.float().mean()), tokens=int(tokens),
        )
        record.update(self._update(rollout, advantages))
        record["state_bytes"] = measured_state_bytes(self.optimizer)
        record["seconds"] = time.perf_counter() - start
        return record

    def _update(self, rollout: Rollout, advantages: torch.Tensor) -> dict[str, Any]:
        """`updates_per_batch` optimizer steps on one rollout; means of what they report."""
        c = self.config
        tokens, mask = rollout.response_tokens, rollout.response_mask
        # rank i's token mean, scaled to its share of the global one (module docstring)
        n_local = float(mask.sum())
        (n_global,) = self.dp.sum(n_local)
        share = self.dp.world * n_local / max(n_global, 1.0)
        with torch.no_grad():
            ref_logits = completion_logits(self.reference, rollout)
            ref_logprobs = token_logprobs(ref_logits, tokens)
        logs: list[dict[str, float]] = []
        for update in range(c.updates_per_batch):
            logits = completion_logits(self.trained, rollout)
            logprobs = token_logprobs(logits, tokens)
            if update == 0:
                old_logits = logits.detach()
                old_logprobs = logprobs.detach()
                kl = float(categorical_kl(old_logits, ref_logits, mask))
                if isinstance(self.optimizer, KLControlled) and self.optimizer.kl_drift_budget:
                    # the drift budget needs KL(π_θ ‖ π_ref) before the step: of the global
                    # batch, or the bound the drift probe keeps (`track_drift`)
                    self.optimizer.observe_reference_kl(
                        self.drift_bound if c.kl_drift_source == "probe"
                        else self.dp.token_mean(dict(kl=kl), n_local)["kl"])
            terms = grpo_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask,
                              c.clip_eps, self.beta)
            loss = terms.loss * share if self.dp.world > 1 else terms.loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            (total_loss,) = self.dp.sum(float(loss.detach()))
            log = dict(loss=total_loss / self.dp.world,
                       **self.dp.token_mean(dict(surrogate=terms.surrogate, kl_k3=terms.kl_k3,
                                                 clip_fraction=terms.clip_fraction), n_local),
                       grad_norm=self._grad_norm())
            self._optimizer_step(rollout)
            log.update(optimizer_report(self.optimizer))
            logs.append(log)
        self.optimizer.zero_grad(set_to_none=True)
        del ref_logits, logits
        with torch.no_grad():
            step_kl = float(categorical_kl(old_logits, completion_logits(self.policy, rollout),
                                           mask))
        kls = self.dp.token_mean(dict(kl=kl, step_kl=step_kl), n_local)
        kl, step_kl = kls["kl"], kls["step_kl"]
        merged: dict[str, Any] = {key: sum(log[key] for log in logs) / len(logs)
                                  for key in logs[0]}
        merged.update(beta=self.beta)
        if self.kl_controller is not None:  # the penalty of the next step
            self.kl_controller.update(kl, c.prompts_per_step * c.group_size)
        merged.update(kl=kl, kl_k3=logs[0]["kl_k3"], step_kl=step_kl,
                      clipped=any(log["clipped"] for log in logs),
                      skipped=any(log["skipped"] for log in logs),
                      skipped_steps=logs[-1]["skipped_steps"],
                      kl_probed=any(log["kl_probed"] for log in logs))
        return merged

    @property
    def beta(self) -> float:
        """The weight of the k3 penalty this step: `beta`, or the adaptive controller's."""
        return self.kl_controller.beta if self.kl_controller else self.config.beta

    def _grad_norm(self) -> float:
        grads = [p.grad.float().norm() for p in self.trainable.values() if p.grad is not None]
        return float(torch.stack(grads).norm()) if grads else 0.0

    def _optimizer_step(self, rollout: Rollout) -> None:
        before = ({n: p.detach().clone() for n, p in self.trainable.items()}
                  if self.update_hooks else {})
        optimizer = self.optimizer
        if isinstance(optimizer, KLControlled) and optimizer.wants_kl_batch():
            optimizer.set_kl_batch(self.policy, **rollout.model_inputs(),
                                   token_mask=rollout.logits_mask())
        optimizer.step()
        for hook in self.update_hooks:
            hook(self, rollout, before)

    def evaluate(self) -> tuple[dict[str, float], pd.DataFrame]:
        """Greedy and sampled pass@1 on the held-out prompts (each rank a share) with its wall
        time, and the per-problem frame (`logra.rl.evaluation`; every rank's rows).

        Sampled pass@1 (`eval_samples` completions on each of the first `eval_sampled_prompts`)
        draws with the seed `step_seed(0, EVAL_STEP)` in every run and at every evaluation, so
        that two evaluations of the same problems share their sampling noise."""
        c = self.config
        start = time.perf_counter()
        part = self.dp.split(len(self.test_prompts))
        sampled = c.eval_sampled_prompts or len(self.test_prompts)
        problems = held_out(
            self.policy, self.tokenizer, self.test_prompts.select(range(part.start, part.stop)),
            max_new_tokens=c.max_new_tokens, batch_size=c.eval_batch_size,
            samples=c.eval_samples or 0, sampled_prompts=max(0, min(part.stop, sampled)
                                                                - part.start),
            seed=step_seed(0, EVAL_STEP), first_problem=part.start)
        problems = self._gather_problems(problems)
        return dict(**summary(problems), eval_seconds=time.perf_counter() - start), problems

    def _gather_problems(self, problems: pd.DataFrame) -> pd.DataFrame:
        """Every rank's per-problem rows, in problem order (shares padded to one length)."""
        if self.dp.world == 1:
            return problems
        rows = -(-len(self.test_prompts) // self.dp.world)
        values = torch.full((rows, len(PROBLEM_COLUMNS)), math.nan, dtype=torch.float64)
        values[:len(problems)] = torch.tensor(problems[list(PROBLEM_COLUMNS)].to_numpy())
        gathered = self.dp.gather(values)
        gathered = gathered[~gathered[:, 0].isnan()]
        frame = pd.DataFrame(gathered.numpy(), columns=list(PROBLEM_COLUMNS))
        return frame.astype({"problem": int}).sort_values("problem", ignore_index=True)

    def track_drift(self, record: dict[str, Any]) -> None:
        """Update `drift_bound` K̂ with the record of a step: its probe's KL when it has one,
        else K̂ plus the KL the step applied (γ²·KL̂).

        K̂ = KL_probe + Σ applied KLs since the probe bounds the drift from the reference as
        long as the steps since the probe do not line up (aligned steps add as (Σ√k)²). GRPO's
        mostly do not: in notebook 09's runs without control on proxy-1m the drift grew over
        any 20 steps by at most a quarter of the sum of their step KLs (0.01 against 0.2 over
        300 steps). It starts at 0, the drift of the policy before training.
        """
        probe = record.get("drift_kl", math.nan)
        applied = record.get("applied_kl", math.nan)
        if math.isfinite(probe):
            self.drift_bound = probe
        elif math.isfinite(applied):
            self.drift_bound += applied

    def probe_drift(self) -> dict[str, float]:
        """KL(π_θ ‖ π_ref) per token on the drift probe (module docstring, `drift_kl`).

        The batch KL of a step (`kl`) measures the drift on B fresh completions of training
        prompts, so it moves from step to step by its sampling spread even while the policy
        stands still; the probe measures it on `drift_probe_prompts`·G completions of the same
        held-out prompts with the same sampling seeds every time (common random numbers), so
        that probes differ by the change of the policy, not the draw.
        """
        c = self.config
        part = self.dp.split(c.drift_probe_prompts)
        prompts = self.test_prompts.select(range(part.start, part.stop))
        rollout = sample(self.policy, self.tokenizer, list(prompts["prompt"]), c.group_size,
                         c.max_new_tokens, seed=step_seed(c.seed, PROBE_STEP),
                         first_row=part.start * c.group_size)
        with torch.no_grad():
            kl = float(categorical_kl(completion_logits(self.policy, rollout),
                                      completion_logits(self.reference, rollout),
                                      rollout.response_mask))
        n_local = float(rollout.response_mask.sum())
        return dict(drift_kl=self.dp.token_mean(dict(drift_kl=kl), n_local)["drift_kl"])

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: Path, step: int, records: list[dict[str, Any]],
             problems: pd.DataFrame | None = None) -> None:
        """Trainable weights, optimizer, RNG states, records and per-problem evaluations, in one
        atomic file (rank 0)."""
        if not self.dp.is_main:
            self.dp.barrier()
            return
        state = dict(
            step=step, records=records, config=self.config.to_dict(), problems=problems,
            policy={name: p.detach() for name, p in self.trainable.items()},
            optimizer=self.optimizer.state_dict(), beta=self.beta,
            rng=dict(torch=torch.get_rng_state(), python=random.getstate(),
                     cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None),
        )
        with io.atomic_path(path) as tmp:
            torch.save(state, tmp)
        self.dp.barrier()

    def load(self, path: Path) -> tuple[int, list[dict[str, Any]]]:
        """Restore a checkpoint written by `save`; returns its step and records (its per-problem
        evaluations: `saved_problems`)."""
        # weights_only=False: GaLore's and APOLLO's states hold projector objects (our own file)
        state = torch.load(path, map_location="cpu", weights_only=False)
        missing = sorted(set(self.trainable) ^ set(state["policy"]))
        if missing:
            raise RuntimeError(f"checkpoint {path} does not match the policy: {missing[:5]}")
        with torch.no_grad():
            for name, value in state["policy"].items():
                self.trainable[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.kl_controller is not None:
            self.kl_controller.beta = state["beta"]
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        if state["rng"]["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.saved_problems = state.get("problems")
        return state["step"], state["records"]


def chat(tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
    """`prompt` as one user turn of the tokenizer's chat template, ready for the answer."""
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)


def optimizer_report(optimizer: Optimizer) -> dict[str, Any]:
    """LoGRA's `last_step` (predicted and applied KL, γ, clipped, skipped); NaN for others."""
    last = getattr(optimizer, "last_step", None) or {}
    return dict(
        predicted_kl=float(last.get("predicted_kl", math.nan)),
        applied_kl=float(last.get("applied_kl", math.nan)),
        gamma=float(last.get("gamma", math.nan)),
        clipped=bool(last.get("clipped", False)),
        skipped=bool(last.get("skipped", False)),
        skipped_steps=int(last.get("skipped_steps", 0)),
        diag_kl=float(last.get("diag_kl", math.nan)),
        kl_probed=bool(last.get("kl_probed", False)),
        kl_scale=float(last.get("kl_scale", math.nan)),
        threshold=float(last.get("threshold", math.nan)),
    )


def frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The records as a DataFrame with the documented columns, in order."""
    return pd.DataFrame.from_records(records).reindex(columns=list(COLUMNS))


def evaluations(records: pd.DataFrame) -> pd.DataFrame:
    """The rows of `records` that carry a held-out evaluation: step, eval_accuracy, kl."""
    return records.loc[records["eval_accuracy"].notna(),
                       ["step", "eval_accuracy", "kl"]].reset_index(drop=True)


def run_grpo(config: cfg.GRPOConfig | Mapping[str, Any], progress: bool = True) -> pd.DataFrame:
    """Run (or resume, or extend) the GRPO run of `config`; returns its per-step records.

    `config` is a resolved config (`logra.rl.config.resolve`), or a mapping of every key, which
    is validated into one here (`GRPOConfig.from_mapping`), so a bad one fails before anything is
    loaded. Writes `records.csv`, `manifest.json` and
    `checkpoint/state.pt` under `logra.rl.config.run_dir(config)`, and with `tensorboard: true`
    each record's scalars under its `tensorboard/` (`logra.rl.tracking`) (rank 0 of a
    data-parallel run; every rank returns the records).
    """
    if not isinstance(config, cfg.GRPOConfig):
        config = cfg.GRPOConfig.from_mapping(config)
    directory = cfg.run_dir(config)
    manifest_path = directory / MANIFEST_FILE
    manifest = _read_manifest(manifest_path, config)
    torch.set_num_threads(config.threads)
    trainer = Trainer(config, progress)
    main = trainer.dp.is_main
    checkpoint = directory / CHECKPOINT_FILE
    done, records = trainer.load(checkpoint) if checkpoint.exists() else (0, [])
    problems = [trainer.saved_problems] if done and trainer.saved_problems is not None else []
    manifest.setdefault("resumed_from", []).append(done)
    manifest.update(config=config.to_dict(), model_source=trainer.source, status="running",
                    ranks=trainer.dp.world)
    if main:
        io.write_json(manifest_path, manifest)
    if not records:
        evaluation, before = initial_evaluation(trainer)
        records.append(dict(step=0, **evaluation))
        problems = [before.assign(step=0)]
    tensorboard = TensorBoardLog(directory, done) if config.tensorboard and main else None
    if tensorboard is not None and done == 0:
        tensorboard.write(records[0])
    steps = config.steps
    bar = tqdm(total=steps, initial=min(done, steps), disable=not (progress and main),
               desc=directory.name, unit="step")
    for record in records[1:]:  # a resumed run's K̂ from the records it saved
        trainer.track_drift(record)
    for t in range(done + 1, steps + 1):
        record = trainer.step(t)
        if t % config.eval_every == 0:
            evaluation, after = trainer.evaluate()
            record.update(evaluation)
            problems.append(after.assign(step=t))
        if config.drift_probe_every and t % config.drift_probe_every == 0:
            record.update(trainer.probe_drift())
        trainer.track_drift(record)
        records.append(record)
        if tensorboard is not None:
            tensorboard.write(record)
        bar.update()
        bar.set_postfix(reward=f"{record['reward']:.3f}", kl=f"{record['kl']:.2e}",
                        **({"eval": f"{record['eval_accuracy']:.3f}"}
                           if "eval_accuracy" in record else {}))
        if t % config.checkpoint_every == 0 or t == steps:
            evaluated = _problems(problems, t)
            trainer.save(checkpoint, t, records, evaluated)
            if main:
                _write(directory, manifest, records, evaluated, t)
    bar.close()
    if tensorboard is not None:
        tensorboard.close()
    manifest.update(status="finished", completed_steps=max(done, steps))
    if main:
        io.write_json(manifest_path, manifest)
    return frame([r for r in records if r["step"] <= steps])


EVALUATIONS_DIR = "evaluations"
EVALUATION_KEYS = ("task", "eval_prompts", "max_new_tokens", "eval_batch_size",
                   "use_chat_template", "dtype", "eval_samples", "eval_sampled_prompts")


def initial_evaluation(trainer: Trainer) -> tuple[dict[str, float], pd.DataFrame]:
    """`trainer.evaluate()` of the policy before training, shared by every run that starts from
    the same weights and evaluates the same way.

    Greedy decoding of the same weights on the same prompts is deterministic, so the result is
    cached in <results_dir>/evaluations/ under a hash of the weight files and the evaluation keys
    (`EVALUATION_KEYS`, the device, the number of ranks and the code's fingerprint,
    `logra.provenance`). Only for policies loaded from a
    local directory and trained as they are: a LoRA-wrapped policy or a hub id is evaluated.
    """
    config = trainer.config
    source = Path(trainer.source)
    if spec(config.optimizer).wraps_model or not source.is_dir():
        return trainer.evaluate()
    digest = hashlib.sha256()
    for weights in sorted(source.glob("*.safetensors")):
        digest.update(weights.read_bytes())
    settings = {k: getattr(config, k) for k in EVALUATION_KEYS}
    settings.update(device=str(trainer.device), ranks=trainer.dp.world, code=fingerprint())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    path = Path(config.results_dir) / EVALUATIONS_DIR / f"{digest.hexdigest()[:16]}.json"
    if path.exists():
        cached = json.loads(path.read_text())
        return cached["evaluation"], pd.DataFrame(cached["problems"])
    evaluation, problems = trainer.evaluate()
    if trainer.dp.is_main:
        io.write_json(path, dict(settings=settings, source=str(source), evaluation=evaluation,
                                 problems=problems.to_dict(orient="list")))
    return evaluation, problems


def _problems(evaluations: list[pd.DataFrame], step: int) -> pd.DataFrame:
    """The per-problem evaluations up to `step`, one frame: step, problem, greedy, sampled."""
    frames = [f for f in evaluations if int(f["step"].iloc[0]) <= step] if evaluations else []
    if not frames:
        return pd.DataFrame(columns=["step", *PROBLEM_COLUMNS])
    return pd.concat(frames, ignore_index=True)[["step", *PROBLEM_COLUMNS]]


def _write(directory: Path, manifest: dict[str, Any], records: list[dict],
           problems: pd.DataFrame, step: int) -> None:
    io.write_frame(directory / RECORDS_FILE, frame(records))
    io.write_frame(directory / PROBLEMS_FILE, problems)
    manifest["completed_steps"] = step
    io.write_json(directory / MANIFEST_FILE, manifest)


def _read_manifest(path: Path, config: cfg.GRPOConfig) -> dict[str, Any]:
    """The existing manifest of the run (checked against `config`), or a new one."""
    if path.exists():
        manifest = json.loads(path.read_text())
        differ = cfg.result_keys_differ(manifest["config"], config)
        if differ:
            raise ConfigError(f"{path.parent} holds a run with different {differ}; "
                              "set another run_name= or remove the directory")
        if manifest.get("code") != fingerprint():
            made_on = manifest.get("machine")
            where = ("an unrecorded machine" if made_on is None else
                     f"{made_on.get('cpu')}, ATen {made_on.get('cpu_capability')}, MKL_CBWR "
                     f"{made_on.get('MKL_CBWR') or 'unset'}")
            raise ConfigError(
                f"{path.parent} holds a run made by other code or on another floating-point "
                f"path (fingerprint {manifest.get('code')}, now {fingerprint()}: "
                f"`logra.provenance`; the run was made on {where}; this process: "
                f"{floating_point_path()}); set another run_name= or remove the directory")
        return manifest
    return dict(
        experiment=cfg.EXPERIMENT, seed=config.seed, run_dir=str(path.parent),
        code=fingerprint(),
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        versions=_versions(), git=_git(), python=sys.version.split()[0],
        platform=platform.platform(), machine=machine(), threads=config.threads,
    )


def _versions() -> dict[str, str]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _git() -> dict[str, Any]:
    """The commit of the checkout this package runs from, and whether the tree is dirty; None
    for both when it runs from an installed wheel or git cannot tell."""
    checkout = checkout_root()
    if checkout is None:
        return dict(commit=None, dirty=None)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
    try:
        return dict(commit=git("rev-parse", "HEAD"), dirty=bool(git("status", "--porcelain")))
    except (OSError, subprocess.SubprocessError):
        return dict(commit=None, dirty=None)

