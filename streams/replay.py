"""Replay / backfill: re-process the uploads of a time range into a side results topic, then diff.

The range ``[from, to)`` is resolved per partition with ``offsets_for_times``; the end is capped
at the high watermark captured at start, so a replay always stops. A :class:`~streams.worker.Worker`
in replay mode (assigned partitions, its own consumer group and transactional id) writes results
to the side topic; then :func:`diff_results` compares them with the original results, read from
the results topic from the window's start (less :data:`RESULTS_LOOKBACK_MS`), not from its
beginning, and streamed: a long-lived results topic costs neither the time nor the memory of
reading it whole. Verdicts and reasons are compared for every task; what else changed, each
task's spec says (:meth:`processors.task.TaskSpec.compare`, e.g. the IoU of what it found).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import TopicPartition

from processors import registry
from processors.base import Processor
from schemas import codec
from schemas.models import VerificationResult
from schemas.reasons import ReasonCode
from streams.errors import KafkaSetupError, StorageUnavailable, StoreRefused, StreamsError
from streams.kafka import consumer, read_to_end, setup_call
from streams.settings import KafkaSettings, Settings

#: epoch values below this are taken as seconds and refused (ms since 1970 passed it in 1973)
MIN_EPOCH_MS = 100_000_000_000

RESULTS_LOOKBACK_MS = 300_000
"""How far before a replay window's start the original results are read from (ms). A result is
produced after its upload, but its Kafka timestamp (CreateTime) is the worker's clock, which may
run a little behind the uploader's; 5 min covers any clock skew NTP leaves between hosts."""


class LiveTargetError(StreamsError):
    """A replay was pointed at the live results or dead-letter topic, or the live consumer
    group, without ``allow_live`` (issue 43: downstream readers got a second result per
    upload)."""


class ReplayGroupError(StreamsError):
    """A replay's ``--group`` has committed offsets outside this window's: it replayed another
    window, and going on from them would skip or repeat part of this one (a trial replayed a
    window again after a wider one with the same group: 9 events gave 15 results)."""


def live_targets(s: Settings, results_topic: str, group: str) -> list[str]:
    """What of a replay's side results topic (its dead letters go to ``<side>.dlq``) and
    consumer group is the live worker's: ``results topic ...``, ``dead-letter topic ...``,
    ``consumer group ...`` (empty when none)."""
    k = s.kafka
    hits = []
    if results_topic in (k.results_topic, k.dlq_topic):
        hits.append(f"results topic {results_topic}")
    if f"{results_topic}.dlq" in (k.results_topic, k.dlq_topic):
        hits.append(f"dead-letter topic {results_topic}.dlq")
    if group == k.group_id:
        hits.append(f"consumer group {group}")
    return hits


class TimeArgError(StreamsError):
    """A ``--from``/``--to`` value is neither ISO-8601 nor epoch milliseconds."""


def parse_time_ms(value: str) -> int:
    """ISO-8601 (``2026-11-29T17:00:00Z``; no zone = UTC) or epoch ms -> epoch ms.

    Raises:
        TimeArgError: unparseable, or an integer that looks like epoch *seconds* (< 1e11).
    """
    v = value.strip()
    if re.fullmatch(r"\d+", v):
        n = int(v)
        if n < MIN_EPOCH_MS:
            raise TimeArgError(f"{value!r} looks like epoch seconds; give epoch milliseconds "
                               f"({n * 1000}) or ISO-8601")
        return n
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError as e:
        raise TimeArgError(f"{value!r} is neither ISO-8601 nor epoch milliseconds") from e
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def offset_ranges(k: KafkaSettings, topic: str, from_ms: int, to_ms: int,
                  timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """Per partition of ``topic``: ``[start, end)`` offsets of records with timestamp in
    ``[from_ms, to_ms)``.

    ``end`` is capped at the high watermark captured now, then brought back to just after the
    last record a read_committed consumer receives in the range (:func:`_delivered_end`): on a
    topic written with transactions the range may end on a commit or abort marker or on aborted
    records, which no such consumer ever receives, and a replay waiting for its last offset
    would wait for ever. A partition with nothing in range gets ``start == end``.

    Raises:
        KafkaSetupError: the metadata or the offsets could not be read
            (:func:`streams.kafka.setup_error`; ``BrokerUnavailable``: no broker answered).
        StreamsError: see :func:`_delivered_end`.
    """
    c = consumer(k, "cardstream-offsets-probe")
    try:
        with setup_call(f"reading the offsets of {topic}", k.bootstrap_servers):
            md = c.list_topics(topic, timeout=timeout_s)
            parts = sorted(md.topics[topic].partitions)
            starts = c.offsets_for_times([TopicPartition(topic, p, from_ms) for p in parts],
                                         timeout_s)
            ends = c.offsets_for_times([TopicPartition(topic, p, to_ms) for p in parts],
                                       timeout_s)
            out = {}
            for p, a, b in zip(parts, starts, ends, strict=True):
                _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
                start = a.offset if a.offset >= 0 else high  # -1: no record at/after from
                end = min(max(b.offset if b.offset >= 0 else high, start), high)
                out[p] = (start, _delivered_end(c, topic, p, start, end, timeout_s))
        return out
    finally:
        c.close()


def resume_ranges(k: KafkaSettings, topic: str, ranges: Mapping[int, tuple[int, int]],
                  timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """``ranges`` (partition -> ``[start, end)`` of ``topic``) less what the consumer group
    ``k.group_id`` has already committed: a replay stopped early and started again with the same
    group goes on from its last committed batch instead of replaying (and writing to its side
    topic) again; a partition committed at ``end`` is done. A partition without a committed
    offset (a new group) keeps its range.

    Raises:
        ReplayGroupError: a partition's committed offset is outside ``[start, end]``: the group
            replayed another window (nothing was read or written).
        KafkaSetupError: the committed offsets could not be read
            (:func:`streams.kafka.setup_error`; ``BrokerUnavailable``: no broker answered).
    """
    c = consumer(k, k.group_id)  # never subscribes: reads the group's offsets without joining it
    try:
        with setup_call(f"reading the offsets committed by group {k.group_id}",
                        k.bootstrap_servers):
            committed = c.committed([TopicPartition(topic, p) for p in ranges],
                                    timeout=timeout_s)
    finally:
        c.close()
    out = dict(ranges)
    for tp in committed:
        a, b = ranges[tp.partition]
        if tp.offset < 0:  # nothing committed on this partition
            continue
        if not a <= tp.offset <= b:
            raise ReplayGroupError(
                f"the group {k.group_id} replayed another window: {topic}[{tp.partition}] is "
                f"committed at offset {tp.offset}, outside this window's [{a}, {b}]; give a new "
                "--group to replay this window, or this group's own window to go on")
        out[tp.partition] = (tp.offset, b)
    return out


def _delivered_end(c: Any, topic: str, p: int, start: int, end: int, timeout_s: float) -> int:
    """One past the last offset in ``[start, end)`` of partition ``p`` that the read_committed
    consumer ``c`` receives (``start`` when none): the log's tail is read back from ``end``,
    64 offsets first, eight times more each time nothing is received, until ``c``'s position
    reaches ``end`` (it passes markers and aborted records without delivering them).

    Raises:
        StreamsError: the position did not reach ``end`` within ``timeout_s`` of no progress.
    """
    back = 64
    while start < end:
        lo = max(start, end - back)
        c.assign([TopicPartition(topic, p, lo)])
        last, pos, moved = None, lo, time.monotonic()
        while pos < end:
            for m in c.consume(500, 0.2):
                if m.error() is None and m.offset() < end:
                    last = m.offset()
            now = c.position([TopicPartition(topic, p)])[0].offset
            if now > pos:
                pos, moved = now, time.monotonic()
            elif time.monotonic() - moved > timeout_s:
                raise StreamsError(f"{topic}[{p}]: reading offsets {lo}..{end} stopped at {pos}")
        if last is not None:
            return last + 1
        if lo == start:
            return start
        back *= 8
    return end


@dataclass
class Diff:
    """Replay vs original results.

    Attributes:
        compared: uploads present in both.
        missing_original: replayed uploads with no original result.
        stale_original: uploads whose original answer was ``STALE`` (past its deadline, no
            model ran; issue 42): a replay applies no deadline, so they are not compared.
        verdict_changed: ``[{upload_id, before, after}]``.
        reasons_changed: ``[{upload_id, before, after}]``.
        measures: measure -> upload -> value, for the uploads whose task's spec measured it on
            both payloads (:meth:`~processors.task.TaskSpec.compare`, e.g. an IoU, 0..1, of
            what was found before and after).
    """

    compared: int = 0
    missing_original: list[str] = field(default_factory=list)
    stale_original: list[str] = field(default_factory=list)
    verdict_changed: list[dict[str, Any]] = field(default_factory=list)
    reasons_changed: list[dict[str, Any]] = field(default_factory=list)
    measures: dict[str, dict[str, float]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-able report: counts, ``<measure>_mean`` and ``<measure>_min`` for every measure
        of every registered task (None where no upload had it), the changed uploads."""
        names = dict.fromkeys([m for t in registry.specs() for m in t.measures] + [*self.measures])
        stats: dict[str, float | None] = {}
        for m in names:
            vs = list(self.measures.get(m, {}).values())
            stats[f"{m}_mean"] = round(sum(vs) / len(vs), 4) if vs else None
            stats[f"{m}_min"] = round(min(vs), 4) if vs else None
        return {
            "compared": self.compared,
            "missing_original": len(self.missing_original),
            "stale_original": len(self.stale_original),
            "verdicts_changed": len(self.verdict_changed),
            "reasons_changed": len(self.reasons_changed),
            **stats,
            "changed": self.verdict_changed + [r for r in self.reasons_changed
                                               if r["upload_id"] not in
                                               {v["upload_id"] for v in self.verdict_changed}],
        }


def latest_by_upload(results: Iterable[VerificationResult]) -> dict[str, VerificationResult]:
    """upload_id -> its result with the greatest ``processed_at``."""
    out: dict[str, VerificationResult] = {}
    for r in results:
        if r.upload_id not in out or r.processed_at >= out[r.upload_id].processed_at:
            out[r.upload_id] = r
    return out


@dataclass(frozen=True)
class Comparison:
    """Two verdicts on the same upload: whether the ``status`` differs, whether the sets of
    reason codes differ, and the task's ``measures`` of the two payloads
    (:meth:`~processors.task.TaskSpec.compare`)."""

    verdict_changed: bool
    reasons_changed: bool
    measures: dict[str, float]


def compare(task: str, before: tuple[Any, Sequence[str], Any],
            after: tuple[Any, Sequence[str], Any]) -> Comparison:
    """Compare two verdicts of ``task`` on one upload, each ``(status, reasons, payload)`` (the
    payload None when there is none): the replay's diff and the shadow model's
    (:mod:`streams.shadow`)."""
    (sb, rb, pb), (sa, ra, pa) = before, after
    measures = registry.spec(task).compare(pb, pa) if pb is not None and pa is not None else {}
    return Comparison(str(sb) != str(sa), sorted(map(str, rb)) != sorted(map(str, ra)),
                      dict(measures))


def diff_results(original: Iterable[VerificationResult],
                 replayed: Iterable[VerificationResult]) -> Diff:
    """Compare replayed results with the originals of the same uploads (latest of each)."""
    before, after = latest_by_upload(original), latest_by_upload(replayed)
    d = Diff()
    for uid, a in sorted(after.items()):
        b = before.get(uid)
        if b is None:
            d.missing_original.append(uid)
            continue
        if ReasonCode.STALE in b.reasons:
            d.stale_original.append(uid)
            continue
        d.compared += 1
        c = compare(str(a.task), (b.status, b.reasons, b.payload if b.task == a.task else None),
                    (a.status, a.reasons, a.payload))
        if c.verdict_changed:
            d.verdict_changed.append({"upload_id": uid, "before": str(b.status),
                                      "after": str(a.status)})
        if c.reasons_changed:
            d.reasons_changed.append({"upload_id": uid, "before": sorted(map(str, b.reasons)),
                                      "after": sorted(map(str, a.reasons))})
        for m, v in c.measures.items():
            d.measures.setdefault(m, {})[uid] = v
    return d


def run_replay(s: Settings, from_ms: int, to_ms: int, processors: Mapping[str, Processor], *,
               group: str | None = None, results_topic: str | None = None,
               model_version: str | None = None, allow_live: bool = False,
               on_total: Callable[[int], Any] | None = None,
               on_progress: Callable[[int], Any] | None = None,
               stop: threading.Event | None = None) -> dict[str, Any]:
    """Replay the uploads of ``[from_ms, to_ms)`` into a side results topic and diff with the
    originals.

    Args:
        s: app settings (the uploads and original results topics come from here).
        from_ms / to_ms: window on the uploads' Kafka timestamps (epoch ms).
        processors: task -> processor (warmed up here).
        group / results_topic: consumer group and side topic (default: ``cardstream-replay-<time>``
            and ``cardstream.results.replay-<time>``); the side dead-letter topic is ``<side>.dlq``.
        model_version: label outputs with this version instead of the processors' own.
        allow_live: let ``results_topic`` / ``group`` be the live worker's (else refused).
        on_total / on_progress: progress callbacks (number of uploads in the window; uploads done).
        stop: set (e.g. by a signal handler) to end the replay early: the batch in flight is
            finished and committed, then the report covers what was replayed so far
            (``stopped`` true; the window's other events are neither results nor dead letters
            yet: a replay of the same window with the same ``group`` goes on from there).

    Raises:
        LiveTargetError: the side topic, its ``.dlq`` or the group is the live one
            (:func:`live_targets`) and ``allow_live`` is not set; nothing was read or written.
        ReplayGroupError: ``group`` replayed another window (:func:`resume_ranges`); nothing
            was read or written.
        KeySegmentError: ``model_version`` cannot be an object-key segment
            (:func:`streams.worker.compute.check_key_segment`); nothing was read or written.
        KafkaSetupError: the window's offsets could not be read or the side topics could not be
            created (``BrokerUnavailable``: no broker answered); no event was replayed.
        StorageError: the object store did not answer before the replay began
            (:meth:`~streams.storage.Storage.check`, asked when there is something left to
            replay; nothing was written).
        StorageUnavailable: the store failed the replay's batches for
            ``s.backfill.store_outage_limit_s`` in a row; the message ends with how many of the
            window's events were replayed, and either names the side topics deleted (this run
            made them and committed nothing to them) or says how to go on (their group and
            side topic kept). Any other error of the replay's worker is raised too, after the
            same clean-up.

    Returns:
        The JSON report: ``window_ms``, ``results_topic``, ``group``, ``events`` (records in the
        window),
        ``replayed`` (results; the other events became dead letters on ``<side>.dlq``),
        ``yielded_s`` and ``yields`` (how long and how often it paused for the live workers,
        :mod:`streams.backfill`), ``stopped`` (``stop`` ended it before the window's end) and
        :meth:`Diff.summary`.
    """
    from confluent_kafka.admin import NewTopic

    from streams.backfill import LiveLag, YieldGate
    from streams.kafka import admin, create_topics
    from streams.storage import Storage
    from streams.worker import Worker
    from streams.worker.compute import check_key_segment

    if model_version is not None:
        check_key_segment("model_version", model_version)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    side = results_topic or f"cardstream.results.replay-{stamp}"
    live = live_targets(s, side, group or "")
    if live and not allow_live:
        raise LiveTargetError(f"the replay would write to the live {' and the live '.join(live)}: "
                              "downstream readers would get a second result per upload; pass "
                              "--allow-live (allow_live=True) if that is what you mean")
    k = s.kafka.model_copy(update={"results_topic": side, "dlq_topic": f"{side}.dlq",
                                   "group_id": group or f"cardstream-replay-{stamp}",
                                   "transactional_id_prefix": f"cardstream-replay-{stamp}"})
    window = offset_ranges(k, k.uploads_topic, from_ms, to_ms)
    total = sum(b - a for a, b in window.values())
    ranges = resume_ranges(k, k.uploads_topic, window) if total else window
    left = sum(b - a for a, b in ranges.values())
    storage = Storage(s.s3)
    if left:  # before anything is shown or written: a store down would stall the worker
        storage.check()
    if on_total:
        on_total(total)
    if on_progress and (before := total - left):
        on_progress(before)  # committed by an earlier run of this group
    report: dict[str, Any] = {"window_ms": [from_ms, to_ms], "results_topic": side,
                              "group": k.group_id, "events": total}
    if total == 0:
        return {**report, "replayed": 0, "yielded_s": 0.0, "yields": 0, "stopped": False,
                **Diff().summary()}
    t = s.kafka.topics
    made = [name for name, how in create_topics(
        admin(k), [NewTopic(side, t.results_partitions, t.replication_factor),
                   NewTopic(k.dlq_topic, 1, t.replication_factor)]).items() if how == "created"]
    # a backfill yields to the live workers (CARDSTREAM_BACKFILL__*): no batch while they are busy
    lag = (LiveLag(s.kafka, s.kafka.group_id, s.kafka.uploads_topic)
           if s.backfill.yield_to_live else None)
    gate = YieldGate(lag, s.backfill) if lag is not None else None
    w_settings = s.worker if gate is None else s.worker.model_copy(
        update={"max_batch": min(s.worker.max_batch, s.backfill.max_batch)})
    w = Worker(s.model_copy(update={"kafka": k, "worker": w_settings}), processors,
               storage, ranges=ranges, model_version=model_version, gate=gate,
               store_outage_limit_s=s.backfill.store_outage_limit_s)
    w.warm_up()
    failed: list[Exception] = []

    def run() -> None:
        try:
            w.run()
        except Exception as e:  # raised below, in the caller's thread
            failed.append(e)

    th = threading.Thread(target=run, name="replay-worker", daemon=True)
    th.start()
    done, stopped = 0, False
    while th.is_alive():
        th.join(0.5)
        if stop is not None and stop.is_set() and not stopped:
            stopped = True
            w.stop()  # the batch in flight is finished and committed, then run() returns
        now = w.committer.committed_events
        if on_progress and now > done:
            on_progress(now - done)
        done = now
    if lag is not None:
        lag.close()
    if failed:
        e = failed[0]
        tail = _gave_up(k, made, total - left + w.committer.committed_events, total)
        if isinstance(e, StoreRefused):
            raise StoreRefused(f"{e}; {tail}", e.code) from e
        if isinstance(e, StorageUnavailable):
            raise StorageUnavailable(f"{e}; {tail}") from e
        raise e
    replayed = list(decode_results(read_to_end(k, side)))
    ids = {x.upload_id for x in replayed}
    # the originals were produced after their uploads: read from the window's start, not the
    # whole topic, and keep only the replayed uploads' results
    since = from_ms - RESULTS_LOOKBACK_MS
    original = [r for r in decode_results(read_to_end(s.kafka, s.kafka.results_topic,
                                                      since_ms=since))
                if r.upload_id in ids]
    yielded = ({"yielded_s": round(gate.yielded_s, 1), "yields": gate.yields} if gate is not None
               else {"yielded_s": 0.0, "yields": 0})
    return {**report, "replayed": len(replayed), **yielded,
            "stopped": stopped and w.committer.committed_events < left,
            **diff_results(original, replayed).summary()}


def _gave_up(k: KafkaSettings, made: Sequence[str], done: int, total: int) -> str:
    """What a replay whose worker failed leaves, as the end of its error's message: ``done``
    of the ``total`` events of the window replayed (by this run and earlier runs of the
    group); with none, the side topics this run ``made`` (``k.results_topic`` and its
    ``.dlq``, empty) are deleted, else the group and side topic are kept to go on from."""
    from streams.kafka import admin, delete_topics

    out = f"{done} of {total} events replayed on {k.results_topic}"
    if done:
        return (f"{out}; to go on: the same command with --group {k.group_id} "
                f"--results-topic {k.results_topic}")
    if not made:
        return out
    try:
        delete_topics(admin(k), list(made))
    except KafkaSetupError as e:
        return f"{out}; the side topics it made ({', '.join(made)}) not deleted: {e}"
    return f"{out}; the side topics it made ({', '.join(made)}) deleted"


def decode_results(msgs: Iterable[Any]) -> Iterator[VerificationResult]:
    """Decode result records (lazily), skipping any that are not valid results."""
    for m in msgs:
        try:
            r = codec.decode_result(m.value())
        except Exception:
            continue
        yield r
