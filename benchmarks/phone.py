"""Phone-sized uploads: CPU work around the model, the bare model, and end to end, per task.

For each task and each size (``2mp`` = 1600x1200, what a ticketing app uploads after its own
downsizing; ``12mp`` = 4032x3024, a phone camera's full frame), on scenes made by the project's
own code (cards: ``processors.card.training.synth.sample``; ID photos:
``benchmarks.portraits.phone_portrait``, the astronaut in a selfie-like frame), JPEG quality 90:

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
    committed result, against the bare model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from benchmarks.cpu_outside import Call, bare_model_images_per_s, cpu_ms_outside_model
from processors.base import Processor
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
            from benchmarks.portraits import phone_portrait

            img = phone_portrait(w, h, seed=seed + i)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
        out.append(buf.tobytes())
    return out


def measure(base: Settings, task: str, proc: Processor, proc_1thread: Processor, blobs: list[bytes],
            files: list[Path], e2e: bool) -> dict[str, Any]:
    """The three figures for one task and size (module docstring).

    Args:
        base: settings from the environment.
        task: ``card`` or ``id_photo``.
        proc: the warmed-up processor with its default threads (end to end).
        proc_1thread: the same processor with ``postprocess_threads=1`` (CPU ms), warmed up.
        blobs: the JPEG uploads; ``files``: the same written to disk (end to end).
        e2e: run the end-to-end pass (needs the stack).
    """
    from benchmarks.model_only import batched_model

    bucket = batched_model(proc_1thread).chosen_bucket
    calls: list[Call] = []
    cpu = cpu_ms_outside_model(proc_1thread, blobs, batch=bucket, rounds=2, dec=base.decode,
                               calls=calls)
    bare = bare_model_images_per_s(calls, len(blobs))
    row: dict[str, Any] = {"task": task, "images": len(blobs), "bucket": bucket,
                           "cpu_ms_per_image_outside_model": cpu["cpu_ms_per_image"],
                           "wall_ms_per_image_outside_model": cpu["wall_ms_per_image"],
                           "model_calls_per_pass": cpu["model_calls"],
                           "bare_model_images_per_s": bare}
    if e2e:
        from benchmarks.e2e import run_batching

        r = run_batching(base, task, proc, files, len(files))
        row["e2e_images_per_s"] = r["images_per_s"]
        row["e2e_mean_batch_size"] = r["mean_batch_size"]
        row["e2e_over_bare_model"] = round(r["images_per_s"] / bare, 3)
    return row


def run_phone(base: Settings, procs: dict[str, Processor], build_1thread, n: int, tmp: Path,
              e2e: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
    """Every task of ``procs`` at every size of :data:`SIZES`.

    Args:
        base: settings from the environment.
        procs: task -> warmed-up processor (default threads).
        build_1thread: ``task -> processor`` with one post-processing thread, warmed up.
        n: uploads per task and size.
        tmp: folder for the upload files.
        e2e: run the end-to-end passes.

    Returns:
        ``{task: {size: row}}`` (:func:`measure`'s rows).
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for task, proc in procs.items():
        one = build_1thread(task)
        for name, size in SIZES.items():
            blobs = scenes(task, size, n)
            files = []
            for i, b in enumerate(blobs):
                f = tmp / f"phone-{task}-{name}-{i}.jpg"
                f.write_bytes(b)
                files.append(f)
            row = measure(base, task, proc, one, blobs, files, e2e)
            out.setdefault(task, {})[name] = {"size": f"{size[0]}x{size[1]}", **row}
            print(f"[{task} {name}] {out[task][name]}", flush=True)
    return out
