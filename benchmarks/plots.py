"""PNG plots of a benchmark run (matplotlib, Agg backend; the ``bench`` extra)."""

from __future__ import annotations

from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (backend first)


def _finish(fig: plt.Figure, ax: plt.Axes, xlabel: str, ylabel: str, title: str,
            path: Path) -> None:
    """Labels, title, grid and legend; save as PNG and close."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def throughput_vs_batch(model_only: dict, compare: dict, path: Path, title: str) -> None:
    """Model-only images/s against batch size per task, with the end-to-end batching worker and
    the naive consumer (medians over rounds) marked at the bucket the worker used."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for i, (task, rows) in enumerate(model_only.items()):
        c = f"C{i}"
        ax.plot([r["batch"] for r in rows], [r["images_per_s"] for r in rows], "o-", color=c,
                label=f"{task}: model only (decode+inference+post)")
        cmp = compare.get(task)
        if cmp:
            for mode, marker in (("batching", "s"), ("naive", "x")):
                ips = median(r[mode]["images_per_s"] for r in cmp["rounds"])
                ax.plot([cmp["bucket"]], [ips], marker, color=c, markersize=9,
                        label=f"{task}: end to end, {mode}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    _finish(fig, ax, "batch size (images per inference call)", "images/s", title, path)


def latency_vs_load(load: dict, path: Path, title: str) -> None:
    """Average, P95 and P99 latency (left axis) and results/s (right axis) against concurrent
    producers; the half-capacity P99 and its goal as horizontal lines."""
    rows = load["rows"]
    x = [r["producers"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for key, style in (("avg_ms", "o-"), ("p95_ms", "s--"), ("p99_ms", "^:")):
        ax.plot(x, [r[key] for r in rows], style, label=key.replace("_ms", " latency (ms)"))
    half = load["half_capacity"]
    ax.axhline(half["p99_ms"], color="C3", lw=1,
               label=f"p99 at 50% capacity ({half['rate_per_s']}/s): {half['p99_ms']} ms")
    ax.axhline(load["p99_goal_ms"], color="C3", lw=1, ls="--",
               label=f"goal max_wait + 2 x batch compute = {load['p99_goal_ms']} ms")
    ax.set_xlabel("concurrent producers (closed loop)")
    ax.set_ylabel("latency submitted -> committed (ms)")
    ax2 = ax.twinx()
    ax2.plot(x, [r["results_per_s"] for r in rows], "kD-", alpha=0.5, label="results/s")
    ax2.set_ylabel("results/s")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def scaling(sc: dict, path: Path, title: str) -> None:
    """Results/s against worker processes, with the partition-bounded ideal."""
    rows = sc["rows"]
    x = [r["workers"] for r in rows]
    base = rows[0]["results_per_s"]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    ax.plot(x, [r["results_per_s"] for r in rows], "o-", label="measured")
    ax.plot(x, [base * r["ideal_speedup"] for r in rows], "k--", alpha=0.6,
            label=f"ideal on {sc['partitions']} partitions (1 worker x 6/ceil(6/n))")
    ax.set_xticks(x)
    _finish(fig, ax, "worker processes", "results/s", title, path)
