"""The real-scale launch configs resolve, the accountant prices them, and verl can build LoGRA."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from logra import LoGRA

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "experiments" / "launch"


@pytest.mark.parametrize("scale", ["1.5b", "7b", "27b"])
def test_launch_configs_are_options_of_the_trl_script(load_script, scale: str) -> None:
    pytest.importorskip("trl")
    script = load_script("trl_grpo")
    # GRPOConfig checks for whole groups per generation batch on this process count (1 here, 8
    # at launch): one process generating for 8 steps holds what 8 do in one
    launch = ["--config", str(LAUNCH / f"trl_grpo_{scale}.yaml"), "--steps_per_generation", "8"]
    options, config = script.parse_args(launch)
    assert config.bf16 and options.rank == 16 and options.embedding_rank == 64
    assert options.kl_threshold == 0.02 and config.learning_rate == 1e-6
    accelerate = yaml.safe_load((LAUNCH / "accelerate_fsdp2_8gpu.yaml").read_text())
    world = accelerate["num_processes"]
    assert config.per_device_train_batch_size * world % config.num_generations == 0  # groups
    options, _ = script.parse_args([*launch, "--rank", "32"])
    assert options.rank == 32  # the command line wins


def test_accelerate_config_is_fsdp2_with_checkpointing_in_bf16() -> None:
    config = yaml.safe_load((LAUNCH / "accelerate_fsdp2_8gpu.yaml").read_text())
    assert config["distributed_type"] == "FSDP" and config["mixed_precision"] == "bf16"
    fsdp = config["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_activation_checkpointing"]
    assert config["num_processes"] == 8


def test_the_accountant_says_logra_fits_every_launch_config(load_script) -> None:
    table = load_script("launch_memory").rows(gpus=8)
    assert [row["config"] for row in table] == [f"trl_grpo_{s}.yaml" for s in ("1.5b", "7b",
                                                                               "27b")]
    for row in table:
        assert row["logra_peak"] <= row["capacity"]
        assert row["logra_state"] < row["logra_fsdp2_state"] < row["adamw_state"]


def verl_build_optimizer(parameters, optim: dict) -> torch.optim.Optimizer:
    """verl 0.9.1's `verl.workers.config.optimizer.build_optimizer`, for a plain dict config."""
    args = {"lr": optim["lr"], "weight_decay": optim["weight_decay"]}
    if "adam" in optim["optimizer"].lower():
        args["betas"] = optim["betas"]
    args.update(optim.get("override_optimizer_config") or {})
    cls = getattr(importlib.import_module(optim["optimizer_impl"]), optim["optimizer"])
    return cls(parameters, **args)


def tensors_outside_state(optimizer: torch.optim.Optimizer) -> list[str]:
    """Names of tensors the optimizer holds anywhere but `state` and the parameters."""
    found = []
    for name, value in vars(optimizer).items():
        if name in ("state", "param_groups"):
            continue
        values = value.values() if isinstance(value, dict) else [value]
        found += [name for v in values if isinstance(v, torch.Tensor)]
    return found


def test_verl_snippet_builds_logra_with_every_tensor_in_its_state() -> None:
    optim = yaml.safe_load((LAUNCH / "verl_logra.yaml").read_text())
    optim = optim["actor_rollout_ref"]["actor"]["optim"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8))
    optimizer = verl_build_optimizer(model.parameters(), optim)
    assert isinstance(optimizer, LoGRA)
    assert optimizer.param_groups[0]["rank"] == 16 and optimizer.param_groups[0]["betas"] == [
        0.9, 0.999]
    model(torch.randn(4, 64)).square().mean().backward()
    optimizer.step()
    assert optimizer.state and not tensors_outside_state(optimizer)
    for state in optimizer.state.values():  # what verl's offload_fsdp_optimizer moves
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to("cpu", copy=True)
    model(torch.randn(4, 64)).square().mean().backward()
    optimizer.step()  # after an offload round trip of the state
    assert optimizer.last_step["skipped"] is False
