"""Phone-sized uploads: CPU work around the model, the bare model, and end to end, per task and
precision.

For each task, each size (``2mp`` = 1600x1200, what a ticketing app uploads after its own
downsizing; ``12mp`` = 4032x3024, a phone camera's full frame) and each precision
(``CARDSTREAM_RUNTIME__PRECISION``: ``fp32`` and ``int8`` on a CPU), on scenes made by the
project's own code (cards: ``processors.card.training.synth.sample``; ID photos:
``processors.idphoto.portraits.phone_portrait``, the astronaut in a selfie-like frame), JPEG
quality 90:

``cpu_ms_per_image_outside_model``
    ``benchmarks.cpu_outside.cpu_ms_outside_model``: process CPU ms per image of the header
    probe and ``process_batch`` with one post-processing thread, every model call replayed from
    a recording (so model time is excluded exactly), at the bucket warm-up chose.
``bare_model_images_per_s``
    ``benchmarks.cpu_outside.bare_model_images_per_s``: ``InferenceSession.run`` alone on the
    model inputs recorded in that run (every model of the task, chunked and padded as the
    processor does at that bucket), fastest of two passes.
``e2e_images_per_s`` and ``e2e_over_bare_model``
    the same JPEGs uploaded through MinIO + Kafka to the batching worker (``benchmarks.e2e``,
    default worker settings, the processor with its default threads), first upload to last
    committed result: the median of ``rounds`` passes, the precisions interleaved (their order
    reversed every other round), against the bare model of the same precision;
    ``e2e_over_bare_fp32`` divides by the fp32 bare model of the same run (issue 40's target);
    ``fixed_start_share`` is the median share of a pass spent before the pipeline's steady
    rate (:func:`benchmarks.e2e.fixed_start`).

The end-to-end passes use every upload (enough that their fixed start is a small share: issue
40); the CPU and bare-model figures, per-image averages, are taken on the first
:data:`MEASURE_IMAGES` of them (three passes of the model each: recording and two bare runs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import cv2
import numpy as np

from benchmarks.cpu_outside import bare_model_images_per_s, cpu_ms_outside_model
from processors.base import Processor
from processors.runtime import ModelCall
from streams.settings import Settings

#: Upload sizes (width, height) px.
SIZES: dict[str, tuple[int, int]] = {"2mp": (1600, 1200), "12mp": (4032, 3024)}
#: JPEG quality of the generated uploads.
QUALITY = 90


def scenes(task: str, size: tuple[int, int], n: int, seed: int = 29) -> list[bytes]:
    """``n`` JPEG uploads of ``task`` at ``size`` ``(w, h)``: synthetic card scenes (a card in
    every one) or astronaut selfies, deterministic."""
    w, h = size
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        if task == "card":
            from processors.card.training.synth import sample

            img = sample(rng, doc_type="id_card" if i % 4 else "passport", size=(w, h)).image
        else:
            from processors.idphoto.portraits import phone_portrait

            img = phone_portrait(w, h, seed=seed + i)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
        out.append(buf.tobytes())
    return out


def measure(proc_1thread: Processor, blobs: list[bytes], base: Settings) -> tuple[dict[str, Any],
                                                                               list[ModelCall]]:
    """CPU ms outside the model and the bare model's images/s for one processor and upload set
    (module docstring); returns the row and the recorded model calls.

    Args:
        proc_1thread: the processor with ``postprocess_threads=1``, warmed up.
        blobs: the JPEG uploads.
        base: settings from the environment (decode limits).
    """
    from benchmarks.model_only import batched_model

    bucket = batched_model(proc_1thread).chosen_bucket
    calls: list[ModelCall] = []
    cpu = cpu_ms_outside_model(proc_1thread, blobs, batch=bucket, rounds=2, dec=base.decode,
                               calls=calls)
    return {"images": len(blobs), "bucket": bucket,
            "cpu_ms_per_image_outside_model": cpu["cpu_ms_per_image"],
            "wall_ms_per_image_outside_model": cpu["wall_ms_per_image"],
            "model_calls_per_pass": cpu["model_calls"],
            "bare_model_images_per_s": bare_model_images_per_s(calls, len(blobs))}, calls


MEASURE_IMAGES = 24
"""Uploads the CPU and bare-model figures are measured on (the first of a size's uploads)."""


def run_phone(base: Settings, procs: dict[str, dict[str, Processor]],
              build_1thread: Callable[[str, str], Processor], n: int, tmp: Path,
              e2e: bool = True, rounds: int = 3) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Every task at every size of :data:`SIZES` and every precision of ``procs``.

    Args:
        base: settings from the environment.
        procs: precision -> task -> warmed-up processor (default threads).
        build_1thread: ``(task, precision) -> processor`` with one post-processing thread,
            warmed up.
        n: uploads per task and size (the end-to-end passes; the CPU and bare-model figures
            on the first :data:`MEASURE_IMAGES`).
        tmp: folder for the upload files.
        e2e: run the end-to-end passes (needs the stack).
        rounds: end-to-end passes per task, size and precision (interleaved; medians).

    Returns:
        ``{task: {size: {precision: row}}}``; rows hold the figures of the module docstring.
    """
    from benchmarks.e2e import run_batching

    precisions = list(procs)
    tasks = list(procs[precisions[0]])
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for task in tasks:
        ones = {p: build_1thread(task, p) for p in precisions}
        for name, size in SIZES.items():
            blobs = scenes(task, size, n)
            files = []
            for i, b in enumerate(blobs):
                f = tmp / f"phone-{task}-{name}-{i}.jpg"
                f.write_bytes(b)
                files.append(f)
            rows = {p: {"size": f"{size[0]}x{size[1]}", "precision": p,
                        **measure(ones[p], blobs[:MEASURE_IMAGES], base)[0]}
                    for p in precisions}
            passes: dict[str, list[dict[str, Any]]] = {p: [] for p in precisions}
            for r in range(rounds if e2e else 0):
                for p in (precisions if r % 2 == 0 else precisions[::-1]):
                    passes[p].append(run_batching(base, task, procs[p][task], files, len(files)))
            fp32_bare = rows.get("fp32", {}).get("bare_model_images_per_s")
            for p, row in rows.items():
                if passes[p]:
                    ips = median(x["images_per_s"] for x in passes[p])
                    row.update({"e2e_images": len(files), "e2e_images_per_s": round(ips, 3),
                                "e2e_rounds_images_per_s": [x["images_per_s"] for x in passes[p]],
                                "e2e_mean_batch_size": median(x["mean_batch_size"]
                                                              for x in passes[p]),
                                "fixed_start_share": round(median(x["fixed_start_share"]
                                                                  for x in passes[p]), 3),
                                "e2e_over_bare_model":
                                    round(ips / row["bare_model_images_per_s"], 3)})
                    if fp32_bare:
                        row["e2e_over_bare_fp32"] = round(ips / fp32_bare, 3)
                out.setdefault(task, {}).setdefault(name, {})[p] = row
                print(f"[{task} {name} {p}] {row}", flush=True)
    return out
