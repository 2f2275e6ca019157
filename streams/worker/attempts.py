"""Attempts: counting the worker's starts at a partition's committed offset, across restarts.

A record that kills the worker process (a native crash in a decoder or ONNX Runtime, an
out-of-memory kill, a hang that gets the pod restarted) leaves nothing committed: the restarted
worker reads the same record again and dies again, for ever. No in-memory counter survives
that, so the count is kept where the offset is: in the **metadata of the consumer group's
committed offset** (a string Kafka stores with each committed offset, OffsetCommit's
``metadata``; up to 4096 bytes by default, ``offset.metadata.max.bytes``). A :class:`Mark`
says "at offset ``offset`` of this partition, ``attempts`` tries; isolate events up to
``isolate_end``":

* every transaction writes, with the offsets it commits (``send_offsets_to_transaction``), the
  mark of the next offset: ``Mark(next, 1)`` (a batch holding it is tried next), or while the
  partition is isolated ``Mark(next, 0, isolate_end)`` (not tried alone yet);
* on assignment, :meth:`AttemptLedger.assign` reads the committed offset and its mark. A
  ``Mark(offset, 1)`` at that very offset means the last owner began a batch there and never
  committed past it (a crash, a kill, a hang): the partition is **isolated** up to
  ``offset + 2 * max_batch`` (the loop computes the next batch while the current one stores
  and commits, so a start may have read two batches past its committed offset, and the crash
  may have been in the second; issue 43): its events run one per batch, so the next crash
  names its record;
* before an isolated event runs, :meth:`AttemptLedger.trying` counts the try in its mark (a
  plain consumer commit at the same offset, which moves nothing; once per process, so a batch
  redone after an outage is not counted again). A crash of a process running other partitions'
  events counts nothing against this one;
* an isolated record tried alone ``max_attempts`` times, each ending the process, is not tried
  again: it becomes a ``POISON`` dead letter (:meth:`AttemptLedger.poisoned`), and the
  partition goes on;
* a clean stop or a revocation writes an empty mark at the last committed offset
  (:meth:`AttemptLedger.release`), so the next owner does not take a handover for a crash.

With ``max_attempts`` 2, a record that crashes the worker is a dead letter at the fourth start:
one crash in its batch, two alone. A kill from outside (``kill -9``, a node lost) is counted
like a crash, but only against the record that was running alone at the time.

The offset a mark is written at is always one the group has committed, or the log start for a
partition never committed (where a new member starts, ``auto.offset.reset=earliest``): a plain
commit never moves an offset. A consumer reading committed offsets with
``isolation.level=read_committed`` gets them stable (KIP-447: a transactional commit still
pending is waited for), so the offset read at assignment is the latest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from streams.logs import log
from streams.worker.record import Record

Key = tuple[str, int]
"""A partition as ``(topic, partition)``: how every part of the worker names one."""


def key_of(m: Record) -> Key:
    """The record's partition as ``(topic, partition)``."""
    return (m.topic(), m.partition())

#: how long the assignment's committed-offset and watermark requests may take (s)
REQUEST_TIMEOUT_S = 10.0


def start_offsets(consumer: Any, keys: Iterable[Key]) -> list[tuple[Key, int, str | None]]:
    """Where a member assigned each of ``keys`` now starts: ``(key, offset, metadata)`` with the
    consumer group's committed offset and its metadata, or for a partition never committed its
    log start (``auto.offset.reset=earliest``) and None. A partition the coordinator answered
    with an error for is left out (neither committed nor never committed is known).

    The log start is the one the partition's last fetch response carried (librdkafka caches
    it); only where none has come yet is it asked for. Asking cost about 0.5 s per partition
    (the request waits behind the consumer's own fetch, ``fetch.wait.max.ms``): measured 3.0 s
    for 6 partitions, twice per assignment (the start check and the attempt ledger), so the
    first batch after a rebalance waited about 6 s.

    Raises:
        KafkaException: the group coordinator or a partition leader did not answer within
            :data:`REQUEST_TIMEOUT_S`.
    """
    out = []
    for tp in consumer.committed([TopicPartition(t, p) for t, p in keys],
                                 timeout=REQUEST_TIMEOUT_S):
        key = (tp.topic, tp.partition)
        if tp.error is not None:
            continue
        if tp.offset >= 0:
            out.append((key, tp.offset, tp.metadata))
        else:  # never committed: a member starts at the log start
            low = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)[0]
            if low < 0:  # no fetch response yet
                low = consumer.get_watermark_offsets(TopicPartition(*key),
                                                     timeout=REQUEST_TIMEOUT_S)[0]
            out.append((key, low, None))
    return out


@dataclass(frozen=True, slots=True)
class Mark:
    """The attempt record of one partition, kept in its committed offset's metadata.

    Attributes:
        offset: the committed offset it was written at: the next record to try.
        attempts: not isolated: 1 (a batch holding ``offset`` is tried); isolated: how many
            times the record at ``offset`` was tried alone.
        isolate_end: events at offsets below this run one per batch (None: none).
    """

    offset: int
    attempts: int
    isolate_end: int | None = None

    def encode(self) -> str:
        """The metadata string: compact JSON ``{"v":1,"o":offset,"a":attempts[,"e":end]}``."""
        obj: dict[str, int] = {"v": 1, "o": self.offset, "a": self.attempts}
        if self.isolate_end is not None:
            obj["e"] = self.isolate_end
        return json.dumps(obj, separators=(",", ":"))

    @classmethod
    def decode(cls, metadata: str | None) -> Mark | None:
        """The mark in a committed offset's ``metadata``; None for an empty or foreign one."""
        try:
            obj = json.loads(metadata or "")
            if obj.get("v") != 1:
                return None
            end = obj.get("e")
            return cls(int(obj["o"]), int(obj["a"]), None if end is None else int(end))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


class AttemptLedger:
    """The marks of the partitions a worker holds (module doc).

    Args:
        max_attempts: tries alone, each ending the process, after which a record is a
            ``POISON`` dead letter (``WorkerSettings.poison_attempts``).
        max_batch: events per batch at most: a crashed start may have read two batches.

    Attributes:
        marks: partition -> its current mark, for the partitions assigned and seen.
    """

    def __init__(self, max_attempts: int, max_batch: int) -> None:
        self.max_attempts = max_attempts
        self.max_batch = max_batch
        self.marks: dict[Key, Mark] = {}
        self._tried: set[tuple[Key, int]] = set()  # (partition, offset) tried alone here
        self._own: dict[Key, int] = {}  # the offset of the last mark this process wrote

    def assign(self, consumer: Any, keys: Iterable[Key]) -> None:
        """Read the committed offset and mark of each of ``keys`` (partitions without a mark
        here yet) and write the mark of this start (a plain commit at the same offset): a batch
        begun at that offset and never committed isolates the partition. A partition never
        committed starts at its log start. Errors are logged and leave the partition uncounted
        (it then runs as if fresh)."""
        todo = [k for k in keys if k not in self.marks]
        if not todo:
            return
        try:
            write = []
            for key, offset, metadata in start_offsets(consumer, todo):
                mark = self._next_start(key, Mark.decode(metadata), offset)
                self.marks[key] = self._own_mark(key, mark)
                write.append(TopicPartition(*key, mark.offset, metadata=mark.encode()))
                if mark.isolate_end is not None:
                    log.warning("partition_restarted_at_same_offset", partition=key[1],
                                offset=mark.offset, tried_alone=mark.attempts,
                                isolate_to=mark.isolate_end,
                                poison=mark.attempts >= self.max_attempts)
            consumer.commit(offsets=write, asynchronous=False)
        except KafkaException as ex:
            log.warning("attempt_marks_unavailable", error=str(ex.args[0]),
                        partitions=[p for _, p in todo])

    def _next_start(self, key: Key, prev: Mark | None, offset: int) -> Mark:
        """The mark of a start at ``offset`` after ``prev`` (the committed one). A mark this
        process wrote itself (the partition lost and assigned back, e.g. across a broker
        restart) is no crash."""
        if prev is None or prev.offset != offset or (
                prev.isolate_end is None and self._own.get(key) == offset):
            return Mark(offset, 1)
        if prev.isolate_end is not None and prev.isolate_end > offset:
            return prev  # isolated already: only tries alone count (:meth:`trying`)
        # its batch never committed, nor the one the loop computed behind it
        return Mark(offset, 0, offset + 2 * self.max_batch)

    def trying(self, consumer: Any, m: Record) -> None:
        """``m`` runs alone now (isolated, not poison): count the try in its partition's mark,
        once per process (a plain commit at the same offset, synchronous, before it runs)."""
        key = key_of(m)
        mark = self.marks.get(key)
        if (mark is None or mark.isolate_end is None or (key, m.offset()) in self._tried
                or self.poisoned(m)):
            return
        self._tried.add((key, m.offset()))
        tries = mark.attempts if mark.offset == m.offset() else 0
        mark = self.marks[key] = self._own_mark(key, Mark(m.offset(), tries + 1, mark.isolate_end))
        try:
            consumer.commit(offsets=[TopicPartition(*key, mark.offset, metadata=mark.encode())],
                            asynchronous=False)
        except KafkaException as ex:
            log.warning("attempt_mark_not_written", error=str(ex.args[0]), partition=key[1])

    def isolated(self, m: Record) -> bool:
        """Whether ``m`` must run in a batch of its own (its partition restarted at an offset
        below it, within ``isolate_end``)."""
        mark = self.marks.get(key_of(m))
        return mark is not None and mark.isolate_end is not None and m.offset() < mark.isolate_end

    def poisoned(self, m: Record) -> int:
        """How many times ``m`` was tried alone, each ending the process, when that reached
        ``max_attempts`` (``m`` is then a ``POISON`` dead letter); else 0."""
        key = key_of(m)
        mark = self.marks.get(key)
        if (mark is None or mark.isolate_end is None or mark.offset != m.offset()
                or mark.attempts < self.max_attempts or (key, m.offset()) in self._tried):
            return 0
        return mark.attempts

    def commit_marks(self, offsets: Sequence[TopicPartition]) -> list[TopicPartition]:
        """``offsets`` (what a transaction commits) with the mark each writes: a batch begun at
        the next offset, or while below the partition's ``isolate_end`` an isolated offset not
        tried alone yet."""
        out = []
        for tp in offsets:
            out.append(TopicPartition(tp.topic, tp.partition, tp.offset,
                                      metadata=self._after(tp).encode()))
        return out

    def _after(self, tp: TopicPartition) -> Mark:
        prev = self.marks.get((tp.topic, tp.partition))
        end = prev.isolate_end if prev is not None else None
        if end is not None and end > tp.offset:
            return Mark(tp.offset, 0, end)  # isolated: not tried alone yet
        return Mark(tp.offset, 1)

    def committed(self, offsets: Sequence[TopicPartition]) -> None:
        """A transaction committed ``offsets`` (with :meth:`commit_marks`' marks): they are the
        partitions' marks now, and the tries alone below them are forgotten (never fetched
        again: issue 43, they stayed for the life of the process)."""
        for tp in offsets:
            key = (tp.topic, tp.partition)
            self.marks[key] = self._own_mark(key, self._after(tp))
        if self._tried:
            below = {(tp.topic, tp.partition): tp.offset for tp in offsets}
            self._tried = {(k, o) for k, o in self._tried if o >= below.get(k, o)}

    def _own_mark(self, key: Key, mark: Mark) -> Mark:
        """Note that this process wrote ``mark`` for ``key``; returns it."""
        self._own[key] = mark.offset
        return mark

    def release(self, consumer: Any, keys: Iterable[Key]) -> None:
        """A clean stop or revocation of ``keys``: write an empty mark at each one's last
        committed offset and forget it and its tries alone (errors are logged: the next owner
        then isolates its first events for nothing, nothing worse)."""
        tps = [TopicPartition(*k, self.marks[k].offset, metadata="")
               for k in keys if k in self.marks]
        for k in keys:
            self.marks.pop(k, None)
        gone = set(keys)
        self._tried = {(k, o) for k, o in self._tried if k not in gone}
        if not tps:
            return
        try:
            consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as ex:
            log.warning("attempt_marks_not_released", error=str(ex.args[0]),
                        partitions=[tp.partition for tp in tps])

    def forget(self, keys: Iterable[Key]) -> None:
        """``keys`` were lost (session timeout): drop their marks without writing."""
        for k in keys:
            self.marks.pop(k, None)

    @property
    def isolating(self) -> bool:
        """Whether any partition held runs events one per batch now."""
        return any(m.isolate_end is not None for m in self.marks.values())
