"""The worker's intake (unit tier): the carry list and pausing, through its public methods."""

from __future__ import annotations

import pytest

from streams.health import Health
from streams.metrics import WorkerMetrics
from streams.settings import WorkerSettings, load_settings
from streams.worker.intake import Intake
from tests.doubles import FakeConsumer, Msg


def _intake(monkeypatch: pytest.MonkeyPatch, max_batch: int = 32,
            ranges: dict[int, tuple[int, int]] | None = None) -> Intake:
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    return Intake(load_settings().kafka, WorkerSettings(max_batch=max_batch), WorkerMetrics(),
                  Health(), ranges)


def _offsets(msgs: list) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for m in msgs]


def test_a_failed_batch_is_redone_from_memory_in_offset_order_without_seeking(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # batch k (partitions 0 and 1), batch k+1 behind it, then what was prefetched meanwhile
    k = [Msg(0, 10), Msg(1, 4), Msg(0, 11)]
    k1 = [Msg(1, 5), Msg(2, 7)]
    c = FakeConsumer([0, 1, 2], queued=k)
    intake = _intake(monkeypatch, max_batch=4)
    intake.open(c)
    got_k = intake.next_batch()
    c.queued = list(k1)
    got_k1 = intake.next_batch(wait=False)
    assert _offsets(got_k) == _offsets(k) and _offsets(got_k1) == _offsets(k1)
    c.queued = [Msg(0, 12), Msg(1, 6)]
    intake.prefetch(0.0)  # into the carry list while batch k+1 computes
    intake.on_revoke(c, [c.parts[2]])
    intake.redo(got_k + got_k1)
    first, second = intake.next_batch(), intake.next_batch()
    assert _offsets(first) == [(0, 10), (1, 4), (0, 11), (1, 5)]
    assert _offsets(second) == [(0, 12), (1, 6)]  # 2 was revoked
    assert intake.next_batch() == []
    assert intake.metrics.redone._value.get() == 5
    assert not [call for call in c.calls if call[0] == "seek"]  # redone from memory
    # replay mode: redone partitions are not done yet
    replay = _intake(monkeypatch, max_batch=4, ranges={0: (10, 12), 1: (4, 6)})
    replay.open(FakeConsumer(queued=[Msg(0, 10), Msg(1, 4), Msg(0, 11), Msg(1, 5)]))
    done = replay.next_batch()
    assert replay.ranges_done()
    replay.redo(done)
    assert not replay.ranges_done()


def test_a_partition_is_paused_only_once_it_has_delivered_an_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka can lose the start offset of a partition paused before its fetcher started
    (issues #2190, #5591): such a partition is paused when its first event arrives. Resume
    touches only what was paused, and a partition revoked while paused (librdkafka keeps it
    paused) is resumed when it is assigned again."""
    intake = _intake(monkeypatch)
    c = FakeConsumer([0, 1, 2])
    intake.open(c)
    p0, p1, p2 = c.parts
    intake.on_assign(c, c.parts)
    c.queued = [Msg(0, 10)]
    intake.prefetch(0.0)                    # partition 0 is fetching; 1 and 2 not yet
    assert c.calls == []                    # nothing paused while fetching goes on
    intake.pause()
    intake.pause()                          # idempotent
    assert c.calls == [("pause", [0])]
    c.queued = [Msg(1, 3), Msg(1, 4), Msg(0, 11)]
    intake.prefetch(0.0)
    assert c.calls[1:] == [("pause", [1])]  # 1 paused at its first event, once
    intake.on_revoke(c, [p0])               # 0 goes to another worker while paused
    c.parts = [p1, p2]
    intake.resume_if_room()
    intake.resume_if_room()
    assert c.calls[2:] == [("resume", [1])]  # not 0 (not assigned), not 2 (never paused)
    c.parts = [p0, p1, p2]
    intake.on_assign(c, [p0])               # 0 comes back, still paused in librdkafka
    assert c.calls[3:] == []                # not resumed from inside the callback
    intake.next_batch()                     # the loop resumes it
    assert c.calls[3:] == [("resume", [0])]
    intake.next_batch()
    intake.pause()                          # 1 delivered since its assignment; 0 and 2 did not
    assert c.calls[4:] == [("pause", [1])]


def test_a_partition_assigned_again_starts_at_its_committed_offset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first event a partition delivers after an assignment must be at the group's committed
    offset. Ahead of it (events skipped: lost) the partition is sought back and that fetch held
    aside; behind it (committed events again: duplicates) the events below the offset are
    dropped as they come. A partition kept across the rebalance is not checked again. After a
    seek, a fetch from the same offset again is a legitimate gap (kept); a fetch past the held
    events a seek that did not take: sought again a bounded number of times, then the held
    events are released, so the check never loses an event itself (a fresh user's review)."""
    from confluent_kafka import KafkaError, KafkaException

    from streams.worker.intake import SEEK_TRIES

    intake = _intake(monkeypatch)
    c = FakeConsumer([0, 1], queued=[Msg(0, 0), Msg(1, 0)])
    intake.open(c)
    p0, p1 = c.parts
    intake.on_assign(c, c.parts)
    assert _offsets(intake.next_batch()) == [(0, 0), (1, 0)]  # at the log start: no seek
    assert c.calls == []

    def again(committed: int) -> None:  # 1 goes to another member, which commits, and back
        intake.on_revoke(c, [p1])
        c.offsets[("uploads", 1)] = (committed, None)
        intake.on_assign(c, [p1])

    # ahead: librdkafka fetches 1 from 7, the group committed 3
    again(3)
    c.queued = [Msg(1, 7), Msg(0, 1), Msg(1, 8)]
    assert _offsets(intake.next_batch()) == [(0, 1)]  # 0 was kept: not checked again
    assert c.calls == [("seek", [1, 3])]
    c.queued = [Msg(1, 3), Msg(1, 4)]  # the seek took: the skipped events come
    assert _offsets(intake.next_batch()) == [(1, 3), (1, 4)]
    assert c.calls == [("seek", [1, 3])]
    # behind (the prefetch path): committed 10, fetched from 5 in fetches that cross it
    again(10)
    for o in range(5, 13):
        c.queued = [Msg(1, o)]
        intake.prefetch(0.0)
    assert _offsets(intake.next_batch(wait=False)) == [(1, 10), (1, 11), (1, 12)]
    assert len(c.calls) == 1  # no seek
    # ahead, fetched from the same offset after the seek: no data lies between (transaction
    # markers, aborted records): kept, no second seek
    again(7)
    c.queued = [Msg(1, 9)]
    assert intake.next_batch() == [] and c.calls[1:] == [("seek", [1, 7])]
    c.queued = [Msg(1, 9), Msg(1, 10)]
    assert _offsets(intake.next_batch()) == [(1, 9), (1, 10)] and len(c.calls) == 2
    # ahead, and the seeks never take (the fetch goes on past what it held): sought SEEK_TRIES
    # times, then every event fetched since is released in order, none lost to the check
    again(11)
    got: list[tuple[int, int]] = []
    for i in range(SEEK_TRIES + 1):
        c.queued = [Msg(1, 14 + 2 * i), Msg(1, 15 + 2 * i)]
        got += _offsets(intake.next_batch())
    assert c.calls[2:] == [("seek", [1, 11])] * SEEK_TRIES
    assert got == [(1, o) for o in range(14, 16 + 2 * SEEK_TRIES)]
    # the coordinator not answering, or answering with an error for the partition: the events
    # are kept, as before the check
    from types import SimpleNamespace

    def timed_out(tps: list, timeout: float | None = None) -> list:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def errored(tps: list, timeout: float | None = None) -> list:
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001,
                                metadata=None,
                                error=KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
                for tp in tps]

    n = len(c.calls)
    for answer in (timed_out, errored):
        again(0)
        monkeypatch.setattr(c, "committed", answer)
        c.queued = [Msg(1, 30)]
        assert _offsets(intake.next_batch()) == [(1, 30)] and len(c.calls) == n


def test_a_batch_that_would_commit_past_events_delivered_here_is_redone_with_them(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """CI twice lost a partition's first four events while a later event of it committed,
    with no log line (2026-12-05, 2026-12-06). Whatever path leaves an event behind, the commit
    checks it: a batch whose partition holds events delivered in this assignment, below the
    batch's last offset there and neither in it nor committed, is not committed; its redo
    takes them back in offset order, and an error names the offsets (no event content)."""
    import json

    from streams.logs import configure_logging

    configure_logging("INFO")
    c = FakeConsumer([0, 5], queued=[Msg(5, 0), Msg(5, 1), Msg(5, 2), Msg(5, 3), Msg(0, 7),
                                     Msg(5, 4)])
    intake = _intake(monkeypatch)
    intake.open(c)
    intake.on_assign(c, c.parts)
    delivered = intake.next_batch()
    assert _offsets(delivered) == [(5, 0), (5, 1), (5, 2), (5, 3), (0, 7), (5, 4)]
    batch = delivered[4:]  # as if the first four had gone missing inside the worker
    lost = intake.skipped(batch)
    assert _offsets(lost) == [(5, 0), (5, 1), (5, 2), (5, 3)]
    line = [json.loads(x) for x in capsys.readouterr().err.splitlines()
            if '"uncommitted_events_skipped"' in x][0]
    assert line["partitions"] == {"5": [0, 1, 2, 3]}
    intake.redo(batch)
    again = intake.next_batch()
    assert _offsets(again) == [(0, 7), (5, 0), (5, 1), (5, 2), (5, 3), (5, 4)]
    assert {id(m) for m in again} == {id(m) for m in delivered}  # the same events, once each
    assert intake.skipped(again) == []
    intake.committed(again)
    # committed: nothing of theirs is pending; a later batch of the partition is not held up
    c.queued = [Msg(5, 5), Msg(5, 6)]
    later = intake.next_batch()
    assert intake.skipped(later[1:]) == later[:1]  # 5 below 6, delivered, not committed
    assert intake.skipped(later) == []
    intake.committed(later)
    assert intake.skipped(later) == []


def test_events_of_a_revoked_partition_are_neither_owned_nor_counted_as_skipped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition revoked while its events are held: they are the new owner's (not owned
    here, nothing of them pending), and when it comes back, the events fetched again are new
    ones; the old ones stay not owned."""
    c = FakeConsumer([3], queued=[Msg(3, 0), Msg(3, 1)])
    intake = _intake(monkeypatch)
    intake.open(c)
    intake.on_assign(c, c.parts)
    old = intake.next_batch()
    assert all(intake.owns(m) for m in old)
    intake.on_revoke(c, c.parts)
    assert not any(intake.owns(m) for m in old)
    intake.on_assign(c, c.parts)
    c.queued = [Msg(3, 0), Msg(3, 1), Msg(3, 2)]
    new = intake.next_batch()
    assert not any(intake.owns(m) for m in old) and all(intake.owns(m) for m in new)
    assert intake.skipped(new[2:]) == new[:2]  # the old events do not count, the new ones do


def test_a_rescue_never_redoes_a_batch_for_ever_when_lower_offsets_arrive_behind_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka may deliver a partition's lower offsets again behind higher ones (a rewind);
    a batch of the higher ones would skip them. The rescue orders the carry list by offset, one
    event per offset, so the next batches start at the lowest and each commits."""
    c = FakeConsumer([1], queued=[Msg(1, 11), Msg(1, 12)])
    intake = _intake(monkeypatch, max_batch=3)
    intake.open(c)
    intake.on_assign(c, c.parts)
    batch = intake.next_batch()
    c.queued = [Msg(1, 9), Msg(1, 10), Msg(1, 11)]  # fetched again from lower down
    intake.prefetch(0.0)
    assert _offsets(intake.skipped(batch)) == [(1, 9), (1, 10)]
    intake.redo(batch)
    done = []
    for _ in range(2):
        b = intake.next_batch()
        assert intake.skipped(b) == []
        intake.committed(b)
        done += _offsets(b)
    assert done == [(1, 9), (1, 10), (1, 11), (1, 12)]  # each offset once, in order
    assert intake.next_batch() == []


def test_a_rewind_never_does_an_event_twice(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """librdkafka can fetch a partition again from lower down (a rewind, e.g. after a resume,
    librdkafka #4637). Before a commit, the event fetched again replaces the one held: only
    the newer one is this worker's, so the offset is committed once. After a commit, events
    below it that come again are dropped as they come, with a warning (offsets only); before
    this, they were done again and their results published twice."""
    import json

    from streams.logs import configure_logging

    configure_logging("INFO")
    c = FakeConsumer([0], queued=[Msg(0, 10), Msg(0, 11)])
    intake = _intake(monkeypatch, max_batch=4)
    intake.open(c)
    intake.on_assign(c, c.parts)
    batch = intake.next_batch()
    c.queued = [Msg(0, 11), Msg(0, 12)]  # fetched again from 11 while the batch computes
    intake.prefetch(0.0)
    assert [intake.owns(m) for m in batch] == [True, False]
    owned = [m for m in batch if intake.owns(m)]  # what the loop commits
    assert intake.skipped(owned) == []
    intake.committed(owned)
    nxt = intake.next_batch()
    assert _offsets(nxt) == [(0, 11), (0, 12)] and all(intake.owns(m) for m in nxt)
    intake.committed(nxt)
    capsys.readouterr()
    c.queued = [Msg(0, 11), Msg(0, 12), Msg(0, 13)]  # fetched again after the commit
    assert _offsets(intake.next_batch()) == [(0, 13)]
    line = [json.loads(x) for x in capsys.readouterr().err.splitlines()
            if '"committed_events_fetched_again"' in x]
    assert [x["partitions"] for x in line] == [{"0": [11, 12, 2]}]
    # a partition assigned again starts from the group's committed offset: no floor is kept
    intake.on_revoke(c, c.parts)
    intake.on_assign(c, c.parts)
    c.offsets[("uploads", 0)] = (11, None)
    c.queued = [Msg(0, 11)]
    assert _offsets(intake.next_batch()) == [(0, 11)]
