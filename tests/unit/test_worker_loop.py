"""The worker's loop (unit tier): waiting for the object store, and for a producer."""

from __future__ import annotations

import json

import pytest

from streams.logs import configure_logging
from streams.settings import load_settings
from streams.worker import Worker
from tests.doubles import FakeConsumer, StoreDouble


def test_the_worker_says_when_the_store_answers_again(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO")
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    w = Worker(load_settings(), {}, storage=StoreDouble([False, True, True]))
    w.intake.open(FakeConsumer())
    w.wait_for_storage()  # one 0.5 s wait, polling all the while
    back = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"storage_back"' in x]
    assert len(back) == 1 and 0.5 <= back[0]["waited_s"] < 2.0
    w.wait_for_storage()  # already up: no line
    assert '"storage_back"' not in capsys.readouterr().err


def test_live_fails_once_a_batch_computes_past_the_deadline_while_the_loop_ticks() -> None:
    import time

    from streams.health import Health

    h = Health(stall_s=0.2)
    h.compute_since = time.monotonic()
    h.tick()
    assert h.live() and h.overdue_s() == 0.0
    time.sleep(0.3)
    h.tick()  # the loop keeps polling while the batch thread hangs
    assert not h.live() and 0.05 < h.overdue_s() < 1.0
    h.computed(h.compute_since - 1.0)  # an earlier batch's end: this one is still late
    assert not h.live()
    h.computed(h.compute_since)
    assert h.live() and h.overdue_s() == 0.0


def test_a_worker_without_a_producer_holds_its_batch_until_the_broker_answers(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43: the committer left without a producer (the broker did not answer its
    ``init_transactions``) holds the batch, paused and not ready, polling, and asks again as
    ``producer_wait`` says; the worker never exits for it."""
    from confluent_kafka import KafkaError, KafkaException

    import streams.worker.committer as committer_mod
    from tests.doubles import Msg, TxnProducer

    configure_logging("INFO")
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_KAFKA__PRODUCER_WAIT__FIRST_S", "0.1")
    monkeypatch.setenv("CARDSTREAM_KAFKA__PRODUCER_WAIT__CAP_S", "0.2")
    w = Worker(load_settings(), {}, storage=StoreDouble())
    consumer = FakeConsumer([0, 1], queued=[Msg(0, 5), Msg(1, 7)])
    w.intake.open(consumer)
    down = KafkaException(KafkaError(KafkaError._TIMED_OUT, "no broker", retriable=True))
    producer = TxnProducer(init_errors=[down, down])
    monkeypatch.setattr(committer_mod, "transactional_producer", lambda k, tid, **kw: producer)
    real, readiness = w.committer.reopen, []

    def reopen() -> bool:
        readiness.append(w.health.ready)
        return real()

    monkeypatch.setattr(w.committer, "reopen", reopen)
    w.health.ready = True
    batch = w.intake.next_batch()
    assert [(m.partition(), m.offset()) for m in batch] == [(0, 5), (1, 7)]
    w._committer_down(batch)
    assert producer.calls == ["init"] * 3 and readiness == [False, False, False]
    assert w.committer.ready
    assert w.health.ready  # back once the committer is
    assert list(w.intake.carry.msgs) == batch  # held, to be redone in order
    assert w.intake.paused
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert [x["event"] for x in lines if x["event"].startswith("committer_")] == [
        "committer_unavailable", "committer_back"]
    assert 0.2 <= lines[-1]["waited_s"] < 2.0
    w.committer.close(0.1)


def test_a_batch_failing_on_a_store_that_answers_is_redone_only_after_longer_pauses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: a batch whose calls failed while the store's health check answered at once
    was redone at once, again and again (2,024 ``storage_unavailable`` lines in 30 s): each
    outage in a row now holds the batch for the next wait of ``store_wait`` (0.1 s, 0.2 s
    here), and a batch that goes through starts the waits again."""
    import time

    from streams.errors import StorageUnavailable

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_WORKER__STORE_WAIT__FIRST_S", "0.1")
    monkeypatch.setenv("CARDSTREAM_WORKER__STORE_WAIT__CAP_S", "0.4")
    w = Worker(load_settings(), {}, storage=StoreDouble())  # healthy() answers True every time
    w.intake.open(FakeConsumer())

    def held_s() -> float:
        t0 = time.monotonic()
        w._storage_down(StorageUnavailable("PUT results/…: ValueError"), [])
        return time.monotonic() - t0

    first, second = held_s(), held_s()
    assert first >= 0.1 and second >= 0.2, (first, second)
    w._store_accepts()
    assert w._outage.next() == 0.1  # the waits start again


def test_a_worker_with_an_outage_limit_gives_up_once_the_store_is_down_that_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh user's trial: ``cardstream replay`` with the object store down waited for ever
    (its worker held the batch until the store answered, as the live worker does). With
    ``store_outage_limit_s`` (a replay's ``BackfillSettings.store_outage_limit_s``; 0.5 s
    here) the hold ends at the limit although the store never answers, and the next failure
    raises; a batch that goes through in between starts the count again."""
    import time

    from streams.errors import StorageUnavailable

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_WORKER__STORE_WAIT__FIRST_S", "0.1")
    monkeypatch.setenv("CARDSTREAM_WORKER__STORE_WAIT__CAP_S", "0.2")
    w = Worker(load_settings(), {}, storage=StoreDouble([False] * 1000),
               store_outage_limit_s=0.5)
    w.intake.open(FakeConsumer())
    down = StorageUnavailable("GET uploads/key:0123abcd/4B at 127.0.0.1:1 failed after 4 "
                              "attempts: MaxRetryError (NewConnectionError)")
    t0 = time.monotonic()
    w._storage_down(down, [])  # held up to the limit, the store never answering
    assert 0.5 <= time.monotonic() - t0 < 1.5
    with pytest.raises(StorageUnavailable) as ei:
        w._storage_down(down, [])
    said = str(ei.value)
    assert said.startswith("the object store did not answer for ") and said.endswith(
        " s (limit 0.5 s): GET uploads/key:0123abcd/4B at 127.0.0.1:1 failed after 4 attempts: "
        "MaxRetryError (NewConnectionError)"), said
    w._store_accepts()  # a batch went through: the count starts again
    w._storage_down(down, [])  # held, not raised


def test_the_compute_deadline_grows_with_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: a flat 120 s deadline ended the worker (status 70) on a batch of 9 uploads on
    2 busy cores. A batch's deadline is ``compute_deadline_s`` plus
    ``compute_deadline_per_item_s`` per event; a hang still fails ``/live`` once past it."""
    import time

    from streams.health import Health

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_WORKER__COMPUTE_DEADLINE_S", "100")
    monkeypatch.setenv("CARDSTREAM_WORKER__COMPUTE_DEADLINE_PER_ITEM_S", "15")
    w = Worker(load_settings(), {}, storage=StoreDouble())
    assert (w.health.stall_s, w.health.per_item_s) == (100.0, 15.0)
    w.health.computing(9)
    assert w.health.deadline_s == 235.0 and w.health.live()
    assert load_settings().worker.compute_deadline_per_item_s == 15.0
    monkeypatch.delenv("CARDSTREAM_WORKER__COMPUTE_DEADLINE_PER_ITEM_S")
    assert load_settings().worker.compute_deadline_per_item_s == 20.0  # the default

    h = Health(stall_s=0.1, per_item_s=0.1)
    since = h.computing(3)  # 0.4 s
    time.sleep(0.25)
    h.tick()
    assert h.live() and h.overdue_s() == 0.0  # past the base, within 3 events' allowance
    time.sleep(0.25)
    h.tick()
    assert not h.live() and 0.05 < h.overdue_s() < 1.0  # a hang: past base + 3 x per item
    h.computed(since)
    assert h.live() and h.overdue_s() == 0.0
    h.computing(0)
    assert h.deadline_s == 0.1  # no events: the base alone


def test_an_idle_worker_started_without_a_broker_is_ready_once_one_answers(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A worker whose start found no broker (no transactional producer) stayed unready while
    idle after the broker came back: only a batch's commit made it ready again (measured with
    ``cardstream worker``: ``/ready`` 503 for the 45 s it was watched after the broker
    answered). Now the idle loop asks for a producer as ``producer_wait`` says, polling and
    fetching on (nothing paused), and is ready once it has one, without an upload."""
    import threading
    import time

    from confluent_kafka import KafkaError, KafkaException

    import streams.worker.committer as committer_mod
    from streams.worker.intake import Intake
    from tests.doubles import TxnProducer

    configure_logging("INFO")
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_KAFKA__PRODUCER_WAIT__FIRST_S", "0.1")
    monkeypatch.setenv("CARDSTREAM_KAFKA__PRODUCER_WAIT__CAP_S", "0.2")
    w = Worker(load_settings(), {}, storage=StoreDouble())
    down = KafkaException(KafkaError(KafkaError._TIMED_OUT, "no broker", retriable=True))
    producer = TxnProducer(init_errors=[down, down, down])  # the start's try, then two more
    monkeypatch.setattr(committer_mod, "transactional_producer", lambda k, tid, **kw: producer)
    consumer = FakeConsumer([0, 1])
    monkeypatch.setattr(w.intake, "open", lambda: Intake.open(w.intake, consumer))
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        end = time.monotonic() + 5.0
        while not w.health.ready and time.monotonic() < end:
            time.sleep(0.01)
        assert w.health.ready, producer.calls
        assert producer.calls[:4] == ["init"] * 4
        assert not w.intake.paused and ("pause", [0, 1]) not in consumer.calls
    finally:
        w.stop()
        t.join(10)
    events = [json.loads(x)["event"] for x in capsys.readouterr().err.splitlines()
              if x.startswith("{")]
    assert [e for e in events if e.startswith("committer_")] == [
        "committer_unavailable", "committer_back"]
