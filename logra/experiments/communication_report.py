"""Notebook 08's tables, figure and verdict (C12), from the rows `logra.experiments.communication`
counts and measures: the all-reduce bytes per step (`bytes_table`, `measured_table`), the checks of
each parallelism (`checks_table`) and `c12_claim` by the rule in its docstring.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from logra.experiments.communication import Config
from logra.experiments.report import ClaimRow

C12_REPORTED = ("compatible with DDP, FSDP and Megatron tensor parallelism; sketches shrink the "
                "all-reduce volume")


# ---------------------------------------------------------------- tables and the verdict


def _measured(frame: pd.DataFrame) -> dict[str, float]:
    sel = frame[frame.section == "measured"]
    return dict(zip(sel.metric, sel.value, strict=True))


def bytes_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model: parameters, MB per step dense and through the hook, and the ratios."""
    sel = frame[frame.section == "counted"]
    wide = sel.pivot_table(index="model", columns=["reconstruction", "grad_dtype", "metric"],
                           values="value", sort=False)
    table = pd.DataFrame({
        "parameters (M)": wide[("gain", "fp32", "params")] / 1e6,
        "dense MB, fp32 grads": wide[("gain", "fp32", "dense_bytes")] / 1e6,
        "hook MB, gain (= dense)": wide[("gain", "fp32", "sent_bytes")] / 1e6,
        "hook MB, Nyström, fp32 grads": wide[("nystrom", "fp32", "sent_bytes")] / 1e6,
        "ratio Nyström, fp32 grads": wide[("nystrom", "fp32", "ratio")],
        "ratio Nyström, bf16 grads": wide[("nystrom", "bf16", "ratio")],
        "ratio gain": wide[("gain", "fp32", "ratio")],
    })
    return table.reset_index()


def measured_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured 2-rank run's numbers: metric, value, note (bytes are per step)."""
    sel = frame[frame.section == "measured"]
    return sel[["metric", "value", "note"]].reset_index(drop=True)


def checks(frame: pd.DataFrame, cfg: Config) -> dict[str, bool]:
    """The four facts the verdict is built from (see `c12_claim`)."""
    m = _measured(frame)
    tol = cfg.tolerance
    return {
        "ddp": m["ddp_vs_single"] <= tol and m["hook_vs_dense"] <= tol,
        "fsdp2": m["fsdp2_vs_single"] <= tol,
        "tensor_parallel": m["tp_refused"] == 0.0,
        "shrinks": m["ratio"] < cfg.c12_shrink,
    }


def checks_table(frame: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """What the measured run checked, what it found, and whether it passed."""
    m, ok = _measured(frame), checks(frame, cfg)
    tol = cfg.tolerance
    tp_note = frame.loc[(frame.section == "measured") & (frame.metric == "tp_refused"), "note"]
    rows = [
        ("DDP = one process with the global batch", f"max |Δw| {m['ddp_vs_single']:.1e}",
         f"≤ {tol:g}", m["ddp_vs_single"] <= tol),
        ("DDP with the sketch hook = DDP dense all-reduce", f"max |Δw| {m['hook_vs_dense']:.1e}",
         f"≤ {tol:g}", m["hook_vs_dense"] <= tol),
        ("FSDP2 = one process with the global batch", f"max |Δw| {m['fsdp2_vs_single']:.1e}",
         f"≤ {tol:g}", ok["fsdp2"]),
        ("tensor parallelism (Colwise + Rowwise)",
         f"refused: {tp_note.iloc[0]}" if m["tp_refused"] else "stepped", "steps",
         ok["tensor_parallel"]),
        ("bytes all-reduced per step, sketch hook / dense (counted at all_reduce)",
         f"{m['sent_bytes']:,.0f} / {m['dense_bytes']:,.0f} = {m['ratio']:.2%} (predicted "
         f"{m['predicted_sent_bytes'] / m['predicted_dense_bytes']:.2%}, hook's own count "
         f"{m['hook_sent_bytes']:,.0f})", f"< {cfg.c12_shrink:.0%}", ok["shrinks"]),
    ]
    return pd.DataFrame(rows, columns=["check", "measured", "criterion", "passed"])


def c12_claim(frame: pd.DataFrame, cfg: Config) -> ClaimRow:
    """Claim C12, judged by a fixed rule from the measured 2-rank run.

    Four facts (`checks`; τ = `tolerance`, 1e-5; ρ = `c12_shrink`, 0.9):
        ddp              DDP = one process and the sketch hook = DDP's dense all-reduce,
                         max |Δw| ≤ τ
        fsdp2            FSDP2 = one process, max |Δw| ≤ τ
        tensor_parallel  LoGRA steps a Colwise/Rowwise tensor-parallel model (does not refuse it)
        shrinks          the sketch hook (Nyström) passes < ρ of the dense bytes to all_reduce

        reproduced      all four hold
        not reproduced  none holds
        partly          otherwise

    The default reconstruction (gain) sends every byte (ratio 1, counted): the row says so.
    """
    ok = checks(frame, cfg)
    m = _measured(frame)
    if all(ok.values()):
        verdict = "reproduced"
    elif not any(ok.values()):
        verdict = "not reproduced"
    else:
        verdict = "partly"
    counted = frame[(frame.section == "counted") & (frame.metric == "ratio")
                    & (frame.reconstruction == "nystrom") & (frame.grad_dtype == "fp32")]
    real = counted[counted.model.isin(cfg.architectures)]
    real_text = ", ".join(f"{name} {value:.1%}" for name, value in zip(real.model, real.value,
                                                                       strict=True))
    tp = "refused by LoGRA (Shard(1) parameters)" if m["tp_refused"] else "ran"
    reproduced = (
        f"DDP = one process (max |Δw| {m['ddp_vs_single']:.0e}) and the sketch hook = dense "
        f"all-reduce ({m['hook_vs_dense']:.0e}); FSDP2 = one process "
        f"({m['fsdp2_vs_single']:.0e}); tensor parallelism {tp}; bytes passed to all_reduce "
        f"per step with the hook {m['ratio']:.1%} of dense "
        f"({cfg.measured_model}, r={cfg.measured_rank}, Nyström); counted at "
        f"r={cfg.rank}/{cfg.embedding_rank}: {real_text}; with the default gain "
        f"reconstruction the hook sends 100 %"
    )
    return ClaimRow(claim="C12", reported=C12_REPORTED, reproduced=reproduced,
                    scale=f"{cfg.scale} (2 CPU ranks, gloo; byte counts from shapes up to "
                          f"{cfg.architectures[-1]})", verdict=verdict)


# ---------------------------------------------------------------- figure


def plot_bytes(frame: pd.DataFrame, cfg: Config) -> plt.Figure:
    """Left: MB all-reduced per step, dense vs the sketch hook (Nyström; gain sends the dense
    bytes). Right: the ratio hook / dense for fp32 and bf16 gradients, and the measured point."""
    table = bytes_table(frame)
    models = list(table.model)
    x = np.arange(len(models))
    colours = plt.get_cmap("tab10").colors
    fig, (left, right) = plt.subplots(1, 2, figsize=(13.5, 4.6))
    left.bar(x - 0.2, table["dense MB, fp32 grads"], 0.4, color="0.35",
             label="dense DDP = hook with gain (fp32 grads)")
    left.bar(x + 0.2, table["hook MB, Nyström, fp32 grads"], 0.4, color=colours[0],
             label="sketch hook, Nyström")
    left.set_yscale("log")
    left.set_ylabel("MB all-reduced per step (per rank)")
    right.plot(x, table["ratio Nyström, fp32 grads"], marker="o", color=colours[0],
               label="Nyström, fp32 gradients")
    right.plot(x, table["ratio Nyström, bf16 grads"], marker="s", linestyle="--",
               color=colours[1], label="Nyström, bf16 gradients (sketches stay fp32)")
    right.plot(x, table["ratio gain"], color="0.35", label="gain (the default): everything dense")
    for xi, ratio in zip(x, table["ratio Nyström, fp32 grads"], strict=True):
        right.annotate(f"{ratio:.1%}", (xi, ratio), textcoords="offset points", xytext=(6, -12),
                       fontsize=8, color=colours[0])
    m = _measured(frame)
    if cfg.measured_model in models:
        right.plot(models.index(cfg.measured_model), m["ratio"], marker="*", markersize=15,
                   linestyle="none", color=colours[3],
                   label=f"measured, 2 gloo ranks (r={cfg.measured_rank})")
    right.set_yscale("log")
    right.set_ylabel("bytes sent / dense bytes")
    right.set_xlim(-0.5, len(models) - 0.3)
    for ax in (left, right):
        ax.set_xticks(x, models, rotation=20, ha="right")
        ax.set_xlabel("model")
        ax.grid(True, axis="y", which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"All-reduce volume per step: dense DDP against LoGRA's sketch hook (r = "
                 f"{cfg.rank}, embeddings {cfg.embedding_rank})", fontsize=11)
    fig.tight_layout()
    return fig


FIGURES = {"communication": plot_bytes}

