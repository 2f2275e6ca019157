"""The loop: run the worker, two batches overlapping.

A batch's path (exactly-once results):

1. :class:`~streams.worker.intake.Intake` hands the loop up to ``max_batch`` events or what
   came within ``max_wait_ms``, whichever first (dynamic batching);
2. :class:`~streams.worker.compute.Compute` computes it on the batch thread: parse, load (GETs
   and decodes on the I/O pool), process (one model call per batch bucket), PUTs started;
3. the loop starts the next batch from what was prefetched meanwhile, then awaits this batch's
   PUTs;
4. :class:`~streams.worker.committer.Committer` commits its results, dead letters and offsets
   in one Kafka transaction.

While a batch computes or its PUTs run, the loop keeps polling (:meth:`Intake.wait`):
prefetching the next batch into the carry list, pausing the partitions only when that is full,
serving rebalance callbacks and staying in the group. Two batches overlap: as soon as batch *k*
has computed, batch *k+1* starts computing, and only then does the loop await *k*'s PUTs and
commit *k*'s transaction; *k+1*'s results go in a later transaction. If *k*'s PUTs or
transaction fail, *k+1* is awaited and thrown away and both are redone from memory
(:meth:`Intake.redo`): nothing of either is committed. Events of partitions revoked meanwhile
are dropped before the transaction (their new owner redoes them); a batch that would commit a
partition's offset past events delivered here and not committed is not committed but redone
with them (:meth:`Intake.skipped <streams.worker.intake.Intake.skipped>`). If MinIO does not
answer, or the processor breaker opens, nothing is committed: the batch is put back and
fetching paused until the store answers or the breaker's pause is over
(:mod:`streams.worker.pausing`); the same when the committer has no producer (the broker did not
answer a new one's ``init_transactions``) until
:meth:`Committer.reopen <streams.worker.committer.Committer.reopen>` succeeds.

The worker builds its parts and hands each what it uses: the attempt ledger
(:mod:`streams.worker.attempts`, owned here; None in replay mode) goes to the intake (marks read
at assignment, events isolated), compute (``POISON`` dead letters) and the committer (marks
committed); the loop itself never sees an offset or a mark.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import NewTopic

from processors import registry
from processors.base import Processor
from processors.runtime import RuntimeSettings, int8_saturates
from streams.backfill import YieldGate
from streams.errors import ProcessorUnavailable, StorageUnavailable, StoreRefused
from streams.health import Health
from streams.kafka import admin, create_topics
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.reach import BrokerReach
from streams.retry import Backoff
from streams.settings import Settings
from streams.shadow import Shadow
from streams.storage import Storage
from streams.tracing import Spans, Tracing
from streams.worker.attempts import AttemptLedger
from streams.worker.committer import Checkpoint, Committer
from streams.worker.compute import Compute, Computed, Stored
from streams.worker.intake import Intake
from streams.worker.pausing import PausingManager
from streams.worker.record import Record


@dataclass
class _Batch:
    """A batch handed to the batch thread: its events (in fetch order) and its future."""

    msgs: list[Record]
    fut: Future


class Worker:
    """One worker process: intake, compute and committer, run by the loop.

    Args:
        settings: the frozen app settings.
        processors: task -> processor serving it; events of other tasks are dead-lettered.
        storage: the object store client.
        metrics: Prometheus metrics (a fresh registry by default).
        health: readiness/liveness state (its ``broker`` is set to :attr:`broker`).
        ranges: replay mode: uploads-topic partition -> ``[start, end)`` offsets (see
            :class:`~streams.worker.intake.Intake`); :meth:`run` returns once every partition
            reached its end.
        model_version: label outputs (object keys, result ``model.version``) with this version
            instead of the processor's, e.g. to replay a new model beside the originals.
        gate: a backfill's yield gate (:mod:`streams.backfill`): no batch starts while the live
            workers are busy. None: none (the live workers themselves).
        shadow: the shadow version's processor of ``settings.shadow.task``
            (:func:`build_shadow`, :mod:`streams.shadow`); None: no shadow.
        store_outage_limit_s: after the store has failed batches for this long in a row (s),
            :meth:`run` raises :class:`StorageUnavailable` instead of waiting on (a replay:
            ``BackfillSettings.store_outage_limit_s``). None: it waits for ever (the live
            worker, readiness failing meanwhile).

    Attributes:
        broker: whether a broker answers (:mod:`streams.reach`; reported by the consumer, read
            by ``/ready``).
        ledger: the attempt ledger (None in replay mode), handed to the three parts below.
        intake: the consumer side (``intake.paused``: whether fetching is paused).
        compute: parse -> load -> process -> PUT (``compute.processors``, ``compute.storage``).
        committer: the transaction (``committer.committed_events``); a test may replace it
            before :meth:`run`, with one built on ``ledger``.
        pausing: the pausing manager (store outage, processor breaker).
        tracing: the worker's traces (:mod:`streams.tracing`; ``CARDSTREAM_TRACING__*``).
        transactional_id: ``{transactional_id_prefix}-{slot}``.
        batches: batches computed so far.
    """

    def __init__(self, settings: Settings, processors: Mapping[str, Processor], storage: Storage,
                 metrics: WorkerMetrics | None = None, health: Health | None = None,
                 ranges: Mapping[int, tuple[int, int]] | None = None,
                 model_version: str | None = None, gate: YieldGate | None = None,
                 shadow: Processor | None = None,
                 store_outage_limit_s: float | None = None) -> None:
        self.settings = settings
        self.store_outage_limit_s = store_outage_limit_s
        self.gate = gate
        self.metrics = metrics or WorkerMetrics()
        self.health = health or Health(stall_s=settings.worker.compute_deadline_s,
                                       per_item_s=settings.worker.compute_deadline_per_item_s)
        self.broker = self.health.broker = BrokerReach(settings.kafka)
        self.transactional_id = f"{settings.kafka.transactional_id_prefix}-{settings.worker.slot}"
        w = settings.worker
        self.ledger = AttemptLedger(w.poison_attempts, w.max_batch) if ranges is None else None
        self.tracing = Tracing.from_settings(settings.tracing, self.metrics)
        self.intake = Intake(settings.kafka, w, self.metrics, self.health, ranges, self.ledger)
        self.shadow = (Shadow(settings.shadow, shadow, self.metrics) if shadow is not None
                       else None)
        self.compute = Compute(settings, processors, storage, self.metrics, model_version,
                               self.ledger, self.tracing, live=ranges is None, shadow=self.shadow)
        self.committer = Committer(settings.kafka, self.transactional_id, self.metrics,
                                   self.ledger, settings.shadow.topic)
        self.batches = 0
        self._batch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch")
        self._stop = threading.Event()
        self.pausing = PausingManager(self.intake, self._stop.is_set)
        self._inflight: _Batch | None = None  # the batch computing on the batch thread
        self._breaker = Backoff(w.breaker)  # its pauses, longer per failure in a row
        self._refusal = Backoff(w.store_refusal)  # the store refusing: pauses, longer each time
        self._outage = Backoff(w.store_wait)  # the store failing a batch: pauses, longer each time
        self._refused_since: float | None = None  # monotonic start of refusals in a row
        self._outage_since: float | None = None  # monotonic start of outages in a row

    @property
    def computing(self) -> bool:
        """Whether a batch is computing on the batch thread (behind the one being committed)."""
        return self._inflight is not None

    # --- lifecycle -------------------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        """Ask the loop to finish the current batch, commit and leave (SIGTERM handler)."""
        self._stop.set()

    def warm_up(self) -> None:
        """Load every model and run every batch bucket once (before subscribing), the shadow
        version's too. One ``warmed_up`` log line per task names the task's main model, its
        provider and bucket, and on the CPU whether its int8 products are computed exactly by
        ONNX Runtime's slower kernels because this CPU's fast ones saturate
        (``exact_int8_products``, :func:`processors.runtime.int8_saturates`)."""
        shadow = {"shadow": self.shadow.processor} if self.shadow is not None else {}
        for task, p in {**self.compute.processors, **shadow}.items():
            t0 = time.perf_counter()
            p.warm_up()
            on_cpu = p.model.provider == "CPUExecutionProvider"
            log.info("warmed_up", task=task, model=p.model.name, provider=p.model.provider,
                     bucket=p.bucket, ms=round((time.perf_counter() - t0) * 1000, 1),
                     exact_int8_products=int8_saturates() if on_cpu else None)

    def start(self) -> None:
        """Build the producer and the consumer, and subscribe (after :meth:`warm_up`); with a
        shadow version, make its topic if it is missing. Starts watching the broker
        (:attr:`broker`)."""
        self.broker.start()
        if self.shadow is not None:
            t = self.settings.kafka.topics
            create_topics(admin(self.settings.kafka),
                          [NewTopic(self.shadow.topic, t.results_partitions, t.replication_factor,
                                    config={"retention.ms": str(t.results_retention_ms)})])
        self.committer.open()
        self.intake.open()
        self.health.ready = self.committer.ready

    def close(self, clean: bool = True) -> None:
        """Leave the group and flush; bounded by ``shutdown_timeout_s``. ``clean``: the loop
        stopped as asked (the attempt marks are released; after an error they stay)."""
        self.health.ready = False
        self.intake.close(clean)
        self.committer.close(self.settings.worker.shutdown_timeout_s)
        self.compute.close()
        self.broker.close()
        self._batch_thread.shutdown(wait=False, cancel_futures=True)

    def run(self, max_batches: int | None = None, idle_exit_s: float | None = None) -> None:
        """Run the loop until :meth:`stop` (or SIGTERM), ``max_batches``, or ``idle_exit_s`` of no
        events (replay mode: until every range is done). On stop the batch in flight is finished
        and committed before leaving."""
        self.start()
        idle_since = time.monotonic()
        clean = False
        try:
            while not self._stop.is_set():
                self.health.tick()
                if self._inflight is None:
                    if self.intake.ranges_done() or (max_batches is not None
                                                     and self.batches >= max_batches):
                        break
                    if self.gate is not None:
                        self.gate.wait(self._stop.is_set)
                    t_poll = time.time_ns()
                    msgs = self.intake.next_batch(wait=True)
                    if not msgs:
                        if not self.committer.ready:  # no producer since the start: ask again
                            self._committer_down([])
                        if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                            break
                        continue
                    self._submit(msgs, (t_poll, time.time_ns()))
                idle_since = time.monotonic()
                self._step(start_next=max_batches is None or self.batches + 1 < max_batches)
            while self._inflight is not None:  # stopping: finish the batch in flight, commit it
                self._step(start_next=False)
            clean = True
        finally:
            self.close(clean)

    # --- two batches -----------------------------------------------------------------------
    def _submit(self, msgs: list[Record], polled_ns: tuple[int, int] | None = None) -> None:
        """Start computing ``msgs`` on the batch thread (it becomes the batch in flight);
        ``polled_ns``: when the poll that formed it ran (None: it was prefetched)."""
        self.metrics.batch_size.observe(len(msgs))
        since = self.health.computing(len(msgs))
        fut = self._batch_thread.submit(self.compute.run, msgs, polled_ns)
        # the compute's own end, not when the loop gets to it (the loop may be committing the
        # batch before, e.g. a stuck send_offsets_to_transaction during a broker restart)
        fut.add_done_callback(lambda _: self.health.computed(since))
        self._inflight = _Batch(msgs, fut)

    def _await(self, b: _Batch) -> Computed:
        """Keep serving the group (and prefetching) until ``b`` has computed (its PUTs may
        still be in flight).

        Raises:
            StorageUnavailable: (or anything else the batch thread raised).
        """
        self.intake.wait([b.fut])
        computed = b.fut.result()
        self.metrics.stage.labels("handoff").observe(time.perf_counter() - self.compute.finished_at)
        return computed

    def _step(self, start_next: bool = True) -> None:
        """Finish the batch in flight: await its compute, start the next batch from the events
        already prefetched (no waiting), then await this batch's PUTs and commit it.

        If the PUTs or the transaction fail, the next batch (which read past this one's offsets)
        is awaited and discarded, and both are redone: nothing of either is committed.
        """
        b = self._inflight
        if b is None:  # nothing in flight (the callers step only while a batch is)
            return
        try:
            try:
                computed = self._await(b)
            except StorageUnavailable as e:  # a GET (load) failed: nothing else is in flight
                self._inflight = None
                self._storage_down(e, b.msgs)
                return
            except ProcessorUnavailable as e:  # the breaker: nothing else is in flight
                self._inflight = None
                self._processor_down(e, b.msgs)
                return
            self._inflight = None
            self.batches += 1
            self._breaker.reset()
            # events running one per batch (a partition restarted at the same offset): no
            # batch starts while another commits
            isolating = self.ledger is not None and self.ledger.isolating
            yielding = self.gate is not None and self.gate.busy()
            if start_next and not self._stop.is_set() and not isolating and not yielding:
                nxt = self.intake.next_batch(wait=False)
                if nxt:
                    self._submit(nxt)
            try:
                stored = self.compute.stored(computed, self.intake.wait)
            except StorageUnavailable as e:
                computed.trace.abandoned("object store unavailable")
                self._storage_down(e, self._abandon(b))
                return
            self._store_accepts()
            if not self._commit(stored):
                msgs = self._abandon(b)
                if self.committer.ready:
                    self.intake.redo(msgs)
                else:
                    self._committer_down(msgs)
        finally:
            self.intake.resume_if_room()

    def _commit(self, stored: Stored) -> bool:
        """One transaction (in a ``cardstream.transaction`` span of the batch) with the results
        and dead letters of ``stored``'s fates still this worker's and their offsets (marked by
        the ledger), each record carrying its upload's trace context; whether it committed
        (True when nothing was left to commit). Ends the batch's spans."""
        fates = [f for f in stored.fates if self.intake.owns(f.msg)]
        if not fates:
            stored.trace.abandoned("no event still this worker's: partitions revoked, or committed")
            return True
        msgs = [f.msg for f in fates]
        if self.intake.skipped(msgs):
            stored.trace.abandoned("events below the batch not committed")
            return False
        results, dead_letters = self.compute.records(fates)
        owned = {(f.msg.topic(), f.msg.partition(), f.msg.offset()) for f in fates}
        shadow = [d for d in stored.shadow
                  if (d.source.topic, d.source.partition, d.source.offset) in owned]
        cp = Checkpoint.of(msgs, results, dead_letters, stored.ms, self.ledger,
                           stored.trace.headers(), shadow)
        with self.tracing.span(Spans.TRANSACTION, stored.trace.batch,
                               **{"cardstream.batch.events": cp.events}) as span:
            ok = self.committer.commit(cp, self.intake.consumer)
            span.set_attribute("cardstream.transaction.committed", ok)
        if ok:
            self.intake.committed(msgs)
            self.health.ready = True  # a start without a producer (broker down) was not ready
            stored.trace.committed(results, dead_letters)
        else:
            stored.trace.abandoned("transaction not committed")
        return ok

    def _abandon(self, b: _Batch) -> list[Record]:
        """``b`` failed: await and discard the batch computing behind it; the events of both,
        ``b``'s first (fetch order, which is offset order within a partition)."""
        nb, self._inflight = self._inflight, None
        if nb is None:
            return list(b.msgs)
        with contextlib.suppress(Exception):  # its outcome is thrown away either way
            self._await(nb).trace.abandoned("batch ahead failed")
        return list(b.msgs) + list(nb.msgs)

    def _storage_down(self, e: Exception, msgs: list[Record]) -> None:
        """MinIO did not answer: hold ``msgs`` (put back, pause) until it answers
        (:meth:`wait_for_storage`), or until ``store_outage_limit_s`` from the first failure
        in a row; nothing is committed. A refusal (:class:`StoreRefused`) goes to
        :meth:`_store_refused` instead.

        Raises:
            StorageUnavailable: batches failed in a row for ``store_outage_limit_s`` (ending
                the loop; nothing of ``msgs`` is committed).
        """
        if isinstance(e, StoreRefused):
            self._store_refused(e, msgs)
            return
        now = time.monotonic()
        self._outage_since = self._outage_since or now
        log.warning("storage_unavailable", error=str(e))
        limit_s = self.store_outage_limit_s
        if limit_s is not None and now - self._outage_since >= limit_s:
            raise StorageUnavailable(f"the object store did not answer for "
                                     f"{now - self._outage_since:.0f} s (limit {limit_s:g} s): "
                                     f"{e}") from e
        self.wait_for_storage(msgs, at_least_s=self._outage.next(),
                              until=None if limit_s is None else self._outage_since + limit_s)

    def _store_refused(self, e: StoreRefused, msgs: list[Record]) -> None:
        """The store answered with a refusal no wait clears (issue 43: the batch, models
        included, was recomputed in a hot loop while ``/ready`` and ``/live`` stayed 200): count
        it, fail readiness, hold ``msgs`` for the next pause of ``store_refusal`` (1 s doubling
        to 30 s), and after ``store_refusal_limit_s`` of refusals in a row raise, ending the
        loop (``cardstream worker`` exits 1; nothing is committed, so a restart redoes it).

        Raises:
            StoreRefused: refused in a row for ``store_refusal_limit_s``.
        """
        now = time.monotonic()
        self._refused_since = self._refused_since or now
        refused_s = now - self._refused_since
        limit_s = self.settings.worker.store_refusal_limit_s
        self.metrics.store_refusals.labels(e.code).inc()
        self.health.ready = False
        log.error("store_refused", code=e.code, error=str(e), refused_for_s=round(refused_s, 1),
                  limit_s=limit_s)
        if refused_s >= limit_s:
            raise StoreRefused(f"the object store refused for {refused_s:.0f} s "
                               f"(store_refusal_limit_s {limit_s:.0f}): {e}", e.code) from e
        pause_s = self._refusal.next()
        until = now + pause_s
        self.pausing.hold(msgs, lambda: time.monotonic() >= until, [pause_s])

    def _committer_down(self, msgs: list[Record]) -> None:
        """The committer has no producer (the broker did not answer a new one's
        ``init_transactions``: issue 43, a broker down past a stuck commit's bound, where the
        rebuild's ``KafkaSetupError`` escaped the loop and the worker exited; or down when the
        worker started, ``msgs`` then empty: before, an idle worker started so stayed unready
        after the broker came back, until an upload came) or no call thread: hold ``msgs`` (put
        back, pause; with none, what arrives waits in the carry list), fail readiness, and poll
        (heartbeats, rebalances) until :meth:`Committer.reopen` succeeds, asked as
        ``KafkaSettings.producer_wait`` says (each try blocks up to
        ``Committer.INIT_TIMEOUT_S``); nothing is committed meanwhile."""
        self.health.ready = False
        log.warning("committer_unavailable", events=len(msgs),
                    hint="no transactional producer: nothing is committed until the broker answers")
        waits = self.settings.kafka.producer_wait.delays()
        waited = (self.pausing.hold(msgs, self.committer.reopen, waits) if msgs
                  else self.pausing.poll_until(self.committer.reopen, waits))
        if self.committer.ready:
            self.health.ready = self._refused_since is None
            log.info("committer_back", waited_s=round(waited, 1))

    def _store_accepts(self) -> None:
        """A batch's calls went through: refusals and outages in a row are over (readiness
        back)."""
        self._outage.reset()
        self._outage_since = None
        if self._refused_since is not None:
            self._refused_since = None
            self._refusal.reset()
            self.health.ready = True

    def _processor_down(self, e: Exception, msgs: list[Record]) -> None:
        """The breaker: a processor failed even on a probe (:class:`ProcessorUnavailable`): hold
        ``msgs`` (put back, pause) and fail readiness for the breaker's next pause
        (``WorkerSettings.breaker``: 1 s, doubled per failure in a row up to 30 s), polling
        meanwhile, then try the batch again; nothing is dead-lettered."""
        pause_s = self._breaker.next()
        self.metrics.breaker_opened.inc()
        self.metrics.breaker_open.set(1)
        log.error("processor_breaker_open", error=str(e), pause_s=round(pause_s, 3))
        self.health.ready = False
        until = time.monotonic() + pause_s
        try:
            self.pausing.hold(msgs, lambda: time.monotonic() >= until, [pause_s])
        finally:
            self.metrics.breaker_open.set(0)
        self.health.ready = True

    def wait_for_storage(self, msgs: Sequence[Record] = (), at_least_s: float = 0.0,
                         until: float | None = None) -> None:
        """Hold ``msgs`` (put back, pause) and keep polling (heartbeats, rebalances) until the
        object store answers again, asked as ``WorkerSettings.store_wait`` says, and for
        ``at_least_s`` (s) however soon it answers: a batch failing again and again on a store
        that answers each health check must not be redone in a hot loop (issue 43: 2,024
        ``storage_unavailable`` lines in 30 s). Logs ``storage_back`` with the wait in s once it
        answers (nothing when it answered at once). ``until``: a ``time.monotonic()`` at which
        the hold ends whether the store answers or not (one wait of ``store_wait`` late at
        most); None: none."""
        least = time.monotonic() + at_least_s
        waits = itertools.chain([at_least_s] if at_least_s > 0.0 else [],
                                self.settings.worker.store_wait.delays())

        back = False

        def ready() -> bool:
            nonlocal back
            now = time.monotonic()
            back = now >= least and self.compute.storage.healthy()
            return back or (until is not None and now >= until)

        waited = self.pausing.hold(msgs, ready, waits)
        if waited > 0.0 and back and not self._stop.is_set():
            log.info("storage_back", waited_s=round(waited, 1))


def task_section(settings: Settings, task: str) -> Any:
    """The settings section of ``task`` (``Settings.<spec.settings_key>``, e.g. ``card``), None
    for a task without one."""
    key = registry.spec(task).settings_key
    return getattr(settings, key) if key is not None else None


def build_processors(settings: Settings, tasks: Iterable[str] | None = None,
                     use: Mapping[str, str] | None = None, sleep_ms: float = 20.0,
                     runtime: RuntimeSettings | None = None) -> dict[str, Processor]:
    """Task -> the processor serving it, for a worker or a replay (not warmed up).

    Args:
        settings: the app settings (each task's section, the runtime).
        tasks: the tasks to serve (default: ``settings.worker.tasks``).
        use: task -> processor name (``sleep``: the fixed-latency stand-in); a task not named
            gets its own processor.
        sleep_ms: per-call latency of the ``sleep`` processor (ms).
        runtime: runtime settings instead of ``settings.runtime`` (a benchmark's buckets).

    Raises:
        ProcessorError: an unknown task or processor; ``ModelError``/``ProviderError`` from a
            processor's construction.
    """
    rt = runtime or settings.runtime
    use = use or {}
    files = settings.worker.model_files
    return {t: registry.build_processor(t, task_section(settings, t), rt, name=use.get(t),
                                        sleep_ms=sleep_ms, decode=settings.decode,
                                        model_file=files.get(t))
            for t in (settings.worker.tasks if tasks is None else tasks)}


def build_shadow(settings: Settings, runtime: RuntimeSettings | None = None) -> Processor | None:
    """The shadow version's processor (``settings.shadow``: the task's processor on its model
    file, not warmed up), or None when the share is 0.

    Raises:
        ProcessorError: the task takes no model file; ``ModelError``/``ProviderError`` from the
            processor's construction.
    """
    sh = settings.shadow
    if sh.share <= 0 or sh.task is None:
        return None
    return registry.build_processor(sh.task, task_section(settings, sh.task),
                                    runtime or settings.runtime, decode=settings.decode,
                                    model_file=sh.model_file)


def install_signal_handlers(worker: Worker) -> None:
    """SIGTERM / SIGINT -> finish or abort the batch, commit, leave the group."""
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
