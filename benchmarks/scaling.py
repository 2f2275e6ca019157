"""Scaling with partitions: 1, 2, 4 worker processes on a 6-partition uploads topic.

The workers serve ``card`` with the ``sleep`` processor (``--sleep-ms`` per call + 2 ms per item)
and small poll batches, so one worker's throughput is bounded by its sleep, not by this machine's
two cores. Workers are added to the same consumer group step by step; each step waits until the
group is stable with every partition held, then uploads a backlog of ``events`` small images
inline and times from the first upload to the last committed result.

With 6 partitions the busiest worker holds ``ceil(6 / n)`` partitions, so the ideal speed-up of
``n`` workers over one is ``6 / ceil(6 / n)``: 1, 2 and 3 for 1, 2 and 4 workers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    BenchError,
    InlineSender,
    ResultWatcher,
    WorkerProc,
    check_alive,
    fresh_stack,
    start_worker,
    stop_workers,
    wait_group,
)
from streams.settings import Settings

PARTITIONS = 6


def run_scaling(base: Settings, files: Sequence[Path], logs: Path,
                counts: Sequence[int] = (1, 2, 4), sleep_ms: float = 200.0, max_batch: int = 8,
                events: int = 240, timeout_s: float = 120.0) -> dict:
    """Throughput of 1, 2, 4 workers on the same backlog size.

    Args:
        base: settings from the environment.
        files: small images (uploaded inline).
        logs: folder for the workers' logs.
        counts: worker counts, ascending.
        sleep_ms: per-call latency of the sleep processor (ms).
        max_batch: events per poll batch of each worker.
        events: backlog uploaded per step.
        timeout_s: wait for a step's results (s).

    Returns:
        ``{"processor", "partitions", "events", "rows": [{"workers", "results", "seconds",
        "results_per_s", "speedup", "ideal_speedup"}]}``.

    Raises:
        BenchError: a worker exited or a step's results did not all arrive.
    """
    args = ["--tasks", "card", "--processor", "card=sleep", "--sleep-ms", str(sleep_ms),
            "--max-batch", str(max_batch), "--max-wait-ms", "10"]
    rows = []
    with fresh_stack(base, PARTITIONS) as s, ResultWatcher(s) as rw:
        workers: list[WorkerProc] = []
        try:
            sender = InlineSender(s, "card", files)
            for step, n in enumerate(counts):
                while len(workers) < n:
                    workers.append(start_worker(s, len(workers), logs, args))
                wait_group(s, n, PARTITIONS, timeout_s=120.0)
                check_alive(workers)
                t0 = time.time() * 1000.0
                ids = [sender.send(step * events + i) for i in range(events)]
                sender.flush()
                got = rw.wait_all(ids, timeout_s)
                if len(got) < events:
                    raise BenchError(f"{n} workers: {len(got)} of {events} results in "
                                     f"{timeout_s} s")
                sec = (max(g.recv_ms for g in got.values()) - t0) / 1000.0
                rows.append({"workers": n, "results": len(got), "seconds": round(sec, 3),
                             "results_per_s": round(len(got) / sec, 1),
                             "ideal_speedup": round(PARTITIONS / math.ceil(PARTITIONS / n), 2)})
        finally:
            stop_workers(workers)
    for r in rows:
        r["speedup"] = round(r["results_per_s"] / rows[0]["results_per_s"], 2)
    return {"processor": f"sleep ({sleep_ms:g} ms per call + 2 ms per item)",
            "partitions": PARTITIONS, "max_batch": max_batch, "events": events, "rows": rows}
