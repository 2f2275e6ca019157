"""Intake: where events come in. The consumer and its assignment (rebalance callbacks, and
the events delivered in it and not yet committed), the carry list (:class:`Carry`), pausing
and resuming partitions (:class:`PartitionPause`, with the librdkafka behaviours that shape
it), replay ranges (:class:`ReplayRanges`) and the lag gauge (:class:`LagGauge`).

``max_batch`` is read once, here: a batch is at most that many events, and the carry list pauses
the partitions once it holds that many. The attempt ledger is the worker's
(:mod:`streams.worker.attempts`), handed in: the intake reads the marks of partitions it is
assigned, isolates the events that must run alone and releases the marks it gives up.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import Gauge

from streams.health import Health
from streams.kafka import age_ms
from streams.kafka import consumer as make_consumer
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.settings import KafkaSettings, WorkerSettings
from streams.worker.attempts import AttemptLedger, Key, key_of, start_offsets
from streams.worker.record import Record


class PartitionPause:
    """Pausing and resuming the partitions this worker holds: ``pause``, ``resume``, and what
    the assignment and the fetcher tell it (``assigned``, ``revoked``, ``delivered``).

    Three librdkafka behaviours shape it, each handled where noted:

    * a partition paused before its fetcher started can lose its start offset (the pause makes
      the fetch-start op outdated) and is then never fetched again until a rebalance
      (librdkafka #2190, #5591): a partition is paused only once it has delivered an event
      (:meth:`pause`, :meth:`delivered`); after that librdkafka resumes it after the last event
      delivered (librdkafka #2052);
    * resuming a partition that was not paused can rewind it (librdkafka #4637): only what this
      object paused is resumed (:meth:`resume`);
    * a partition revoked while paused stays paused in librdkafka across its re-assignment
      (measured with librdkafka 2.16: a partition given back after 12 s delivered nothing until
      resumed, then started at the committed offset): such a partition stays in the paused set
      and is resumed from the loop once it is assigned again (:meth:`assigned`, then
      :meth:`resume`); resuming it in the revoke callback instead made the re-assigned
      partition start at this worker's old position, past events fetched and not committed.

    The consumer (``assignment``, ``pause``, ``resume``) is the argument of the calls that use
    it.

    Args:
        revoked: the partitions revoked from this worker (shared with :class:`Intake`).
    """

    def __init__(self, revoked: set[Key]) -> None:
        self.paused = False  # fetching is to stop (carry list full, or the store down)
        self.resume_due = False  # a partition paused here came back in a new assignment
        self._paused: set[Key] = set()  # paused by this object (even if revoked since)
        self._fetching: set[Key] = set()  # delivered an event since assigned
        self._revoked = revoked

    def assigned(self, key: Key) -> None:
        """``key`` is (again) assigned to this worker: it has delivered nothing yet; if it is
        still paused from before its revocation, resume it from the loop (not from inside the
        rebalance callback)."""
        self._fetching.discard(key)
        if key in self._paused:
            self.resume_due = True

    def revoked(self, key: Key) -> None:
        """``key`` left this worker (it stays in the paused set: see the class doc)."""
        self._fetching.discard(key)

    def delivered(self, consumer: Any, key: Key) -> None:
        """``key`` delivered an event: it is fetching now, and is paused at once if fetching is
        paused (at most one event each beyond the carry list's cap)."""
        if key in self._fetching:
            return
        self._fetching.add(key)
        if self.paused and key not in self._revoked:
            consumer.pause([TopicPartition(*key)])
            self._paused.add(key)

    def pause(self, consumer: Any) -> None:
        """Stop fetching: pause the assigned partitions that have delivered an event since their
        assignment (the others when their first event arrives, :meth:`delivered`)."""
        if self.paused:
            return
        self.paused = True
        self.resume_due = False  # what came back paused stays paused with the rest
        tps = [tp for tp in consumer.assignment()
               if (tp.topic, tp.partition) in self._fetching - self._paused - self._revoked]
        if tps:
            consumer.pause(tps)
            self._paused.update((tp.topic, tp.partition) for tp in tps)

    def resume(self, consumer: Any) -> None:
        """Fetch again: resume exactly the assigned partitions :meth:`pause` paused."""
        if not (self.paused or self.resume_due):
            return
        self.paused = self.resume_due = False
        tps = [tp for tp in consumer.assignment()
               if (tp.topic, tp.partition) in self._paused - self._revoked]
        self._paused.difference_update((tp.topic, tp.partition) for tp in tps)
        if tps:
            consumer.resume(tps)


SEEK_TRIES = 3
"""Seeks of one partition back to its start before its events are kept as fetched
(:meth:`Intake._check_starts`)."""


@dataclass(frozen=True, slots=True)
class _Seek:
    """A partition sent back to its start offset: ``start``, the offset it ``fetched`` from
    instead (ahead of ``start``), the seeks so far (``tries``), and the events dropped since
    (``held``, fetch order: released if the seeks never take)."""

    start: int
    fetched: int
    tries: int
    held: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class Carry:
    """The carry list, a value: events held between batches (prefetched while a batch computes,
    or put back to be redone), in fetch order, and when the oldest of them arrived.

    Attributes:
        msgs: the events, oldest first.
        since: ``time.monotonic()`` when the oldest one arrived or was put back (what a batch
            starting with them has waited already).
    """

    msgs: tuple[Record, ...] = ()
    since: float = 0.0

    def __len__(self) -> int:
        return len(self.msgs)

    def added(self, m: Record) -> Carry:
        """With ``m`` (just fetched) at the end."""
        return Carry((*self.msgs, m), self.since if self.msgs else time.monotonic())

    def in_front(self, msgs: Sequence[Record]) -> Carry:
        """With ``msgs`` (put back, in fetch order) in front."""
        if not msgs:
            return self
        return Carry((*msgs, *self.msgs), self.since if self.msgs else time.monotonic())

    def kept(self, keep: Callable[[Record], bool]) -> Carry:
        """Without the events ``keep`` refuses."""
        return Carry(tuple(m for m in self.msgs if keep(m)), self.since)

    def split(self, n: int) -> tuple[list[Record], Carry]:
        """The first ``n`` events, and the carry list after them."""
        return list(self.msgs[:n]), Carry(self.msgs[n:], self.since)


class ReplayRanges:
    """Replay mode: the uploads topic's partition -> ``[start, end)`` offsets to consume, and
    which partitions have reached their end.

    Args:
        bounds: partition -> ``(start, end)`` offsets; an empty range is done at once.
    """

    def __init__(self, bounds: Mapping[int, tuple[int, int]]) -> None:
        self.bounds = dict(bounds)
        self._done = {p for p, (a, b) in self.bounds.items() if a >= b}

    def assignment(self, topic: str) -> list[TopicPartition]:
        """The partitions of ``topic`` to assign, each at its start offset."""
        return [TopicPartition(topic, p, a) for p, (a, b) in self.bounds.items() if a < b]

    def within(self, m: Record) -> bool:
        """Whether ``m`` lies before its partition's end; the partition is done once its
        last event in the range has come."""
        end = self.bounds[m.partition()][1]
        if m.offset() >= end - 1:
            self._done.add(m.partition())
        return m.offset() < end

    def reopen(self, msgs: Iterable[Record]) -> None:
        """``msgs`` are to be redone: their partitions are not done any more."""
        self._done -= {m.partition() for m in msgs}

    def done(self) -> bool:
        """Every partition consumed up to its end."""
        return self._done >= set(self.bounds)


class LagGauge:
    """The consumer lag per partition (``cardstream_consumer_lag``), set at most every
    ``every_s`` from the high watermarks librdkafka caches from its fetch responses (a paused
    partition's is as old as its last fetch). Asking the broker instead (``cached=False``)
    blocked the loop for one round trip per partition: ~0.1 s every 5 s in the load benchmark,
    up to 2.5 s for 6 idle partitions, which was the P99.

    Args:
        gauge: the gauge, labelled by partition.
        every_s: the shortest time between two updates (s).
        also: other per-partition gauges whose series are dropped with the lag's
            (``cardstream_committed_offset``).
    """

    def __init__(self, gauge: Gauge, every_s: float = 5.0, also: Sequence[Gauge] = ()) -> None:
        self.gauge = gauge
        self.also = tuple(also)
        self.every_s = every_s
        self._last = 0.0
        self._labels: set[str] = set()  # the partitions the gauge has a value for

    def update(self, consumer: Any) -> None:
        """Set the gauge from ``consumer``'s positions, unless it was set less than ``every_s``
        ago, and drop the partitions no longer assigned (issue 43: a revoked partition kept its
        last lag for ever, counted again by its new owner); Kafka errors leave it as it was."""
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        try:
            parts = consumer.assignment()
            held = set()
            for tp, pos in zip(parts, consumer.position(parts), strict=True):
                _, high = consumer.get_watermark_offsets(tp, cached=True)
                held.add(str(tp.partition))
                if pos.offset >= 0:
                    self.gauge.labels(str(tp.partition)).set(max(high - pos.offset, 0))
        except KafkaException:
            return
        for gone in self._labels - held:
            for g in (self.gauge, *self.also):
                with contextlib.suppress(KeyError):  # never set (no position yet)
                    g.remove(gone)
        self._labels = held


class Intake:
    """The consumer side of a worker.

    Args:
        kafka: Kafka settings (uploads topic, consumer group).
        worker: worker settings: ``max_batch``, ``max_wait_ms``, ``poll_interval_ms``,
            ``max_poll_interval_ms`` are read here, once.
        metrics: the worker's metrics (``fill`` stage, fetch delay, lag, redone events).
        health: the worker's health (ticked while waiting; ``in_group`` from the callbacks;
            its ``broker`` watch gets the consumer's errors).
        ranges: replay mode: uploads-topic partition -> ``[start, end)`` offsets. The consumer
            is assigned these instead of subscribing, events at or past ``end`` are left alone,
            and :meth:`ranges_done` says when every partition reached its end.
        ledger: the worker's attempt ledger (:mod:`streams.worker.attempts`): an event of a
            partition restarted at the same offset runs in a batch of its own. None (replay
            mode): no start is counted.

    Attributes:
        consumer: the consumer, once :meth:`open` has built it.
        carry: the carry list (:class:`Carry`).
    """

    def __init__(self, kafka: KafkaSettings, worker: WorkerSettings, metrics: WorkerMetrics,
                 health: Health, ranges: Mapping[int, tuple[int, int]] | None = None,
                 ledger: AttemptLedger | None = None) -> None:
        self.kafka = kafka
        self.worker = worker
        self.max_batch = worker.max_batch
        self.metrics = metrics
        self.health = health
        self.ranges = ReplayRanges(ranges) if ranges is not None else None
        self.ledger = ledger
        self.consumer: Any = None
        self.carry = Carry()
        self._revoked: set[Key] = set()  # partitions revoked from this worker
        self.pausing = PartitionPause(self._revoked)
        self.lag = LagGauge(metrics.lag, also=[metrics.committed_offset])
        # delivered in the current assignment and not committed yet: partition -> offset -> event
        # (what :meth:`owns` asks and :meth:`skipped` checks a batch against)
        self._pending: dict[Key, dict[int, Record]] = {}
        self._skipped: list[Record] = []  # found skipped by a batch (:meth:`skipped`), to redo
        self._unchecked: set[Key] = set()  # assigned; where it starts fetching not checked yet
        self._sought: dict[Key, _Seek] = {}  # sent back to its start: what it fetched instead
        # the group's committed offset where events below it came (again): dropped as they come
        self._floor: dict[Key, int] = {}

    # --- the consumer and its assignment -----------------------------------------------------
    def open(self, consumer: Any = None) -> None:
        """Build the consumer (or take ``consumer``, a test's) and subscribe to the uploads topic,
        or in replay mode assign the ranges' partitions at their start offsets. The consumer
        reports to the health's broker watch (``error_cb``, :mod:`streams.reach`)."""
        k = self.kafka
        broker = self.health.broker
        self.consumer = consumer if consumer is not None else make_consumer(
            k, k.group_id,
            **{"max.poll.interval.ms": self.worker.max_poll_interval_ms,
               "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
               "queued.max.messages.kbytes": 16_384,
               **({"error_cb": broker.error_cb} if broker is not None else {})})
        if self.ranges is None:
            self.consumer.subscribe([k.uploads_topic], on_assign=self.on_assign,
                                    on_revoke=self.on_revoke, on_lost=self.on_lost)
        else:
            self.consumer.assign(self.ranges.assignment(k.uploads_topic))

    def close(self, clean: bool = True) -> None:
        """Leave the group; after a clean stop, release the attempt marks of the partitions
        held (:meth:`AttemptLedger.release`; after a crash they stay, to be counted)."""
        if self.consumer is not None:
            if clean and self.ledger is not None:
                self.ledger.release(self.consumer, list(self.ledger.marks))
            self.consumer.close()

    def on_assign(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Rebalance callback: ``parts`` are this worker's now."""
        for tp in parts:
            key = (tp.topic, tp.partition)
            self._revoked.discard(key)
            self._unchecked.add(key)
            self._sought.pop(key, None)
            self._floor.pop(key, None)
            self.pausing.assigned(key)
        self.health.in_group = True
        log.info("partitions_assigned", partitions=[tp.partition for tp in parts])

    def on_revoke(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Rebalance callback: ``parts`` went to another member; their carried events are
        dropped (their new owner starts at the committed offset) and their attempt marks
        released (a handover is no crash)."""
        if self.ledger is not None:
            self.ledger.release(consumer, [(tp.topic, tp.partition) for tp in parts])
        self._drop(parts)

    def _drop(self, parts: list[TopicPartition]) -> None:
        """``parts`` are no longer this worker's: forget their carried events."""
        for tp in parts:
            key = (tp.topic, tp.partition)
            self._revoked.add(key)
            self._unchecked.discard(key)
            self._sought.pop(key, None)
            self._floor.pop(key, None)
            self._pending.pop(key, None)
            self.pausing.revoked(key)
        self._skipped = [m for m in self._skipped if key_of(m) not in self._revoked]
        self.carry = self.carry.kept(lambda m: key_of(m) not in self._revoked)
        log.info("partitions_revoked", partitions=[tp.partition for tp in parts])

    def on_lost(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Rebalance callback: ``parts`` were lost (session timeout): revoked, out of the group
        (their marks are dropped unwritten: the group is no longer ours to write to)."""
        if self.ledger is not None:
            self.ledger.forget([(tp.topic, tp.partition) for tp in parts])
        self._drop(parts)
        self.health.in_group = False

    def owns(self, m: Record) -> bool:
        """Whether ``m`` is still this worker's to commit: it is the event its partition
        delivered at its offset in the current assignment, not committed yet.

        Not when its partition was revoked (even if assigned back while ``m`` was in flight:
        the partition is fetched again from the committed offset, and committing ``m`` too
        would duplicate it), nor when a later fetch of the same offset replaced it (a
        librdkafka rewind: the newer event is the one kept), nor once an event at or past its
        offset was committed (a rewind delivering it again after its commit)."""
        return self._pending.get(key_of(m), {}).get(m.offset()) is m

    def ranges_done(self) -> bool:
        """Replay mode: every partition consumed up to its end."""
        return self.ranges is not None and self.ranges.done()

    @property
    def paused(self) -> bool:
        """Whether fetching is paused (the carry list is full, or the store is down)."""
        return self.pausing.paused

    # --- batches -----------------------------------------------------------------------------
    def next_batch(self, wait: bool = True) -> list[Record]:
        """The next batch: up to ``max_batch`` events, carried ones first (oldest first).

        Args:
            wait: wait for the batch to fill, up to ``max_wait_ms`` from its first event
                (carried events have waited already); False: only what is carried or already
                fetched (the batch that starts computing while the previous one commits).
        """
        if self.pausing.resume_due and len(self.carry) < self.max_batch:
            self.pausing.resume(self.consumer)
        t0 = time.perf_counter()
        since = self.carry.since
        msgs, self.carry = self.carry.split(self.max_batch)
        if len(msgs) < self.max_batch:
            wait_s = 0.0
            if wait:
                wait_s = self.worker.max_wait_ms / 1000.0
                if msgs:
                    wait_s = max(0.0, wait_s - (time.monotonic() - since))
            got = self._delivered([Record.of(m) for m in
                                   self.consumer.consume(self.max_batch - len(msgs), wait_s)])
        else:
            got = []
        if (msgs or got) and wait:
            self.metrics.stage.labels("fill").observe(time.perf_counter() - t0)
        return self._isolate(self._usable(msgs + self._records(got)))

    def _isolate(self, msgs: list[Record]) -> list[Record]:
        """Read the attempt marks of the partitions seen for the first time since their
        assignment (:meth:`AttemptLedger.assign`); if an event must run alone (its partition
        restarted where a batch never committed), the batch is that event, its try counted
        (:meth:`AttemptLedger.trying`), and the others go back in front of the carry list, in
        fetch order."""
        if self.ledger is None or not msgs:
            return msgs
        self.ledger.assign(self.consumer, dict.fromkeys(key_of(m) for m in msgs))
        alone = next((i for i, m in enumerate(msgs) if self.ledger.isolated(m)), None)
        if alone is None:
            return msgs
        self.carry = self.carry.in_front(msgs[:alone] + msgs[alone + 1:])
        self.ledger.trying(self.consumer, msgs[alone])
        return [msgs[alone]]

    def prefetch(self, timeout_s: float) -> None:
        """Poll while a batch computes: move what is fetched into the carry list (up to
        ``max_batch``), pausing the partitions only once it is full (librdkafka waits 0.5-1 s
        before fetching after a resume, so pausing every batch would stall the pipeline). Also
        serves rebalance callbacks and keeps the consumer in its group."""
        self.health.tick()
        if len(self.carry) >= self.max_batch:
            self.pausing.pause(self.consumer)
        m = self.consumer.poll(timeout_s)
        while m is not None:
            r = Record.of(m)
            if isinstance(r, Record):  # not an error event
                for kept in self._delivered([r]):
                    if isinstance(kept, Record):
                        self.carry = self.carry.added(kept)
            if len(self.carry) >= self.max_batch:
                break
            m = self.consumer.poll(0)

    def wait(self, futs: Sequence[Future]) -> None:
        """Wait for ``futs``, returning as soon as they are done, prefetching every
        ``poll_interval_ms`` meanwhile (:meth:`prefetch`)."""
        pending = [f for f in futs if not f.done()]
        while pending:
            pending = list(wait(pending, timeout=self.worker.poll_interval_ms / 1000.0).not_done)
            self.prefetch(0.0)

    def redo(self, msgs: Sequence[Record]) -> None:
        """Put the events of a failed batch (and of the batch behind it), ``msgs`` in fetch
        order, back in front of the carry list, so the next batches redo them; no seek.

        Every event read and not committed is in ``msgs`` or already in the carry list (what was
        prefetched after them), and the consumer's position is past all of them, so the
        partitions go on in offset order with nothing skipped or read twice. Events this worker
        no longer owns (:meth:`owns`) are dropped (their partition's owner starts at the
        committed offset). In replay mode
        their partitions count as not done again. At most two batches plus the carry are held:
        ``3 * max_batch`` events.

        A rewind by ``seek`` instead left one event of 24 never redone under load (twice on CI),
        even with a check that re-seeked when a partition came back past its rewind offset:
        librdkafka's ``seek`` is asynchronous and its failures unreported (librdkafka #2256,
        confluent-kafka-python #1270).
        """
        if self._skipped:
            self._rescue(msgs)
        else:
            self.carry = self.carry.in_front(msgs).kept(self.owns)
        if self.ranges is not None:
            self.ranges.reopen(msgs)
        self.metrics.redone.inc(len(msgs))

    def _rescue(self, msgs: Sequence[Record]) -> None:
        """Redo ``msgs`` with the events a batch would have skipped (:meth:`skipped`): the
        carry list becomes all of them, one event per offset, in offset order within each
        partition, so the next batches take every partition from its lowest held offset
        (an order by arrival could put a batch past them again, e.g. after librdkafka fetched
        a partition a second time from lower down, and redo it for ever)."""
        merged: dict[tuple[str, int, int], Record] = {}
        for m in (*msgs, *self._skipped, *self.carry.msgs):
            if self.owns(m):
                merged.setdefault((m.topic(), m.partition(), m.offset()), m)
        self._skipped = []
        since = self.carry.since if self.carry.msgs else time.monotonic()
        self.carry = Carry(tuple(merged[k] for k in sorted(merged)), since)

    def skipped(self, msgs: Sequence[Record]) -> list[Record]:
        """The events a commit of ``msgs`` (a batch about to be committed) would skip: events
        of its partitions delivered in this assignment, below the batch's last offset there,
        neither in the batch nor committed. Committing the batch would move the partition's
        offset past them and lose them, so the caller does not commit it; they go into the
        batch's redo (:meth:`redo`, in offset order) and an error is logged (offsets only).

        No path of the worker is known to leave such an event behind; CI lost a partition's
        first four events this way twice (2026-12-05 and 2026-12-06, a later event of the
        partition committed) with no log line from the start check
        (:meth:`_check_starts`), so the commit checks it instead of trusting the paths.
        """
        batch: dict[Key, set[int]] = {}
        for m in msgs:
            batch.setdefault(key_of(m), set()).add(m.offset())
        lost = []
        for key, offsets in batch.items():
            last = max(offsets)
            lost += [m for off, m in sorted(self._pending.get(key, {}).items())
                     if off < last and off not in offsets]
        if lost:
            gone: dict[int, list[int]] = {}
            for m in lost:
                gone.setdefault(m.partition(), []).append(m.offset())
            log.error("uncommitted_events_skipped", partitions=gone,
                      hint="a batch would have committed past events delivered to this worker "
                           "and never committed: it is redone with them")
            self._skipped = [*self._skipped, *lost]
        return lost

    def committed(self, msgs: Sequence[Record]) -> None:
        """``msgs`` are committed: their partitions' events up to the last of them are no
        longer pending, and events below it that librdkafka delivers again (a rewind, e.g.
        after a resume: librdkafka #4637) are dropped as they come (:meth:`_check_starts`,
        ``committed_events_fetched_again``) instead of being done and committed twice."""
        last: dict[Key, int] = {}
        for m in msgs:
            last[key_of(m)] = max(last.get(key_of(m), -1), m.offset())
        for key, off in last.items():
            self._floor[key] = max(self._floor.get(key, -1), off + 1)
            held = self._pending.get(key)
            if held:
                for o in [o for o in held if o <= off]:
                    del held[o]

    def pause(self) -> None:
        """Stop fetching (the store is down, or the processor breaker is open): see
        :class:`PartitionPause`."""
        self.pausing.pause(self.consumer)

    def resume_if_room(self) -> None:
        """Fetch again unless the carry list holds a full batch."""
        if len(self.carry) < self.max_batch:
            self.pausing.resume(self.consumer)

    # --- what was fetched --------------------------------------------------------------------
    def _delivered(self, msgs: Sequence[Record | Message]) -> list[Record | Message]:
        """Check where the partitions assigned anew start (:meth:`_check_starts`), record the
        fetch delay of delivered events, tell the pause who is fetching, and keep each event as
        pending (:meth:`owns`, :meth:`skipped`); returns ``msgs`` less the events of partitions
        sent back to their committed offset and those below a partition's floor
        (:meth:`_above_floor`)."""
        msgs = self._above_floor(self._check_starts(msgs))
        now_ms = time.time() * 1000.0
        for m in msgs:
            if isinstance(m, Record):  # not an error event
                self.metrics.fetch_delay.observe(age_ms(m, now_ms) / 1000.0)
                self.pausing.delivered(self.consumer, key_of(m))
                self._pending.setdefault(key_of(m), {})[m.offset()] = m
        return list(msgs)

    def _check_starts(self, msgs: Sequence[Record | Message]) -> list[Record | Message]:
        """The first event a partition delivers after each assignment must be at the group's
        committed offset (or, never committed, at the log start).

        * **Behind it** (the group's committed events again: duplicates), the events below the
          start are dropped as they come (the partition's floor, raised by each commit here:
          :meth:`committed`); no seek.
        * **Ahead of it** (events skipped: a loss), the partition is sent back (``seek``) and
          the events of that fetch are held aside. Its next event tells what happened
          (:meth:`_after_seek`): before the offset it had fetched from, the skipped events come
          now (``fetch_position_corrected``); at that offset again, nothing but transaction
          markers or aborted or deleted records lay between (``fetch_start_gap``, info); past
          the held events, the seek did not take (librdkafka reports no seek failure): it is
          sought again, up to :data:`SEEK_TRIES` times, then the held events are released in
          front of the fetch and ``fetch_position_not_corrected`` logged with the range
          skipped, so the check itself never drops an event it does not get back.

        Why: on CI (2026-12-05) a partition revoked while paused and assigned back lost its
        first four events while its later ones committed (``tests/integration/test_worker.py``,
        ``test_partitions_revoked_while_paused_are_fetched_when_they_come_back``); the
        librdkafka path that restarted it past its committed offset was not reproduced here.
        So the start is checked, not trusted: one committed-offset request per partition per
        assignment (:func:`~streams.worker.attempts.start_offsets`). It cannot help where the
        committed offset itself were wrong.
        """
        firsts: dict[Key, Record] = {}
        for x in msgs:
            if isinstance(x, Record) and (key_of(x) in self._unchecked
                                          or key_of(x) in self._sought):
                firsts.setdefault(key_of(x), x)
        if not firsts:
            return list(msgs)
        back: set[Key] = set()
        released: list[Record] = []
        sought = [k for k in firsts if k in self._sought]
        for key in sought:
            drop, free = self._after_seek(key, [x for x in msgs if isinstance(x, Record)
                                                and key_of(x) == key])
            if drop:
                back.add(key)
            released += free
        fresh = [k for k in firsts if k not in sought]
        self._unchecked.difference_update(fresh)
        starts: dict[Key, int] = {}
        if fresh:
            try:
                starts = {key: offset for key, offset, _ in start_offsets(self.consumer, fresh)}
            except KafkaException as ex:
                log.warning("start_offsets_unavailable", error=str(ex.args[0]),
                            partitions=[p for _, p in fresh])
        for key in fresh:
            start = starts.get(key)
            fetched = firsts[key].offset()
            if start is None or fetched == start:
                continue
            if fetched < start:
                log.warning("fetch_position_corrected", partition=key[1], committed=start,
                            fetched=fetched)
                self._floor[key] = start
            elif self._seek(key, start):
                held = tuple(x for x in msgs if isinstance(x, Record) and key_of(x) == key)
                self._sought[key] = _Seek(start, fetched, 1, held)
                back.add(key)
        return [*released, *(x for x in msgs if not (isinstance(x, Record) and key_of(x) in back))]

    def _above_floor(self, msgs: Sequence[Record | Message]) -> list[Record | Message]:
        """``msgs`` less the events below their partition's floor: the group's committed offset
        where the first fetch after an assignment started below it (:meth:`_check_starts`),
        raised by each commit here (:meth:`committed`). Such events were committed already;
        one warning per fetch names their offsets."""
        if not self._floor:
            return list(msgs)
        out: list[Record | Message] = []
        again: dict[int, list[int]] = {}  # partition -> offsets below its floor
        for x in msgs:
            if isinstance(x, Record) and x.offset() < self._floor.get(key_of(x), -1):
                again.setdefault(x.partition(), []).append(x.offset())
                continue
            out.append(x)
        if again:
            log.warning("committed_events_fetched_again",
                        partitions={p: [min(o), max(o), len(o)] for p, o in again.items()},
                        hint="events below the group's committed offset came again (first, "
                             "last, count): dropped, not done twice")
        return out

    def _after_seek(self, key: Key, got: list[Record]) -> tuple[bool, list[Record]]:
        """``got`` are the events ``key`` delivered in this fetch, the first since it was sent
        back to its start (:meth:`_check_starts`): whether to drop them (sought again), and the
        held events to release in front of them."""
        sk = self._sought[key]
        o = got[0].offset()
        if o <= sk.fetched:
            del self._sought[key]
            if o < sk.fetched:
                log.warning("fetch_position_corrected", partition=key[1], committed=sk.start,
                            fetched=sk.fetched, now=o)
            else:
                log.info("fetch_start_gap", partition=key[1], committed=sk.start, fetched=o)
            return False, []
        if sk.tries < SEEK_TRIES and self._seek(key, sk.start):
            self._sought[key] = _Seek(sk.start, sk.fetched, sk.tries + 1, sk.held + tuple(got))
            return True, []
        del self._sought[key]
        log.error("fetch_position_not_corrected", partition=key[1], committed=sk.start,
                  fetched=sk.fetched, skipped=sk.fetched - sk.start, tries=sk.tries)
        return False, list(sk.held)

    def _seek(self, key: Key, offset: int) -> bool:
        """Seek ``key`` to ``offset``; whether librdkafka took the request (it reports no later
        failure)."""
        try:
            self.consumer.seek(TopicPartition(*key, offset))
        except KafkaException as ex:
            log.warning("fetch_position_not_corrected", error=str(ex.args[0]), partition=key[1])
            return False
        return True

    def _records(self, got: Sequence[Record | Message]) -> list[Record]:
        """The records of a fetch (:meth:`Record.of` made each one a :class:`Record`), its error
        events dropped (logging all but partition EOF)."""
        out = []
        for m in got:
            if isinstance(m, Record):
                out.append(m)
                continue
            err = m.error()
            if err is None or err.code() != KafkaError._PARTITION_EOF:
                log.warning("consume_error", error=str(err))
        return out

    def _usable(self, msgs: list[Record]) -> list[Record]:
        """Drop, in replay mode, events past the range."""
        out = [m for m in msgs if self.ranges is None or self.ranges.within(m)]
        if len(out) < len(msgs):  # past the range: never committed, so not pending either
            kept = {id(m) for m in out}
            for m in msgs:
                if id(m) not in kept:
                    self._pending.get(key_of(m), {}).pop(m.offset(), None)
        self.lag.update(self.consumer)
        return out
