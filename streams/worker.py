"""The worker loop: poll batch -> fetch + probe -> one batched call per model -> store -> transaction.

Checkpoint order per batch (exactly-once results):

1. consume up to ``max_batch`` events or ``max_wait_ms``, whichever first (dynamic batching);
2. parse each event (contract errors -> dead letter), fetch its image (MinIO claim check or
   inline) and probe its header on a bounded thread pool (bad images -> ``rejected`` result);
   the processor decodes the pixels at the size it needs (corrupt data -> ``rejected``);
3. group by task and call each processor once per batch (it splits into its best bucket);
4. PUT every output object to MinIO under deterministic keys (retries with backoff);
5. in ONE Kafka transaction: produce results + dead letters, ``send_offsets_to_transaction``,
   ``commit_transaction``.

Steps 2-3 run on a helper thread (the PUTs of step 4 on the I/O pool). While they run the loop
keeps polling (prefetching the next batch, and pausing its partitions only when that is full), so
rebalance callbacks run and the consumer stays in its group. Two batches overlap: as soon as batch
*k* has computed, batch *k+1* (what was prefetched meanwhile) starts computing, and only then does
the loop wait for *k*'s PUTs and commit *k*'s transaction; *k+1* is produced in a later
transaction, after *k*'s commit. If *k*'s PUTs or transaction fail, *k+1* is awaited and thrown
away and both are redone: nothing of either is committed.

Events of partitions revoked meanwhile are dropped before the transaction (their new owner redoes
them). If MinIO is unavailable nothing is committed: the loop pauses and retries once the store
answers. Abortable transaction errors abort; fatal ones (fenced producer) rebuild the producer.

A batch is redone from memory, never by seeking: every event the worker has read and not committed
is in the batch in flight, the batch behind it or the carry list, and the consumer's position is
past all of them, so a failed batch's events go back, in their order, to the front of the carry
list (:meth:`Worker._redo`). A rewind by ``seek`` left one event of 24 never redone under load
(``test_fenced_worker_takes_its_id_back_and_redoes_the_batch``, twice on CI) even with a check
that re-seeked when a partition came back past its rewind offset; librdkafka's ``seek`` is
asynchronous and its failures unreported (librdkafka #2256, confluent-kafka-python #1270).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from processors.base import Item, Outcome, Processor
from processors.decode import EncodedImage, probe_image
from processors.errors import DecodeError
from schemas import codec
from schemas.errors import ContractError
from schemas.formats import UPLOAD_ID_PATTERN
from schemas.models import (
    CardPayload,
    DeadLetter,
    IdPhotoPayload,
    ModelRef,
    ObjectRef,
    SourceRef,
    Timings,
    UploadEvent,
    VerificationResult,
)
from schemas.reasons import DeadLetterCode, ReasonCode, Status
from streams.errors import ObjectNotFound, ObjectTooLarge, ProducerStuck, StorageError
from streams.health import Health
from streams.kafka import consumer as make_consumer
from streams.kafka import transactional_producer
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.settings import Settings
from streams.storage import Storage

#: artifact name -> the payload field holding its object ref, per task
REF_FIELD = {"card": "rectified", "id_photo": "photo"}


def now_rfc3339() -> str:
    """Current UTC time as RFC 3339 with milliseconds (``2026-11-29T17:00:00.123Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def object_key(task: str, model_version: str, upload_id: str, name: str, ext: str) -> str:
    """Deterministic output key ``{task}/{model_version}/{upload_id}/{name}.{ext}``.

    ``upload_id`` is contract-checked (``[A-Za-z0-9._-]``, not ``.``/``..``) so the key cannot
    leave its prefix; a redelivered upload overwrites the same key with the same bytes.
    """
    return f"{task}/{model_version}/{upload_id}/{name}.{ext}"


@dataclass
class _Entry:
    """One event of a batch and what became of it."""

    msg: Message
    event: UploadEvent | None = None
    image: EncodedImage | None = None
    dead: DeadLetter | None = None
    reason: ReasonCode | None = None  # rejected before processing
    outcome: Outcome | None = None
    batch_size: int = 0
    t_batch_ms: float = 0.0
    refs: dict[str, ObjectRef] = field(default_factory=dict)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.msg.topic(), self.msg.partition())


@dataclass
class _Batch:
    """A poll batch handed to the batch thread: its events (in fetch order) and its future."""

    msgs: list[Message]
    fut: Future


@dataclass
class _Computed:
    """What the batch thread hands back: the entries, and their output PUTs still in flight
    (entry, artifact, future), started at ``t_put`` (``perf_counter``); ``ms``: stage times
    for the batch's log line."""

    entries: list[_Entry]
    puts: list[tuple[_Entry, Any, Future]]
    t_put: float
    ms: dict[str, float] = field(default_factory=dict)


class StorageUnavailable(StorageError):
    """MinIO did not answer within the retries: the batch is retried, nothing is committed."""


class Worker:
    """One worker process: a consumer in the group, a transactional producer, processors by task.

    Class attributes: ``TXN_CALL_TIMEOUT_S`` (30 s) is the timeout given to each transactional
    producer call; ``STUCK_GRACE_S`` (30 s) is how much longer ``send_offsets_to_transaction``
    may take before the producer counts as stuck (:meth:`_send_offsets`).

    Args:
        settings: the frozen app settings.
        processors: task name (``card`` / ``id_photo``) -> processor serving it; events of other
            tasks are rejected.
        storage: the object store client.
        metrics: Prometheus metrics (a fresh registry by default).
        health: readiness/liveness state.
        ranges: replay mode: uploads-topic partition -> ``[start, end)`` offsets. The consumer is
            assigned these partitions instead of subscribing, events at or past ``end`` are left
            alone, and :meth:`run` returns once every partition reached its end.
        model_version: label outputs (object keys, result ``model.version``) with this version
            instead of the processor's, e.g. to replay a new model beside the originals.
    """

    TXN_CALL_TIMEOUT_S = 30.0
    STUCK_GRACE_S = 30.0

    def __init__(self, settings: Settings, processors: Mapping[str, Processor], storage: Storage,
                 metrics: WorkerMetrics | None = None, health: Health | None = None,
                 ranges: Mapping[int, tuple[int, int]] | None = None,
                 model_version: str | None = None) -> None:
        self.s = settings
        self.processors = dict(processors)
        self.storage = storage
        self.metrics = metrics or WorkerMetrics()
        self.health = health or Health()
        w = settings.worker
        self.transactional_id = f"{settings.kafka.transactional_id_prefix}-{w.slot}"
        self._pool = ThreadPoolExecutor(max_workers=w.io_threads, thread_name_prefix="io")
        self._compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch")
        self._stop = threading.Event()
        self._revoked: set[tuple[str, int]] = set()
        self._paused = False  # fetching is to stop (carry list full, or the store down)
        self._paused_tps: set[tuple[str, int]] = set()  # paused by this worker (even if revoked)
        self._resume_due = False  # a partition paused here came back in a new assignment
        self._fetching: set[tuple[str, int]] = set()  # delivered an event since assigned
        self._carry: list[Message] = []
        self._last_lag = 0.0
        self._compute_end = 0.0  # perf_counter when the batch thread finished its last batch
        self._carry_since = 0.0  # monotonic time the oldest carried event arrived
        self._inflight: _Batch | None = None  # the batch computing on the batch thread
        self.batches = 0
        self.committed_events = 0  # events whose result or dead letter is committed
        self.consumer = None
        self.producer = None
        self.ranges = dict(ranges) if ranges is not None else None
        self.model_version = model_version
        self._done_parts: set[int] = set()

    # --- lifecycle -------------------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        """Ask the loop to finish the current batch, commit and leave (SIGTERM handler)."""
        self._stop.set()

    def warm_up(self) -> None:
        """Load every model and run every batch bucket once (before subscribing)."""
        for task, p in self.processors.items():
            t0 = time.perf_counter()
            p.warm_up()
            log.info("warmed_up", task=task, model=p.model.name, provider=p.model.provider,
                     bucket=p.bucket,
                     ms=round((time.perf_counter() - t0) * 1000, 1))

    def _on_assign(self, c: Any, parts: list[TopicPartition]) -> None:
        for tp in parts:
            key = (tp.topic, tp.partition)
            self._revoked.discard(key)
            self._fetching.discard(key)
            # librdkafka keeps a partition's pause across its revocation and re-assignment
            # (measured with librdkafka 2.16): resume it from the loop, not from this callback
            if key in self._paused_tps:
                self._resume_due = True
        self.health.in_group = True
        log.info("partitions_assigned", partitions=[tp.partition for tp in parts])

    def _on_revoke(self, c: Any, parts: list[TopicPartition]) -> None:
        for tp in parts:
            key = (tp.topic, tp.partition)
            self._revoked.add(key)
            self._fetching.discard(key)
        self._carry = [m for m in self._carry if (m.topic(), m.partition()) not in self._revoked]
        log.info("partitions_revoked", partitions=[tp.partition for tp in parts])

    def _on_lost(self, c: Any, parts: list[TopicPartition]) -> None:
        self._on_revoke(c, parts)
        self.health.in_group = False

    def start(self) -> None:
        """Build the clients and subscribe (after :meth:`warm_up`)."""
        k = self.s.kafka
        self.producer = transactional_producer(k, self.transactional_id)
        self.consumer = make_consumer(
            k, k.group_id,
            **{"max.poll.interval.ms": self.s.worker.max_poll_interval_ms,
               "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
               "queued.max.messages.kbytes": 16_384})
        if self.ranges is None:
            self.consumer.subscribe([k.uploads_topic], on_assign=self._on_assign,
                                    on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            self._done_parts = {p for p, (a, b) in self.ranges.items() if a >= b}
            self.consumer.assign([TopicPartition(k.uploads_topic, p, a)
                                  for p, (a, b) in self.ranges.items() if a < b])
        self.health.ready = True

    def ranges_done(self) -> bool:
        """Replay mode: every partition consumed up to its end offset."""
        return self.ranges is not None and self._done_parts >= set(self.ranges)

    def close(self) -> None:
        """Leave the group and flush; bounded by ``shutdown_timeout_s``."""
        self.health.ready = False
        if self.consumer is not None:
            self.consumer.close()
        if self.producer is not None:
            self.producer.flush(self.s.worker.shutdown_timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._compute.shutdown(wait=False, cancel_futures=True)

    def run(self, max_batches: int | None = None, idle_exit_s: float | None = None) -> None:
        """Run the loop until :meth:`stop` (or SIGTERM), ``max_batches``, or ``idle_exit_s`` of no events.

        Two batches overlap: while batch *k*'s transaction commits on this thread, batch *k+1*
        (the events that arrived while *k* computed) already computes on the batch thread. Its
        results are produced only in the next transaction, after *k*'s commit; if *k*'s
        transaction fails, *k+1* is discarded too and both are redone (nothing of either is
        committed). On stop the batch in flight is finished and committed before leaving.
        """
        self.start()
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set():
                self.health.tick()
                if self._inflight is None:
                    if self.ranges_done() or (max_batches is not None
                                              and self.batches >= max_batches):
                        break
                    msgs = self._poll_batch()
                    if not msgs:
                        if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                            break
                        continue
                    self._submit(msgs)
                idle_since = time.monotonic()
                self._step(start_next=max_batches is None or self.batches + 1 < max_batches)
            while self._inflight is not None:  # stopping: finish the batch in flight, commit it
                self._step(start_next=False)
        finally:
            self.close()

    def process(self, msgs: list[Message]) -> None:
        """Process one poll batch to a committed transaction (or put it back for a retry)."""
        self._submit(msgs)
        while self._inflight is not None:
            self._step(start_next=False)

    # --- one batch -------------------------------------------------------------------------
    def _poll_batch(self) -> list[Message]:
        w = self.s.worker
        if self._resume_due and len(self._carry) < w.max_batch:
            self._resume()
        t0 = time.perf_counter()
        msgs, since = self._take_carry()
        if len(msgs) < w.max_batch:
            # max_wait counts from the batch's first event: carried events have waited already
            wait_s = w.max_wait_ms / 1000.0
            if msgs:
                wait_s = max(0.0, wait_s - (time.monotonic() - since))
            got = self.consumer.consume(w.max_batch - len(msgs), wait_s)
            self._observe_fetch(got)
            msgs += got
        if msgs:
            self.metrics.stage.labels("fill").observe(time.perf_counter() - t0)
        return self._usable(msgs)

    def _take_carry(self) -> tuple[list[Message], float]:
        """Up to ``max_batch`` prefetched events, oldest first (the rest stay carried), and when
        the oldest of them arrived (``time.monotonic()``)."""
        n = self.s.worker.max_batch
        msgs, self._carry = self._carry[:n], self._carry[n:]
        return msgs, self._carry_since

    def _usable(self, msgs: list[Message]) -> list[Message]:
        """Drop errors (logging all but partition EOF) and, in replay mode, events past the range."""
        out = []
        for m in msgs:
            err = m.error()
            if err is None and self.ranges is not None:
                end = self.ranges[m.partition()][1]
                if m.offset() >= end - 1:
                    self._done_parts.add(m.partition())
                if m.offset() < end:
                    out.append(m)
            elif err is None:
                out.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consume_error", error=str(err))
        self._update_lag()
        return out

    def _update_lag(self, every_s: float = 5.0) -> None:
        """Set the lag gauge from the high watermarks librdkafka caches from its fetch responses
        (a paused partition's is as old as its last fetch). Asking the broker instead
        (``cached=False``) blocked this loop for one round trip per partition: ~0.1 s every 5 s
        in the load benchmark, up to 2.5 s for 6 idle partitions, which was the P99."""
        now = time.monotonic()
        if now - self._last_lag < every_s:
            return
        self._last_lag = now
        try:
            parts = self.consumer.assignment()
            for tp, pos in zip(parts, self.consumer.position(parts), strict=True):
                _, high = self.consumer.get_watermark_offsets(tp, cached=True)
                if pos.offset >= 0:
                    self.metrics.lag.labels(str(tp.partition)).set(max(high - pos.offset, 0))
        except KafkaException:
            pass

    def _submit(self, msgs: list[Message]) -> None:
        """Start computing ``msgs`` on the batch thread (it becomes the batch in flight)."""
        self.metrics.batch_size.observe(len(msgs))
        self._inflight = _Batch(msgs, self._compute.submit(self._compute_batch, msgs))

    def _await(self, b: _Batch) -> _Computed:
        """Keep serving the group (and prefetching) until ``b`` has computed (its PUTs may
        still be in flight).

        Raises:
            StorageUnavailable: (or anything else the batch thread raised).
        """
        self._wait_serving([b.fut])
        computed = b.fut.result()
        self.metrics.stage.labels("handoff").observe(time.perf_counter() - self._compute_end)
        return computed

    def _step(self, start_next: bool = True) -> None:
        """Finish the batch in flight: await its compute, start the next batch from the events
        already prefetched (no waiting), then await this batch's PUTs and commit its transaction.

        If the PUTs or the transaction fail, the next batch (which read past this one's offsets)
        is awaited and discarded, and both are redone (:meth:`_redo`): nothing of either is
        committed.
        """
        b = self._inflight
        try:
            try:
                computed = self._await(b)
            except StorageUnavailable as e:  # a GET (load) failed: nothing else is in flight
                self._inflight = None
                self._storage_down(e, b.msgs)
                return
            entries = self._stored_or_rewound(b, computed, start_next)
            if entries is None:
                return
            entries = [e for e in entries if e.tp not in self._revoked]
            if entries and not self._transact(entries, computed.ms):
                self._redo(self._abandon(b))
        finally:
            if len(self._carry) < self.s.worker.max_batch:
                self._resume()

    def _stored_or_rewound(self, b: _Batch, computed: _Computed,
                           start_next: bool) -> list[_Entry] | None:
        """Start the next batch (if events are ready), then wait for ``b``'s PUTs; on a storage
        failure redo ``b`` and the next batch, wait for the store, and return None."""
        self._inflight = None
        self.batches += 1
        if start_next and not self._stop.is_set():
            nxt = self._take_ready()
            if nxt:
                self._submit(nxt)
        try:
            return self._stored(computed)
        except StorageUnavailable as e:
            self._storage_down(e, self._abandon(b))
            return None

    def _abandon(self, b: _Batch) -> list[Message]:
        """``b`` failed: await and discard the batch computing behind it; the events of both,
        ``b``'s first (fetch order, which is offset order within a partition)."""
        nb, self._inflight = self._inflight, None
        if nb is None:
            return list(b.msgs)
        with contextlib.suppress(Exception):  # its outcome is thrown away either way
            self._await(nb)
        return list(b.msgs) + list(nb.msgs)

    def _storage_down(self, e: Exception, msgs: list[Message]) -> None:
        """MinIO did not answer: put ``msgs`` back (:meth:`_redo`), pause, and poll until it
        answers (nothing is committed)."""
        log.warning("storage_unavailable", error=str(e))
        self._redo(msgs)
        self._pause()
        self._wait_for_storage()

    def _take_ready(self) -> list[Message]:
        """The next batch from what is prefetched or already fetched, without waiting (it starts
        computing while the previous batch's transaction commits)."""
        w = self.s.worker
        msgs, _ = self._take_carry()
        if len(msgs) < w.max_batch:
            got = self.consumer.consume(w.max_batch - len(msgs), 0)
            self._observe_fetch(got)
            msgs += got
        return self._usable(msgs)

    def _pause(self) -> None:
        """Stop fetching: pause the assigned partitions that have delivered an event since their
        assignment; the others are paused by :meth:`_observe_fetch` when their first event
        arrives (at most one event each beyond the carry list's cap).

        A partition paused soon after its assignment, before its fetcher has started, can lose
        its start offset in librdkafka (the pause makes the fetch-start op outdated; librdkafka
        issues #2190 and #5591), and after the resume it is never fetched again: its events are
        lost to this worker until a rebalance. Once a partition has delivered an event,
        librdkafka resumes it after the last event delivered (issue #2052).
        """
        if self._paused:
            return
        self._paused = True
        self._resume_due = False  # what came back paused stays paused with the rest
        tps = [tp for tp in self.consumer.assignment()
               if (tp.topic, tp.partition) in self._fetching - self._paused_tps - self._revoked]
        if tps:
            self.consumer.pause(tps)
            self._paused_tps.update((tp.topic, tp.partition) for tp in tps)

    def _resume(self) -> None:
        """Fetch again: resume exactly the assigned partitions that :meth:`_pause` paused
        (resuming a partition that was not paused can rewind it: librdkafka #4637).

        A partition revoked while paused stays paused in librdkafka, and if it is assigned to
        this worker again it is never fetched until resumed (measured with librdkafka 2.16: a
        partition revoked and given back after 12 s delivered nothing until resumed, and then
        started at the committed offset). Such partitions stay in the paused set until they are
        assigned again, and are resumed then (``_resume_due``). Resuming them in the revoke
        callback instead made the re-assigned partition start at this worker's old position,
        past events it had fetched and not committed.
        """
        if not (self._paused or self._resume_due):
            return
        self._paused = self._resume_due = False
        tps = [tp for tp in self.consumer.assignment()
               if (tp.topic, tp.partition) in self._paused_tps - self._revoked]
        self._paused_tps.difference_update((tp.topic, tp.partition) for tp in tps)
        if tps:
            self.consumer.resume(tps)

    def _wait_serving(self, futs: Sequence[Future]) -> None:
        """Wait for ``futs``, returning as soon as they are done; meanwhile, every
        ``poll_interval_ms``, move prefetched events into the carry list (which also serves
        rebalance callbacks and keeps the consumer in its group)."""
        poll_s = self.s.worker.poll_interval_ms / 1000.0
        pending = [f for f in futs if not f.done()]
        while pending:
            pending = list(wait(pending, timeout=poll_s).not_done)
            self._keep_polling(0.0)

    def _keep_polling(self, timeout_s: float) -> None:
        """Poll while a batch computes: prefetch the next batch into the carry list (whatever is
        already fetched, up to ``max_batch``), and pause the partitions only once it is full
        (librdkafka waits a while before fetching after a resume, so pausing every batch would
        stall the pipeline)."""
        self.health.tick()
        cap = self.s.worker.max_batch
        if len(self._carry) >= cap:
            self._pause()
        m = self.consumer.poll(timeout_s)
        while m is not None:
            if m.error() is None:
                self._observe_fetch([m])
                if not self._carry:
                    self._carry_since = time.monotonic()
                self._carry.append(m)
            if len(self._carry) >= cap:
                break
            m = self.consumer.poll(0)

    def _observe_fetch(self, msgs: Sequence[Message]) -> None:
        """Record the fetch delay of delivered events; a partition's first event marks it as
        fetching, and pauses it if fetching is paused (see :meth:`_pause`)."""
        now_ms = time.time() * 1000.0
        for m in msgs:
            if m.error() is None:
                self.metrics.fetch_delay.observe(max(now_ms - _kafka_ts_ms(m), 0.0) / 1000.0)
                key = (m.topic(), m.partition())
                if key not in self._fetching:
                    self._fetching.add(key)
                    if self._paused and key not in self._revoked:
                        self.consumer.pause([TopicPartition(*key)])
                        self._paused_tps.add(key)

    def _wait_for_storage(self) -> None:
        """Keep polling (heartbeats, rebalances) until the object store answers again, checking
        every 0.5 s doubling to 5 s; logs ``storage_back`` with the wait in s once it does."""
        delay, t0, waited = 0.5, time.monotonic(), False
        while not self._stop.is_set() and not self.storage.healthy():
            waited = True
            t_end = time.monotonic() + delay
            while time.monotonic() < t_end:
                self._keep_polling(0.1)
            delay = min(delay * 2, 5.0)
        if waited and not self._stop.is_set():
            log.info("storage_back", waited_s=round(time.monotonic() - t0, 1))

    def _redo(self, msgs: list[Message]) -> None:
        """Put the events of a failed batch (and of the batch behind it), ``msgs`` in fetch
        order, back in front of the carry list, so the next batches redo them; no seek.

        Every event read and not committed is in ``msgs`` or already in the carry list (what was
        prefetched after them), and the consumer's position is past all of them, so the
        partitions go on in offset order with nothing skipped or read twice. Events of revoked
        partitions are dropped (their new owner starts at the committed offset). In replay mode
        their partitions count as not done again. At most two batches plus the carry are held:
        ``3 * max_batch`` events.
        """
        held = [m for m in list(msgs) + self._carry
                if (m.topic(), m.partition()) not in self._revoked]
        if held and not self._carry:
            self._carry_since = time.monotonic()
        self._carry = held
        self._done_parts -= {m.partition() for m in msgs}
        self.metrics.redone.inc(len(msgs))

    # --- compute side (runs on the batch thread) -------------------------------------------
    def _compute_batch(self, msgs: list[Message]) -> _Computed:
        t0 = time.perf_counter()
        try:
            c = self._compute_entries(msgs)
        finally:
            self._compute_end = time.perf_counter()
            self.metrics.stage.labels("compute").observe(self._compute_end - t0)
        c.ms["compute"] = round((self._compute_end - t0) * 1000.0, 1)
        return c

    def _compute_entries(self, msgs: list[Message]) -> _Computed:
        t_batch = time.time() * 1000.0
        entries = [self._parse(m) for m in msgs]
        for e in entries:
            e.t_batch_ms = t_batch
        loads = {i: self._pool.submit(self._load, e.event)
                 for i, e in enumerate(entries) if e.event is not None}
        for i, f in loads.items():
            e = entries[i]
            try:
                e.image = f.result()
            except ObjectNotFound:
                e.reason = ReasonCode.OBJECT_NOT_FOUND
            except ObjectTooLarge:
                e.reason = ReasonCode.IMAGE_TOO_LARGE
            except DecodeError as de:
                e.reason = ReasonCode(de.reason)
            except ContractError as ce:
                e.dead = self._dead(e.msg, ce.code, str(ce), e.event.upload_id)
                e.event = None
            except StorageError as se:
                raise StorageUnavailable(str(se)) from se
        for e in entries:
            if e.event is not None:
                self.metrics.queue_wait.observe(max(t_batch - _kafka_ts_ms(e.msg), 0.0) / 1000.0)
        by_task: dict[str, list[_Entry]] = {}
        for e in entries:
            if e.event is not None and e.image is not None:
                by_task.setdefault(str(e.event.task), []).append(e)
        for task, group in by_task.items():
            self._run_processor(task, group)
        t_put = time.perf_counter()
        puts = []
        for e in entries:
            if e.outcome is None:
                continue
            version = self._version(str(e.event.task))
            for a in e.outcome.artifacts:
                key = object_key(str(e.event.task), version, e.event.upload_id, a.name, a.ext)
                puts.append((e, a, self._pool.submit(self.storage.put, self.s.s3.results_bucket,
                                                      key, a.data, a.content_type)))
        return _Computed(entries, puts, t_put)

    def _stored(self, c: _Computed) -> list[_Entry]:
        """Wait for the batch's PUTs (started on the I/O pool by the batch thread, so the next
        batch's inference overlaps them); the entries with their object refs.

        Raises:
            StorageUnavailable: a PUT failed after its retries.
        """
        self._wait_serving([f for _, _, f in c.puts])  # a PUT may retry for a while
        for e, a, f in c.puts:
            try:
                st = f.result()
            except StorageError as se:
                raise StorageUnavailable(str(se)) from se
            e.refs[a.name] = ObjectRef(bucket=st.bucket, key=st.key, size_bytes=st.size_bytes,
                                       sha256=st.sha256, content_type=a.content_type,
                                       width=a.width, height=a.height)
        if c.puts:
            put_s = time.perf_counter() - c.t_put
            self.metrics.stage.labels("put").observe(put_s)
            c.ms["put"] = round(put_s * 1000.0, 1)
        return c.entries

    def _version(self, task: str) -> str:
        return self.model_version or self.processors[task].model.version

    def _parse(self, m: Message) -> _Entry:
        e = _Entry(m)
        try:
            e.event = codec.decode_upload(
                m.key(), m.value(), m.headers(), allowed_buckets=self.s.s3.allowed_buckets,
                inline_max_bytes=self.s.worker.inline_max_bytes)
        except ContractError as ce:
            where = f" at {ce.path}" if ce.path != "$" else ""
            e.dead = self._dead(m, ce.code, f"{ce}{where}", _readable_upload_id(m.value()))
            return e
        if str(e.event.task) not in self.processors:
            e.dead = self._dead(m, DeadLetterCode.PROCESSING_ERROR,
                                f"task {e.event.task} not served by this worker", e.event.upload_id)
            e.event = None
        return e

    def _load(self, ev: UploadEvent) -> EncodedImage:
        """Image bytes (inline or claim check, verified against the ref's size and sha256 when
        given) with their header probed (format, size, limits; no pixel decoded).

        Raises:
            ObjectNotFound / ObjectTooLarge / StorageError: from the store.
            DecodeError: bad image, or ``CHECKSUM_MISMATCH`` when the object is not the one the
                event describes.
        """
        data = codec.inline_bytes(ev)
        if data is None:
            ref = ev.image.ref
            data = self.storage.get(ref.bucket, ref.key, max_bytes=self.s.decode.max_bytes)
            if ref.size_bytes is not None and ref.size_bytes != len(data):
                raise DecodeError(ReasonCode.CHECKSUM_MISMATCH,
                                  f"object is {len(data)} bytes, the event says {ref.size_bytes}")
            if ref.sha256 is not None and hashlib.sha256(data).hexdigest() != ref.sha256:
                raise DecodeError(ReasonCode.CHECKSUM_MISMATCH, "object sha256 differs from the event's")
        return probe_image(data, self.s.decode)

    def _run_processor(self, task: str, group: list[_Entry]) -> None:
        """Run the task's processor on ``group`` in chunks of its batch bucket: one model call each."""
        proc = self.processors[task]
        step = max(1, int(proc.bucket))
        for i in range(0, len(group), step):
            self._run_chunk(task, proc, group[i : i + step])

    def _run_chunk(self, task: str, proc: Processor, chunk: list[_Entry]) -> None:
        items = [Item(e.event.upload_id, e.image, e.event.options_dict()) for e in chunk]
        calls0 = _calls(proc)
        t0 = time.perf_counter()
        try:
            outcomes: list[Outcome | None] = list(proc.process_batch(items))
            if len(outcomes) != len(items):
                raise RuntimeError(f"{len(outcomes)} outcomes for {len(items)} items")
        except Exception as exc:  # isolate the poison item: one by one
            log.warning("batch_failed_isolating", task=task, error=type(exc).__name__)
            outcomes = []
            for e, it in zip(chunk, items, strict=True):
                try:
                    outcomes.extend(proc.process_batch([it]))
                except Exception as exc1:
                    e.dead = self._dead(e.msg, DeadLetterCode.PROCESSING_ERROR,
                                        f"{task} processor raised {type(exc1).__name__}: {exc1}",
                                        e.event.upload_id)
                    outcomes.append(None)
        self.metrics.inference.labels(task).observe(time.perf_counter() - t0)
        self.metrics.inference_calls.labels(task).inc(max(_calls(proc) - calls0, 0))
        for e, o in zip(chunk, outcomes, strict=True):
            e.image = None
            if o is None:
                e.event = None
            else:
                e.outcome = o
                e.batch_size = len(chunk)

    # --- results + transaction --------------------------------------------------------------
    def _dead(self, m: Message, code: str, error: str, upload_id: str | None) -> DeadLetter:
        return codec.make_dead_letter(
            key=m.key(), value=m.value(), headers=m.headers(), topic=m.topic(),
            partition=m.partition(), offset=m.offset(), code=code, error=error,
            max_value_bytes=self.s.worker.dlq_value_max_bytes, upload_id=upload_id)

    def _result(self, e: _Entry) -> VerificationResult:
        ev = e.event
        task = str(ev.task)
        proc = self.processors[task]
        processed_at = now_rfc3339()
        now_ms = time.time() * 1000.0
        ts_ms = _kafka_ts_ms(e.msg)
        o = e.outcome
        if o is None:
            status, reasons, payload, inf_ms = Status.REJECTED, (e.reason,), None, 0.0
        else:
            status, reasons, inf_ms = o.status, tuple(o.reasons), o.inference_ms
            payload = task_payload(task, o.payload, e.refs)
        kw: dict[str, Any] = {task: payload} if payload is not None else {}
        return VerificationResult(
            upload_id=ev.upload_id, task=ev.task, status=status, reasons=reasons,
            model=None if o is None else ModelRef(name=proc.model.name, version=self._version(task),
                                                  provider=proc.model.provider),
            timings=Timings(queue_ms=round(max(e.t_batch_ms - ts_ms, 0.0), 3),
                            batch_size=e.batch_size, inference_ms=round(inf_ms, 3),
                            total_ms=round(max(now_ms - ts_ms, 0.0), 3)),
            source=SourceRef(topic=e.msg.topic(), partition=e.msg.partition(), offset=e.msg.offset()),
            processed_at=processed_at, submitted_at=ev.submitted_at, trace_id=ev.trace_id, **kw)

    def _result_or_failed(self, e: _Entry) -> VerificationResult:
        """The entry's result; a ``failed`` INTERNAL_ERROR result if the outcome breaks the contract."""
        try:
            return self._result(e)
        except ValueError as exc:  # pydantic ValidationError: a processor bug, not the upload's
            log.error("outcome_breaks_contract", upload_id=e.event.upload_id, task=str(e.event.task),
                      error=type(exc).__name__, detail=str(exc).splitlines()[0][:200])
            e.outcome, e.reason = None, ReasonCode.INTERNAL_ERROR
            r = self._result(e)
            return r.model_copy(update={"status": Status.FAILED})

    def _transact(self, entries: list[_Entry], ms: Mapping[str, float] | None = None) -> bool:
        """Results + dead letters + the batch's offsets in one transaction (``ms``: the batch's
        stage times, logged with the commit).

        Returns:
            True when committed; False when aborted (the caller redoes the batch).
        """
        k = self.s.kafka
        results = [(e, self._result_or_failed(e)) for e in entries if e.event is not None]
        deads = [e.dead for e in entries if e.dead is not None]
        last: dict[tuple[str, int], int] = {}
        for e in entries:
            last[e.tp] = max(last.get(e.tp, -1), e.msg.offset())
        offsets = [TopicPartition(t, p, off + 1) for (t, p), off in last.items()]
        p = self.producer
        stage = self.metrics.stage
        try:
            t0 = time.perf_counter()
            p.begin_transaction()
            t1 = time.perf_counter()
            for _, r in results:
                key, value, headers = codec.encode_result(r)
                p.produce(k.results_topic, key=key, value=value, headers=headers)
            for d in deads:
                key, value, headers = codec.encode_dead_letter(d)
                p.produce(k.dlq_topic, key=key, value=value, headers=headers)
            t2 = time.perf_counter()
            self._send_offsets(p, offsets)
            t3 = time.perf_counter()
            self._commit_with_retry(p)
            t4 = time.perf_counter()
            for name, a, b in (("begin", t0, t1), ("produce", t1, t2), ("send_offsets", t2, t3),
                               ("commit", t3, t4)):
                stage.labels(name).observe(b - a)
        except ProducerStuck as ex:
            self.metrics.transactions.labels("stuck").inc()
            log.error("producer_stuck", error=str(ex), transactional_id=self.transactional_id,
                      hint="librdkafka #5456: a new producer with the same transactional id "
                           "fences the stuck one (its open transaction is aborted) and the "
                           "batch is redone")
            self._rebuild_producer()  # the stuck one is left alone: a call on it may block too
            return False
        except KafkaException as ex:
            err = _fatal_cause(p, ex.args[0])
            log.warning("transaction_failed", error=str(err), abortable=err.txn_requires_abort(),
                        fatal=err.fatal())
            if err.code() in _FENCED_CODES:
                self.metrics.transactions.labels("fenced").inc()
                log.error("worker_fenced", transactional_id=self.transactional_id,
                          hint="another worker runs with this transactional id (same "
                               "transactional_id_prefix and --slot): give each worker its own "
                               "--slot; this one takes the id back and redoes the batch")
            else:
                self.metrics.transactions.labels("aborted").inc()
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(self.TXN_CALL_TIMEOUT_S)
                except KafkaException:
                    self._rebuild_producer()
            else:
                self._rebuild_producer()
            return False
        self.metrics.transactions.labels("committed").inc()
        self.committed_events += len(entries)
        now = time.time()
        for _, r in results:
            self.metrics.results.labels(str(r.task), str(r.status)).inc()
            self.metrics.e2e.labels(str(r.task)).observe(r.timings.total_ms / 1000.0)
        for d in deads:
            self.metrics.dead_letters.labels(str(d.error_code)).inc()
        log.info("batch_committed", results=len(results), dead_letters=len(deads),
                 partitions=sorted({p for _, p in last}), at=round(now, 3),
                 **{f"{k}_ms": v for k, v in (ms or {}).items()},
                 txn_ms=round((t4 - t0) * 1000.0, 1))
        return True

    def _send_offsets(self, p: Any, offsets: list[TopicPartition]) -> None:
        """``send_offsets_to_transaction`` with a bound librdkafka does not keep.

        librdkafka 2.x can block in this call for ever, past its timeout, when the group
        coordinator it cached has gone (issues #5456 and #5511, open; seen here after a
        single-broker restart: both workers blocked for minutes and ignored SIGTERM). The call
        runs on its own thread; if it has not returned ``TXN_CALL_TIMEOUT_S + STUCK_GRACE_S``
        seconds later, nothing of the transaction is committed yet, so the producer can be
        abandoned and the batch redone without a duplicate. Only this call is bounded this way:
        a ``commit_transaction`` that does not return may have committed.

        Raises:
            KafkaException: what the call raised.
            ProducerStuck: the call has not returned in time; it is left running on a daemon thread.
        """
        group = self.consumer.consumer_group_metadata()
        box: list[BaseException] = []

        def call() -> None:
            try:
                p.send_offsets_to_transaction(offsets, group, self.TXN_CALL_TIMEOUT_S)
            except BaseException as e:  # noqa: BLE001 - handed to the loop's thread below
                box.append(e)

        th = threading.Thread(target=call, name="send-offsets", daemon=True)
        th.start()
        th.join(self.TXN_CALL_TIMEOUT_S + self.STUCK_GRACE_S)
        if th.is_alive():
            raise ProducerStuck(f"send_offsets_to_transaction has not returned after "
                                f"{self.TXN_CALL_TIMEOUT_S + self.STUCK_GRACE_S:.0f} s")
        if box:
            raise box[0]

    def _commit_with_retry(self, p: Any, attempts: int = 5) -> None:
        for i in range(attempts):
            try:
                p.commit_transaction(self.TXN_CALL_TIMEOUT_S)
                return
            except KafkaException as ex:
                if ex.args[0].retriable() and i + 1 < attempts:
                    time.sleep(0.2 * (i + 1))
                    continue
                raise

    def _rebuild_producer(self) -> None:
        """Fenced or fatal: drop the producer, build a new one with the same transactional.id.

        The old producer is not flushed: what it holds belongs to the failed transaction, which
        read_committed consumers never see, and a fenced producer's ``flush`` raised out of the
        loop (a bare ``KafkaError`` that no ``except`` clause can name)."""
        self.producer = transactional_producer(self.s.kafka, self.transactional_id)


_FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
"""Error codes that mean another producer with this transactional.id took it over (librdkafka
INTRODUCTION.md, "Fatal producer errors")."""


def _fatal_cause(p: Any, err: KafkaError) -> KafkaError:
    """The error that put the producer in its fatal state, when ``err`` only says it is in one.

    Once librdkafka has raised a fatal error (e.g. ``_FENCED``, from the AddPartitions answer of
    an earlier ``produce``), the next ``produce`` fails with a bare ``_FATAL`` whose ``fatal()``
    is False; the cause comes out of the next ``poll``, which confluent-kafka raises as a
    ``KafkaException``.

    Args:
        p: the transactional Producer that failed.
        err: the error it raised.

    Returns:
        The cause (``fatal()`` True), or ``err`` itself when it is not ``_FATAL`` or ``poll``
        raised nothing.
    """
    if err.code() != KafkaError._FATAL:
        return err
    try:
        p.poll(0)
    except KafkaException as ex:
        cause = ex.args[0] if ex.args else None
        if isinstance(cause, KafkaError):
            return cause
    return err


def _readable_upload_id(value: bytes | None) -> str | None:
    """The ``upload_id`` of an event that failed its contract, when it is itself valid (for the
    dead letter); None otherwise."""
    try:
        uid = json.loads(value).get("upload_id") if value else None
    except (ValueError, AttributeError, RecursionError):
        return None
    return uid if isinstance(uid, str) and _UPLOAD_ID.fullmatch(uid) else None


_UPLOAD_ID = re.compile(UPLOAD_ID_PATTERN.rstrip("$") + r"\Z")


def _kafka_ts_ms(m: Message) -> float:
    """The record's Kafka timestamp (epoch ms; CreateTime from the producer)."""
    return float(m.timestamp()[1])


def _calls(proc: Processor) -> int:
    return int(proc.stats.calls)


def task_payload(task: str, payload: Mapping[str, Any], refs: Mapping[str, ObjectRef]) -> Any:
    """Build the result's task payload (``CardPayload`` / ``IdPhotoPayload``) from an outcome.

    Args:
        task: ``card`` or ``id_photo``.
        payload: the outcome's task fields.
        refs: artifact name -> stored object ref; the task's main artifact (``rectified`` /
            ``photo``) fills the ref field, ``None`` when the item was rejected.
    """
    field_name = REF_FIELD[task]
    d = {k: v for k, v in payload.items() if k in _FIELDS[task] and v is not None}
    d[field_name] = refs.get(field_name)
    if task == "card":
        d.setdefault("quad", None)
        d.setdefault("confidence", 0.0)
        d.setdefault("doc_type", "unknown")
        return CardPayload(**d)
    d.setdefault("face_box", None)
    return IdPhotoPayload(**d)


_FIELDS = {"card": set(CardPayload.model_fields), "id_photo": set(IdPhotoPayload.model_fields)}


def install_signal_handlers(worker: Worker) -> None:
    """SIGTERM / SIGINT -> finish or abort the batch, commit, leave the group."""
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)


