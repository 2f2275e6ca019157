"""End to end through the real stack, batching worker against the naive consumer.

Both consumers run in this process on the same warmed-up processor, each on fresh topics and
buckets. A step waits until its consumer holds every partition, then uploads the images (MinIO
PUT + UploadEvent, the platform's claim check) and times from the first upload to the last
result read back as committed (read_committed); it also reports the time to the first result,
the fixed start (:func:`fixed_start`) and the process CPU per image over the pass (consumer,
uploader and reader together: what the consumer costs beyond the same uploads' other work).
``compare`` interleaves model-only, batching and naive passes (order reversed every other
round) so load from other processes on a shared machine hits them alike, and reports the median
ratios.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median

from benchmarks.common import BenchError, ResultWatcher, fresh_stack, wait_group
from benchmarks.model_only import batched_model, measure
from benchmarks.naive import NaiveConsumer
from processors.base import Processor
from streams.produce import UploadProducer
from streams.settings import CacheSettings, Settings
from streams.storage import Storage
from streams.worker import Worker

PARTITIONS = 6


def _timed(s: Settings, task: str, files: Sequence[Path], count: int, mode: str,
           start: Callable[[], Callable[[], None]], timeout_s: float) -> dict:
    """Start a consumer (``start`` returns its stop function), upload, await every result."""
    with ResultWatcher(s) as rw:
        stop = start()
        try:
            wait_group(s, 1, PARTITIONS)
            c0 = time.process_time()
            t0 = time.time() * 1000.0
            sent = UploadProducer(s).produce_files(list(files), task, count=count, concurrency=4)
            got = rw.wait_all([x.upload_id for x in sent], timeout_s)
            cpu_s = time.process_time() - c0
        finally:
            stop()
    if not got:
        raise BenchError(f"{mode}/{task}: no result within {timeout_s} s")
    recv = sorted(g.recv_ms for g in got.values())
    sec = (recv[-1] - t0) / 1000.0
    statuses = Counter(g.status for g in got.values())
    errors = count - len(got) + statuses.get("failed", 0) + statuses.get("dead_letter", 0)
    start_s = fixed_start([(r - t0) / 1000.0 for r in recv])
    return {"task": task, "mode": mode, "images": count, "results": len(got),
            "seconds": round(sec, 3), "images_per_s": round(len(got) / sec, 3),
            "mean_batch_size": round(sum(g.batch_size for g in got.values()) / len(got), 2),
            "first_result_s": round((recv[0] - t0) / 1000.0, 3),
            "fixed_start_s": round(start_s, 3), "fixed_start_share": round(start_s / sec, 3),
            "cpu_ms_per_image": round(cpu_s * 1000.0 / count, 1),
            "statuses": dict(statuses), "errors": errors}


def fixed_start(result_s: Sequence[float]) -> float:
    """The part of a pass that does not grow with its uploads: the time to the first committed
    result, less one upload at the pass's steady rate (``(N - 1)`` results over the time from
    the first to the last), in s (0 when only one result or all at once).

    Args:
        result_s: seconds from the first upload to each committed result, ascending.
    """
    if len(result_s) < 2 or result_s[-1] <= result_s[0]:
        return max(result_s[0], 0.0) if result_s else 0.0
    per_upload = (result_s[-1] - result_s[0]) / (len(result_s) - 1)
    return max(result_s[0] - per_upload, 0.0)


def _in_thread(target: Callable[[], object], stop: Callable[[], None]) -> Callable[[], None]:
    t = threading.Thread(target=target, daemon=True)
    t.start()

    def halt() -> None:
        stop()
        t.join(120)

    return halt


def run_batching(base: Settings, task: str, proc: Processor, files: Sequence[Path], count: int,
                 timeout_s: float = 600.0) -> dict:
    """The batching worker (:class:`streams.worker.Worker`, in-process, default batch settings)
    with its result cache off: a pass cycles a few files, and repeats answered from the cache
    (``rush`` measures it) would measure the cache, not the batching (issue 40: with it on,
    58 of 64 card uploads skipped the model and batching / naive read 10.5)."""
    with fresh_stack(base, PARTITIONS) as s:
        s = s.model_copy(update={"cache": CacheSettings(enabled=False)})
        def start() -> Callable[[], None]:
            w = Worker(s, {task: proc}, Storage(s.s3))
            return _in_thread(w.run, w.stop)

        return _timed(s, task, files, count, "batching", start, timeout_s)


def run_naive(base: Settings, task: str, proc: Processor, files: Sequence[Path], count: int,
              timeout_s: float = 600.0) -> dict:
    """The naive consumer (:class:`benchmarks.naive.NaiveConsumer`, in-process)."""
    with fresh_stack(base, PARTITIONS) as s:
        def start() -> Callable[[], None]:
            n = NaiveConsumer(s, task, proc)
            return _in_thread(lambda: n.run(count, timeout_s), n.stop)

        return _timed(s, task, files, count, "naive", start, timeout_s)


def compare(base: Settings, task: str, proc: Processor, files: Sequence[Path], count: int,
            rounds: int, timeout_s: float = 600.0) -> dict:
    """Interleaved model-only / batching / naive passes on the same images.

    Args:
        base: settings from the environment.
        task: a registered task.
        proc: the warmed-up processor; its chosen bucket (from warm-up) is used throughout.
        files: the image files (cycled to ``count``).
        count: images per pass.
        rounds: passes of each kind (order reversed every other round).

    Returns:
        ``{"task", "bucket", "rounds": [...], "e2e_over_model_only", "batching_over_naive"}``
        with the ratios as medians over rounds of per-round ratios of images/s.
    """
    bm = batched_model(proc)
    bucket = bm.chosen_bucket
    blobs = [f.read_bytes() for f in files]
    kinds: dict[str, Callable[[], dict]] = {
        "model_only": lambda: {"task": task, "mode": "model_only",
                               **measure(proc, blobs, bucket, count, base.decode)},
        "batching": lambda: run_batching(base, task, proc, files, count, timeout_s),
        "naive": lambda: run_naive(base, task, proc, files, count, timeout_s),
    }
    out_rounds = []
    try:
        for r in range(rounds):
            order = list(kinds) if r % 2 == 0 else list(kinds)[::-1]
            res = {}
            for k in order:
                bm.chosen_bucket = bucket
                res[k] = kinds[k]()
            out_rounds.append(res)
    finally:
        bm.chosen_bucket = bucket

    def ratio(a: str, b: str) -> float:
        return round(median(x[a]["images_per_s"] / x[b]["images_per_s"] for x in out_rounds), 3)

    return {"task": task, "bucket": bucket, "images": count, "rounds": out_rounds,
            "e2e_over_model_only": ratio("batching", "model_only"),
            "batching_over_naive": ratio("batching", "naive")}
