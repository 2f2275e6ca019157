"""The rush: lag built up, uploads past their deadline and repeat uploads (issue 42).

One workload, four runs on fresh topics and buckets, the same warmed-up processor in this
process: ``n`` uploads of distinct images produced before the worker starts (the lag), of which
``stale_share`` carry a deadline that has passed when the worker reaches them and
``repeat_share`` are repeats (new upload ids, the bytes of an earlier upload of the run). The
runs differ in what the worker may use:

- ``baseline``: the same uploads without deadlines, the result cache off (what every upload cost
  before);
- ``deadlines``: deadlines on, cache off;
- ``cache``: no deadlines, cache on;
- ``rush``: both.

Each row counts the images the model ran on (the processor's ``stats.images``) and its batched
calls (``stats.calls``) against what the workload allows: with deadlines, only uploads still in
time; with the cache, each distinct image once (``expected_images``).
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from benchmarks.common import BenchError, fresh_stack, wait_group
from processors.base import Processor
from schemas import codec
from schemas import formats as F
from streams.kafka import read_to_end
from streams.produce import UploadProducer
from streams.settings import CacheSettings, Settings
from streams.storage import Storage
from streams.worker import Worker

PARTITIONS = 6
MODES = {"baseline": (False, False), "deadlines": (True, False), "cache": (False, True),
         "rush": (True, True)}


def distinct_images(sources: Sequence[Path], n: int, seed: int = 42,
                    long_side: int = 640) -> list[bytes]:
    """``n`` JPEGs with distinct bytes: the sources (cycled) scaled to ``long_side`` px, each with
    a small random mark in a corner (the card itself untouched), quality 90."""
    rng = random.Random(seed)
    base = []
    for p in sources:
        im = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if im is None:
            raise BenchError(f"cannot read {p}")
        f = long_side / max(im.shape[:2])
        base.append(cv2.resize(im, (round(im.shape[1] * f), round(im.shape[0] * f)),
                               interpolation=cv2.INTER_AREA))
    out = []
    for i in range(n):
        im = base[i % len(base)].copy()
        x, y = rng.randrange(0, 12), rng.randrange(0, 12)
        im[y:y + 3, x:x + 3] = np.array([rng.randrange(256) for _ in range(3)], np.uint8)
        ok, buf = cv2.imencode(".jpg", im, [cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise BenchError("JPEG encode failed")
        out.append(buf.tobytes())
    return out


def workload(n: int, stale_share: float, repeat_share: float, seed: int = 7) -> list[dict]:
    """The uploads of a run: ``[{"image": k, "stale": bool, "repeat": bool}]``, exactly
    ``round(n * stale_share)`` stale and ``round(n * repeat_share)`` repeats (a repeat has the
    image of an earlier upload), the two drawn independently."""
    rng = random.Random(seed)
    stale = set(rng.sample(range(n), round(n * stale_share)))
    repeats = set(rng.sample(range(1, n), round(n * repeat_share)))
    ups: list[dict] = []
    distinct = 0
    for i in range(n):
        k = ups[rng.randrange(i)]["image"] if i in repeats else distinct
        distinct += i not in repeats
        ups.append({"image": k, "stale": i in stale, "repeat": i in repeats})
    return ups


def expected_images(ups: Sequence[dict], deadlines: bool, cache: bool) -> int:
    """Images the model must run on: uploads in time (all without deadlines), each distinct
    image once with the cache."""
    live = [u for u in ups if not (deadlines and u["stale"])]
    return len({u["image"] for u in live}) if cache else len(live)


def one_run(base: Settings, task: str, proc: Processor, images: Sequence[bytes],
            ups: Sequence[dict], mode: str, lag_s: float, timeout_s: float) -> dict[str, Any]:
    """Produce the workload, wait ``lag_s`` (the stale deadlines pass), run the worker until
    every upload has its result; count model images and calls, stale answers and cache hits."""
    deadlines, cache = MODES[mode]
    with fresh_stack(base, PARTITIONS) as s:
        s = s.model_copy(update={"cache": CacheSettings(enabled=cache)})
        prod = UploadProducer(s)
        prefix = uuid.uuid4().hex[:8]
        t_prod = time.time()
        for i, u in enumerate(ups):
            ev = prod.event_for(f"{prefix}-{i:05d}", task, images[u["image"]], "u.jpg", None)
            if deadlines:
                when = t_prod + (lag_s / 2 if u["stale"] else 3600.0)
                ev = ev.model_copy(update={"deadline": F.utc_now_rfc3339(
                    dt.datetime.fromtimestamp(when, dt.UTC))})
            prod.send(ev)
        if prod.flush(60):
            raise BenchError("uploads not delivered")
        time.sleep(max(0.0, lag_s - (time.time() - t_prod)))
        images0, calls0 = proc.stats.images, proc.stats.calls
        w = Worker(s, {task: proc}, Storage(s.s3))
        th = threading.Thread(target=w.run, daemon=True)
        t0 = time.monotonic()
        th.start()
        try:
            wait_group(s, 1, PARTITIONS)
            deadline = time.monotonic() + timeout_s
            while w.committer.committed_events < len(ups) and time.monotonic() < deadline:
                time.sleep(0.2)
            wall = time.monotonic() - t0
        finally:
            w.stop()
            th.join(120)
        if w.committer.committed_events < len(ups):
            raise BenchError(f"{mode}: {w.committer.committed_events} of {len(ups)} answered "
                             f"in {timeout_s} s")
        results = [codec.decode_result(m.value())
                   for m in read_to_end(s.kafka, s.kafka.results_topic)]
    reasons = Counter(str(r) for x in results for r in x.reasons)
    return {"mode": mode, "uploads": len(ups), "results": len(results),
            "stale": reasons.get("STALE", 0),
            "cache_hits": sum(1 for r in results if r.cache_hit),
            "model_images": proc.stats.images - images0, "model_calls": proc.stats.calls - calls0,
            "expected_images": expected_images(ups, deadlines, cache),
            "wall_s": round(wall, 2), "uploads_per_s": round(len(ups) / wall, 2),
            "statuses": dict(Counter(str(r.status) for r in results))}


def run_rush(base: Settings, task: str, proc: Processor, sources: Sequence[Path], n: int = 120,
             stale_share: float = 0.3, repeat_share: float = 0.2, lag_s: float = 4.0,
             timeout_s: float = 900.0) -> dict[str, Any]:
    """The four runs (module doc) on one workload; ratios of model images and calls against the
    baseline."""
    ups = workload(n, stale_share, repeat_share)
    images = distinct_images(sources, 1 + max(u["image"] for u in ups))
    rows = [one_run(base, task, proc, images, ups, m, lag_s, timeout_s) for m in MODES]
    b = rows[0]
    for r in rows:
        r["images_vs_baseline"] = round(r["model_images"] / b["model_images"], 3)
        r["calls_vs_baseline"] = round(r["model_calls"] / b["model_calls"], 3)
    return {"task": task, "n": n, "stale_share": stale_share, "repeat_share": repeat_share,
            "stale_uploads": sum(u["stale"] for u in ups),
            "repeat_uploads": sum(u["repeat"] for u in ups), "rows": rows}
