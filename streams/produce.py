"""Upload producer (the ticketing platform's side, and the benchmarks' load generator).

Each image is PUT to the uploads bucket (claim check) — or sent inline when ``inline`` and
small — and its UploadEvent produced with key = upload_id. Bounded in count and time.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from schemas import codec
from schemas import formats as F
from schemas.models import UploadEvent
from streams.errors import DeliveryError, KafkaSetupError, StorageError
from streams.kafka import plain_producer, setup_call
from streams.settings import Settings
from streams.storage import Storage

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".heic",
                  ".heif"}


@dataclass(frozen=True, slots=True)
class Sent:
    """One produced upload: ``upload_id``, the source ``file`` name, and ``sent_ms`` (epoch ms)."""

    upload_id: str
    file: str
    sent_ms: float


def list_images(folder: Path) -> list[Path]:
    """Regular files of ``folder`` with an image suffix (:data:`IMAGE_SUFFIXES`), sorted by
    name; a folder, FIFO or device named like an image is left out (reading a FIFO would
    block)."""
    return sorted(p for p in Path(folder).iterdir()
                  if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def make_upload_id(prefix: str, name: str, i: int) -> str:
    """A contract-safe upload id: ``{prefix}-{i:06d}-{8 hex of the file name}``, the name hashed
    as its bytes on disk (:func:`os.fsencode`: a name that is not UTF-8, which Python holds with
    surrogate escapes, hashes as its own bytes instead of raising ``UnicodeEncodeError``)."""
    return f"{prefix}-{i:06d}-{hashlib.sha1(os.fsencode(name)).hexdigest()[:8]}"


def write_ids(path: Path, sent: Iterable[Sent]) -> None:
    """Write ``upload_id<TAB>file name`` per upload to ``path`` (its folder made), UTF-8; a file
    name that is not UTF-8 is written back as its own bytes (``surrogateescape``), as the
    processors' ``--out`` writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{x.upload_id}\t{x.file}\n" for x in sent), encoding="utf-8",
                    errors="surrogateescape")


def parse_options(text: str | None) -> dict[str, Any] | None:
    """An upload's options from their JSON text (None, empty or blank: none), read by the
    contract's own parser (:func:`schemas.codec.parse_json`, as the workers read the event):
    the one place the gateway (form field and query parameter) and ``cardstream produce
    --options`` read them.

    Raises:
        ValueError: a plain reason: ``not JSON: ...`` (malformed, a repeated key, which it
            names, nesting too deep, NaN) or ``not a JSON object``.
    """
    if text is None or not text.strip():
        return None
    try:
        value = codec.parse_json(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {codec.where_not_json(e)}") from None
    except codec.RepeatedKey as e:  # the sender's own text: name the key it repeats
        shown = json.dumps(e.key if len(e.key) <= 64 else e.key[:64] + "...")
        raise ValueError(f"not JSON: an object repeats the key {shown}") from None
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def validate_request(upload_id: str, task: str, options: dict[str, Any] | None) -> None:
    """Check an upload's id, task and options against the contract before anything is stored.

    Raises:
        pydantic.ValidationError (a ``ValueError``): what the contract refuses.
    """
    probe: dict[str, Any] = {"upload_id": upload_id, "task": task, "image": {"inline_b64": "AA=="}}
    if options is not None:  # [] or "" too: the contract refuses what is not an object
        probe["options"] = options
    UploadEvent.model_validate(probe)


class UploadProducer:
    """Puts images and produces UploadEvents.

    Args:
        settings: app settings (uploads topic, uploads bucket, inline limit).
        inline: send images up to ``worker.inline_max_bytes`` inline instead of a claim check.
        **producer_config: librdkafka settings on top of ``plain_producer``'s (e.g.
            ``{"linger.ms": 0}``).
    """

    def __init__(self, settings: Settings, inline: bool = False, **producer_config: Any) -> None:
        self.settings = settings
        self.inline = inline
        self.storage = Storage(settings.s3)
        self.producer = plain_producer(settings.kafka, **producer_config)
        self._errors: list[str] = []
        self._failed: list[UploadEvent] = []  # events whose delivery report carried an error
        self._lock = threading.Lock()

    def check_broker(self, timeout_s: float = 10.0) -> None:
        """Ask the brokers for the cluster's metadata (all topics: asking for one may create
        it), before anything is uploaded: no broker answering, or no uploads topic, is one
        error in ``timeout_s`` (s), not a claim check per image then a flush's wait (30 s, and
        "not delivered within 30.0 s" said nothing of the topic: a fresh user's trial).

        Raises:
            BrokerUnavailable: no broker answered (:func:`streams.kafka.setup_error`).
            KafkaSetupError: the request was refused (authentication, authorization), or the
                uploads topic is not in the metadata (it does not exist, or this principal may
                not describe it; the project's brokers create no topic on first use).
        """
        k = self.settings.kafka
        with setup_call(f"reading the metadata for {k.uploads_topic}", k.bootstrap_servers):
            topics = self.producer.list_topics(timeout=timeout_s).topics
        if k.uploads_topic not in topics:
            raise KafkaSetupError(f"topic {k.uploads_topic} is not at {k.bootstrap_servers} (or "
                                  "this principal may not describe it): `cardstream topics "
                                  "create` makes it")

    def event_for(self, upload_id: str, task: str, data: bytes, name: str,
                  options: dict[str, Any] | None) -> UploadEvent:
        """PUT ``data`` (unless sent inline) and build its event.

        The claim-check key is ``{task}/{upload_id}/upload{.ext}``: the local file name (which
        may hold a person's name) stays on this machine; only its lower-cased suffix travels."""
        import base64

        validate_request(upload_id, task, options)  # before the PUT: a bad event uploads nothing
        if self.inline and len(data) <= self.settings.worker.inline_max_bytes:
            image: dict[str, Any] = {"inline_b64": base64.b64encode(data).decode()}
        else:
            ext = Path(name).suffix.lower()
            key = f"{task}/{upload_id}/upload{ext if ext in IMAGE_SUFFIXES else ''}"
            st = self.storage.put(self.settings.s3.uploads_bucket, key, data,
                                  "application/octet-stream")
            image = {"ref": {"bucket": st.bucket, "key": st.key, "size_bytes": st.size_bytes,
                             "sha256": st.sha256}}
        ev: dict[str, Any] = {"upload_id": upload_id, "task": task, "image": image,
                              "submitted_at": F.utc_now_rfc3339()}
        if options:
            ev["options"] = options
        return UploadEvent.model_validate(ev)

    def send(self, ev: UploadEvent) -> None:
        """Produce ``ev`` to the uploads topic (asynchronous; :meth:`flush` waits)."""
        key, value, encoded = codec.encode_upload(ev)
        headers: list[tuple[str, str | bytes | None]] = list(encoded)

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                with self._lock:
                    self._failed.append(ev)
                    if err.code() != KafkaError._PURGE_QUEUE:  # purged: flush said why
                        self._errors.append(f"{err.name()}: {err.str()}")

        self.producer.produce(self.settings.kafka.uploads_topic, key=key, value=value,
                              headers=headers,
                              on_delivery=on_delivery)
        self.producer.poll(0)

    def send_raw(self, key: bytes | None, value: bytes | None) -> None:
        """Produce raw bytes (for tests of bad events)."""
        self.producer.produce(self.settings.kafka.uploads_topic, key=key, value=value)

    def flush(self, timeout_s: float = 30.0) -> list[str]:
        """Wait for delivery; returns the delivery errors seen (empty when all were
        acknowledged)."""
        left = self.producer.flush(timeout_s)
        errs = list(self._errors)
        if left:
            errs.append(f"{left} messages not delivered within {timeout_s} s")
        return errs

    def produce_files(self, files: Sequence[Path], task: str, *,
                      options: dict[str, Any] | None = None,
                      count: int | None = None, rate: float | None = None, concurrency: int = 4,
                      prefix: str | None = None, max_seconds: float = 600.0,
                      progress: Callable[[int], object] | None = None) -> list[Sent]:
        """Upload ``count`` events cycling over ``files`` (default: each file once).

        Args:
            rate: events per second ceiling (None: as fast as possible).
            concurrency: uploads in flight (threads doing PUT + produce).
            prefix: upload id prefix (default: a fresh random one).
            max_seconds: stop after this long (s) even if not all were sent.

        Raises:
            BrokerUnavailable / KafkaSetupError: :meth:`check_broker`, before any upload.
            DeliveryError: some events were not delivered (:meth:`flush`'s errors; the first
                one in the message); their claim-check objects are deleted
                (:meth:`_undelivered`, whose account ends the message).
            StorageError: a claim check's PUT failed (:meth:`event_for`).
        """
        if not files:
            return []
        self.check_broker()
        n = count if count is not None else len(files)
        prefix = prefix or uuid.uuid4().hex[:10]
        sent: list[Sent] = []
        t0 = time.monotonic()
        cache: dict[Path, bytes] = {}

        def one(i: int) -> Sent | None:
            if time.monotonic() - t0 > max_seconds:
                return None
            if rate:
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            f = files[i % len(files)]
            data = cache.get(f) or cache.setdefault(f, f.read_bytes())
            uid = make_upload_id(prefix, f.name, i)
            self.send(self.event_for(uid, task, data, f.name, options))
            if progress:
                progress(1)
            return Sent(uid, f.name, time.time() * 1000.0)

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as ex:
            for s in ex.map(one, range(n)):
                if s is not None:
                    sent.append(s)
        errs = self.flush()
        if errs:
            k = self.settings.kafka
            more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
            failed, left = self._undelivered()
            e = DeliveryError(f"{len(failed)} of {len(sent)} uploads not delivered to "
                              f"{k.uploads_topic} at {k.bootstrap_servers}: {errs[0]}{more}"
                              f"{left}")
            e.sent = [x for x in sent if x.upload_id not in failed]
            raise e
        return sent

    def _undelivered(self) -> tuple[set[str], str]:
        """After a flush that did not deliver everything: the events still queued are purged
        (their delivery reports fail now), and the claim-check objects of the events whose
        reports failed are deleted, so that no object is left without its event. Best effort:
        the first delete that fails stops it (an outage, or a role without
        ``s3:DeleteObject``). Events in flight when the flush's wait ended may still be
        delivered: their objects are kept.

        Returns:
            The upload ids of the events not delivered, and the account of the clean-up for
            the end of the error's message (``; their 3 claim-check objects deleted``; counts
            and the store's error, never a key).
        """
        self.producer.purge(in_queue=True, in_flight=False)
        self.producer.poll(0)  # the purged events' delivery reports
        with self._lock:
            failed, self._failed = self._failed, []
        refs = [ev.image.ref for ev in failed if ev.image.ref is not None]
        out = f"; their {len(refs)} claim-check objects deleted" if refs else ""
        for i, ref in enumerate(refs):
            try:
                self.storage.delete(ref.bucket, ref.key)
            except StorageError as e:
                out = (f"; {len(refs) - i} of their {len(refs)} claim-check objects not "
                       f"deleted ({type(e).__name__}: {e})")
                break
        if in_flight := len(self.producer):
            out += (f"; {in_flight} more in flight may still be delivered (their claim-check "
                    "objects kept)")
        return {ev.upload_id for ev in failed}, out


def iter_chunks(xs: Iterable[Any], n: int) -> Iterable[list[Any]]:
    """Consecutive lists of ``n`` items."""
    buf: list[Any] = []
    for x in xs:
        buf.append(x)
        if len(buf) == n:
            yield buf
            buf = []
    if buf:
        yield buf
