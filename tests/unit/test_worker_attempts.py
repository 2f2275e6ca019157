"""The attempt ledger (streams/worker/attempts.py): starts at a committed offset counted in the
committed offset's metadata, across restarts (unit tier: a consumer double keeps the commits)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from streams.worker.attempts import AttemptLedger, Mark
from tests.doubles import FakeConsumer, Msg

P = ("uploads", 0)


def _start(c: FakeConsumer, max_attempts: int = 2, max_batch: int = 16) -> AttemptLedger:
    """A worker start: a fresh ledger counting its start on partition 0."""
    led = AttemptLedger(max_attempts, max_batch)
    led.assign(c, [P])
    return led


def test_mark_round_trips_and_foreign_metadata_is_no_mark() -> None:
    m = Mark(41, 3, 57)
    assert m.encode() == '{"v":1,"o":41,"a":3,"e":57}'
    assert Mark.decode(m.encode()) == m
    assert Mark.decode(Mark(5, 1).encode()) == Mark(5, 1, None)
    for other in (None, "", "not json", "[]", '{"v":2,"o":1,"a":1}', '{"v":1,"o":"x","a":1}'):
        assert Mark.decode(other) is None


def test_a_record_that_kills_every_start_at_the_head_is_poison_at_the_third() -> None:
    c = FakeConsumer([0])
    led = _start(c)  # start 1 at the log start: a batch, then the process dies
    assert led.marks[P] == Mark(0, 1) and c.offsets[P] == (0, '{"v":1,"o":0,"a":1}')
    assert not led.isolated(Msg(0, 0)) and led.poisoned(Msg(0, 0)) == 0
    led = _start(c)  # start 2: the same offset, nothing committed: run it alone
    assert led.marks[P] == Mark(0, 2, 16)
    assert led.isolated(Msg(0, 0)) and led.isolated(Msg(0, 15)) and not led.isolated(Msg(0, 16))
    assert led.poisoned(Msg(0, 0)) == 0
    led = _start(c)  # start 3: it killed the process alone too
    assert led.poisoned(Msg(0, 0)) == 2 and led.poisoned(Msg(0, 1)) == 0
    # its POISON dead letter is committed: the next records still run alone, counted afresh
    (tp,) = led.commit_marks([TopicPartition(*P, 1)])
    assert Mark.decode(tp.metadata) == Mark(1, 1, 16)
    led.committed([tp])
    assert led.poisoned(Msg(0, 1)) == 0 and led.isolated(Msg(0, 1))
    (tp,) = led.commit_marks([TopicPartition(*P, 16)])
    led.committed([tp])
    assert led.marks[P] == Mark(16, 1) and not led.isolating


def test_a_record_in_the_middle_is_found_alone_then_poison() -> None:
    c = FakeConsumer([0])
    c.offsets[P] = (100, Mark(100, 1).encode())  # the last transaction moved the group to 100
    led = _start(c)  # the start that crashed somewhere in 100..115 left this mark: start 2
    assert led.marks[P] == Mark(100, 2, 116)
    for off in range(101, 108):  # 100..106 run alone and commit; 107 kills the process
        (tp,) = led.commit_marks([TopicPartition(*P, off)])
        led.committed([tp])
        c.commit([tp])
    assert c.offsets[P] == (107, '{"v":1,"o":107,"a":1,"e":116}')
    led = _start(c)
    assert led.marks[P] == Mark(107, 2, 116) and led.poisoned(Msg(0, 107)) == 0
    led = _start(c)
    assert led.poisoned(Msg(0, 107)) == 2


def test_a_clean_stop_releases_the_mark_so_the_next_owner_does_not_isolate() -> None:
    c = FakeConsumer([0])
    led = _start(c)
    (tp,) = led.commit_marks([TopicPartition(*P, 9)])
    led.committed([tp])
    c.commit([tp])
    led.release(c, [P])
    assert c.offsets[P] == (9, "") and P not in led.marks
    assert _start(c).marks[P] == Mark(9, 1)
