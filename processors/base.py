"""The processor protocol: probed uploads in, outcomes out, one batched inference call per model.

``streams`` probes uploads (``processors.decode.probe_image``: format, size and limits from the
header, no pixel decoded), groups them by task, cuts each group into buckets
(:func:`process_in_buckets`) and calls ``Processor.process_batch``; each processor decodes at the
size its steps need through its pixel backend (``processors.pixels``). Processors never touch
Kafka or MinIO. What a task is (its options, payload, main artifact, processor factory) is its
:class:`processors.task.TaskSpec`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import structlog

from processors.decode import EncodedImage
from processors.errors import DecodeError
from processors.runtime import BatchStats, bucket_slices
from schemas.reasons import ReasonCode, Status

log = structlog.get_logger("cardstream.processors")


@dataclass(frozen=True, slots=True)
class Item:
    """One upload handed to a processor, not yet decoded.

    Attributes:
        upload_id: the upload's id (``[A-Za-z0-9._-]{1,128}``), used for logs and outcomes only.
        image: the encoded bytes with their validated header (:class:`EncodedImage`: format,
            displayed width and height in px, EXIF orientation); the processor decodes them. Bad
            pixel data found then (``CORRUPT_IMAGE``...) is a ``rejected`` outcome with that
            reason.
        options: the task's options from the UploadEvent (:meth:`processors.task.TaskSpec.
            item_options`); what they leave out, the processor takes from its settings.
    """

    upload_id: str
    image: EncodedImage
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_array(cls, upload_id: str, image: np.ndarray,
                   options: Mapping[str, Any] | None = None) -> Item:
        """An item from pixels (tests, benchmarks): ``image`` ``(H, W, 3) uint8`` BGR stored as a
        lossless PNG (:meth:`EncodedImage.from_array`), so decoding gives it back exactly.

        Raises:
            DecodeError: the image breaks the default decode limits (e.g. a side under 32 px).
        """
        return cls(upload_id, EncodedImage.from_array(image), dict(options or {}))


@dataclass(frozen=True, slots=True)
class Artifact:
    """An output file of an outcome, stored by ``streams`` under
    ``{task}/{model_version}/{upload_id}/{input_tag}/{name}.{ext}``.

    Attributes:
        name: artifact name; the task's main artifact (``TaskSpec.main_artifact``) is the one
            whose object ref the result's payload carries.
        ext: file extension without dot (``jpg``, ``png``).
        content_type: MIME type (``image/jpeg``).
        data: encoded bytes.
        width: pixel width of the encoded image (px).
        height: pixel height of the encoded image (px).
    """

    name: str
    ext: str
    content_type: str
    data: bytes
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a processor decided for one item.

    Attributes:
        upload_id: the item's id.
        status: ``accepted`` / ``rejected`` / ``failed``.
        reasons: reason codes (empty when accepted without remarks).
        payload: task fields of the VerificationResult's payload (the task's payload model, see
            its spec ``processors/<task>/task.py``); fields the model does not know are dropped
            and the main artifact's object ref is added by ``streams``.
        artifacts: encoded outputs to store (empty when rejected).
        inference_ms: wall time (ms) of the batched model call(s) shared by this item's batch.
        detail: why, in words, where the reason code alone does not say it (the decoder's
            message for pixel data that fails to decode, e.g. ``jpeg data undecodable: ...``);
            shown by the processor commands, not part of the result contract (no field
            carries it to the results topic). Never personal data: it names bytes, not people.
    """

    upload_id: str
    status: Status
    reasons: tuple[ReasonCode, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    inference_ms: float = 0.0
    detail: str = ""

    @classmethod
    def undecodable(cls, upload_id: str, error: DecodeError,
                    payload: Mapping[str, Any] | None = None) -> Outcome:
        """The ``rejected`` outcome of an item whose pixel data failed to decode: the decoder's
        reason (``CORRUPT_IMAGE``, ``IMAGE_TOO_LARGE``...) and its message as :attr:`detail`."""
        return cls(upload_id, Status.REJECTED, (ReasonCode(error.reason),),
                   dict(payload or {}), detail=str(error))


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Model identity reported in results and used in object keys.

    Attributes:
        name: model name, e.g. ``u2netp-card``.
        version: version string, safe in object keys (``[A-Za-z0-9._-]``).
        provider: ONNX Runtime execution provider actually used (``CUDAExecutionProvider``...).
    """

    name: str
    version: str
    provider: str


@runtime_checkable
class Processor(Protocol):
    """A task's batched compute.

    ``process_batch`` returns exactly one :class:`Outcome` per item, in order (as Triton's
    ``execute`` returns one response per request: a failure is carried inside its outcome, never
    a missing one), and makes one inference call per model for a chunk of at most ``bucket``
    items (counted in ``stats.calls``). It raises nothing for bad content (that is a ``rejected``
    outcome) nor for one item whose post-processing fails (a ``failed`` outcome, see
    :func:`outcomes_per_item`); it may raise ``ProcessorError`` for a broken model call, which
    is the whole batch's.
    """

    task: str

    @property
    def bucket(self) -> int:
        """The largest batch one model call takes (chosen at warm-up); ``streams`` hands the
        processor chunks of at most this many items, so each chunk is one inference call."""
        ...

    @property
    def stats(self) -> BatchStats:
        """Counters of its batched model calls (``calls``, ``images``, ``padded``)."""
        ...

    @property
    def model(self) -> ModelInfo:
        """The model identity (name, version, active provider)."""
        ...

    def warm_up(self) -> None:
        """Load models and run every batch bucket once; choose the best bucket."""
        ...

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """Process ``items`` (len N >= 1) and return N outcomes in the same order."""
        ...


def process_in_buckets(proc: Processor, items: Sequence[Item], bucket: int) -> Iterator[Outcome]:
    """Run ``proc.process_batch`` on consecutive chunks of at most ``bucket`` items (one batched
    model call per chunk, cut by :func:`processors.runtime.bucket_slices`) and yield the
    outcomes one by one, in the order of ``items``.

    Args:
        proc: a processor.
        items: the items (any length, 0 included).
        bucket: items per ``process_batch`` call; values below 1 count as 1.

    Raises:
        ProcessorError: as ``process_batch`` (a broken model).
    """
    for part in bucket_slices(len(items), bucket):
        yield from proc.process_batch(items[part])


def outcomes_per_item(one: Callable[[int], R], items: Sequence[Item], threads: int, *,
                      task: str, inference_ms: float = 0.0) -> list[R | Outcome]:
    """``[one(k) for k in range(len(items))]`` on the post-processing pool (:func:`map_in_threads`),
    with the one rule for an item that fails: an exception raised by ``one(k)`` gives that item
    a ``failed`` outcome with ``INTERNAL_ERROR`` (logged as ``postprocess_failed`` with the task,
    its upload id and the error class) and leaves the other items of the batch unaffected. Every
    processor post-processes its items through this, after its batched model call; an error of
    the model call itself is the whole batch's and is raised by ``process_batch``.

    Args:
        one: the per-item post-processing: index into ``items`` -> its outcome (or, for a
            processor that post-processes in steps, the step's result: the card's pre-warp
            verdict, then its finished outcome; a failed item's ``Outcome`` takes its place).
        items: the batch's items.
        threads: pool size (0: ``os.cpu_count()``).
        task: the task, for the log line.
        inference_ms: the batch's model time (ms), carried by a failed outcome too.
    """

    def guarded(k: int) -> R | Outcome:
        try:
            return one(k)
        except Exception as e:  # one item's failure, not the batch's
            log.error("postprocess_failed", task=task, upload_id=items[k].upload_id,
                      error=type(e).__name__)
            return Outcome(upload_id=items[k].upload_id, status=Status.FAILED,
                           reasons=(ReasonCode.INTERNAL_ERROR,), inference_ms=inference_ms)

    return map_in_threads(guarded, range(len(items)), threads)


T = TypeVar("T")
R = TypeVar("R")
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def map_in_threads(fn: Callable[[T], R], xs: Sequence[T], threads: int) -> list[R]:
    """``[fn(x) for x in xs]`` on a process-wide pool of ``threads`` threads, results in order.

    Per-item pre- and post-processing is OpenCV and NumPy work that releases the GIL, so a
    batch's items run in parallel on the CPU cores while the model call itself stays one
    batched call.

    Args:
        fn: the per-item function; it must not call ``map_in_threads`` itself (the pool is shared).
        xs: the items.
        threads: pool size; 0 means ``os.cpu_count()``. With 1 thread, or one item, ``fn`` runs
            inline on the caller's thread.

    Raises:
        Exception: the first exception ``fn`` raised, in the order of ``xs`` (catch per item in
            ``fn`` to isolate items).
    """
    n = threads if threads > 0 else (os.cpu_count() or 1)
    if n <= 1 or len(xs) <= 1:
        return [fn(x) for x in xs]
    with _POOLS_LOCK:
        pool = _POOLS.get(n)
        if pool is None:
            pool = _POOLS[n] = ThreadPoolExecutor(n, thread_name_prefix=f"postprocess{n}")
    return list(pool.map(fn, xs))
