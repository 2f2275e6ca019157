"""``POST /v1/uploads`` without HTTP: from a client's bytes and fields to a stored claim check and
an UploadEvent on the uploads topic, refusing first whatever the worker would refuse.

Order (each step refuses with a :class:`~streams.gateway.errors.Refused` before anything is
stored; nothing later can leave half an upload behind):

1. the task (one the gateway serves) and its options, checked by the contract's pydantic models
   (:func:`streams.produce.validate_request`, what ``cardstream produce`` runs);
2. the upload id (:func:`upload_id_for`): ``{client}.{id}`` from the client's own ``upload_id``,
   a digest of its ``Idempotency-Key``, or a random one;
3. the image: the worker's own header probe (:func:`processors.decode.probe_image`: magic bytes,
   byte and pixel limits, header readable), answered with the worker's reason code;
4. the UploadEvent, encoded and decoded again exactly as the worker parses its records
   (:func:`schemas.codec.decode_upload` with the worker's bucket allow-list and inline limit),
   so no event the worker would dead-letter is ever produced;
5. the image PUT to the uploads bucket at ``{task}/{upload_id}/upload`` with SSE-S3 and
   ``If-None-Match: *``: the first POST of an id stores it, a repeated one gets 412 and is then
   compared with what is stored (the digest, task and options kept in the object's metadata):
   the same -> a replay, answered with the same upload; different -> 409
   ``IDEMPOTENCY_KEY_REUSED``. The store decides, so two instances racing on one key cannot
   both store. The key has no extension, so a second image of another format still lands on
   the same key; for a deterministic id the other tasks' keys are checked too;
6. the UploadEvent produced (key = upload_id) and acknowledged by the brokers within
   ``produce_timeout_s``; if not, the object this request stored is deleted and the answer is
   503 ``UNAVAILABLE``.

A replay whose result the gateway has seen is answered with that result and produces nothing; a
replay without one produces its event again (the contract's rule: the same upload_id again is
processed again and rewrites the same outputs), unless this instance produced it within the
last ``RECENT_S`` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Producer
from pydantic import ValidationError

from processors.decode import DecodeSettings, probe_image
from processors.errors import DecodeError
from schemas import codec
from schemas import formats as F
from schemas.errors import ContractError
from schemas.gateway import GatewayCode
from schemas.models import UploadEvent
from streams.errors import ObjectNotFound, ObjectRefused, StorageError
from streams.gateway.errors import Refused, store_unavailable
from streams.kafka import plain_producer
from streams.logs import log
from streams.produce import parse_options as read_options
from streams.produce import validate_request
from streams.settings import Settings
from streams.storage import Storage

#: a client's own id: the contract's upload-id characters, short enough for ``{client}.`` before it
CLIENT_ID_PATTERN = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9._-]{1,95}")
#: longest Idempotency-Key (characters; IETF draft-ietf-httpapi-idempotency-key-header keys are
#: usually UUIDs)
IDEMPOTENCY_KEY_MAX = 255
#: seconds this instance remembers having produced an upload (a replay within it is not
#: produced again)
RECENT_S = 600.0
#: object metadata the gateway writes on a claim check (``x-amz-meta-*``)
META_SHA256, META_CLIENT, META_TASK, META_OPTIONS = ("cs-sha256", "cs-client", "cs-task",
                                                    "cs-options")


def upload_id_for(client: str, upload_id: str | None,
                  idempotency_key: str | None) -> tuple[str, bool]:
    """The upload id of a POST and whether it is deterministic (a repeat gets the same one).

    ``{client}.{upload_id}`` for a client's own id; ``{client}.k-{32 hex}`` for an
    ``Idempotency-Key`` (SHA-256 of the client, a NUL and the key: two clients' ids of one key
    share nothing, so an id does not tell that another client used the same key);
    ``{client}.{32 hex}`` (random) otherwise. The client part makes two clients' ids distinct
    and tells every instance whose an upload is.

    Raises:
        Refused: ``INVALID_UPLOAD_ID`` (not 1-95 characters of ``[A-Za-z0-9._-]``, or ``.``/
            ``..``); ``INVALID_PARAMETER`` (both given, or a key that is empty, longer than 255
            characters or not printable ASCII).
    """
    if upload_id is not None and idempotency_key is not None:
        raise Refused(GatewayCode.INVALID_PARAMETER,
                      "give upload_id or an Idempotency-Key header, not both")
    if upload_id is not None:
        if not CLIENT_ID_PATTERN.fullmatch(upload_id):
            raise Refused(GatewayCode.INVALID_UPLOAD_ID,
                          "upload_id must be 1-95 characters of A-Z a-z 0-9 . _ - (not . or ..)")
        return f"{client}.{upload_id}", True
    if idempotency_key is not None:
        if not (0 < len(idempotency_key) <= IDEMPOTENCY_KEY_MAX
                and all(" " <= c <= "~" for c in idempotency_key)):
            raise Refused(GatewayCode.INVALID_PARAMETER,
                          f"Idempotency-Key must be 1-{IDEMPOTENCY_KEY_MAX} printable ASCII "
                          "characters")
        digest = hashlib.sha256(f"{client}\0{idempotency_key}".encode()).hexdigest()
        return f"{client}.k-{digest[:32]}", True
    return f"{client}.{uuid.uuid4().hex}", False


def parse_options(raw: str | None) -> dict[str, Any] | None:
    """The ``options`` field (a JSON object as text; None or empty: none).

    Read as ``cardstream produce`` reads them (:func:`streams.produce.parse_options`: the
    contract's strict parser), so a form field and a query parameter alike.

    Raises:
        Refused: ``OPTIONS_INVALID`` when it is not a JSON object, or not JSON as the contract
            reads it (a repeated key, which the message names, as a repeated form field is
            refused; nesting too deep; NaN).
    """
    try:
        return read_options(raw)
    except ValueError as e:
        raise Refused(GatewayCode.OPTIONS_INVALID, f"options must be a JSON object ({e})") from None


def check_request(task: str | None, options: dict[str, Any] | None, tasks: tuple[str, ...]) -> str:
    """Check the task and its options against the contract (before any byte is stored).

    Returns:
        The task.

    Raises:
        Refused: ``UNKNOWN_TASK`` (missing or not served), ``OPTIONS_INVALID`` (the contract
            refuses them: the message names the field and pydantic's reason, never the value).
    """
    if not task or task not in tasks:
        raise Refused(GatewayCode.UNKNOWN_TASK, f"task must be one of {', '.join(tasks)}")
    try:
        validate_request("probe", task, options)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise Refused(GatewayCode.OPTIONS_INVALID, f"{where}: {err['msg']}") from None
    return task


def probe(body: bytes, dec: DecodeSettings) -> str:
    """The image format, by the worker's own header probe.

    Raises:
        Refused: ``EMPTY_BODY`` for zero bytes; otherwise the probe's reason code
            (``UNSUPPORTED_FORMAT`` 415, ``IMAGE_TOO_LARGE`` 413, ``IMAGE_TOO_SMALL`` /
            ``CORRUPT_IMAGE`` 422) with its message.
    """
    if not body:
        raise Refused(GatewayCode.EMPTY_BODY, "the request has no image (0 bytes)")
    try:
        return probe_image(body, dec).format
    except DecodeError as e:
        raise Refused(str(e.reason), str(e)) from None


def canonical_options(options: dict[str, Any] | None) -> str:
    """The options as compact JSON with sorted keys (what a replay is compared by)."""
    return json.dumps(options or {}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Submitted:
    """What :meth:`Intake.submit` did: the ``upload_id``, its ``task``, whether it was a
    ``replayed`` POST, and whether an event was ``produced`` by this request."""

    upload_id: str
    task: str
    replayed: bool
    produced: bool
    at: tuple[int, int] | None = None
    """(partition, offset) of the event this request produced."""


class Intake:
    """Stores claim checks and produces UploadEvents for the gateway (blocking calls run on the
    default executor).

    Args:
        settings: app settings (uploads bucket and topic, the worker's allow-list and limits,
            the gateway's produce timeout).
        storage: the object store client (the gateway role's credentials).
        producer: a Kafka producer (default: :func:`streams.kafka.plain_producer` with 2 ms
            linger and the produce timeout as ``message.timeout.ms``).
    """

    def __init__(self, settings: Settings, storage: Storage,
                 producer: Producer | None = None) -> None:
        self.settings = settings
        self.storage = storage
        g = settings.gateway
        self.producer = producer or plain_producer(
            settings.kafka, **{"linger.ms": 2,
                               "message.timeout.ms": int(g.produce_timeout_s * 1000)})
        self.tasks: tuple[str, ...] = g.tasks or settings.worker.tasks
        self._recent: OrderedDict[str, float] = OrderedDict()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="gateway-producer", daemon=True)
        self._poller.start()

    def close(self) -> None:
        """Flush what is in flight (up to 10 s) and stop the delivery thread."""
        self._stop.set()
        self._poller.join(5)
        self.producer.flush(10)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.05)  # delivery callbacks run here

    # ---- the steps ----------------------------------------------------------------------------

    def event(self, upload_id: str, task: str, body: bytes, fmt: str,
              options: dict[str, Any] | None) -> tuple[UploadEvent, tuple[bytes, bytes, Any]]:
        """The UploadEvent of a probed image and its record, parsed back as the worker parses
        it (step 4).

        Raises:
            Refused: ``INTERNAL_ERROR`` when the worker's parse refuses it (a gateway whose
                uploads bucket is not in the workers' allow-list, say).
        """
        s3 = self.settings.s3
        ev: dict[str, Any] = {
            "upload_id": upload_id, "task": task,
            "image": {"ref": {"bucket": s3.uploads_bucket, "key": f"{task}/{upload_id}/upload",
                              "size_bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}},
            "content_type": f"image/{fmt}", "submitted_at": F.utc_now_rfc3339()}
        if options:
            ev["options"] = options
        try:
            model = UploadEvent.model_validate(ev)
            record = codec.encode_upload(model)
            codec.decode_upload(*record, allowed_buckets=s3.allowed_buckets,
                                inline_max_bytes=self.settings.worker.inline_max_bytes)
        except (ValidationError, ContractError) as e:
            log.error("gateway_event_refused", upload_id=upload_id, error=type(e).__name__)
            raise Refused(GatewayCode.INTERNAL_ERROR, "the upload event would not be accepted by "
                          "the workers (check the gateway's buckets and the workers' allow-list)",
                          upload_id=upload_id) from None
        return model, record

    def _metadata(self, client: str, ev: UploadEvent) -> dict[str, str]:
        ref = ev.image.ref
        assert ref is not None and ref.sha256 is not None
        return {META_SHA256: ref.sha256, META_CLIENT: client, META_TASK: str(ev.task),
                META_OPTIONS: canonical_options(ev.options.model_dump(exclude_none=True)
                                                if ev.options is not None else None)}

    def _stored_metadata(self, key: str) -> dict[str, str] | None:
        """The gateway metadata of the object at ``key`` in the uploads bucket, or None.

        Raises:
            StorageError: the store refused the HEAD or did not answer.
        """
        bucket = self.settings.s3.uploads_bucket
        try:
            st = self.storage.retry(f"HEAD {bucket}",
                                    lambda: self.storage.client.stat_object(bucket, key))
        except ObjectNotFound:
            return None
        meta = {k.lower(): v for k, v in (st.metadata or {}).items()}
        return {m: meta.get(f"x-amz-meta-{m}", "") for m in (META_SHA256, META_CLIENT, META_TASK,
                                                             META_OPTIONS)}

    def store(self, client: str, ev: UploadEvent, body: bytes, deterministic: bool) -> bool:
        """Step 5: PUT the claim check unless an object is there already (blocking).

        Returns:
            True when this call stored it; False for a replay (the same object was there).

        Raises:
            Refused: ``IDEMPOTENCY_KEY_REUSED`` (another image, task or options under this
                id); ``UNAVAILABLE`` with ``Retry-After`` (the store refused or did not answer
                a HEAD or the PUT: :func:`~streams.gateway.errors.store_unavailable`; a HEAD of
                an idempotent POST ran outside the mapping and answered 500, a fresh user's
                trial).
        """
        try:
            return self._store(client, ev, body, deterministic)
        except StorageError as e:
            raise store_unavailable(e, self.settings.gateway.retry_after_s,
                                    ev.upload_id) from None

    def _store(self, client: str, ev: UploadEvent, body: bytes, deterministic: bool) -> bool:
        ref = ev.image.ref
        assert ref is not None
        want = self._metadata(client, ev)
        if deterministic:  # the same id under another task's key?
            for other in self.tasks:
                if other != str(ev.task) and self._stored_metadata(
                        f"{other}/{ev.upload_id}/upload") is not None:
                    raise Refused(GatewayCode.IDEMPOTENCY_KEY_REUSED, "this upload id was used "
                                  "with another task", upload_id=ev.upload_id)
        try:
            self.storage.put(self.settings.s3.uploads_bucket, ref.key, body,
                             "application/octet-stream", metadata=want, if_absent=True)
            return True
        except ObjectRefused as e:
            if e.status != 412:  # If-None-Match: the object exists
                raise
        if self._stored_metadata(ref.key) != want:
            raise Refused(GatewayCode.IDEMPOTENCY_KEY_REUSED, "this upload id was used with "
                          "another image or other options", upload_id=ev.upload_id)
        return False

    def delete(self, key: str) -> None:
        """Remove a claim check this request stored (its event was not delivered)."""
        try:
            self.storage.delete(self.settings.s3.uploads_bucket, key)
        except StorageError as e:
            log.warning("gateway_orphan_claim_check", error=str(e))

    async def produce(self, record: tuple[bytes, bytes, Any]) -> tuple[int, int]:
        """Step 6: produce the record and wait for the brokers' acknowledgement.

        Returns:
            The record's (partition, offset).

        Raises:
            Refused: ``UNAVAILABLE`` when it is not acknowledged (``message.timeout.ms``).
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[KafkaError | None, tuple[int, int]]] = loop.create_future()

        def done(err: KafkaError | None, msg: Any) -> None:
            at = (-1, -1) if err is not None else (msg.partition(), msg.offset())

            def settle() -> None:
                if not fut.done():
                    fut.set_result((err, at))

            loop.call_soon_threadsafe(settle)

        key, value, headers = record
        try:
            self.producer.produce(self.settings.kafka.uploads_topic, key=key, value=value,
                                  headers=headers, on_delivery=done)
        except BufferError:
            raise Refused(GatewayCode.OVERLOADED, "the producer queue is full",
                          retry_after_s=self.settings.gateway.retry_after_s) from None
        err, at = await fut
        if err is not None:
            raise Refused(GatewayCode.UNAVAILABLE, f"Kafka did not take the upload ({err.name()})",
                          retry_after_s=self.settings.gateway.retry_after_s,
                          upload_id=key.decode())
        return at

    def recently_produced(self, upload_id: str) -> bool:
        """True when this instance produced ``upload_id`` within :data:`RECENT_S` seconds."""
        at = self._recent.get(upload_id)
        return at is not None and time.monotonic() - at < RECENT_S

    def _remember(self, upload_id: str) -> None:
        self._recent[upload_id] = time.monotonic()
        self._recent.move_to_end(upload_id)
        while len(self._recent) > 100_000:
            self._recent.popitem(last=False)

    async def submit(self, client: str, task: str, options: dict[str, Any] | None, body: bytes,
                     upload_id: str, deterministic: bool, has_result: bool) -> Submitted:
        """Steps 3-6 for a checked task and options (:func:`check_request`).

        Args:
            has_result: a committed result of ``upload_id`` is known (a replay then produces
                nothing).

        Raises:
            Refused: see the steps.
        """
        fmt = probe(body, self.settings.decode)
        ev, record = self.event(upload_id, task, body, fmt, options)
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(None, self.store, client, ev, body, deterministic)
        if not stored and (has_result or self.recently_produced(upload_id)):
            return Submitted(upload_id, task, replayed=True, produced=False)
        try:
            at = await self.produce(record)
        except Refused:
            if stored:
                assert ev.image.ref is not None
                await loop.run_in_executor(None, self.delete, ev.image.ref.key)
            raise
        self._remember(upload_id)
        return Submitted(upload_id, task, replayed=not stored, produced=True, at=at)


__all__ = ["Intake", "Submitted", "canonical_options", "check_request", "parse_options", "probe",
           "upload_id_for"]
