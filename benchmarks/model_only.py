"""Model-only ceiling: images/s of a processor without Kafka or MinIO.

One timed pass per batch size: the header probe (``processors.decode.probe_image``) of the JPEG
bytes, then ``process_batch`` (which decodes) per chunk of ``batch`` items, with the model's bucket
forced to ``batch`` so each chunk is one inference call (pre-processing, inference, post-processing
and output encoding included). This is the most the pipeline could deliver at that batch size on
this machine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from processors.base import Item, Processor
from processors.decode import DecodeSettings, probe_image
from processors.runtime import BatchedModel


def batched_model(proc: Processor) -> BatchedModel:
    """The :class:`BatchedModel` of a card (``.batched_model``) or ID-photo
    (``.matting.model``) processor.

    Raises:
        TypeError: the processor exposes neither.
    """
    bm = getattr(proc, "batched_model",
                 None) or getattr(getattr(proc, "matting", None), "model", None)
    if not isinstance(bm, BatchedModel):
        raise TypeError(f"{type(proc).__name__} exposes no BatchedModel")
    return bm


def measure(proc: Processor, blobs: Sequence[bytes], batch: int, n: int,
            dec: DecodeSettings) -> dict[str, float | int]:
    """One timed pass of ``max(n, batch)`` images (cycling over ``blobs``) at ``batch``.

    Args:
        proc: a warmed-up card or ID-photo processor; its bucket is left forced to ``batch``.
        blobs: encoded images (JPEG bytes).
        batch: items per ``process_batch`` call and per inference call.
        n: images per pass (at least one full batch is always run).
        dec: decode limits.

    Returns:
        ``{"batch", "images", "seconds", "images_per_s", "accepted", "cpu_ms_per_image"}``
        (process CPU of every thread per image).
    """
    batched_model(proc).chosen_bucket = batch
    count = max(n, batch)
    accepted = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for k in range(0, count, batch):
        chunk = range(k, min(k + batch, count))
        items = [Item(f"m{i:05d}", probe_image(blobs[i % len(blobs)], dec)) for i in chunk]
        accepted += sum(str(o.status) == "accepted" for o in proc.process_batch(items))
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"batch": batch, "images": count, "seconds": round(sec, 3),
            "images_per_s": round(count / sec, 3), "accepted": accepted,
            "cpu_ms_per_image": round(cpu * 1000.0 / count, 1)}


def _meminfo_mib(field: str, path: str = "/proc/meminfo") -> float:
    """A ``kB`` field of a /proc status file, in MiB (0 when unreadable)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB; ``VmHWM``)."""
    return _meminfo_mib("VmHWM", "/proc/self/status")


def sweep(proc: Processor, blobs: Sequence[bytes], batches: Sequence[int], n: int,
          dec: DecodeSettings, mem_share: float = 0.5,
          floor_mib: float = 64.0) -> list[dict[str, object]]:
    """:func:`measure` at every batch size (ascending); the chosen bucket is restored after.

    Memory grows with the batch: u2netp's CPU activations take about 260 MiB per image with ONNX
    Runtime 1.32 (its arena keeps the peak) and ID-photo post-processing adds its own. Each
    measured step records the peak-RSS growth per added image (at least ``floor_mib``); the next
    batch is run only if ``growth per image x added images`` stays within ``mem_share`` of
    ``MemAvailable``, otherwise it and the larger ones are reported as ``{"batch", "skipped"}``
    instead of risking the OOM killer on a shared machine.
    """
    bm = batched_model(proc)
    chosen = bm.chosen_bucket
    rows: list[dict[str, object]] = []
    prev, per_image = 0, floor_mib
    try:
        for b in sorted(batches):
            need, avail = per_image * (b - prev), _meminfo_mib("MemAvailable")
            if prev and avail and need > mem_share * avail:
                rows += [{"batch": x, "skipped": f"needs ~{need:.0f} MiB more, "
                          f"{avail:.0f} MiB available"} for x in sorted(batches) if x >= b]
                break
            before = peak_rss_mib()
            rows.append({**measure(proc, blobs, b, n, dec), "peak_rss_mib": round(peak_rss_mib())})
            if prev:
                per_image = max(per_image, (peak_rss_mib() - before) / (b - prev))
            prev = b
        return rows
    finally:
        bm.chosen_bucket = chosen
        bm.shrink()  # the CPU arena would keep the largest batch's activations
