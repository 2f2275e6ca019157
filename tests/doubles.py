"""The test doubles the suite shares, in one place (as bytewax ships its ``testing.py``).

The integration tier uses none of the Kafka or S3 ones: there the worker meets the real broker
and the real MinIO. The unit tier uses them to drive one part of the worker through its public
methods; the processor stand-ins (fixed latency, no model) serve both tiers.
"""

from __future__ import annotations

import hashlib
import threading
import time
import types
from collections.abc import Iterable
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, TopicPartition

from processors import registry
from processors.base import Processor
from streams.errors import ObjectNotFound, StorageError
from streams.storage import StoredObject


def stand_ins(call_ms: float = 5.0, item_ms: float = 2.0, bucket: int = 32,
              tasks: Iterable[str] | None = None) -> dict[str, Processor]:
    """Task -> the fixed-latency ``sleep`` processor serving it, for every registered task (or
    ``tasks``): outcomes with the task's main artifact and a payload of its shape."""
    return {t: registry.stand_in(t, call_ms=call_ms, item_ms=item_ms, bucket=bucket)
            for t in (registry.names() if tasks is None else tasks)}


class Msg:
    """A consumed record as the worker sees it (confluent-kafka ``Message``'s accessors),
    stamped now unless ``timestamp_ms`` is given."""

    def __init__(self, partition: int, offset: int, topic: str = "uploads",
                 value: bytes | None = None, key: bytes | None = None,
                 timestamp_ms: int | None = None,
                 headers: list[tuple[str, bytes | None]] | None = None) -> None:
        self._p, self._o, self._t, self._v, self._k = partition, offset, topic, value, key
        self._ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        self._h = list(headers or [])

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> list:
        return self._h

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self._ts


class FakeConsumer:
    """A consumer assigned ``parts`` of ``topic`` that hands out ``queued`` records (to
    ``consume`` and ``poll``, in order) and records what is paused and resumed in ``calls``.

    ``poll`` with nothing queued sleeps its timeout, as the real one waits; ``seek`` is recorded
    in ``calls`` as ``("seek", [partition, offset])``. ``committed`` holds the consumer group's
    committed offsets with their metadata, ``(topic, partition) -> (offset, metadata)``, as
    ``commit`` writes them; a partition never committed starts at its log start, the lowest
    offset of it the fake was given (queued at construction or handed out since), else 0.
    """

    def __init__(self, parts: Iterable[int] = (), topic: str = "uploads",
                 queued: Iterable[Any] = ()) -> None:
        self.parts = [TopicPartition(topic, p) for p in parts]
        self.queued = list(queued)
        self.calls: list[tuple[str, list[int]]] = []
        self.offsets: dict[tuple[str, int], tuple[int, str | None]] = {}  # committed
        self.low: dict[int, int] = {}  # partition -> its log start
        self._note(self.queued)

    def _note(self, msgs: list) -> list:
        """Lower the log starts to what ``msgs`` hold; returns ``msgs``."""
        for m in msgs:
            if getattr(m, "error", lambda: None)() is None:
                self.low[m.partition()] = min(m.offset(), self.low.get(m.partition(), m.offset()))
        return msgs

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def assign(self, tps: list) -> None:
        self.parts = list(tps)

    def assignment(self) -> list:
        return list(self.parts)

    def pause(self, tps: list) -> None:
        self.calls.append(("pause", sorted(tp.partition for tp in tps)))

    def resume(self, tps: list) -> None:
        self.calls.append(("resume", sorted(tp.partition for tp in tps)))

    def consume(self, n: int, timeout_s: float) -> list:
        out, self.queued = self.queued[:n], self.queued[n:]
        return self._note(out)

    def poll(self, timeout_s: float) -> Any:
        if self.queued:
            return self._note([self.queued.pop(0)])[0]
        time.sleep(timeout_s)
        return None

    def position(self, parts: list) -> list:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in parts]  # no position yet

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False,
                              timeout: float | None = None) -> tuple[int, int]:
        return self.low.get(tp.partition, 0), 0

    def committed(self, tps: list, timeout: float | None = None) -> list:
        out = []
        for tp in tps:
            off, md = self.offsets.get((tp.topic, tp.partition), (-1001, None))
            out.append(TopicPartition(tp.topic, tp.partition, off) if md is None
                       else TopicPartition(tp.topic, tp.partition, off, metadata=md))
        return out

    def commit(self, offsets: list, asynchronous: bool = True) -> None:
        self.offsets.update({(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in offsets})

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def seek(self, tp: TopicPartition) -> None:
        self.calls.append(("seek", [tp.partition, tp.offset]))

    def close(self) -> None:
        pass


class TxnProducer:
    """A transactional producer whose every call succeeds at once; it records them in ``calls``
    (``init_transactions`` raises ``init_errors`` first, one per call, while any are left)."""

    def __init__(self, init_errors: Iterable[Exception] = ()) -> None:
        self.calls: list[str] = []
        self.init_errors = list(init_errors)

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")
        if self.init_errors:
            raise self.init_errors.pop(0)

    def __getattr__(self, name: str) -> Any:  # begin, produce, send_offsets, commit, poll...
        return lambda *a, **kw: self.calls.append(name)


class StuckProducer:
    """A transactional producer whose ``send_offsets_to_transaction`` never returns (librdkafka
    #5456) until ``release`` is set; it records every call in ``calls``, and fails the test if
    anything else is called on it after that (commit, abort, flush...). ``holds``: a real
    librdkafka client it keeps while it lives (its threads and sockets, as a stuck one keeps)."""

    def __init__(self, release: threading.Event | None = None, holds: Any = None) -> None:
        self.calls: list[str] = []
        self.release = release or threading.Event()
        self.holds = holds

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, *a: Any, **kw: Any) -> None:
        self.calls.append("produce")

    def send_offsets_to_transaction(self, offsets: list, group: Any, timeout: float) -> None:
        self.calls.append(f"send_offsets({timeout})")
        self.release.wait()  # blocks past its own timeout, as librdkafka does

    def __getattr__(self, name: str) -> Any:  # commit_transaction, abort_transaction, flush, ...
        raise AssertionError(f"{name} called on a stuck producer")


class StoreDouble:
    """An object store whose ``healthy()`` answers ``answers`` in turn (then True), and whose
    ``put`` keeps what it is given in ``objects`` (``(bucket, key) -> bytes``), ``get``
    returns it (:class:`~streams.errors.ObjectNotFound` for a missing key) and ``delete``
    removes it, or, with ``down``, all three raise :class:`~streams.errors.StorageError` as a
    store out of retries does."""

    def __init__(self, answers: Iterable[bool] = (), down: bool = False) -> None:
        self._answers = iter(answers)
        self.down = down
        self.objects: dict[tuple[str, str], bytes] = {}

    def healthy(self) -> bool:
        return next(self._answers, True)

    def put(self, bucket: str, key: str, data: bytes, content_type: str) -> StoredObject:
        if self.down:
            raise StorageError(f"PUT {bucket}/{key} failed after 4 attempts: MaxRetryError")
        self.objects[(bucket, key)] = bytes(data)
        return StoredObject(bucket, key, len(data), hashlib.sha256(data).hexdigest())

    def get(self, bucket: str, key: str, max_bytes: int | None = None) -> bytes:
        if self.down:
            raise StorageError(f"GET {bucket}/{key} failed after 4 attempts: MaxRetryError")
        if (bucket, key) not in self.objects:
            raise ObjectNotFound(f"{bucket}/{key}")
        return self.objects[(bucket, key)]

    def delete(self, bucket: str, key: str) -> None:
        if self.down:
            raise StorageError(f"DELETE {bucket}/{key} failed after 4 attempts: MaxRetryError")
        self.objects.pop((bucket, key), None)

def nvimgcodec_double() -> types.ModuleType:
    """A stand-in for NVIDIA's ``nvidia.nvimgcodec`` module on a machine without a GPU: the API
    :mod:`processors.gpu.nvcodec` uses (``Decoder``, ``Encoder``, ``CodeStream``,
    ``DecodeParams``, ``EncodeParams``, ``as_image`` and their enums), on host memory.

    It decodes as nvJPEG differs from libjpeg-turbo (simplejpeg with its fast integer IDCT and
    plain chroma upsampling instead of the fancy one; the stored orientation, EXIF not applied)
    and encodes with OpenCV at the asked quality. Its decoded images expose
    ``__cuda_array_interface__`` whose pointer is host memory, so the backend is built with
    ``device="cpu"``. Knobs, set on the returned module: ``start_error`` (raised by ``Decoder``
    and ``Encoder``: the real one raises CUDA error 35 without a device), ``decode_error`` and
    ``encode_error`` (raised by a whole call), ``encode_none`` (every encoded image is None);
    ``calls`` counts the images decoded and encoded. Install it as ``sys.modules["nvidia"]``
    (its ``nvimgcodec``) and ``sys.modules["nvidia.nvimgcodec"]``.
    """
    import ctypes
    from enum import Enum
    from math import prod

    import cv2
    import numpy as np
    import simplejpeg

    mod = types.ModuleType("nvidia.nvimgcodec")
    mod.__version__ = "0.9.0-double"
    mod.start_error = None
    mod.decode_error = None
    mod.encode_error = None
    mod.encode_none = False
    mod.calls = {"decode": 0, "encode": 0}

    class ColorSpec(Enum):
        SRGB = 1

    class SampleFormat(Enum):
        I_BGR = 1
        I_RGB = 2

    class QualityType(Enum):
        QUALITY = 1

    class ChromaSubsampling(Enum):
        CSS_420 = 1
        CSS_444 = 2

    class CodeStream:
        def __init__(self, data: bytes) -> None:
            self.data = bytes(data)

        def __bytes__(self) -> bytes:
            return self.data

    class Image:
        """An image in host memory with the CUDA array interface's fields (its pointer is a
        host address)."""

        def __init__(self, pixels: np.ndarray, keep: Any = None) -> None:
            self.pixels = pixels
            self.keep = keep

        @property
        def __cuda_array_interface__(self) -> dict:
            return {"shape": self.pixels.shape, "typestr": "|u1", "version": 3,
                    "data": (self.pixels.ctypes.data, False), "strides": None}

    def _params(**kw: Any) -> types.SimpleNamespace:
        return types.SimpleNamespace(**kw)

    def as_image(obj: Any, sample_format: Any = None) -> Image:
        iface = getattr(obj, "__cuda_array_interface__", None) or obj.__array_interface__
        shape = tuple(iface["shape"])
        raw = (ctypes.c_ubyte * prod(shape)).from_address(iface["data"][0])
        return Image(np.ctypeslib.as_array(raw).reshape(shape), keep=obj)

    class Decoder:
        def __init__(self, device_id: int = 0, max_num_cpu_threads: int = 0) -> None:
            if mod.start_error is not None:
                raise mod.start_error

        def decode(self, streams: list, params: Any = None) -> list:
            if mod.decode_error is not None:
                raise mod.decode_error
            out: list = []
            for cs in streams:
                try:
                    px = simplejpeg.decode_jpeg(cs.data, colorspace="BGR", fastdct=True,
                                                fastupsample=True)
                except ValueError:
                    out.append(None)
                    continue
                mod.calls["decode"] += 1
                out.append(Image(np.ascontiguousarray(px)))
            return out

    class Encoder:
        def __init__(self, device_id: int = 0, max_num_cpu_threads: int = 0) -> None:
            if mod.start_error is not None:
                raise mod.start_error

        def encode(self, images: list, codec: str = "jpeg", params: Any = None) -> list:
            if mod.encode_error is not None:
                raise mod.encode_error
            out: list = []
            for im in images:
                ok, buf = cv2.imencode(".jpg", im.pixels,
                                       [cv2.IMWRITE_JPEG_QUALITY, int(params.quality_value)])
                mod.calls["encode"] += 1
                out.append(None if mod.encode_none or not ok else CodeStream(buf.tobytes()))
            return out

    for name, obj in (("ColorSpec", ColorSpec), ("SampleFormat", SampleFormat),
                      ("QualityType", QualityType), ("ChromaSubsampling", ChromaSubsampling),
                      ("CodeStream", CodeStream), ("Image", Image), ("as_image", as_image),
                      ("Decoder", Decoder), ("Encoder", Encoder),
                      ("DecodeParams", _params), ("EncodeParams", _params)):
        setattr(mod, name, obj)
    return mod
