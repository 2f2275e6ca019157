"""Committer: one Kafka transaction per batch, and its failure modes (fenced, aborted, stuck).

The checkpoint of a batch (:meth:`Committer.commit`), once every output object is stored:

1. ``begin_transaction``;
2. produce the results (results topic) and the dead letters (dead-letter topic): a dead letter
   refused for its size (by the producer at once, or by the broker in its delivery report,
   which fails the transaction) goes out as its minimal form the next time
   (:func:`schemas.codec.minimal_dead_letter`: code, source, no key, value or headers), so one
   dead letter can never block its partition;
3. ``send_offsets_to_transaction``: per partition, the offset after the batch's last event,
   each with its attempt mark as metadata (stamped by :meth:`Checkpoint.of`), bounded in time
   on the committer's one call thread (a stuck producer is replaced,
   :meth:`Committer.send_offsets`);
4. ``commit_transaction``, retried while the error is retriable (``KafkaSettings.commit_retry``,
   :mod:`streams.retry`); if it still times out its outcome is unknown (the coordinator may have
   committed it): the consumer group's committed offsets decide (:func:`group_reached`), never
   a blind redo. Once committed, the marks are the attempt ledger's.

Nothing of a batch is visible to read_committed consumers before step 4 returns, and a failed
transaction commits nothing: the caller redoes the batch. As quix-streams' ``Checkpoint``, one
object owns the commit and its steps are numbered here and in the code.

The committer may be without a producer for a while (:attr:`Committer.ready` False): the broker
did not answer a new producer's ``init_transactions`` (a broker down longer than a stuck call's
bound, issue 43), or the call thread could not start (a process thread limit). A commit then
commits nothing and :meth:`Committer.reopen` is asked again later (the worker's loop holds the
batch meanwhile, ``streams.worker.loop``); nothing of that raises out of :meth:`Committer.commit`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from schemas import codec
from schemas.models import DeadLetter, ShadowDiff, VerificationResult
from streams import retry
from streams.errors import KafkaSetupError, ProducerStuck
from streams.kafka import transactional_producer
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.settings import KafkaSettings
from streams.shadow import change_of
from streams.worker.attempts import AttemptLedger, Key, key_of
from streams.worker.record import Record

REFUSED_RECORD_CODES = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD,
                        KafkaError.INVALID_MSG, KafkaError.RECORD_LIST_TOO_LARGE)
"""Error codes that mean the broker or the producer refuses this record itself (Kafka protocol
error codes 10, 87, 2, 18; librdkafka's local size check is ``MSG_SIZE_TOO_LARGE`` too)."""

FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
"""Error codes that mean another producer with this transactional.id took it over (librdkafka
INTRODUCTION.md, "Fatal producer errors")."""


@dataclass(frozen=True)
class Checkpoint:
    """What one transaction commits.

    Attributes:
        results: the batch's results, in fetch order.
        dead_letters: its dead letters, in fetch order.
        offsets: per partition of the batch, the offset after its last event, with its attempt
            mark as metadata when the checkpoint was given the marks.
        events: events the checkpoint covers (results + dead letters).
        stage_ms: the batch's stage times (ms), logged with the commit.
        trace_headers: per source record ``(topic, partition, offset)``, the trace-context
            headers (``traceparent``...) its result or dead letter carries (:mod:`streams.tracing`).
        shadow_diffs: the shadow model's comparisons (:mod:`streams.shadow`), to the shadow
            topic in the same transaction.
    """

    results: list[VerificationResult]
    dead_letters: list[DeadLetter]
    offsets: list[TopicPartition]
    events: int
    stage_ms: Mapping[str, float] = field(default_factory=dict)
    trace_headers: Mapping[tuple[str, int, int], list[tuple[str, bytes]]] = field(
        default_factory=dict)
    shadow_diffs: list[ShadowDiff] = field(default_factory=list)

    @classmethod
    def of(cls, msgs: Sequence[Record], results: list[VerificationResult],
           dead_letters: list[DeadLetter], stage_ms: Mapping[str, float] | None = None,
           marks: AttemptLedger | None = None,
           trace_headers: Mapping[tuple[str, int, int], list[tuple[str, bytes]]] | None = None,
           shadow_diffs: Sequence[ShadowDiff] = ()) -> Checkpoint:
        """The checkpoint of a batch of ``msgs`` (each with a result or a dead letter), its
        offsets stamped with the attempt marks they write (:meth:`AttemptLedger.commit_marks`)
        when ``marks`` is given (None: replay mode, no marks)."""
        last: dict[Key, int] = {}
        for m in msgs:
            last[key_of(m)] = max(last.get(key_of(m), -1), m.offset())
        offsets = [TopicPartition(t, p, off + 1) for (t, p), off in last.items()]
        if marks is not None:
            offsets = marks.commit_marks(offsets)
        return cls(results, dead_letters, offsets, len(msgs), dict(stage_ms or {}),
                   dict(trace_headers or {}), list(shadow_diffs))


def group_reached(consumer: Any, offsets: Sequence[TopicPartition],
                  timeout_s: float = 30.0) -> bool:
    """Whether the consumer group's committed offsets are at or past ``offsets`` (read stable:
    a read_committed consumer's request waits for pending transactional commits, KIP-447).

    Raises:
        KafkaException: the request failed.
    """
    got = consumer.committed([TopicPartition(tp.topic, tp.partition) for tp in offsets],
                             timeout=timeout_s)
    want = {(tp.topic, tp.partition): tp.offset for tp in offsets}
    return all(tp.offset >= want[(tp.topic, tp.partition)] for tp in got)


class _Caller:
    """One daemon thread that runs the calls handed to it, one at a time (:meth:`call`).

    The committer's ``send_offsets_to_transaction`` runs here, on a thread started once and
    reused, instead of a thread started per commit (issue 43: under a thread limit that
    ``Thread.start()`` raised ``RuntimeError`` out of the commit). A daemon thread, so that a call
    librdkafka never returns does not hold the process at its exit (a ``ThreadPoolExecutor``'s
    threads are joined at exit). Once a call has returned, the thread lets go of the callable
    and its arguments: an abandoned producer is freed when its stuck call ends.

    Args:
        name: the thread's name.

    Raises:
        RuntimeError: the thread cannot start (``can't start new thread``: a process thread
            limit, or no address space left for its stack).
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fut, fn, args = job
            del job
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the caller through fut
                fut.set_exception(e)
            del fut, fn, args  # the producer goes with its call

    def call(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on the thread, after the calls handed before; its future."""
        fut: Future = Future()
        self._jobs.put((fut, fn, args))
        return fut

    def close(self) -> None:
        """Let the thread end once the call it runs (if any) has returned."""
        self._jobs.put(None)


class Committer:
    """The transactional producer of a worker slot and the batch checkpoint (module doc).

    Class attributes: ``TXN_CALL_TIMEOUT_S`` (30 s) is the timeout given to each transactional
    producer call; ``STUCK_GRACE_S`` (5 s) is how much longer ``send_offsets_to_transaction``
    may take before the producer counts as stuck (:meth:`send_offsets`): a call that keeps its
    own timeout has returned by then, and a broker restart's stall is bounded by 35 s, not 60 s.
    ``INIT_TIMEOUT_S`` (5 s) bounds each ``init_transactions`` try of :meth:`reopen` (the loop
    polls between tries; librdkafka resumes the operation at the next try).
    ``STUCK_HELD_MAX`` (3): stuck producers left behind whose call has still not returned; one
    more and :meth:`commit` raises (each holds its librdkafka threads, sockets and a blocked
    call thread, and only a new process frees a call that never returns).

    Args:
        kafka: Kafka settings (results and dead-letter topics, producer settings).
        transactional_id: this worker slot's ``transactional.id`` (stable across restarts of
            the slot, so a restarted slot fences its zombie).
        metrics: the worker's metrics (transactions, results, dead letters, end-to-end
            latency, the transaction's stages).
        ledger: the worker's attempt ledger: the marks a committed checkpoint wrote become its
            partitions' marks (:meth:`AttemptLedger.committed`). None (replay mode): none.
        shadow_topic: where a checkpoint's shadow comparisons go (:mod:`streams.shadow`).

    Attributes:
        producer: the transactional producer, ``init_transactions`` done (built by :meth:`open`
            or :meth:`reopen`, replaced when fenced, fatal or stuck); None while the broker
            does not answer a new one.
        committed_events: events whose result or dead letter is committed.
        minimal_sources: ``(topic, partition, offset)`` of the records whose full dead letter
            was refused: their dead letter goes out in its minimal form from then on (until it
            is committed, or its partition is no longer held at a commit).
    """

    TXN_CALL_TIMEOUT_S = 30.0
    STUCK_GRACE_S = 5.0
    INIT_TIMEOUT_S = 5.0
    STUCK_HELD_MAX = 3

    def __init__(self, kafka: KafkaSettings, transactional_id: str, metrics: WorkerMetrics,
                 ledger: AttemptLedger | None = None,
                 shadow_topic: str = "cardstream.shadow.v1") -> None:
        self.kafka = kafka
        self.shadow_topic = shadow_topic
        self.transactional_id = transactional_id
        self.metrics = metrics
        self.ledger = ledger
        self.producer: Any = None
        self.committed_events = 0
        self.minimal_sources: dict[tuple[str, int, int], str] = {}
        self._building: Any = None  # a producer whose init_transactions has not gone through
        self._caller: _Caller | None = None
        self._stuck: list[Future] = []  # calls of abandoned producers that had not returned

    @property
    def ready(self) -> bool:
        """Whether a commit can start: a producer with its transactions initialised, and the
        call thread."""
        return self.producer is not None and self._caller is not None

    @property
    def stuck_held(self) -> int:
        """Abandoned producers whose stuck call has still not returned."""
        self._stuck = [f for f in self._stuck if not f.done()]
        return len(self._stuck)

    def open(self) -> None:
        """Build the producer (``init_transactions`` fences an older one with this id) and the
        call thread: :meth:`reopen` with up to ``TXN_CALL_TIMEOUT_S``. Not ready then (the
        broker does not answer), the worker starts all the same and the next commit tries again.

        Raises:
            KafkaSetupError: ``init_transactions`` failed with an error no retry fixes.
        """
        self.reopen(self.TXN_CALL_TIMEOUT_S)

    def reopen(self, timeout_s: float | None = None) -> bool:
        """Make the committer :attr:`ready` if it is not: build a producer, or call the
        ``init_transactions`` of the one built before again (after a retriable error librdkafka
        resumes the operation), for at most ``timeout_s`` (default ``INIT_TIMEOUT_S``); then
        start the call thread. A fatal error drops that producer (the next try builds another).

        Returns:
            Whether the committer is ready now.

        Raises:
            KafkaSetupError: ``init_transactions`` failed with an error neither retriable nor
                fatal (an unsupported broker, an invalid ``transaction.timeout.ms``, a denied
                transactional id): no retry fixes it.
        """
        if self.producer is None:
            if self._building is None:
                self._building = transactional_producer(self.kafka, self.transactional_id,
                                                        init_timeout_s=None)
            try:
                self._building.init_transactions(timeout_s or self.INIT_TIMEOUT_S)
            except KafkaException as ex:
                err = ex.args[0]
                if not (err.retriable() or err.fatal()):
                    self._building = None
                    raise KafkaSetupError(
                        f"init_transactions({self.transactional_id}) failed: {err}") from ex
                if err.fatal():
                    self._building = None
                log.warning("producer_unavailable", error=str(err), retriable=err.retriable(),
                            transactional_id=self.transactional_id,
                            hint="the broker did not initialise the transactional producer; "
                                 "nothing is committed until it does, batches wait")
                return False
            self.producer, self._building = self._building, None
        if self._caller is None:
            try:
                self._caller = _Caller("send-offsets")
            except RuntimeError as ex:
                log.error("txn_thread_unavailable", error=str(ex),
                          threads=threading.active_count(),
                          hint="the process cannot start a thread (a thread limit, or no memory "
                               "for its stack); nothing is committed until it can")
                return False
        return True

    def close(self, timeout_s: float) -> None:
        """Flush what the producer holds (at most ``timeout_s``); let the call thread end."""
        if self.producer is not None:
            self.producer.flush(timeout_s)
        if self._caller is not None:
            self._caller.close()
            self._caller = None

    def commit(self, cp: Checkpoint, consumer: Any) -> bool:
        """Commit ``cp`` in one transaction (steps 1-4 of the module doc).

        Args:
            cp: the batch's checkpoint.
            consumer: the consumer whose group the offsets are committed for: its
                ``consumer_group_metadata()`` goes with the offsets, and its group's committed
                offsets decide an unknown outcome (:func:`group_reached`: reached, the
                transaction did commit; it is counted as committed and the producer, whose
                state is unknown, replaced).

        Returns:
            True when committed; False when nothing was (aborted, fenced or stuck: the producer
            is aborted or replaced, and the caller redoes the batch; or the committer is not
            :attr:`ready` and :meth:`reopen` did not make it so: the caller waits for it).

        Raises:
            ProducerStuck: more than ``STUCK_HELD_MAX`` abandoned producers are still stuck.
            KafkaSetupError: a new producer's ``init_transactions`` failed for good
                (:meth:`reopen`).
        """
        if not self.ready and not self.reopen():
            return False
        if self.minimal_sources:
            self._forget_unheld(consumer)
        p = self.producer
        stage = self.metrics.stage
        try:
            t0 = time.perf_counter()
            p.begin_transaction()  # 1.
            t1 = time.perf_counter()
            for r in cp.results:  # 2.
                key, value, headers = codec.encode_result(r)
                src = (r.source.topic, r.source.partition, r.source.offset)
                p.produce(self.kafka.results_topic, key=key, value=value,
                          headers=headers + cp.trace_headers.get(src, []))
            for d in cp.dead_letters:
                self.produce_dead_letter(p, d, cp.trace_headers.get(
                    (d.source.topic, d.source.partition, d.source.offset), []))
            for sd in cp.shadow_diffs:
                key, value, headers = codec.encode_shadow_diff(sd)
                p.produce(self.shadow_topic, key=key, value=value, headers=headers)
            t2 = time.perf_counter()
            self.send_offsets(cp.offsets, consumer.consumer_group_metadata())  # 3.
            t3 = time.perf_counter()
            try:
                self.commit_transaction()  # 4.
            except KafkaException as ex:
                if not (ex.args[0].retriable() and self._committed_anyway(cp, consumer, ex)):
                    raise
            t4 = time.perf_counter()
            for name, a, b in (("begin", t0, t1), ("produce", t1, t2), ("send_offsets", t2, t3),
                               ("commit", t3, t4)):
                stage.labels(name).observe(b - a)
        except ProducerStuck as ex:
            self.metrics.transactions.labels("stuck").inc()
            held = self._abandon_stuck()
            log.error("producer_stuck", error=str(ex), transactional_id=self.transactional_id,
                      stuck_held=held,
                      hint="librdkafka #5456: a new producer with the same transactional id "
                           "fences the stuck one (its open transaction is aborted) and the "
                           "batch is redone")
            if held > self.STUCK_HELD_MAX:
                raise ProducerStuck(f"{held} abandoned producers are stuck at once (more than "
                                    f"STUCK_HELD_MAX {self.STUCK_HELD_MAX}): only a new process "
                                    "frees them") from ex
            self.reopen()
            return False
        except KafkaException as ex:
            self._failed(p, ex)
            return False
        self._committed(cp, t4 - t0)
        return True

    def produce_dead_letter(self, p: Any, d: DeadLetter,
                            trace: Sequence[tuple[str, bytes]] = ()) -> None:
        """Step 2 for one dead letter: the full one, or its minimal form when the full one of
        this source was refused before (by the broker: its delivery report names the source) or
        is refused now (by the producer: ``produce`` raises). Either carries ``trace`` (its
        upload's trace-context headers) after its own.

        Raises:
            KafkaException: ``produce`` failed for another reason than the record itself.
        """
        src = (d.source.topic, d.source.partition, d.source.offset)
        why = self.minimal_sources.get(src)
        if why is None:
            key, value, headers = codec.encode_dead_letter(d)
            try:
                p.produce(self.kafka.dlq_topic, key=key, value=value, headers=headers + [*trace],
                          on_delivery=lambda err, _msg: self._delivered(src, err))
                return
            except KafkaException as ex:
                if ex.args[0].code() not in REFUSED_RECORD_CODES:
                    raise
                why = self._refused(src, ex.args[0])
        key, value, headers = codec.encode_dead_letter(codec.minimal_dead_letter(d, why))
        p.produce(self.kafka.dlq_topic, key=key, value=value, headers=headers + [*trace])

    def _delivered(self, src: tuple[str, int, int], err: KafkaError | None) -> None:
        """Delivery report of a full dead letter: one the broker refused for itself goes out
        minimal when its batch is redone (the refusal fails this transaction)."""
        if err is not None and err.code() in REFUSED_RECORD_CODES:
            self._refused(src, err)

    def _refused(self, src: tuple[str, int, int], err: KafkaError) -> str:
        """Remember that the full dead letter of ``src`` was refused; returns why (the code)."""
        why = err.name()
        if src not in self.minimal_sources:
            self.minimal_sources[src] = why
            self.metrics.minimal_dead_letters.inc()
            log.error("dead_letter_refused", topic=src[0], partition=src[1], offset=src[2],
                      error=why, hint="its minimal form (code and source only) goes out instead")
        return why

    def _forget_unheld(self, consumer: Any) -> None:
        """Drop the refused dead letters of partitions ``consumer`` no longer holds: their
        records are the new owner's (issue 43: such entries stayed for ever)."""
        held = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        self.minimal_sources = {src: why for src, why in self.minimal_sources.items()
                                if src[:2] in held}

    def _committed_anyway(self, cp: Checkpoint, consumer: Any, ex: KafkaException) -> bool:
        """``commit_transaction`` kept timing out: did the transaction commit all the same?
        Yes when the group's committed offsets reached ``cp``'s; the producer is then replaced
        (librdkafka still holds the commit as in progress). Errors of the check count as no."""
        try:
            done = group_reached(consumer, cp.offsets)
        except KafkaException:
            done = False
        log.warning("commit_outcome_unknown", error=str(ex.args[0]), committed=done,
                    partitions=sorted({tp.partition for tp in cp.offsets}))
        if done:
            self.metrics.transactions.labels("unknown_committed").inc()
            self.rebuild()
        return done

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        """Step 3: ``send_offsets_to_transaction`` with a bound librdkafka does not keep.

        librdkafka 2.x can block in this call for ever, past its timeout, when the group
        coordinator it cached has gone (librdkafka #5456 and #5511, open; seen here after a
        single-broker restart: both workers blocked for minutes and ignored SIGTERM). The call
        runs on its own thread; if it has not returned ``TXN_CALL_TIMEOUT_S + STUCK_GRACE_S``
        seconds later, nothing of the transaction is committed yet, so the producer can be
        abandoned and the batch redone without a duplicate. Only this call is bounded this way:
        a ``commit_transaction`` that does not return may have committed.

        The call runs on the committer's call thread (:class:`_Caller`), started once, not per
        commit.

        Raises:
            KafkaException: what the call raised.
            ProducerStuck: the call has not returned in time; it is left running on the call
                thread (its future is counted in :attr:`stuck_held` until it returns).
        """
        assert self._caller is not None  # commit() starts only when ready
        fut = self._caller.call(self.producer.send_offsets_to_transaction, offsets,
                                group_metadata, self.TXN_CALL_TIMEOUT_S)
        bound_s = self.TXN_CALL_TIMEOUT_S + self.STUCK_GRACE_S
        if not wait([fut], bound_s).done:
            self._stuck.append(fut)
            raise ProducerStuck(f"send_offsets_to_transaction has not returned after "
                                f"{bound_s:.0f} s")
        fut.result()

    def _abandon_stuck(self) -> int:
        """Leave the stuck producer and its call thread behind (a call on it may block too;
        the thread lets the producer go once the call returns, :class:`_Caller`); returns how
        many abandoned producers are stuck now, this one included."""
        if self._caller is not None:
            self._caller.close()
        self._caller, self.producer = None, None
        return self.stuck_held

    def commit_transaction(self) -> None:
        """Step 4: ``commit_transaction``, retried as ``KafkaSettings.commit_retry`` says (0.2 s,
        0.4 s, 0.8 s, 0.8 s by default) while the error is retriable.

        Raises:
            KafkaException: not retriable, or still failing after the policy's attempts.
        """
        retry.call(lambda: self.producer.commit_transaction(self.TXN_CALL_TIMEOUT_S),
                   self.kafka.commit_retry,
                   lambda e: isinstance(e, KafkaException) and e.args[0].retriable())

    def rebuild(self) -> None:
        """Fenced, fatal or unknown: drop the producer, build a new one with the same
        transactional.id (:meth:`reopen`: when the broker does not answer it, the committer
        stays not :attr:`ready` and the next commit tries again; nothing raises).

        The old producer is not flushed: what it holds belongs to the failed transaction, which
        read_committed consumers never see, and a fenced producer's ``flush`` raised out of the
        loop (a bare ``KafkaError`` that no ``except`` clause can name)."""
        self.producer = None
        self.reopen()

    def _failed(self, p: Any, ex: KafkaException) -> None:
        """A transaction failed: serve the delivery reports still queued (a refused dead
        letter's), count it (fenced or aborted), then abort it when librdkafka allows, else
        (fatal) replace the producer. An abort that librdkafka refuses fatally (librdkafka#4849:
        its EndTxn can overtake the AddPartitionsToTxn of records still in flight and find the
        transaction ``Empty``, INVALID_TXN_STATE) replaces the producer too: ``init_transactions``
        on the same transactional.id aborts whatever the coordinator still holds open."""
        err = fatal_cause(p, ex.args[0])
        with contextlib.suppress(KafkaException):
            p.poll(0)
        log.warning("transaction_failed", error=str(err), abortable=err.txn_requires_abort(),
                    fatal=err.fatal())
        if err.code() in FENCED_CODES:
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
                self.rebuild()
        else:
            self.rebuild()

    def _committed(self, cp: Checkpoint, txn_s: float) -> None:
        """Count a committed checkpoint and log ``batch_committed``."""
        self.metrics.transactions.labels("committed").inc()
        self.committed_events += cp.events
        if self.ledger is not None:
            self.ledger.committed(cp.offsets)
        for r in cp.results:
            self.metrics.results.labels(str(r.task), str(r.status)).inc()
            self.metrics.e2e.labels(str(r.task)).observe(r.timings.total_ms / 1000.0)
            for reason in r.reasons:
                self.metrics.result_reasons.labels(str(r.task), str(reason)).inc()
            if r.cache_hit:
                self.metrics.cache_hits.labels(str(r.task)).inc()
        for tp in cp.offsets:
            self.metrics.committed_offset.labels(str(tp.partition)).set(tp.offset)
        for sd in cp.shadow_diffs:
            self.metrics.shadow_diffs.labels(str(sd.task), change_of(sd)).inc()
            for m, v in sd.measures.items():
                self.metrics.shadow_measure.labels(str(sd.task), m).observe(v)
        for d in cp.dead_letters:
            self.metrics.dead_letters.labels(str(d.error_code)).inc()
            self.minimal_sources.pop((d.source.topic, d.source.partition, d.source.offset), None)
        log.info("batch_committed", results=len(cp.results), dead_letters=len(cp.dead_letters),
                 partitions=sorted({tp.partition for tp in cp.offsets}), at=round(time.time(), 3),
                 **{f"{k}_ms": v for k, v in cp.stage_ms.items()},
                 txn_ms=round(txn_s * 1000.0, 1))


def fatal_cause(p: Any, err: KafkaError) -> KafkaError:
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
