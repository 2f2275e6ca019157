"""The fault suite's soak: the group's capacity measured on a backlog, then a long run at a share
of it (70 % by default) with no fault, each worker's RSS sampled.

RSS growth of a slot is ``(last sample - baseline) / baseline``, the baseline being its first
sample after :data:`WARM_S` (allocators and librdkafka's buffers settle in the first minute). A
slot whose process was restarted has no valid growth (reported, and the goal is missed).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks.common import fresh_stack, wait_group
from benchmarks.faults.ledger import tally
from benchmarks.faults.proxy import FaultProxy
from benchmarks.faults.suite import (
    PARTITIONS,
    SOAK_RSS_GROWTH_MAX,
    Group,
    Options,
    Outputs,
    Uploads,
    worker_args,
)
from streams.settings import Settings

WARM_S = 60.0
SAMPLE_S = 15.0


def _drain(outputs: Outputs, uploads: Uploads, group: Group, timeout_s: float) -> float:
    """Wait until every produced record has an output (or ``timeout_s``); returns the time."""
    end = time.time() + timeout_s
    while time.time() < end:
        group.supervise()
        if len({(x.partition, x.offset) for x in outputs.got}) >= len(uploads.produced):
            break
        time.sleep(0.2)
    return time.time()


def run_soak(base: Settings, o: Options) -> dict[str, Any]:
    """Capacity on a backlog, then ``o.soak_minutes`` at ``o.soak_load`` of it.

    Returns:
        ``capacity_per_s``, ``rate_per_s``, ``minutes``, the tally of the soak's uploads
        (:func:`benchmarks.faults.ledger.tally`), ``rss`` per slot (``baseline_mib``,
        ``last_mib``, ``growth``, ``restarts``) and ``goals_met``.
    """
    with fresh_stack(base, PARTITIONS) as s, FaultProxy.for_store(s.s3) as proxy:
        group = Group(s, proxy.endpoint, o.out / "logs", worker_args(o, soak=True))
        for slot in range(o.workers):
            group.start(slot)
        wait_group(s, o.workers, PARTITIONS, timeout_s=120.0)
        outputs, uploads = Outputs(s), Uploads(s)
        try:
            backlog = max(600, o.workers * 200)
            t0 = time.time()
            for i in range(backlog):
                uploads.good(i)
            uploads.flush()
            t1 = _drain(outputs, uploads, group, 300.0)
            capacity = backlog / (t1 - t0)
            rate = o.soak_load * capacity
            start = len(uploads.produced)
            samples: dict[int, list[tuple[float, float]]] = {}
            stop = threading.Event()

            def produce() -> None:
                ts = time.time()
                i = 0
                while not stop.is_set():
                    delay = ts + i / rate - time.time()
                    if delay > 0:
                        time.sleep(min(delay, 0.5))
                        continue
                    uploads.good(backlog + i)
                    i += 1

            th = threading.Thread(target=produce, name="soak-producer", daemon=True)
            ts = time.time()
            th.start()
            while time.time() < ts + o.soak_minutes * 60:
                group.supervise()
                for slot, mib in group.rss_mib().items():
                    samples.setdefault(slot, []).append((time.time() - ts, mib))
                time.sleep(SAMPLE_S)
            stop.set()
            th.join(30)
            uploads.flush()
            end = _drain(outputs, uploads, group, 120.0)
        finally:
            group.stop()
            outputs.close()
    soaked = uploads.produced[start:]
    row = tally(soaked, outputs.got, end, end)
    rss = {}
    for slot, xs in sorted(samples.items()):
        warm = [m for t, m in xs if t >= WARM_S] or [m for _, m in xs]
        sl = group.slots[slot]
        rss[str(slot)] = {"baseline_mib": round(warm[0], 1), "last_mib": round(warm[-1], 1),
                          "growth": round((warm[-1] - warm[0]) / warm[0], 4),
                          "restarts": sl.restarts}
    ok = (row["lost"] == 0 and row["duplicates"] == 0
          and all(r["growth"] < SOAK_RSS_GROWTH_MAX and r["restarts"] == 0 for r in rss.values()))
    return {"capacity_per_s": round(capacity, 1), "backlog": backlog,
            "rate_per_s": round(rate, 1), "load": o.soak_load, "minutes": o.soak_minutes,
            **row, "rss": rss, "goals_met": ok}
