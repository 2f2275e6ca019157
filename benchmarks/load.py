"""The seeds' load table, on the sleep processor, and latency at half of the measured capacity.

One ``cardstream worker`` subprocess serves task ``card`` with the fixed-latency ``sleep``
processor (``--sleep-ms`` per call + 2 ms per item, bucket 32), so the table measures the
pipeline (Kafka, decode, MinIO PUT of every output, transactions) and not this machine's cores.

Offered load: N concurrent producers in a closed loop (each uploads one image inline, waits for
its committed result, then uploads the next), N = 10, 50, 100, 150, 300, for a bounded time and
count per level. Latency is client-observed: the event's ``submitted_at`` to the result read by a
read_committed consumer (so the Kafka commit is included); the worker's own ``timings.total_ms``
is reported next to it. Errors: no result within the timeout, ``failed`` results, dead letters.

Half capacity: an open loop at a fixed rate of 50% of the best results/s of the table; the
batch compute time (mean ``cardstream_inference_seconds`` per call) is scraped from the worker's
``/metrics`` over that run, for the goal ``p99 <= max_wait_ms + 2 x batch_compute_ms``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    Got,
    InlineSender,
    ResultWatcher,
    check_alive,
    fresh_stack,
    latency_stats,
    scrape,
    start_worker,
    stop_workers,
    wait_group,
)
from streams.settings import Settings

LEVELS = (10, 50, 100, 150, 300)
PARTITIONS = 6


def _errors(records: Sequence[tuple[float, Got | None]]) -> int:
    return sum(g is None or g.status in ("failed", "dead_letter") for _, g in records)


def closed_loop(sender: InlineSender, rw: ResultWatcher, users: int, duration_s: float,
                warm_s: float, timeout_s: float, max_requests: int) -> dict:
    """``users`` threads each upload -> await result -> repeat for ``warm_s + duration_s``.

    Only requests submitted inside the measuring window (after ``warm_s``) count for latency and
    errors; results/s counts results received inside the window. Bounded by ``max_requests``
    and, per request, ``timeout_s``.

    Returns:
        A load-table row: ``producers``, ``submitted``, ``offered_per_s``, ``results_per_s``,
        ``avg_ms``/``p50_ms``/``p95_ms``/``p99_ms``/``max_ms`` (client-observed),
        ``worker_total_p99_ms``, ``mean_batch_size``, ``error_rate``.
    """
    counter = itertools.count()
    records: list[tuple[float, Got | None]] = []
    t_begin = time.time() * 1000.0
    w0, w1 = t_begin + warm_s * 1000.0, t_begin + (warm_s + duration_s) * 1000.0

    def user() -> None:
        while time.time() * 1000.0 < w1:
            i = next(counter)
            if i >= max_requests:
                return
            t_sub = time.time() * 1000.0
            uid = sender.send(i)
            records.append((t_sub, rw.wait_one(uid, timeout_s)))  # list.append is atomic

    threads = [threading.Thread(target=user, daemon=True) for _ in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(warm_s + duration_s + timeout_s + 10.0)
    inside = [(t, g) for t, g in records if w0 <= t < w1]
    done = [g for _, g in inside if g is not None]
    received = sum(1 for _, g in records if g is not None and w0 <= g.recv_ms < w1)
    return {"producers": users, "submitted": len(inside),
            "offered_per_s": round(len(inside) / duration_s, 1),
            "results_per_s": round(received / duration_s, 1),
            **latency_stats([g.latency_ms for g in done]),
            "worker_total_p99_ms": latency_stats([g.total_ms for g in done])["p99_ms"],
            "mean_batch_size": round(sum(g.batch_size for g in done) / len(done),
                                     2) if done else None,
            "error_rate": round(_errors(inside) / len(inside), 4) if inside else None}


def open_loop(sender: InlineSender, rw: ResultWatcher, rate: float, duration_s: float,
              timeout_s: float, first: int) -> dict:
    """Uploads at a fixed ``rate`` (events/s) for ``duration_s``; ids numbered from ``first``."""
    n = max(1, int(rate * duration_s))
    t0 = time.monotonic()
    sent: list[tuple[float, str]] = []
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent.append((time.time() * 1000.0, sender.send(first + i)))
    sender.flush()
    got = rw.wait_all([u for _, u in sent], timeout_s)
    records = [(t, got.get(u)) for t, u in sent]
    done = [g for _, g in records if g is not None]
    worker_total = latency_stats([g.total_ms for g in done])
    return {"rate_per_s": round(rate, 1), "submitted": n,
            **latency_stats([g.latency_ms for g in done]),
            "worker_total_p99_ms": worker_total["p99_ms"],
            "worker_total_p50_ms": worker_total["p50_ms"],
            # the worker built the result -> a read_committed reader saw it: the transaction,
            # the commit markers and the reader's own fetch
            "after_result_p50_ms": latency_stats([g.latency_ms - g.total_ms
                                                  for g in done])["p50_ms"],
            "error_rate": round(_errors(records) / n, 4)}


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(name + "{"))


def _stage_means(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """Mean ms per batch of each ``cardstream_batch_stage_seconds`` stage, plus the mean
    ``fetch_delay`` per event (Kafka timestamp -> consumer returned it), over the scrape window."""
    out = {}
    for k, v in after.items():
        if k.startswith("cardstream_batch_stage_seconds_count{"):
            n = v - before.get(k, 0.0)
            ksum = k.replace("_count{", "_sum{")
            if n > 0:
                stage = k.split("stage=", 1)[1].rstrip("}")
                out[stage] = round(1000.0 * (after[ksum] - before.get(ksum, 0.0)) / n, 2)
    n = _delta(after, before, "cardstream_fetch_delay_seconds_count")
    if n > 0:
        out["fetch_delay_per_event"] = round(
            1000.0 * _delta(after, before, "cardstream_fetch_delay_seconds_sum") / n, 2)
    return out


def run_load(base: Settings, files: Sequence[Path], logs: Path, levels: Sequence[int] = LEVELS,
             duration_s: float = 6.0, warm_s: float = 1.0, sleep_ms: float = 20.0,
             timeout_s: float = 30.0, max_requests: int = 20_000,
             half_rate: float | None = None) -> dict:
    """The load table and the half-capacity run on one sleep-processor worker.

    Args:
        base: settings from the environment.
        files: small images (uploaded inline).
        logs: folder for the worker's log.
        levels: concurrent producers per level.
        duration_s / warm_s: measuring window and unmeasured ramp per level (s).
        sleep_ms: per-call latency of the sleep processor (ms).
        timeout_s: per-request wait for a result (s).
        max_requests: cap on requests per level.
        half_rate: skip the table and run only the open loop at this rate (events/s), e.g. to
            re-measure the half-capacity latency against an earlier run's capacity.

    Returns:
        ``{"processor", "max_wait_ms", "max_batch", "rows", "capacity_per_s", "half_capacity",
        "batch_compute_ms", "p99_goal_ms", "p99_goal_met"}``.
    """
    with fresh_stack(base, PARTITIONS) as s, ResultWatcher(s) as rw:
        w = s.worker
        workers = [start_worker(s, 0, logs, ["--tasks", "card", "--processor", "card=sleep",
                                             "--sleep-ms", str(sleep_ms),
                                             "--max-batch", str(w.max_batch),
                                             "--max-wait-ms", str(w.max_wait_ms)])]
        try:
            wait_group(s, 1, PARTITIONS, timeout_s=120.0)
            sender = InlineSender(s, "card", files)
            root = sender.prefix
            rows = []
            for i, users in enumerate(() if half_rate else levels):
                check_alive(workers)
                sender.prefix = f"{root}l{i}"  # ids restart at 0 per level
                rows.append(closed_loop(sender, rw, users, duration_s, warm_s, timeout_s,
                                        max_requests))
            capacity = 2.0 * half_rate if half_rate else max(r["results_per_s"] for r in rows)
            sender.prefix = f"{root}h"
            if half_rate:  # one unmeasured second so the first batches do not count
                open_loop(sender, rw, half_rate, 1.0, timeout_s, first=1_000_000)
            before = scrape(workers[0].port)
            half = open_loop(sender, rw, capacity / 2.0, duration_s, timeout_s, first=0)
            after = scrape(workers[0].port)
        finally:
            stop_workers(workers)
    calls = _delta(after, before, "cardstream_inference_seconds_count")
    compute_ms = 1000.0 * _delta(after, before,
                                 "cardstream_inference_seconds_sum") / max(calls, 1.0)
    polls = _delta(after, before, "cardstream_poll_batch_size_count")
    half["mean_poll_batch"] = round(_delta(after, before, "cardstream_poll_batch_size_sum")
                                    / max(polls, 1.0), 2)
    half["stage_mean_ms"] = _stage_means(after, before)
    goal = w.max_wait_ms + 2.0 * compute_ms
    return {"processor": f"sleep ({sleep_ms:g} ms per call + 2 ms per item, bucket 32)",
            "workers": 1, "partitions": PARTITIONS, "max_wait_ms": w.max_wait_ms,
            "max_batch": w.max_batch, "duration_s": duration_s, "rows": rows,
            "capacity_per_s": capacity, "half_capacity": half,
            "batch_compute_ms": round(compute_ms, 1), "p99_goal_ms": round(goal, 1),
            "p99_goal_met": half["p99_ms"] is not None and half["p99_ms"] <= goal}
