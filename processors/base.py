"""The processor protocol: probed uploads in, outcomes out, one batched inference call per model.

``streams`` probes uploads (``processors.decode.probe_image``: format, size and limits from the
header, no pixel decoded), groups them by task and calls ``Processor.process_batch``; each
processor decodes at the size its steps need through its pixel backend (``processors.pixels``).
Processors never touch Kafka or MinIO.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from processors.decode import EncodedImage
from processors.runtime import BatchStats
from schemas.reasons import ReasonCode, Status


@dataclass(frozen=True, slots=True)
class Item:
    """One upload handed to a processor, not yet decoded.

    Attributes:
        upload_id: the upload's id (``[A-Za-z0-9._-]{1,128}``), used for logs and outcomes only.
        image: the encoded bytes with their validated header (:class:`EncodedImage`: format,
            displayed width and height in px, EXIF orientation); the processor decodes them. Bad
            pixel data found then (``CORRUPT_IMAGE``...) is a ``rejected`` outcome with that
            reason.
        options: the task's options from the UploadEvent (``doc_type`` for cards; ``size``,
            ``background``, ``alpha_matting`` for ID photos); missing keys take the defaults.
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
    ``{task}/{model_version}/{upload_id}/{name}.{ext}``.

    Attributes:
        name: artifact name, e.g. ``rectified`` or ``photo``.
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
        payload: task fields of the VerificationResult (card: ``quad`` ``[[x,y]*4]`` TL,TR,BR,BL in
            source px, ``confidence`` in [0,1], ``doc_type``; id_photo: ``size``, ``background``,
            ``face_box`` ``[x,y,w,h]`` source px). Object refs are added by ``streams``.
        artifacts: encoded outputs to store (empty when rejected).
        inference_ms: wall time (ms) of the batched model call(s) shared by this item's batch.
    """

    upload_id: str
    status: Status
    reasons: tuple[ReasonCode, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    inference_ms: float = 0.0


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

    ``process_batch`` must return exactly one :class:`Outcome` per item, in order, and make one
    inference call per model per chunk of its chosen batch bucket (counted in ``stats.calls``). It raises nothing for bad
    content (that is a ``rejected`` outcome); it may raise ``ProcessorError`` for a broken model.
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


def process_in_chunks(proc: Processor, items: Sequence[Item], batch: int) -> Iterator[Outcome]:
    """Run ``proc.process_batch`` on consecutive chunks of at most ``batch`` items (one batched
    model call per chunk) and yield the outcomes one by one, in the order of ``items``.

    Args:
        proc: a processor.
        items: the items (any length, 0 included).
        batch: items per ``process_batch`` call; values below 1 count as 1.

    Raises:
        ProcessorError: as ``process_batch`` (a broken model).
    """
    step = max(1, batch)
    for k in range(0, len(items), step):
        yield from proc.process_batch(items[k:k + step])


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
