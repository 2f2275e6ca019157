"""Compute: a batch of events to one explicit fate per event, in order.

The steps of :meth:`Compute.run` (on the worker's batch thread; GETs and PUTs on the I/O pool):

1. **parse** the record against the contract (:func:`schemas.codec.decode_upload`): an
   :class:`~schemas.models.UploadEvent`, or a dead letter (``NOT_JSON``, ``SCHEMA_INVALID``...,
   or a task this worker does not serve);
2. **load** its image (:meth:`Compute.load`: inline or claim check, verified, its header probed:
   format by magic bytes, size and limits, no pixel decoded): a probed upload (bytes + validated
   header), or a rejection (``OBJECT_NOT_FOUND``, ``OBJECT_REFUSED``, ``IMAGE_TOO_LARGE``,
   ``CHECKSUM_MISMATCH``, a bad image), or a dead letter (a contract error found only now, e.g.
   ``BAD_BASE64``); the
   store not answering is :class:`~streams.errors.StorageUnavailable` (the whole batch waits);
3. **process** the loaded events task by task, cut into the processor's batch buckets (one
   model call per bucket; the processor decodes the pixels at the size it needs, and data that
   fails then is its ``rejected`` outcome, e.g. ``CORRUPT_IMAGE``): the processor's outcome, or
   a dead letter ``PROCESSING_ERROR`` for an event whose processor raised even when run alone;
4. **PUT** each outcome's artifacts to the results bucket under deterministic keys, and each
   dead letter's value to the quarantine bucket (:mod:`streams.quarantine`: the dead letter
   keeps a reference, none of the value's bytes); started here, awaited by the loop with
   :meth:`Compute.stored` while it commits the previous batch. The store not answering a PUT is
   :class:`~streams.errors.StorageUnavailable` too: nothing of the batch is committed, and no
   dead letter goes out without its payload.

Each event ends as exactly one fate: :class:`Processed` (a result with the processor's verdict,
payload and model), :class:`Rejected` (a ``rejected`` result, no model ran) or
:class:`DeadLettered` (a dead letter, no result). Fates are frozen, each built once:
:meth:`Compute.stored` returns new ones once the PUTs are done (a :class:`Processed` with its
object refs, a :class:`Lettered` for each :class:`DeadLettered`: its dead letter built, its
value quarantined), and :meth:`Compute.records` turns those into what the committer produces.
As Triton's ``execute`` answers every request of a batch with a response, an error carried
inside it, no event's fate is a missing value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from pydantic import ValidationError

from processors.base import Artifact, Item, Outcome, Processor
from processors.decode import EncodedImage, decoded_bytes, probe_image
from processors.errors import DecodeError, ProcessorError
from processors.registry import spec
from processors.runtime import bucket_slices
from schemas import codec
from schemas import formats as F
from schemas.errors import ContractError, validation_message
from schemas.models import (
    DeadLetter,
    ModelRef,
    ObjectRef,
    ShadowDiff,
    SourceRef,
    Timings,
    UploadEvent,
    VerificationResult,
)
from schemas.reasons import DeadLetterCode, ReasonCode, Status
from streams.cache import CacheKey, ResultCache, as_upload
from streams.deadlines import is_stale
from streams.errors import (
    KeySegmentError,
    ObjectNotFound,
    ObjectRefused,
    ObjectTooLarge,
    ProcessorUnavailable,
    StorageError,
    StorageUnavailable,
    StoreRefused,
)
from streams.kafka import age_ms
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.quarantine import quarantined_dead_letter
from streams.settings import Settings
from streams.shadow import Shadow
from streams.storage import Storage, StoredObject, key_refused, refusal_code
from streams.tracing import BatchTrace, Spans, Tracing
from streams.worker.attempts import AttemptLedger
from streams.worker.record import Record


def object_key(task: str, model_version: str, upload_id: str, tag: str, name: str,
               ext: str) -> str:
    """Deterministic output key ``{task}/{model_version}/{upload_id}/{tag}/{name}.{ext}``.

    ``upload_id`` is contract-checked (``[A-Za-z0-9._-]``, not ``.``/``..``) so the key cannot
    leave its prefix; ``tag`` is :func:`input_tag` of what the outputs were made from, so a
    redelivered upload (the same bytes and options) overwrites the same keys with the same
    bytes, and a second upload under the same id with other bytes or options (a producer retry,
    a null key on another partition) writes other keys: a committed result's refs always point
    at the bytes they describe (issue 43).
    """
    return f"{task}/{model_version}/{upload_id}/{tag}/{name}.{ext}"


def check_key_segment(option: str, value: str) -> str:
    """``value`` when it can be one segment of an object key (:func:`object_key`): the upload
    id's rule (:data:`schemas.formats.UPLOAD_ID_PATTERN`: ASCII letters, digits, ``.``, ``_``,
    ``-``, 1..128 characters, never ``.`` or ``..``).

    Args:
        option: where the value came from, for the message (``--model-version``).

    Raises:
        KeySegmentError: it cannot (a ``/``, a ``.``/``..`` segment, a space, too long...).
    """
    if not F.matches(F.UPLOAD_ID_PATTERN, value):
        raise KeySegmentError(f"{option} {value!r} cannot be an object-key segment: use 1..128 "
                              "ASCII letters, digits, '.', '_' or '-', not '.' or '..'", option)
    return value


TAG_HEX = 16
"""Hex digits of :func:`input_digest` an object key's ``tag`` segment keeps (:func:`input_tag`)."""


def input_digest(image_sha256: str, options: Mapping[str, Any]) -> str:
    """What a task's outputs are made from besides the model version, as one lowercase hex
    SHA-256: over the image's SHA-256 (hex, computed by the worker over the bytes it loaded,
    never a producer's claim), a newline and the options as the processor gets them, as JSON
    with sorted keys and no spaces. The result cache keys on it (:mod:`streams.cache`); object
    keys keep its first :data:`TAG_HEX` digits (:func:`input_tag`)."""
    opts = json.dumps(dict(options), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{image_sha256}\n{opts}".encode()).hexdigest()



def input_tag(image: bytes, options: Mapping[str, Any]) -> str:
    """The first :data:`TAG_HEX` hex digits of :func:`input_digest` of ``image``'s bytes and
    ``options``: an object key's ``tag`` segment (:func:`object_key`). ``options`` are the
    effective ones (``TaskSpec.effective_options``: what the upload left out filled in from the
    processor's settings, so an operator who changes a default changes the keys too)."""
    return input_digest(hashlib.sha256(image).hexdigest(), options)[:TAG_HEX]


@dataclass(frozen=True, slots=True)
class Processed:
    """An event its processor decided (accepted, rejected or failed): a result with the
    processor's verdict, payload and model.

    Attributes:
        msg: the record.
        event: the parsed upload.
        outcome: the processor's outcome.
        batch_size: items in the model call the event was part of.
        t_batch_ms: when its batch started computing (epoch ms).
        refs: artifact name -> stored object: empty as computed, filled in the fate
            :meth:`Compute.stored` returns.
        tag: :func:`input_tag` of the image and options the outputs were made from.
        cache_hit: the outcome is an earlier upload's, from the result cache (no model ran;
            ``batch_size`` 0).
    """

    msg: Record
    event: UploadEvent
    outcome: Outcome
    batch_size: int
    t_batch_ms: float
    refs: Mapping[str, ObjectRef] = field(default_factory=dict)
    tag: str = ""
    cache_hit: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    """An event refused before any model ran (its image could not be loaded, or its deadline
    had passed): a ``rejected`` result with ``reason``, no payload and no model.

    Attributes:
        msg: the record.
        event: the parsed upload.
        reason: why (``OBJECT_NOT_FOUND``, ``CHECKSUM_MISMATCH``, ``CORRUPT_IMAGE``, ``STALE``...).
        t_batch_ms: when its batch started computing (epoch ms).
    """

    msg: Record
    event: UploadEvent
    reason: ReasonCode
    t_batch_ms: float


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """An event that gets no result: its dead letter goes to the dead-letter topic (built with
    the batch's PUTs: the :class:`Lettered` fate of :meth:`Compute.stored`).

    Attributes:
        msg: the record.
        code: the dead-letter code (``NOT_JSON``, ``SCHEMA_INVALID``, ``PROCESSING_ERROR``...).
        error: why, one line (no image bytes, no personal fields).
        upload_id: the upload id when one could be read, else None.
    """

    msg: Record
    code: str
    error: str
    upload_id: str | None


@dataclass(frozen=True, slots=True)
class Lettered:
    """A dead-lettered event whose dead letter is built, its value quarantined: what
    :meth:`Compute.stored` makes of a :class:`DeadLettered`.

    Attributes:
        msg: the record.
        letter: its dead letter.
    """

    msg: Record
    letter: DeadLetter


Fate = Processed | Rejected | DeadLettered
"""What became of one event of a batch, as computed."""

Ready = Processed | Rejected | Lettered
"""A fate whose objects are stored, ready to commit (:meth:`Compute.stored`)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """An upload's image as :meth:`Compute.load` fetched it: the probed ``image`` and the
    ``sha256`` (lowercase hex) computed over its bytes."""

    image: EncodedImage
    sha256: str


@dataclass(frozen=True, slots=True)
class _Loaded:
    """An event whose image is loaded, on its way to its processor (or the result cache), with
    its :func:`input_digest` (:meth:`Compute._digest`)."""

    msg: Record
    event: UploadEvent
    image: EncodedImage
    digest: str


@dataclass(frozen=True)
class Computed:
    """A computed batch: one fate per event in fetch order, and the PUTs still in flight,
    started at ``t_put`` (``perf_counter``).

    Attributes:
        fates: one per event, in fetch order.
        puts: ``(index of the fate, artifact, future of its stored object)``.
        letters: ``(index of the fate, future of its dead letter)`` (the value's quarantine
            PUT inside).
        t_put: when the PUTs started (``perf_counter``).
        trace: the batch's spans (:class:`~streams.tracing.BatchTrace`).
        shadow: the shadow model's comparisons of the batch's sampled uploads
            (:mod:`streams.shadow`).
        ms: stage times (ms) for the batch's log line.
    """

    fates: tuple[Fate, ...]
    puts: tuple[tuple[int, Artifact, Future[StoredObject]], ...]
    letters: tuple[tuple[int, Future[DeadLetter]], ...]
    t_put: float
    trace: BatchTrace
    shadow: tuple[ShadowDiff, ...] = ()
    ms: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Stored:
    """A batch whose PUTs are done: one fate ready to commit per event, in fetch order, its
    spans and shadow comparisons, and the stage times (ms) for its log line."""

    fates: tuple[Ready, ...]
    trace: BatchTrace
    shadow: tuple[ShadowDiff, ...]
    ms: Mapping[str, float]


@contextlib.contextmanager
def _outage_is_the_batchs() -> Iterator[None]:
    """A :class:`StorageError` raised inside (a GET or a PUT still failing after its retries)
    leaves as :class:`StorageUnavailable`: the whole batch's, which the loop puts back; as
    :class:`StoreRefused` when the store answered with a refusal no wait clears
    (:func:`streams.storage.refusal_code`, or any :class:`ObjectRefused`: issue 43, a
    client-side refusal of a key was taken for an outage and the batch redone in a hot loop)."""
    try:
        yield
    except StorageError as se:
        code = refusal_code(se)
        if code is None and isinstance(se, ObjectRefused):
            code = se.code  # refused, never an outage (a client-side refusal has no S3 answer)
        if code is not None:
            raise StoreRefused(str(se), code) from se
        raise StorageUnavailable(str(se)) from se


class Compute:
    """Parse -> load -> process -> PUT for the worker (see the module doc).

    Args:
        settings: the app settings (decode limits, buckets (the quarantine bucket too), inline
            and dead-letter limits, I/O threads).
        processors: task -> processor serving it; events of other tasks are dead-lettered.
        storage: the object store client (a test may replace ``storage`` between batches).
        metrics: the worker's metrics.
        model_version: label outputs (object keys, result ``model.version``) with this version
            instead of the processor's, e.g. to replay a new model beside the originals.
        ledger: the worker's attempt ledger (:mod:`streams.worker.attempts`): a record tried
            too often without being committed is a ``POISON`` dead letter, not tried again.
            None (replay mode): none is.
        tracing: the worker's tracing (:mod:`streams.tracing`; default: off).
        live: deadlines apply (an upload past its deadline or its task's maximum age is
            answered ``STALE`` without compute, :mod:`streams.deadlines`); False for a replay,
            which re-processes old uploads on purpose.
        shadow: a shadow model version compared on a sample of the uploads
            (:mod:`streams.shadow`); None: none.

    Attributes:
        cache: the result cache (:mod:`streams.cache`), None when ``settings.cache`` is off.
    """

    def __init__(self, settings: Settings, processors: Mapping[str, Processor], storage: Storage,
                 metrics: WorkerMetrics, model_version: str | None = None,
                 ledger: AttemptLedger | None = None, tracing: Tracing | None = None,
                 live: bool = True, shadow: Shadow | None = None) -> None:
        self.processors = dict(processors)
        from streams.worker.loop import task_section  # loop imports this module

        #: task -> its settings section: the processor's defaults an output key must reflect
        self.sections = {t: task_section(settings, t) for t in self.processors}
        self.storage = storage
        self.metrics = metrics
        self.model_version = (check_key_segment("model_version", model_version)
                              if model_version is not None else None)
        self.decode = settings.decode
        self.s3 = settings.s3
        self.worker = settings.worker
        self.finished_at = 0.0  # perf_counter when the last batch finished computing
        self.ledger = ledger
        self.tracing = tracing or Tracing(metrics)
        self.shadow = shadow
        self.max_age_s = settings.deadlines.max_age_s if live else None
        c = settings.cache
        self.cache = ResultCache(c.max_bytes, c.max_entries) if c.enabled else None
        self._io = ThreadPoolExecutor(max_workers=settings.worker.io_threads,
                                      thread_name_prefix="io")

    def close(self) -> None:
        """Stop the I/O pool (what is queued is dropped)."""
        self._io.shutdown(wait=False, cancel_futures=True)

    def version(self, task: str) -> str:
        """The model version labelling ``task``'s outputs."""
        return self.model_version or self.processors[task].model.version

    # --- the batch ---------------------------------------------------------------------------
    def run(self, msgs: Sequence[Record], polled_ns: tuple[int, int] | None = None) -> Computed:
        """Steps 1-4 for one batch (the batch thread).

        Args:
            msgs: the batch's records, in fetch order.
            polled_ns: when the poll that formed the batch started and ended
                (``time.time_ns()``; its ``cardstream.poll`` span), None: it was prefetched.

        Raises:
            StorageUnavailable: the store did not answer a GET (nothing of the batch is kept).
        """
        t0 = time.perf_counter()
        trace = BatchTrace(self.tracing, msgs, polled_ns[0] if polled_ns else None)
        if polled_ns:
            self.tracing.interval(Spans.POLL, trace.batch, *polled_ns, **{
                "cardstream.batch.events": len(msgs)})
        try:
            with _outage_is_the_batchs():
                c = self._run(msgs, trace)
        except BaseException:
            trace.abandoned("not computed")
            raise
        finally:
            self.finished_at = time.perf_counter()
            self.metrics.stage.labels("compute").observe(self.finished_at - t0)
        return dataclasses.replace(c, ms={"compute": round((self.finished_at - t0) * 1000.0, 1)})

    def _run(self, msgs: Sequence[Record], trace: BatchTrace) -> Computed:
        t_batch = time.time() * 1000.0
        parsed = [self._stale(m, self._poison(m) or self.parse(m), t_batch)  # 1. parse
                  for m in msgs]
        loads = [(p, self._io.submit(self._fetch, p, trace.upload(m)))
                 if isinstance(p, UploadEvent) else p for m, p in zip(msgs, parsed, strict=True)]
        staged = [self._loaded(m, *x, t_batch) if isinstance(x, tuple) else x  # 2. load
                  for m, x in zip(msgs, loads, strict=True)]
        for x in staged:
            if isinstance(x, _Loaded | Rejected):
                self.metrics.queue_wait.observe(age_ms(x.msg, t_batch) / 1000.0)
        loaded = [x for x in staged if isinstance(x, _Loaded)]
        done = self._answer(loaded, t_batch, trace)  # 3.
        fates = tuple(done[id(x)] if isinstance(x, _Loaded) else x for x in staged)
        shadow = self._shadow(loaded, done, trace)
        if self.cache is not None:
            self.metrics.cache_bytes.set(self.cache.bytes)
        t_put = time.perf_counter()  # 4. PUT
        puts = tuple((i, a, self._io.submit(self._put, f, a, trace.upload(f.msg)))
                     for i, f in enumerate(fates) if isinstance(f, Processed)
                     for a in f.outcome.artifacts)
        letters = tuple((i, self._io.submit(self._letter, f, trace.upload(f.msg)))
                        for i, f in enumerate(fates) if isinstance(f, DeadLettered))
        return Computed(fates, puts, letters, t_put, trace, shadow)

    def _shadow(self, loaded: list[_Loaded], done: Mapping[int, Processed | DeadLettered],
                trace: BatchTrace) -> tuple[ShadowDiff, ...]:
        """Step 3's shadow: the sampled uploads answered by a model or the cache, run through
        the shadow version too (:mod:`streams.shadow`), in a ``cardstream.process`` span."""
        if self.shadow is None:
            return ()
        live = []
        for x in loaded:
            f, task = done[id(x)], str(x.event.task)
            if isinstance(f, Processed) and self.shadow.wants(task, x.event.upload_id):
                info = self.processors[task].model
                live.append((x.msg, Item(x.event.upload_id, x.image, self._options(x)), f.outcome,
                             ModelRef(name=info.name, version=self.version(task),
                                      provider=info.provider)))
        if not live:
            return ()
        with self.tracing.span(Spans.PROCESS, trace.batch, **{
                "cardstream.task": self.shadow.task, "cardstream.process.items": len(live),
                "cardstream.process.shadow": True}):
            return tuple(self.shadow.compare(live))

    def _stale(self, m: Record, p: UploadEvent | DeadLettered,
               t_batch: float) -> UploadEvent | DeadLettered | Rejected:
        """Step 1's deadline: an upload past its deadline or its task's maximum age when its
        batch starts is rejected ``STALE`` here, neither fetched nor computed (live mode)."""
        if (isinstance(p, UploadEvent) and self.max_age_s is not None
                and is_stale(p, m, t_batch, self.max_age_s)):
            return Rejected(m, p, ReasonCode.STALE, t_batch)
        return p

    def _answer(self, loaded: list[_Loaded], t_batch: float,
                trace: BatchTrace) -> dict[int, Processed | DeadLettered]:
        """Step 3: each loaded event's outcome (by ``id``), from the result cache when it has
        the upload's key (:mod:`streams.cache`), else from a model call; a repeat within the
        batch waits for its first's outcome (computed once) and is computed itself only when
        that one was not a cacheable verdict."""
        done: dict[int, Processed | DeadLettered] = {}
        keys = {id(x): self._cache_key(x) for x in loaded} if self.cache is not None else {}
        first: set[CacheKey] = set()
        todo, repeats = [], []
        for x in loaded:
            k = keys.get(id(x))
            hit = self.cache.get(k) if self.cache is not None and k is not None else None
            if hit is not None:
                done[id(x)] = self._hit(x, hit, t_batch)
            elif k is not None and k in first:
                repeats.append(x)
            else:
                if k is not None:
                    first.add(k)
                todo.append(x)
        while todo:
            for task, chunk in self._model_calls(todo):
                for x, f in zip(chunk, self._process(task, chunk, t_batch, trace), strict=True):
                    done[id(x)] = f
                    if self.cache is not None and isinstance(f, Processed):
                        self.cache.put(keys[id(x)], f.outcome)
            todo = []
            for x in repeats:
                hit = self.cache.get(keys[id(x)]) if self.cache is not None else None
                if hit is not None:
                    done[id(x)] = self._hit(x, hit, t_batch)
                else:
                    todo.append(x)
            repeats = []
        return done

    def _options(self, x: _Loaded) -> dict[str, Any]:
        """``x``'s options as its processor gets them (the task's defaults filled)."""
        return spec(x.event.task).item_options(x.event.options)

    def _digest(self, ev: UploadEvent, image_sha256: str) -> str:
        """:func:`input_digest` of an upload: its bytes' SHA-256 and its effective options (what
        it left out filled in from the processor's settings section); its options as given when
        the processor refuses them (its outcome then has no artifact to key)."""
        task = str(ev.task)
        options = spec(task).item_options(ev.options)
        with contextlib.suppress(ProcessorError):
            options = spec(task).effective_options(options, self.sections[task])
        return input_digest(image_sha256, options)

    def _cache_key(self, x: _Loaded) -> CacheKey:
        """The result cache's key of a loaded event: task, model version, input digest."""
        task = str(x.event.task)
        return CacheKey(task, self.version(task), x.digest)

    def _hit(self, x: _Loaded, outcome: Outcome, t_batch: float) -> Processed:
        """A cache hit's fate: the cached outcome as ``x``'s (its artifacts PUT under ``x``'s
        own keys in step 4), no model call (``batch_size`` 0)."""
        return Processed(x.msg, x.event, as_upload(outcome, x.event.upload_id), 0, t_batch,
                         tag=x.digest[:TAG_HEX], cache_hit=True)

    def _fetch(self, ev: UploadEvent, span: Any) -> Fetched:
        """:meth:`load` on the I/O pool, in its ``cardstream.fetch`` span."""
        with self.tracing.span(Spans.FETCH, span):
            return self.load(ev)

    def _put(self, f: Processed, a: Artifact, span: Any) -> StoredObject:
        """Step 4 for one artifact (the I/O pool), in a ``cardstream.put`` span of its upload."""
        with self.tracing.span(Spans.PUT, span, **{"cardstream.put.bytes": len(a.data)}):
            return self.storage.put(self.s3.results_bucket, self._output_key(f, a), a.data,
                                    a.content_type)

    def _model_calls(self, loaded: list[_Loaded]) -> Iterator[tuple[str, list[_Loaded]]]:
        """Step 3's model calls, ``(task, its events)`` each: ``loaded`` cut into chunks whose
        decodes fit ``decode_budget_bytes`` together (each image's peak from its probed
        header), each chunk task by task (in order of first appearance), each task's events
        in its processor's batch buckets."""
        budget = self.worker.decode_budget_bytes
        for part in memory_chunks([decoded_bytes(x.image) for x in loaded], budget):
            by_task: dict[str, list[_Loaded]] = {}
            for x in loaded[part]:
                by_task.setdefault(str(x.event.task), []).append(x)
            for task, group in by_task.items():
                for bucket in bucket_slices(len(group), self.processors[task].bucket):
                    yield task, group[bucket]

    def _output_key(self, f: Processed, a: Artifact) -> str:
        """The object key of ``f``'s artifact ``a`` (:func:`object_key`)."""
        task = str(f.event.task)
        return object_key(task, self.version(task), f.event.upload_id, f.tag, a.name, a.ext)

    def parse(self, m: Record) -> UploadEvent | DeadLettered:
        """Step 1: the record as an upload this worker serves, or its dead letter (an
        ``UNREADABLE_RECORD`` one when the client could not read a part of it,
        :class:`~streams.worker.record.Record`)."""
        if (unreadable := getattr(m, "unreadable", None)) is not None:
            return DeadLettered(m, DeadLetterCode.UNREADABLE_RECORD,
                                f"the Kafka client could not read the record's {unreadable} "
                                "(e.g. a header name that is not UTF-8)",
                                _readable_upload_id(m.value()))
        try:
            ev = codec.decode_upload(m.key(), m.value(), m.headers(),
                                     allowed_buckets=self.s3.allowed_buckets,
                                     inline_max_bytes=self.worker.inline_max_bytes)
        except ContractError as ce:
            where = f" at {ce.path}" if ce.path != "$" else ""
            return DeadLettered(m, ce.code, f"{ce}{where}", _readable_upload_id(m.value()))
        if str(ev.task) not in self.processors:
            return DeadLettered(m, DeadLetterCode.PROCESSING_ERROR,
                                f"task {ev.task} not served by this worker", ev.upload_id)
        return ev

    def _poison(self, m: Record) -> DeadLettered | None:
        """``m``'s ``POISON`` dead letter when the worker was started on it too often without
        committing it (:mod:`streams.worker.attempts`); else None."""
        tries = self.ledger.poisoned(m) if self.ledger is not None else 0
        if not tries:
            return None
        log.error("poison_record", partition=m.partition(), offset=m.offset(), attempts=tries)
        return DeadLettered(m, DeadLetterCode.POISON,
                            f"the worker stopped {tries} times while this record's batch "
                            "computed (a crash, an out-of-memory kill or a hang past the "
                            "compute deadline); not tried again", _readable_upload_id(m.value()))

    def load(self, ev: UploadEvent) -> Fetched:
        """Step 2, the one place an upload's image is fetched and probed: image bytes (inline
        or claim check, verified against the ref's size and sha256 when given) with their
        header validated (:func:`processors.decode.probe_image`: format, displayed size, byte,
        pixel and side limits; no pixel decoded: the processor decodes at the size it needs,
        and :meth:`run` bounds a chunk's decodes by ``decode_budget_bytes`` from these headers),
        and the SHA-256 of the bytes, computed here once (object keys and the result cache use
        it, never the event's claim).

        Raises:
            ObjectNotFound / ObjectRefused / ObjectTooLarge / StorageError: from the store.
            DecodeError: bad image, or ``CHECKSUM_MISMATCH`` when the object is not the one the
                event describes.
            ContractError: the inline image is not valid base64.
        """
        data = codec.inline_bytes(ev)
        ref = ev.image.ref
        if data is None and ref is not None:  # the contract's image is one or the other
            data = self.storage.get(ref.bucket, ref.key, max_bytes=self.decode.max_bytes)
            if ref.size_bytes is not None and ref.size_bytes != len(data):
                raise DecodeError(ReasonCode.CHECKSUM_MISMATCH,
                                  f"object is {len(data)} bytes, the event says {ref.size_bytes}")
        if data is None:
            raise ContractError(DeadLetterCode.SCHEMA_INVALID,
                                "image has neither inline_b64 nor ref", "$.image")
        digest = hashlib.sha256(data).hexdigest()
        if ref is not None and ref.sha256 is not None and digest != ref.sha256:
            raise DecodeError(ReasonCode.CHECKSUM_MISMATCH,
                              "object sha256 differs from the event's")
        return Fetched(probe_image(data, self.decode), digest)

    def _loaded(self, m: Record, ev: UploadEvent, fut: Future,
                t_batch: float) -> _Loaded | Rejected | DeadLettered:
        """What a load's errors mean for the event: a rejection or a dead letter; the store not
        answering (a plain :class:`StorageError`) is the whole batch's (raised)."""
        try:
            got = fut.result()
            return _Loaded(m, ev, got.image, self._digest(ev, got.sha256))
        except ObjectNotFound:
            return Rejected(m, ev, ReasonCode.OBJECT_NOT_FOUND, t_batch)
        except ObjectTooLarge:
            return Rejected(m, ev, ReasonCode.IMAGE_TOO_LARGE, t_batch)
        except ObjectRefused as orf:  # this ref, not the store: no retry changes it
            log.warning("object_refused", upload_id=ev.upload_id, code=orf.code, status=orf.status)
            return Rejected(m, ev, ReasonCode.OBJECT_REFUSED, t_batch)
        except DecodeError as de:
            return Rejected(m, ev, ReasonCode(de.reason), t_batch)
        except ContractError as ce:
            return DeadLettered(m, ce.code, str(ce), ev.upload_id)

    def _process(self, task: str, chunk: list[_Loaded], t_batch: float,
                 trace: BatchTrace) -> list[Processed | DeadLettered]:
        """Step 3 for one bucket: one ``process_batch`` call, in a ``cardstream.process`` span of
        the batch (the processor's decode and model spans nest under it). If it raises (a model
        call that failed: per-item failures are outcomes already), each event is run alone, and
        one that still raises is dead-lettered ``PROCESSING_ERROR``, provided the processor
        still handles a probe item (:meth:`_probe`).

        Raises:
            ProcessorUnavailable: items failed alone and so did the probe (the breaker).
        """
        proc = self.processors[task]
        items = [Item(x.event.upload_id, x.image, self._options(x)) for x in chunk]
        calls0, images0 = int(proc.stats.calls), int(proc.stats.images)
        t0 = time.perf_counter()
        attrs = {"cardstream.task": task, "cardstream.process.items": len(items)}
        with self.tracing.span(Spans.PROCESS, trace.batch, **attrs):
            try:
                outcomes: list[Outcome | DeadLettered] = list(proc.process_batch(items))
                if len(outcomes) != len(items):
                    raise RuntimeError(f"{len(outcomes)} outcomes for {len(items)} items")
            except Exception as exc:  # isolate the poison item: one by one
                log.warning("batch_failed_isolating", task=task, error=type(exc).__name__)
                outcomes = [self._alone(task, proc, x, it)
                            for x, it in zip(chunk, items, strict=True)]
                if any(isinstance(o, DeadLettered) for o in outcomes):
                    self._probe(task, proc)
        self.metrics.inference.labels(task).observe(time.perf_counter() - t0)
        self.metrics.inference_calls.labels(task).inc(max(int(proc.stats.calls) - calls0, 0))
        self.metrics.inference_images.labels(task).inc(max(int(proc.stats.images) - images0, 0))
        return [o if isinstance(o, DeadLettered)
                else Processed(x.msg, x.event, o, len(chunk), t_batch,
                               tag=x.digest[:TAG_HEX])
                for x, it, o in zip(chunk, items, outcomes, strict=True)]

    def _probe(self, task: str, proc: Processor) -> None:
        """Run ``proc`` on one plain synthetic image (a ``(96, 128, 3)`` mid-grey ``uint8``, the
        task's default options): whatever its verdict, it must not raise.

        Raises:
            ProcessorUnavailable: it raised: the processor is broken, not the items.
        """
        probe = Item.from_array("probe", np.full((96, 128, 3), 127, np.uint8),
                                spec(task).item_options(None))
        try:
            proc.process_batch([probe])
        except Exception as exc:
            raise ProcessorUnavailable(f"{task} processor raised {type(exc).__name__} on a "
                                       "probe image too") from exc

    def _alone(self, task: str, proc: Processor, x: _Loaded, item: Item) -> Outcome | DeadLettered:
        try:
            (outcome,) = proc.process_batch([item])
        except Exception as exc:
            return DeadLettered(x.msg, DeadLetterCode.PROCESSING_ERROR,
                                f"{task} processor raised {type(exc).__name__}: {exc}",
                                x.event.upload_id)
        return outcome

    def stored(self, c: Computed, wait: Callable[[Sequence[Future]], None]) -> Stored:
        """Await the batch's PUTs with ``wait`` (the intake's, which keeps the consumer in its
        group; a PUT may retry for a while). An output PUT whose key is refused
        (:func:`streams.storage.key_refused`) dead-letters its event (``PROCESSING_ERROR``).

        Returns:
            The batch's fates, new: each processed event with its object refs, each
            dead-lettered one :class:`Lettered` with its dead letter.

        Raises:
            StorageUnavailable: a PUT (an output's or a quarantined value's) failed after its
                retries; :class:`StoreRefused` when the store refused it for every key.
        """
        wait([f for _, _, f in c.puts] + [f for _, f in c.letters])
        refs: dict[int, dict[str, ObjectRef]] = {}
        refused: dict[int, DeadLettered] = {}
        fates = list(c.fates)
        with _outage_is_the_batchs():
            letters = {i: f.result() for i, f in c.letters}
            for i, a, f in c.puts:
                try:
                    st = f.result()
                except ObjectRefused as orf:
                    if not key_refused(orf):
                        raise
                    refused[i] = self._key_refused(fates[i], orf)
                    continue
                refs.setdefault(i, {})[a.name] = ObjectRef(
                    bucket=st.bucket, key=st.key, size_bytes=st.size_bytes, sha256=st.sha256,
                    content_type=a.content_type, width=a.width, height=a.height)
            for i, d in refused.items():
                fates[i] = d
                letters[i] = self._letter(d, c.trace.upload(d.msg))
        ms = dict(c.ms)
        if c.puts or c.letters:
            put_s = time.perf_counter() - c.t_put
            self.metrics.stage.labels("put").observe(put_s)
            ms["put"] = round(put_s * 1000.0, 1)
        return Stored(tuple(Lettered(f.msg, letters[i]) if isinstance(f, DeadLettered)
                            else dataclasses.replace(f, refs=refs[i])
                            if isinstance(f, Processed) and i in refs else f
                            for i, f in enumerate(fates)), c.trace, c.shadow, ms)

    @staticmethod
    def _key_refused(f: Fate, orf: ObjectRefused) -> DeadLettered:
        """The dead letter (``PROCESSING_ERROR``) of a processed event ``f`` one of whose output
        keys the store or its client refused (:func:`streams.storage.key_refused`): no wait and
        no redo changes that key, so it is this event's fate, not the batch's outage."""
        upload_id = f.event.upload_id if isinstance(f, Processed) else None
        log.error("output_key_refused", upload_id=upload_id, code=orf.code, status=orf.status)
        return DeadLettered(f.msg, DeadLetterCode.PROCESSING_ERROR,
                            f"the object store refused an output key ({orf.code}): {orf}",
                            upload_id)

    # --- what the committer produces ---------------------------------------------------------
    def records(self, fates: Sequence[Ready]) -> tuple[list[VerificationResult], list[DeadLetter]]:
        """The results and the dead letters of ``fates`` (results built now: ``processed_at``
        and ``total_ms`` are taken here, just before the transaction).

        Raises:
            TypeError: a fate is not ready (a :class:`DeadLettered`, whose dead letter only
                :meth:`stored` builds).
        """
        results, letters = [], []
        for f in fates:
            if isinstance(f, Lettered):
                letters.append(f.letter)
            elif isinstance(f, Processed | Rejected):
                results.append(self._result_or_failed(f))
            else:
                raise TypeError(f"{type(f).__name__} is not ready to commit: Compute.stored() "
                                "makes the fates to commit")
        return results, letters

    def result(self, fate: Processed | Rejected) -> VerificationResult:
        """The result of a processed or rejected event.

        Raises:
            pydantic.ValidationError (a ``ValueError``): the outcome breaks the contract.
        """
        ev, m = fate.event, fate.msg
        task = spec(ev.task)
        processed_at = F.utc_now_rfc3339()
        now_ms = time.time() * 1000.0
        hit = None
        if isinstance(fate, Processed):
            o, info = fate.outcome, self.processors[task.name].model
            status, reasons = o.status, tuple(o.reasons)
            inf_ms, batch_size = o.inference_ms, fate.batch_size
            payload = task.payload(o.payload, fate.refs)
            model = ModelRef(name=info.name, version=self.version(task.name),
                             provider=info.provider)
            hit = True if fate.cache_hit else None
        else:
            status, reasons, inf_ms, batch_size = Status.REJECTED, (fate.reason,), 0.0, 0
            payload, model = None, None
        kw: dict[str, Any] = {task.name: payload} if payload is not None else {}
        return VerificationResult(
            upload_id=ev.upload_id, task=ev.task, status=status, reasons=reasons, model=model,
            timings=Timings(queue_ms=round(age_ms(m, fate.t_batch_ms), 3),
                            batch_size=batch_size, inference_ms=round(inf_ms, 3),
                            total_ms=round(age_ms(m, now_ms), 3)),
            source=SourceRef(topic=m.topic(), partition=m.partition(), offset=m.offset()),
            processed_at=processed_at, submitted_at=ev.submitted_at, trace_id=ev.trace_id,
            cache_hit=hit, **kw)

    def _result_or_failed(self, fate: Processed | Rejected) -> VerificationResult:
        """The fate's result; a ``failed`` INTERNAL_ERROR result (no payload, no model) if the
        outcome breaks the contract."""
        try:
            return self.result(fate)
        except ValueError as exc:  # pydantic's ValidationError: a processor bug, not the upload's
            detail = (validation_message(exc) if isinstance(exc, ValidationError)
                      else "".join(str(exc).splitlines()[:1]))
            log.error("outcome_breaks_contract", upload_id=fate.event.upload_id,
                      task=str(fate.event.task), error=type(exc).__name__, detail=detail[:200])
            r = self.result(Rejected(fate.msg, fate.event, ReasonCode.INTERNAL_ERROR,
                                     fate.t_batch_ms))
            return r.model_copy(update={"status": Status.FAILED})

    def _letter(self, f: DeadLettered, span: Any) -> DeadLetter:
        """The dead letter of ``f`` (an I/O thread; its quarantine PUT in a ``cardstream.put``
        span of its upload). By default (``dlq_value_max_bytes`` 0) the
        record's value is PUT to the quarantine bucket under ``{topic}/{partition}/{offset}`` (a
        redone batch rewrites the same object) and the letter keeps its size and that
        reference; with ``dlq_value_max_bytes`` above 0 the letter keeps up to that many bytes
        of the value itself and nothing is quarantined. Either way the whole dead-letter record
        stays within ``dlq_record_max_bytes``.

        Raises:
            StorageError: the quarantine PUT failed after its retries.
        """
        m = f.msg
        record = _LetterFields(key=m.key(), value=m.value(), headers=m.headers(), topic=m.topic(),
                               partition=m.partition(), offset=m.offset(), code=f.code,
                               error=f.error, upload_id=f.upload_id,
                               max_record_bytes=self.worker.dlq_record_max_bytes)
        if self.worker.dlq_value_max_bytes > 0:
            return codec.make_dead_letter(max_value_bytes=self.worker.dlq_value_max_bytes,
                                          **record)
        with self.tracing.span(Spans.PUT, span, **{"cardstream.put.bytes": len(m.value() or b"")}):
            return quarantined_dead_letter(self.storage, self.s3, **record)


class _LetterFields(TypedDict):
    """What :meth:`Compute._letter` passes to either dead-letter builder."""

    key: bytes | None
    value: bytes | None
    headers: codec.HeadersIn
    topic: str
    partition: int
    offset: int
    code: str
    error: str
    upload_id: str | None
    max_record_bytes: int


def memory_chunks(costs: Sequence[int], budget: int) -> list[slice]:
    """Consecutive runs of ``costs`` (bytes each) whose sum stays within ``budget`` (bytes); an
    item above the budget alone is a run of its own. ``[]`` for no costs.

    >>> memory_chunks([3, 3, 3, 9, 1], 6)
    [slice(0, 2, None), slice(2, 3, None), slice(3, 4, None), slice(4, 5, None)]
    """
    out, start, used = [], 0, 0
    for i, c in enumerate(costs):
        if i > start and used + c > budget:
            out.append(slice(start, i))
            start, used = i, 0
        used += c
    if start < len(costs):
        out.append(slice(start, len(costs)))
    return out


def _readable_upload_id(value: bytes | None) -> str | None:
    """The ``upload_id`` of an event that failed its contract, when it is itself valid (for the
    dead letter); None otherwise, also when the value names it twice (JSON parsers differ on
    which one wins, so neither is the event's)."""
    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            out[k] = None if k in out else v
        return out

    try:
        uid = json.loads(value, object_pairs_hook=once).get("upload_id") if value else None
    except (ValueError, AttributeError, RecursionError):
        return None
    return uid if isinstance(uid, str) and F.matches(F.UPLOAD_ID_PATTERN, uid) else None
