"""Live latency alone and beside a backfill (issue 42): does a replay yield to the live workers?

One run, real processes on fresh topics and buckets: a live ``cardstream worker`` (the real
card model) under an open-loop load at ``load_share`` of its measured capacity, and a
``cardstream replay`` of an earlier window of the same uploads topic started beside it. Phases,
each ``phase_s`` of live load (the replay started ``lead_s`` before its phase, so its start-up
and warm-up fall outside the measurement):

- ``alone``: the live worker only;
- ``backfill_yielding``: with a replay that yields (``CARDSTREAM_BACKFILL__YIELD_TO_LIVE=true``:
  the lag gate, small batches, lowered CPU priority);
- ``backfill_not_yielding``: with a replay that does not;
- ``alone_again``: the live worker only (drift of the machine's load during the run).

Each phase reports the live uploads' P50/P99 (``timings.total_ms``: Kafka timestamp to result)
and what the replay did meanwhile (results on its side topic); the ratios are the yielding and
non-yielding P99 over the mean of the two ``alone`` phases. The result cache is off on both
sides (``CARDSTREAM_CACHE__ENABLED=false``): the sender cycles a few images.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    InlineSender,
    ResultWatcher,
    check_alive,
    fresh_stack,
    latency_stats,
    start_worker,
    stop_workers,
    wait_group,
)
from streams.kafka import read_to_end
from streams.procs import settings_env
from streams.settings import Settings

PARTITIONS = 6
NO_CACHE = {"CARDSTREAM_CACHE__ENABLED": "false"}


def _side_count(s: Settings, topic: str) -> int:
    try:
        return len(list(read_to_end(s.kafka, topic)))
    except Exception:  # not created yet: the replay is still starting
        return 0


def _replay(s: Settings, from_ms: int, to_ms: int, side: str, yielding: bool,
            log: Path) -> subprocess.Popen:
    env = {**settings_env(s), **NO_CACHE,
           "CARDSTREAM_BACKFILL__YIELD_TO_LIVE": "true" if yielding else "false"}
    exe = Path(sys.executable).with_name("cardstream")
    with open(log, "ab") as f:
        return subprocess.Popen([str(exe), "replay", "--from", str(from_ms), "--to", str(to_ms),
                                 "--results-topic", side, "--group", f"{side}-g",
                                 "--report", str(log.with_suffix(".json"))], env=env,
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _phase(sender: InlineSender, rw: ResultWatcher, rate: float, phase_s: float,
           first: int) -> list[float]:
    """Open-loop uploads at ``rate``/s for ``phase_s``; the live results' ``total_ms``."""
    n = max(1, int(rate * phase_s))
    t0 = time.monotonic()
    ids = []
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ids.append(sender.send(first + i))
    sender.flush()
    got = rw.wait_all(ids, 300.0)
    return [g.total_ms for g in got.values()]


def run_backfill(base: Settings, files: Sequence[Path], logs: Path, phase_s: float = 60.0,
                 lead_s: float = 25.0, window: int = 400,
                 load_share: float = 0.5) -> dict[str, Any]:
    """The phases of the module doc; returns the table and the ratios."""
    logs.mkdir(parents=True, exist_ok=True)
    with fresh_stack(base, PARTITIONS) as s:
        live = [start_worker(s, 0, logs, ["--tasks", "card"], NO_CACHE)]
        rows: list[dict[str, Any]] = []
        try:
            with ResultWatcher(s) as rw:
                wait_group(s, 1, PARTITIONS, timeout_s=300.0)
                sender = InlineSender(s, "card", files)
                # the backfill window: uploads the live worker answers first (its capacity)
                t_from = int(time.time() * 1000)
                t0 = time.monotonic()
                ids = [sender.send(i) for i in range(window)]
                sender.flush()
                got = rw.wait_all(ids, 1800.0)
                capacity = len(got) / (time.monotonic() - t0)
                t_to = int(time.time() * 1000) + 1
                rate = load_share * capacity
                first = window
                for name, yielding in (("alone", None), ("backfill_yielding", True),
                                       ("backfill_not_yielding", False), ("alone_again", None)):
                    check_alive(live)
                    rp, side = None, f"{s.kafka.results_topic}.{name}"
                    if yielding is not None:
                        rp = _replay(s, t_from, t_to, side, yielding, logs / f"replay-{name}.log")
                        _phase(sender, rw, rate, lead_s, first)  # the replay starts up
                        first += int(rate * lead_s) + 1
                    before = _side_count(s, side) if rp else 0
                    lat = _phase(sender, rw, rate, phase_s, first)
                    first += int(rate * phase_s) + 1
                    replayed = _side_count(s, side) - before if rp else 0
                    if rp is not None:
                        os.killpg(rp.pid, signal.SIGTERM)
                        rp.wait(60)
                    rows.append({"phase": name, "live_uploads": len(lat),
                                 "replayed_meanwhile": replayed, **latency_stats(lat)})
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            stop_workers(live)
    alone = [r["p99_ms"] for r in rows if r["phase"].startswith("alone")]
    base_p99 = sum(alone) / len(alone)
    by = {r["phase"]: r for r in rows}
    return {"capacity_per_s": round(capacity, 2), "rate_per_s": round(rate, 2),
            "phase_s": phase_s, "window": window, "rows": rows,
            "p99_yielding_over_alone": round(by["backfill_yielding"]["p99_ms"] / base_p99, 3),
            "p99_not_yielding_over_alone": round(by["backfill_not_yielding"]["p99_ms"] / base_p99,
                                                 3)}
