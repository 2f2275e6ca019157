"""Poison records: one builder per kind that issue 31 found able to stop a partition.

Used by the fault suite (``python -m benchmarks.faults``) and by
``tests/integration/test_poison.py``. Every builder returns the raw ``(key, value)`` of one
uploads-topic record; claim-check objects it needs are PUT first with the
:class:`~streams.produce.UploadProducer`'s store client.

Kinds (:data:`KINDS`):

* ``big_key``: a valid event under a 700 000-byte record key (the broker takes it; a dead letter
  that copies the key does not fit the producer's 1 000 000-byte message limit);
* ``refused_key``: a valid event whose claim-check key MinIO refuses (``a//b.jpg``: 400
  ``XMinioInvalidObjectName``);
* ``huge_image``: a valid 40 MP JPEG (just under the 40 MP limit, 120 MB decoded), the input of
  a memory blow-up when a batch decodes many of them at once;
* ``crash`` / ``raise`` / ``hang``: a small PNG of a :data:`processors.sleep.POISON_SIZES` size,
  on which the ``sleep`` processor kills its process with SIGSEGV (a native crash), raises, or
  blocks (a hung compute);
* ``not_json``: bytes that are not JSON (the contract's own poison, dead-lettered since v1);
* ``scan_bomb``: a 0.22 MB progressive JPEG with 6,694 scans, each a pass over its 12 MP (issue
  43: 21.9 s of decoding held its batch); refused ``IMAGE_TOO_COMPLEX`` at the probe;
* ``tile_bomb``: a 64 x 64 TIFF in one 8192 x 8192 tile (0.2 MB stored, 201 MB inflated);
  refused ``IMAGE_TOO_COMPLEX`` at the probe;
* ``alpha_png``: a valid 40 MP RGBA PNG (0.7 MB; its alpha flattening peaked at 1,201 MB against
  the 240 MB the budget counted, issue 43): accepted within the pod's memory.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from benchmarks import decode_cases
from processors.sleep import POISON_SIZES
from schemas import codec
from streams.kafka import base_config
from streams.produce import UploadProducer
from streams.settings import Settings

KINDS = ("big_key", "refused_key", "huge_image", "crash", "raise", "hang", "not_json",
         "scan_bomb", "tile_bomb", "alpha_png", "gzip_lie", "deflate_lie", "brotli_lie",
         "gzip_bomb")
BIG_KEY_BYTES = 700_000
REFUSED_KEY = "a//b.jpg"
#: (height, width) of the huge image: 39 988 000 px, under the default 40 MP limit
HUGE_SHAPE = (5200, 7690)


def png(height: int, width: int, seed: int = 0) -> bytes:
    """A ``height`` x ``width`` px PNG of random colour blocks (lossless, so its size is exact)."""
    rng = np.random.default_rng(seed)
    img = cv2.resize(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8), (width, height),
                     interpolation=cv2.INTER_NEAREST)
    ok, buf = cv2.imencode(".png", img)
    assert ok
    return buf.tobytes()


@functools.cache
def huge_jpeg() -> bytes:
    """A :data:`HUGE_SHAPE` JPEG (about 1.7 MB; 120 MB once decoded to BGR), made once."""
    img = np.full((*HUGE_SHAPE, 3), 127, np.uint8)
    img[::50] = 0
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 50])
    assert ok
    return buf.tobytes()


_IMAGES = {"scan_bomb": functools.cache(lambda: decode_cases.jpeg_many_scans(4000, 3000, 6694)),
           "tile_bomb": functools.cache(lambda: decode_cases.tiff_big_tile(64, 64, 8192)),
           "alpha_png": functools.cache(lambda: decode_cases.png_rgba(*HUGE_SHAPE[::-1]))}


def poison_image(kind: str) -> bytes:
    """The PNG on which the ``sleep`` processor plays ``kind`` (``crash``, ``raise``, ``hang``)."""
    (h, w), = (size for size, what in POISON_SIZES.items() if what == kind)
    return png(h, w)


def record(kind: str, prod: UploadProducer, upload_id: str,
           task: str = "card") -> tuple[bytes, bytes]:
    """The raw ``(key, value)`` of one poison record of ``kind`` for ``upload_id``.

    Raises:
        ValueError: ``kind`` is not in :data:`KINDS`.
    """
    if kind == "not_json":
        return upload_id.encode(), b"\x00not json{"
    if kind == "big_key":
        ev = prod.event_for(upload_id, task, png(96, 128), "k.png", None)
        return b"k" * BIG_KEY_BYTES, codec.encode_upload(ev)[1]
    if kind == "refused_key":
        obj: dict[str, Any] = {"upload_id": upload_id, "task": task,
                               "image": {"ref": {"bucket": prod.settings.s3.uploads_bucket,
                                                 "key": REFUSED_KEY}}}
        return upload_id.encode(), codec.dumps(obj)
    if kind in ENCODED:
        return upload_id.encode(), codec.dumps(_encoded_event(prod, upload_id, task, kind))
    if kind == "huge_image":
        data = huge_jpeg()
    elif kind in _IMAGES:
        data = _IMAGES[kind]()
    elif kind in ("crash", "raise", "hang"):
        data = poison_image(kind)
    else:
        raise ValueError(f"unknown poison kind {kind!r}; known: {', '.join(KINDS)}")
    key, value, _ = codec.encode_upload(prod.event_for(upload_id, task, data, f"{kind}.img", None))
    return key, value


#: claim-check objects stored with a ``Content-Encoding`` the object store keeps and sends back:
#: kind -> (the stored bytes, the header). ``gzip_lie``: a valid PNG that says it is gzip;
#: ``gzip_bomb``: 1 GiB of zeros gzipped to about 1 MB (issue 43: answered IMAGE_TOO_LARGE after
#: the worker's memory grew by 2,049 MiB); ``brotli_lie`` / ``deflate_lie``: a valid PNG that
#: says ``br`` / ``deflate``.
ENCODED: dict[str, tuple[Any, str]] = {
    "gzip_lie": (lambda: png(96, 128, seed=7), "gzip"),
    "gzip_bomb": (lambda: gzip_zeros(1 << 30), "gzip"),
    "brotli_lie": (lambda: png(96, 128, seed=8), "br"),
    "deflate_lie": (lambda: png(96, 128, seed=9), "deflate"),
}


@functools.cache
def gzip_zeros(n: int) -> bytes:
    """``n`` zero bytes (a multiple of 16 MiB) gzipped: one gzip member of 16 MiB of zeros,
    repeated (RFC 1952 2.2: a gzip file is a series of members; decoders, urllib3's included,
    read them all), about ``n / 1030`` bytes."""
    import zlib

    step = 16 << 20
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 16 + 15: a gzip member
    member = z.compress(bytes(step)) + z.flush()
    return member * (n // step)


def _encoded_event(prod: UploadProducer, upload_id: str, task: str, kind: str) -> dict[str, Any]:
    """PUT the ``ENCODED[kind]`` object with its ``Content-Encoding``; the event naming it (its
    ref with the stored bytes' size and sha256, as an honest uploader computes them)."""
    import hashlib
    import io

    build, encoding = ENCODED[kind]
    data = build()
    bucket, key = prod.settings.s3.uploads_bucket, f"{task}/{upload_id}/upload"
    prod.storage.client.put_object(bucket, key, io.BytesIO(data), len(data),
                                   content_type="application/octet-stream",
                                   metadata={"Content-Encoding": encoding})
    return {"upload_id": upload_id, "task": task, "submitted_at": "2026-12-05T00:00:00Z",
            "image": {"ref": {"bucket": bucket, "key": key, "size_bytes": len(data),
                              "sha256": hashlib.sha256(data).hexdigest()}}}


def send(prod: UploadProducer, key: bytes | None, value: bytes | None,
         partition: int | None = None) -> None:
    """Produce one raw record to the uploads topic (to ``partition`` when given; asynchronous,
    ``prod.flush()`` waits)."""
    kw: dict[str, Any] = {} if partition is None else {"partition": partition}
    prod.producer.produce(prod.settings.kafka.uploads_topic, key=key, value=value, **kw)
    prod.producer.poll(0)


def send_with_raw_headers(settings: Settings, key: bytes | None, value: bytes,
                          headers: Sequence[tuple[bytes, bytes]], partition: int = 0) -> None:
    """Produce one record to the uploads topic whose header names are raw bytes (not
    necessarily UTF-8), as any non-Python producer may send them: confluent-kafka's ``produce``
    takes ``str`` names only, so this calls the librdkafka it bundles (``rd_kafka_producev``
    with an ``rd_kafka_headers_t`` built by ``rd_kafka_header_add``) through ctypes.

    Raises:
        RuntimeError: librdkafka refused the configuration, the record, or did not deliver it
            within 30 s.
    """
    lib = _librdkafka()
    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, v in base_config(settings.kafka).items():
        if isinstance(v, (str, int, float, bool)):  # not the Python logger object
            text = str(v).lower() if isinstance(v, bool) else str(v)
            if lib.rd_kafka_conf_set(conf, name.encode(), text.encode(), err, 512) != 0:
                raise RuntimeError(f"librdkafka refused {name}: {err.value.decode()}")
    rk = lib.rd_kafka_new(0, conf, err, 512)  # RD_KAFKA_PRODUCER
    if not rk:
        raise RuntimeError(f"rd_kafka_new: {err.value.decode()}")
    try:
        hdrs = lib.rd_kafka_headers_new(len(headers))
        for name, v in headers:
            lib.rd_kafka_header_add(hdrs, name, len(name), v, len(v))
        topic = settings.kafka.uploads_topic.encode()
        args: list[Any] = [ctypes.c_int(1), ctypes.c_char_p(topic),  # RD_KAFKA_VTYPE_TOPIC
                           ctypes.c_int(3), ctypes.c_int32(partition),  # _PARTITION
                           ctypes.c_int(4), ctypes.c_char_p(value), ctypes.c_size_t(len(value)),
                           ctypes.c_int(7), ctypes.c_int(2),  # _MSGFLAGS: RD_KAFKA_MSG_F_COPY
                           ctypes.c_int(10), ctypes.c_void_p(hdrs)]  # _HEADERS
        if key is not None:
            args += [ctypes.c_int(5), ctypes.c_char_p(key), ctypes.c_size_t(len(key))]  # _KEY
        rc = lib.rd_kafka_producev(ctypes.c_void_p(rk), *args, ctypes.c_int(0))  # _END
        if rc != 0:
            raise RuntimeError(f"rd_kafka_producev: error {rc}")
        if lib.rd_kafka_flush(ctypes.c_void_p(rk), 30_000) != 0:
            raise RuntimeError("the record was not delivered within 30 s")
    finally:
        lib.rd_kafka_destroy(ctypes.c_void_p(rk))


@functools.cache
def _librdkafka() -> ctypes.CDLL:
    """The librdkafka shared library confluent-kafka's wheel bundles, with the prototypes used."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    lib = ctypes.CDLL(str(next(libs.glob("librdkafka*.so*"))))
    p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    ssz, s = ctypes.c_ssize_t, ctypes.c_char_p
    lib.rd_kafka_conf_new.restype = p
    lib.rd_kafka_conf_set.argtypes = [p, s, s, s, sz]
    lib.rd_kafka_new.restype = p
    lib.rd_kafka_new.argtypes = [i, p, s, sz]
    lib.rd_kafka_headers_new.restype = p
    lib.rd_kafka_headers_new.argtypes = [sz]
    lib.rd_kafka_header_add.argtypes = [p, s, ssz, s, ssz]
    lib.rd_kafka_producev.restype = i
    lib.rd_kafka_flush.argtypes = [p, i]
    lib.rd_kafka_destroy.argtypes = [p]
    return lib
