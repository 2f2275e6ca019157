"""The attempt ledger (streams/worker/attempts.py): tries at a committed offset counted in the
committed offset's metadata, across restarts (unit tier: a consumer double keeps the commits)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from streams.worker.attempts import AttemptLedger, Mark
from tests.doubles import FakeConsumer, Msg

P, Q = ("uploads", 0), ("uploads", 1)


def _start(c: FakeConsumer, keys=(P,), max_attempts: int = 2, max_batch: int = 16) -> AttemptLedger:
    """A worker process start: a fresh ledger reading the marks of ``keys``."""
    led = AttemptLedger(max_attempts, max_batch)
    led.assign(c, list(keys))
    return led


def _commit(c: FakeConsumer, led: AttemptLedger, key: tuple[str, int], offset: int) -> None:
    """A transaction committing ``offset`` for ``key`` with its mark."""
    (tp,) = led.commit_marks([TopicPartition(*key, offset)])
    led.committed([tp])
    c.commit([tp])


def test_mark_round_trips_and_foreign_metadata_is_no_mark() -> None:
    m = Mark(41, 3, 57)
    assert m.encode() == '{"v":1,"o":41,"a":3,"e":57}'
    assert Mark.decode(m.encode()) == m
    assert Mark.decode(Mark(5, 1).encode()) == Mark(5, 1, None)
    for other in (None, "", "not json", "[]", '{"v":2,"o":1,"a":1}', '{"v":1,"o":"x","a":1}'):
        assert Mark.decode(other) is None


def test_a_record_that_kills_every_try_at_the_head_is_poison_after_two_tries_alone() -> None:
    c = FakeConsumer([0, 1])
    led = _start(c)  # start 1 at the log start: a batch, then the process dies
    assert led.marks[P] == Mark(0, 1) and c.offsets[P] == (0, '{"v":1,"o":0,"a":1}')
    assert not led.isolated(Msg(0, 0)) and led.poisoned(Msg(0, 0)) == 0
    led = _start(c)  # start 2: the batch never committed: isolate the two batches the loop
    # overlaps (the crash may have been in the second), nothing tried alone yet
    assert led.marks[P] == Mark(0, 0, 32)
    assert led.isolated(Msg(0, 0)) and led.isolated(Msg(0, 31)) and not led.isolated(Msg(0, 32))
    led.trying(c, Msg(0, 0))  # it runs alone, the process dies
    led.trying(c, Msg(0, 0))  # (a redo in the same process is not counted again)
    assert c.offsets[P] == (0, '{"v":1,"o":0,"a":1,"e":32}')
    led = _start(c)  # start 3: tried alone once
    assert led.poisoned(Msg(0, 0)) == 0
    led.trying(c, Msg(0, 0))
    led = _start(c)  # start 4: tried alone twice, both ended the process
    assert led.poisoned(Msg(0, 0)) == 2 and led.poisoned(Msg(0, 1)) == 0
    led.trying(c, Msg(0, 0))  # a poison record is not tried, so not counted
    assert led.marks[P] == Mark(0, 2, 32)
    _commit(c, led, P, 1)  # its POISON dead letter: the next records still run alone
    assert led.marks[P] == Mark(1, 0, 32) and led.isolated(Msg(0, 1))
    _commit(c, led, P, 32)
    assert led.marks[P] == Mark(32, 1) and not led.isolating


def test_a_crash_counts_only_against_the_record_running_alone() -> None:
    c = FakeConsumer([0, 1])
    c.offsets[P] = (100, Mark(100, 1).encode())  # both partitions' batches never committed
    c.offsets[Q] = (7, Mark(7, 1).encode())
    led = _start(c, (P, Q))
    assert (led.marks[P], led.marks[Q]) == (Mark(100, 0, 132), Mark(7, 0, 39))
    for off in range(100, 104):  # 100..102 run alone and commit; 103 kills the process
        led.trying(c, Msg(0, off))
        if off < 103:
            _commit(c, led, P, off + 1)
    led = _start(c, (P, Q))  # 103 tried alone once; Q's record never ran: nothing counted
    assert led.poisoned(Msg(0, 103)) == 0 and led.marks[Q] == Mark(7, 0, 39)
    led.trying(c, Msg(0, 103))  # it ends the process again
    led = _start(c, (P, Q))
    assert led.poisoned(Msg(0, 103)) == 2 and led.poisoned(Msg(1, 7)) == 0


def test_a_partition_lost_and_assigned_back_in_one_process_is_no_crash() -> None:
    c = FakeConsumer([0])
    led = _start(c)
    _commit(c, led, P, 9)  # the transaction marks a batch begun at 9
    led.forget([P])  # lost (session timeout across a broker restart), then assigned back
    led.assign(c, [P])
    assert led.marks[P] == Mark(9, 1) and not led.isolating
    assert _start(c).marks[P] == Mark(9, 0, 41)  # a new process finding it: a crash


def test_a_clean_stop_releases_the_mark_so_the_next_owner_does_not_isolate() -> None:
    c = FakeConsumer([0])
    led = _start(c)
    _commit(c, led, P, 9)
    led.release(c, [P])
    assert c.offsets[P] == (9, "") and P not in led.marks
    assert _start(c).marks[P] == Mark(9, 1)


def test_tries_counted_alone_are_forgotten_once_committed_past_or_released() -> None:
    """Issue 43 (per-partition state kept for ever): each record tried alone stayed in the
    ledger's ``_tried`` set for the life of the process, also after its partition was committed
    past or handed to another worker; 50 handovers after crashes elsewhere (32 records tried
    alone each) left 1,600 entries. Now none outlive the commit past them or the release."""
    c = FakeConsumer([0, 1])
    led = AttemptLedger(2, 16)
    for r in range(50):
        start = r * 100
        c.offsets[P] = (start, Mark(start, 1).encode())  # another worker crashed there
        led.assign(c, [P, Q])
        assert led.marks[P] == Mark(start, 0, start + 32)
        for off in range(start, start + 32):  # each runs alone and commits
            led.trying(c, Msg(0, off))
            _commit(c, led, P, off + 1)
        led.trying(c, Msg(1, 0))  # Q is not isolated: nothing to count
        led.release(c, [P])  # handed over
    assert len(led._tried) == 0
    c.offsets[P] = (9000, Mark(9000, 1).encode())
    led.assign(c, [P])
    led.trying(c, Msg(0, 9000))
    led.trying(c, Msg(0, 9000))  # still counted once per process
    assert c.offsets[P] == (9000, Mark(9000, 1, 9032).encode()) and len(led._tried) == 1
    led.release(c, [P])
    assert len(led._tried) == 0


def test_start_offsets_take_the_log_start_from_the_last_fetch_and_ask_only_without_one() -> None:
    """A partition never committed starts at its log start: the one librdkafka cached from the
    partition's last fetch response, asked of the broker only where no fetch has answered yet
    (asking waits behind the consumer's own fetch: 3.0 s for 6 partitions, measured)."""
    from streams.worker.attempts import start_offsets

    class Consumer:
        def __init__(self) -> None:
            self.asked: list[int] = []

        def committed(self, tps: list, timeout: float | None = None) -> list:
            return [TopicPartition(tp.topic, tp.partition, 12 if tp.partition == 0 else -1001)
                    for tp in tps]

        def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False,
                                  timeout: float | None = None) -> tuple[int, int]:
            if cached:
                return (3, 9) if tp.partition == 1 else (-1001, -1001)
            self.asked.append(tp.partition)
            return 7, 9

    c = Consumer()
    got = start_offsets(c, [("u", 0), ("u", 1), ("u", 2)])
    assert [(k[1], off) for k, off, _ in got] == [(0, 12), (1, 3), (2, 7)]
    assert c.asked == [2]  # committed: no watermark; cached: not asked; no fetch yet: asked
