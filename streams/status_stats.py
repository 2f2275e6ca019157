"""Pure computations of the status app: verdict summaries, tumbling-window aggregates, percentiles.

Nothing here touches Kafka or faust, so the unit tier tests it directly.

Window aggregate (a JSON object, the value of the status app's ``stats`` table, one per task,
source partition and window)::

    {"start_ms": int, "size_s": int, "count": int,
     "by_status": {"accepted": int, ...}, "by_reason": {"NO_CARD": int, ...},
     "total_ms": {"sum": float, "min": float, "max": float, "hist": {"<bucket>": int}},
     "batch_size_sum": int, "last_offset": int}

``last_offset`` is the results-topic offset of the last result counted in it (-1: none); a window
key only ever receives results of one partition, in offset order, so a result at or below it has
been counted already (:func:`applied`), which makes re-reading after a crash harmless.

``hist`` is a fixed log-spaced histogram of ``timings.total_ms``: bucket 0 holds values up to
:data:`HIST_MIN_MS`, bucket ``i >= 1`` holds ``(MIN * G**(i-1), MIN * G**i]`` with growth
:data:`HIST_GROWTH` (the layout of HdrHistogram / DDSketch-style log buckets). Because every
instance uses the same buckets, aggregates of different partitions and windows merge exactly (sum
of counts), and a percentile read from the merged histogram is within ``HIST_GROWTH - 1`` (5 %)
relative error of the nearest-rank sample percentile.

Partitioning: the key a librdkafka producer (the worker) writes to partition
``crc32(key) % partitions`` — librdkafka's default ``consistent_random`` partitioner (CRC-32 of the
key bytes, IEEE polynomial, as :func:`zlib.crc32`). :func:`crc32_partitioner` is the same rule as
a faust/aiokafka partitioner so the status app routes queries to the partition the worker chose.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from processors.registry import names, spec
from schemas.models import VerificationResult

#: Upper edge of histogram bucket 0, ms.
HIST_MIN_MS = 0.1
#: Ratio between consecutive bucket edges (5 % relative resolution).
HIST_GROWTH = 1.05
_LOG_G = math.log(HIST_GROWTH)
#: Percentiles reported by :func:`summarize` (nearest rank).
PERCENTILES = (50, 95, 99)


# ---------------------------------------------------------------------------------------------
# partitioning


def crc32_partition(key: bytes, partitions: int) -> int:
    """Partition librdkafka's default partitioner picks for a non-null ``key``: ``crc32(key) %
    n``."""
    return zlib.crc32(key) % partitions


def crc32_partitioner(key: bytes | None, all_partitions: Sequence[int],
                      available: Sequence[int]) -> int:
    """aiokafka/faust partitioner with librdkafka's ``consistent_random`` rule.

    Args:
        key: serialized key (``None``: a random available partition, as librdkafka does).
        all_partitions: the topic's partition ids (sorted, as aiokafka passes them).
        available: partitions with a leader.

    Returns:
        the partition id.
    """
    if key is None:
        return random.choice(list(available) or list(all_partitions))
    return all_partitions[zlib.crc32(key) % len(all_partitions)]


# ---------------------------------------------------------------------------------------------
# verdict summaries


def verdict_summary(r: VerificationResult, partition: int, offset: int,
                    timestamp_ms: int) -> dict[str, Any]:
    """The verdict table's value for result ``r`` read at ``partition``/``offset`` of the results
    topic.

    Returns:
        a JSON object: ``upload_id``, ``task``, ``status``, ``reasons`` (list of codes),
        ``objects`` (the stored output object refs: ``{"artifact", "bucket", "key", "sha256",
        "content_type", "width", "height", "size_bytes"}``), ``processed_at`` (RFC 3339),
        ``total_ms`` (ms), ``batch_size``, ``model`` (``{"name", "version", "provider"}`` or null),
        ``result`` (``{"partition", "offset", "timestamp_ms"}`` of the result record).
    """
    objects = []
    if str(r.task) in names():
        task = spec(r.task)
        ref = task.main_ref(r.payload)
        if ref is not None:
            objects.append({"artifact": task.main_artifact, **ref.canonical()})
    return {
        "upload_id": r.upload_id,
        "task": str(r.task),
        "status": str(r.status),
        "reasons": [str(x) for x in r.reasons],
        "objects": objects,
        "processed_at": r.processed_at,
        "total_ms": float(r.timings.total_ms),
        "batch_size": int(r.timings.batch_size),
        "model": r.model.canonical() if r.model else None,
        "result": {"partition": int(partition), "offset": int(offset),
                   "timestamp_ms": int(timestamp_ms)},
    }


def expired(summary: Mapping[str, Any], now_ms: int, retention_s: float) -> bool:
    """Whether a verdict summary's result record is older than ``retention_s`` seconds at
    ``now_ms``."""
    return now_ms - int(summary["result"]["timestamp_ms"]) > retention_s * 1000.0


# ---------------------------------------------------------------------------------------------
# histogram


def bucket_of(ms: float) -> int:
    """Histogram bucket of a duration ``ms`` (>= 0): 0 up to :data:`HIST_MIN_MS`, then
    log-spaced."""
    if ms <= HIST_MIN_MS:
        return 0
    i = math.ceil(math.log(ms / HIST_MIN_MS) / _LOG_G - 1e-9)
    return max(1, i)


def bucket_upper_ms(i: int) -> float:
    """Upper edge (ms, inclusive) of histogram bucket ``i``."""
    return HIST_MIN_MS * HIST_GROWTH ** i


def hist_percentile(hist: Mapping[str | int, int], p: float, lo: float, hi: float) -> float | None:
    """Nearest-rank ``p``-th percentile (0 < p <= 100) of the samples counted in ``hist``.

    Args:
        hist: bucket index (int or its decimal string, as JSON keeps it) -> count.
        lo, hi: the smallest and largest sample (ms); the answer is clamped to them.

    Returns:
        the upper edge of the bucket holding the rank-``ceil(p/100 * N)`` sample, clamped to
        ``[lo, hi]`` (ms); ``None`` for an empty histogram.
    """
    items = sorted((int(k), int(v)) for k, v in hist.items() if int(v) > 0)
    n = sum(v for _, v in items)
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    seen = 0
    for i, c in items:
        seen += c
        if seen >= rank:
            return min(max(bucket_upper_ms(i), lo), hi)
    return hi  # pragma: no cover (rank <= n)


# ---------------------------------------------------------------------------------------------
# window aggregates


def window_start_ms(timestamp_ms: int, size_s: int) -> int:
    """Start (epoch ms) of the tumbling window of ``size_s`` seconds holding ``timestamp_ms``."""
    size_ms = size_s * 1000
    return timestamp_ms - timestamp_ms % size_ms


def new_window(start_ms: int, size_s: int) -> dict[str, Any]:
    """An empty window aggregate (see module docstring)."""
    return {"start_ms": int(start_ms), "size_s": int(size_s), "count": 0, "by_status": {},
            "by_reason": {}, "total_ms": {"sum": 0.0, "min": None, "max": None, "hist": {}},
            "batch_size_sum": 0, "last_offset": -1}


def applied(value: Mapping[str, Any] | None, offset: int) -> bool:
    """Whether the result at ``offset`` was already counted in window aggregate ``value``."""
    return value is not None and int(value.get("last_offset", -1)) >= offset


def _inc(d: dict[str, int], k: str, n: int = 1) -> None:
    d[k] = d.get(k, 0) + n


def add_result(agg: Mapping[str, Any], status: str, reasons: Iterable[str], total_ms: float,
               batch_size: int, offset: int = -1) -> dict[str, Any]:
    """A copy of window aggregate ``agg`` with one more result counted.

    Args:
        status: the result's status; reasons: its reason codes; total_ms: ``timings.total_ms``
        (ms); batch_size: ``timings.batch_size`` (images in its inference call); offset: the
        result's offset in the results topic (kept as ``last_offset``).
    """
    out = {**agg, "by_status": dict(agg["by_status"]), "by_reason": dict(agg["by_reason"])}
    t = dict(agg["total_ms"])
    t["hist"] = dict(t["hist"])
    out["count"] = agg["count"] + 1
    _inc(out["by_status"], status)
    for r in reasons:
        _inc(out["by_reason"], r)
    t["sum"] = float(t["sum"]) + float(total_ms)
    t["min"] = float(total_ms) if t["min"] is None else min(t["min"], float(total_ms))
    t["max"] = float(total_ms) if t["max"] is None else max(t["max"], float(total_ms))
    _inc(t["hist"], str(bucket_of(total_ms)))
    out["total_ms"] = t
    out["batch_size_sum"] = int(agg["batch_size_sum"]) + int(batch_size)
    out["last_offset"] = max(int(agg.get("last_offset", -1)), int(offset))
    return out


def merge_windows(aggs: Iterable[Mapping[str, Any]], start_ms: int, size_s: int) -> dict[str, Any]:
    """Sum of window aggregates (different partitions, or consecutive windows) as one window
    starting at ``start_ms`` of ``size_s`` seconds. Exact: counts and histogram buckets add."""
    out = new_window(start_ms, size_s)
    t = out["total_ms"]
    for a in aggs:
        out["count"] += int(a["count"])
        out["batch_size_sum"] += int(a["batch_size_sum"])
        for k, v in a["by_status"].items():
            _inc(out["by_status"], k, int(v))
        for k, v in a["by_reason"].items():
            _inc(out["by_reason"], k, int(v))
        at = a["total_ms"]
        t["sum"] += float(at["sum"])
        if at["min"] is not None:
            t["min"] = at["min"] if t["min"] is None else min(t["min"], at["min"])
            t["max"] = at["max"] if t["max"] is None else max(t["max"], at["max"])
        for k, v in at["hist"].items():
            _inc(t["hist"], str(k), int(v))
    return out


def summarize(agg: Mapping[str, Any], end_ms: int | None = None) -> dict[str, Any]:
    """The HTTP view of one window aggregate
    (``schemas/status_stats.v1.schema.json#/$defs/window``).

    Args:
        agg: a window aggregate.
        end_ms: end of the span (epoch ms) when it is not ``start + size_s`` (the ``total`` over a
            query's range ending now).

    Returns:
        ``start``/``end`` (epoch ms), ``size_s`` (``(end - start) / 1000``), ``count``,
        ``by_status``, ``by_reason``, ``results_per_s`` (count / size_s), ``total_ms``
        {``p50``, ``p95``, ``p99``, ``mean``, ``min``, ``max``} (ms, ``None`` when empty),
        ``batch_size_avg`` (``None`` when empty).
    """
    n = int(agg["count"])
    t = agg["total_ms"]
    lat: dict[str, float | None] = {
        f"p{p}": hist_percentile(t["hist"], p, t["min"],
                                 t["max"]) if n else None for p in PERCENTILES
    }
    # rounded to 1 µs: the float sum depends on the order partitions were merged in, and the
    # same window must answer the same from any instance and after any restart
    lat.update(mean=round(t["sum"] / n, 3) if n else None, min=t["min"], max=t["max"])
    start = int(agg["start_ms"])
    end = start + int(agg["size_s"]) * 1000 if end_ms is None else int(end_ms)
    size_s = max(end - start, 1) / 1000.0
    return {
        "start": start, "end": end, "size_s": size_s,
        "count": n, "by_status": dict(sorted(agg["by_status"].items())),
        "by_reason": dict(sorted(agg["by_reason"].items())),
        "results_per_s": n / size_s, "total_ms": lat,
        "batch_size_avg": round(agg["batch_size_sum"] / n, 6) if n else None,
    }


def regroup(aggs: Iterable[Mapping[str, Any]], size_s: int) -> list[dict[str, Any]]:
    """Merge base-window aggregates (any partition) into tumbling windows of ``size_s`` seconds
    (a multiple of their size), oldest first."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for a in aggs:
        groups.setdefault(window_start_ms(int(a["start_ms"]), size_s), []).append(a)
    return [merge_windows(groups[s], s, size_s) for s in sorted(groups)]


def stats_key(task: str, partition: int, start_ms: int) -> bytes:
    """Key of a window aggregate in the stats table: ``{task}|{partition}|{start_ms}`` (UTF-8)."""
    return f"{task}|{partition}|{start_ms}".encode()


def parse_stats_key(key: bytes | str) -> tuple[str, int, int]:
    """Inverse of :func:`stats_key`: ``(task, partition, start_ms)``.

    Raises:
        ValueError: not a stats key.
    """
    s = key.decode() if isinstance(key, bytes) else key
    task, part, start = s.split("|")
    return task, int(part), int(start)


__all__ = ["HIST_GROWTH", "HIST_MIN_MS", "PERCENTILES", "add_result", "applied", "bucket_of",
           "bucket_upper_ms", "crc32_partition", "crc32_partitioner", "expired", "hist_percentile",
           "merge_windows", "new_window", "parse_stats_key", "regroup", "stats_key", "summarize",
           "verdict_summary", "window_start_ms"]
