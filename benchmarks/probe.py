"""Probe: what pausing every partition during each batch costs a confluent-kafka consumer.

The worker pauses its assignment while a batch computes and resumes it afterwards. This probe
isolates that pattern from everything else: a producer sends small records at a fixed rate with
their send time in the value; a consumer takes up to 32 records per ``consume`` (10 ms wait),
then "computes" for ``compute_ms`` while calling ``poll`` every 50 ms — once with its partitions
paused (like the worker) and once without pausing (records polled meanwhile are kept, like the
worker's carry list). Reported: produce -> consume latency percentiles (ms) for both, on fresh
6-partition topics of the local stack.
"""

from __future__ import annotations

import threading
import time

from benchmarks.common import fresh_stack, latency_stats, wait_group
from streams.kafka import consumer, plain_producer
from streams.settings import Settings

PARTITIONS = 6


def _one(base: Settings, pause: bool, rate: float, seconds: float, compute_ms: float) -> dict:
    with fresh_stack(base, PARTITIONS) as s:
        k = s.kafka
        c = consumer(k, k.group_id)
        c.subscribe([k.uploads_topic])
        lat: list[float] = []
        stop = threading.Event()

        def take(m) -> None:  # noqa: ANN001 (confluent_kafka.Message)
            if m is not None and m.error() is None:
                lat.append(time.time() * 1000.0 - float(m.value().decode()))

        def loop() -> None:
            while not stop.is_set():
                msgs = c.consume(32, 0.01)
                for m in msgs:
                    take(m)
                if not msgs:
                    continue
                parts = c.assignment()
                if pause:
                    c.pause(parts)
                t_end = time.monotonic() + compute_ms / 1000.0
                while time.monotonic() < t_end:
                    take(c.poll(0.05))
                if pause:
                    c.resume(parts)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        try:
            wait_group(s, 1, PARTITIONS)
            p = plain_producer(k)
            n = int(rate * seconds)
            t0 = time.monotonic()
            for i in range(n):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                p.produce(k.uploads_topic, key=str(i).encode(),
                          value=str(time.time() * 1000.0).encode())
                p.poll(0)
            p.flush(10)
            deadline = time.monotonic() + 10.0
            while len(lat) < n and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            t.join(10)
            c.close()
    return {"pause_during_compute": pause, "records": n, "received": len(lat),
            **latency_stats(lat)}


def run_probe(base: Settings, rate: float = 25.0, seconds: float = 4.0,
              compute_ms: float = 100.0) -> dict:
    """Delivery latency with and without pause/resume around each simulated batch.

    Args:
        base: settings from the environment.
        rate: records per second.
        seconds: sending time per variant (s).
        compute_ms: simulated compute per batch (ms).

    Returns:
        ``{"rate_per_s", "compute_ms", "rows": [{"pause_during_compute", "records",
        "received", "avg_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"}, ...]}``.
    """
    rows = [_one(base, pause, rate, seconds, compute_ms) for pause in (True, False)]
    return {"rate_per_s": rate, "compute_ms": compute_ms, "rows": rows}
