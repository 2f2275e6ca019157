"""CPU time a processor spends per image outside its model (model calls replayed), and the
bare model's images/s on the very inputs the processor gave it.

Any processor, any task: the first pass runs ``process_batch`` normally and records what every
:meth:`processors.runtime.BatchedModel.run` call returned, in call order; the timed passes run
the same items again with ``BatchedModel.run`` replaced by a replay of those outputs (the
input's shape is checked against the recording, so a diverging pass fails loudly). What is
left is exactly the work around the model: decode, pre-processing, post-processing, encoding.
The figure is process CPU time (``time.process_time``: all threads of this process) per image,
so it holds however many threads OpenCV or NumPy use; run it with
``RuntimeSettings.postprocess_threads = 1`` to read it as one thread's work.

    from benchmarks.cpu_outside import cpu_ms_outside_model
    cpu_ms_outside_model(proc, [jpeg_bytes, ...], batch=1, rounds=3)

:func:`bare_model_images_per_s` times ``InferenceSession.run`` alone on the recorded inputs
(every model call of the processor, as it chunked them), so "the model" and "the work around
it" are measured on the same images in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from statistics import median

import numpy as np

from benchmarks.common import BenchError
from processors.base import Item, Processor
from processors.decode import DecodeSettings, probe_image
from processors.runtime import BatchedModel, ModelCall, recorded_calls


@contextmanager
def replayed_models(calls: Sequence[ModelCall]) -> Iterator[None]:
    """Inside: ``BatchedModel.run`` returns the recorded outputs in order, without running.

    Raises:
        BenchError: a call's model or input shape differs from the recording, or there are more
            calls than recorded.
    """
    real = BatchedModel.run
    pending = list(calls)

    def replay(self: BatchedModel, x: np.ndarray) -> list[np.ndarray]:
        if not pending:
            raise BenchError(f"{self.name}: a model call more than recorded")
        c = pending.pop(0)
        if c.model is not self or c.x.shape != x.shape:
            raise BenchError(f"replay diverged: {self.name}{tuple(x.shape)} where "
                             f"{c.model.name}{tuple(c.x.shape)} was recorded")
        return c.outputs

    BatchedModel.run = replay  # type: ignore[method-assign]  # measured: the model call swapped
    try:
        yield
    finally:
        BatchedModel.run = real  # type: ignore[method-assign]  # the real call put back


def _items(blobs: Sequence[bytes], dec: DecodeSettings, options: dict) -> list[Item]:
    return [Item(f"c{i:05d}", probe_image(b, dec), dict(options)) for i, b in enumerate(blobs)]


def cpu_ms_outside_model(proc: Processor, blobs: Sequence[bytes], batch: int = 1,
                         rounds: int = 3, dec: DecodeSettings | None = None,
                         options: dict | None = None,
                         calls: list[ModelCall] | None = None) -> dict[str, float | int]:
    """CPU ms per image of ``proc`` outside its model calls, model outputs replayed.

    Each pass: header probe of every blob (as the worker does) and ``process_batch`` on chunks
    of ``batch`` items, so decode and everything around the model count.

    Args:
        proc: a warmed-up processor (its ``postprocess_threads`` decide the threads).
        blobs: encoded uploads (JPEG bytes...).
        batch: items per ``process_batch`` call.
        rounds: timed replay passes; the median counts.
        dec: probe limits (default :class:`DecodeSettings`).
        options: the items' options.
        calls: a list that receives the recorded model calls (for
            :func:`bare_model_images_per_s`).

    Returns:
        ``{"cpu_ms_per_image", "wall_ms_per_image", "model_calls", "images", "rounds"}``:
        medians over the replay passes (process CPU ms and wall ms per image), model calls per
        pass.

    Raises:
        BenchError: a replay pass diverged from the recorded one.
    """
    dec = dec or DecodeSettings()
    opts = options or {}

    def one_pass() -> None:
        items = _items(blobs, dec, opts)
        for k in range(0, len(items), batch):
            proc.process_batch(items[k:k + batch])

    calls = [] if calls is None else calls
    with recorded_calls(calls):
        one_pass()
    cpu, wall = [], []
    for _ in range(rounds):
        with replayed_models(calls):
            c0, w0 = time.process_time(), time.perf_counter()
            one_pass()
            cpu.append((time.process_time() - c0) * 1000.0 / len(blobs))
            wall.append((time.perf_counter() - w0) * 1000.0 / len(blobs))
    return {"cpu_ms_per_image": round(median(cpu), 2), "wall_ms_per_image": round(median(wall), 2),
            "model_calls": len(calls), "images": len(blobs), "rounds": rounds}


def bare_model_images_per_s(calls: Sequence[ModelCall], images: int, repeats: int = 2) -> float:
    """Images/s of the recorded model calls run alone: ``InferenceSession.run`` of each
    recorded input, cut into chunks and padded to a bucket as ``BatchedModel.run`` does; the
    fastest of ``repeats`` passes.

    Args:
        calls: from :func:`cpu_ms_outside_model` (every model of the processor, as it called them).
        images: uploads those calls served.
        repeats: timed passes.
    """
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for c in calls:
            m = c.model
            for k in range(0, c.x.shape[0], m.chosen_bucket):  # chunks and padding as run()
                x = c.x[k:k + m.chosen_bucket]
                n, b = x.shape[0], m.bucket_for(x.shape[0])
                if b > n:
                    x = np.concatenate([x, np.zeros((b - n, *x.shape[1:]), x.dtype)])
                m.session.run(m.output_names, {m.input_name: x})
        best = min(best, time.perf_counter() - t0)
    return round(images / best, 3)
