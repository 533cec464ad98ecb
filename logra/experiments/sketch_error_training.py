"""Toy training runs of the sketch-error experiment (notebooks/01_sketch_error).

A least-squares regression and a Gaussian-cluster MLP classifier, each trained with every update
rule of `sketch_error_measures.RULES` (AdamW, LoGRA gain, LoGRA nystrom, RandomProjectionAdam;
same lr per problem, weight decay 0, predicted_kl_threshold=None: these are not policies).
`training_rows` returns the loss curves and the classifier's test accuracy as rows of the tidy
frame of `sketch_error.run`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from logra.experiments.sketch_error_inputs import rng
from logra.experiments.sketch_error_measures import RULES, make_optimizer

if TYPE_CHECKING:  # the experiment's config; sketch_error imports this module
    from logra.experiments.sketch_error import Config


def train(model: nn.Module, rule: str, rank: int, lr: float, betas: tuple[float, float],
          batches: Iterable[tuple[Tensor, Tensor]], loss_fn: Callable[[Tensor, Tensor], Tensor],
          evaluate: Callable[[nn.Module], float]) -> list[float]:
    """Train `model` with one of RULES; returns evaluate(model) before and after every step."""
    optimizer = make_optimizer(rule, list(model.parameters()), rank, lr, betas)
    losses = [evaluate(model)]
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
        losses.append(evaluate(model))
    return losses


def least_squares_data(cfg: Config) -> tuple[Tensor, Tensor]:
    """X (N×d_in) ~ N(0, I), Y = X W*ᵀ + 0.01·noise with a dense W* (d_out×d_in) of norm ~1/row."""
    d_out, d_in = cfg.lstsq_shape
    g = rng(cfg.seed + 2)
    x = torch.randn(cfg.lstsq_samples, d_in, generator=g)
    w_star = torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)
    return x, x @ w_star.T + 0.01 * torch.randn(cfg.lstsq_samples, d_out, generator=g)


def train_least_squares(cfg: Config, rule: str) -> list[float]:
    """Full-batch MSE of a bias-free Linear(d_in, d_out) from W = 0, per step."""
    d_out, d_in = cfg.lstsq_shape
    x, y = least_squares_data(cfg)
    model = nn.Linear(d_in, d_out, bias=False)
    nn.init.zeros_(model.weight)
    loss_fn = nn.functional.mse_loss

    def evaluate(net: nn.Module) -> float:
        with torch.no_grad():
            return float(loss_fn(net(x), y))

    batches = [(x, y)] * cfg.train_steps
    return train(model, rule, cfg.train_rank, cfg.lstsq_lr, tuple(cfg.betas), batches,
                 loss_fn, evaluate)


def cluster_data(cfg: Config, samples: int, seed: int) -> tuple[Tensor, Tensor]:
    """Gaussian clusters: centres c_k ~ N(0, I_d) (cfg seed), x = c_y + mlp_noise·N(0, I_d)."""
    centres = torch.randn(cfg.mlp_classes, cfg.mlp_dim, generator=rng(cfg.seed))
    g = rng(seed)
    y = torch.randint(0, cfg.mlp_classes, (samples,), generator=g)
    return centres[y] + cfg.mlp_noise * torch.randn(samples, cfg.mlp_dim, generator=g), y


def mlp(cfg: Config) -> nn.Module:
    """d → hidden → hidden → classes, ReLU, PyTorch's default init under the config seed."""
    d, h, c = cfg.mlp_dim, cfg.mlp_hidden, cfg.mlp_classes
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        return nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                             nn.Linear(h, c))


def train_classifier(cfg: Config, rule: str) -> tuple[list[float], float]:
    """Minibatch cross-entropy training; full training-set loss per step and test accuracy."""
    x, y = cluster_data(cfg, cfg.mlp_samples, cfg.seed + 3)
    x_test, y_test = cluster_data(cfg, cfg.mlp_samples, cfg.seed + 4)
    g = rng(cfg.seed + 5)
    batches = []
    for _ in range(cfg.train_steps):
        idx = torch.randint(0, cfg.mlp_samples, (cfg.mlp_batch,), generator=g)
        batches.append((x[idx], y[idx]))
    loss_fn = nn.functional.cross_entropy

    def evaluate(net: nn.Module) -> float:
        with torch.no_grad():
            return float(loss_fn(net(x), y))

    model = mlp(cfg)
    losses = train(model, rule, cfg.train_rank, cfg.mlp_lr, tuple(cfg.betas), batches,
                   loss_fn, evaluate)
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(dim=1) == y_test).float().mean())
    return losses, accuracy


def training_rows(cfg: Config) -> list[dict[str, Any]]:
    """Loss curves (step 0 = before training) and final test accuracy of every rule."""
    rows = []
    d_out, d_in = cfg.lstsq_shape
    for rule in RULES:
        base = dict(experiment="training", rank=cfg.train_rank, method=rule, seed=-1)
        ls = train_least_squares(cfg, rule)
        clf, accuracy = train_classifier(cfg, rule)
        for name, m, n, curve in (("least squares", d_out, d_in, ls),
                                  ("mlp classifier", cfg.mlp_hidden, cfg.mlp_hidden, clf)):
            rows += [dict(base, input=name, matrix=name, m=m, n=n, step=t, metric="loss", value=v)
                     for t, v in enumerate(curve)]
        rows.append(dict(base, input="mlp classifier", matrix="mlp classifier",
                         m=cfg.mlp_hidden, n=cfg.mlp_hidden, step=cfg.train_steps,
                         metric="accuracy", value=accuracy))
    return rows
