"""The worker's committer (unit tier): a stuck producer is replaced and the batch redone; a
broker that does not answer the new producer leaves it not ready (nothing raises); stuck
producers are bounded and freed; one call thread, whatever the process's thread limit."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

import streams.worker.committer as committer_mod
from streams.errors import KafkaSetupError, ProducerStuck
from streams.metrics import WorkerMetrics
from streams.settings import load_settings
from streams.worker.committer import Checkpoint, Committer
from tests.doubles import FakeConsumer, Msg, StuckProducer, TxnProducer


def _committer(monkeypatch: pytest.MonkeyPatch) -> Committer:
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    c = Committer(load_settings().kafka, "tx-unit-0", WorkerMetrics())
    c.TXN_CALL_TIMEOUT_S, c.STUCK_GRACE_S, c.INIT_TIMEOUT_S = 0.2, 0.3, 0.2
    return c


def _cp(offset: int = 0) -> Checkpoint:
    return Checkpoint.of([Msg(0, offset)], [], [])


def _proc_counts() -> tuple[int, int]:
    """(threads of this process, its open file descriptors), from /proc."""
    status = Path("/proc/self/status").read_text().splitlines()
    threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    return threads, len(os.listdir("/proc/self/fd"))


def test_checkpoint_offsets_are_one_past_each_partitions_last_event() -> None:
    cp = Checkpoint.of([Msg(0, 10), Msg(1, 4), Msg(0, 11)], [], [])
    assert sorted((tp.partition, tp.offset) for tp in cp.offsets) == [(0, 12), (1, 5)]
    assert cp.events == 3


def test_a_stuck_send_offsets_replaces_the_producer_and_the_batch_is_redone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = _committer(monkeypatch)
    stuck, fresh = StuckProducer(), TxnProducer()
    c.producer = stuck
    built = []
    monkeypatch.setattr(committer_mod, "transactional_producer",
                        lambda k, tid, **kw: built.append(tid) or fresh)
    t0 = time.monotonic()
    assert c.commit(Checkpoint.of([], [], []), FakeConsumer()) is False  # redo the batch
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 3.0
    assert stuck.calls == ["begin", "send_offsets(0.2)"]  # no commit or abort on the stuck one
    assert c.producer is fresh and built == [c.transactional_id] and fresh.calls == ["init"]
    assert c.metrics.transactions.labels("stuck")._value.get() == 1
    assert c.committed_events == 0 and c.ready and c.stuck_held == 1
    stuck.release.set()
    time.sleep(0.1)
    assert c.stuck_held == 0  # its call returned


def test_a_broker_that_does_not_answer_the_new_producer_leaves_the_committer_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: a broker down past a stuck commit's bound (35 s) and the rebuild's
    ``init_transactions`` (30 s) made ``rebuild`` raise ``KafkaSetupError`` out of the commit,
    and the worker exited (measured in ``make faults``' ``broker_long`` row: 5 restarts). Now the
    committer is left not ready: commits return False without a call, each asking the same
    real librdkafka producer's ``init_transactions`` again (resumable), until one goes through."""
    c = _committer(monkeypatch)
    c.producer = StuckProducer()
    assert c.commit(_cp(0), FakeConsumer([0])) is False  # stuck; the rebuild finds no broker
    assert not c.ready and c.producer is None
    waiting = c._building
    assert isinstance(waiting, Producer)  # a real one: its init_transactions timed out
    assert c.commit(_cp(0), FakeConsumer([0])) is False  # no broker yet: nothing raised
    assert c._building is waiting  # the same producer is asked again, not a new one
    assert c.metrics.transactions.labels("committed")._value.get() == 0
    timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT, "down", retriable=True))
    answered = TxnProducer(init_errors=[timed_out])
    c._building = None
    monkeypatch.setattr(committer_mod, "transactional_producer", lambda k, tid, **kw: answered)
    assert c.commit(_cp(0), FakeConsumer([0])) is False and not c.ready  # still timing out
    assert c.commit(_cp(0), FakeConsumer([0])) is True  # the broker answered: committed
    assert c.ready and answered.calls[:3] == ["init", "init", "begin_transaction"]
    c.close(0.1)


def test_a_refusal_no_retry_fixes_stops_the_worker_loudly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``init_transactions`` error neither retriable nor fatal (e.g. the broker refusing the
    transactional id) is a set-up error, not a wait."""
    c = _committer(monkeypatch)
    denied = KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "no"))
    monkeypatch.setattr(committer_mod, "transactional_producer",
                        lambda k, tid, **kw: TxnProducer(init_errors=[denied]))
    with pytest.raises(KafkaSetupError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED|no"):
        c.open()


def test_stuck_producers_are_bounded_and_freed_once_their_call_returns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: every stuck commit left its producer (4-5 librdkafka threads, 6 fds) and a
    blocked thread behind, with no bound: measured with real librdkafka producers, 6 stuck
    commits held 7 producers, +29 threads, +36 fds. Now at most ``STUCK_HELD_MAX`` are held
    (one more raises: only a new process frees a call that never returns), and each is freed
    when its call returns."""
    c = _committer(monkeypatch)
    release, live = threading.Event(), weakref.WeakSet()

    def stuck_one(*_a: object, **_kw: object) -> StuckProducer:
        p = StuckProducer(release, holds=Producer({"bootstrap.servers": "127.0.0.1:1",
                                                   "log_level": 0}))
        p.init_transactions = lambda timeout: None  # type: ignore[method-assign]
        live.add(p)
        return p

    monkeypatch.setattr(committer_mod, "transactional_producer", stuck_one)
    gc.collect()
    threads0, fds0 = _proc_counts()
    fd_names0 = set(os.listdir("/proc/self/fd"))
    c.open()
    for i in range(c.STUCK_HELD_MAX):
        assert c.commit(_cp(i), FakeConsumer([0])) is False
        assert c.stuck_held == i + 1 and c.ready
    with pytest.raises(ProducerStuck, match="4 abandoned producers are stuck"):
        c.commit(_cp(9), FakeConsumer([0]))
    gc.collect()
    assert len(live) == c.STUCK_HELD_MAX + 1  # the stuck ones, nothing more
    release.set()
    deadline = time.monotonic() + 10.0
    while (c.stuck_held or live) and time.monotonic() < deadline:
        time.sleep(0.05)
        gc.collect()
    assert c.stuck_held == 0 and len(live) == 0  # freed once their calls returned
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        threads, fds = _proc_counts()
        if threads <= threads0 and fds <= fds0:
            break
        time.sleep(0.05)  # librdkafka's threads end, and its fds close, after the destroy
    # Both counts are waited on: an unrelated thread ending can bring the thread count back while
    # a producer's last thread still holds its wake-up fd (CI saw threads 46 -> 46, fds 85 -> 86).
    new_fds = {}
    for fd in set(os.listdir("/proc/self/fd")) - fd_names0:
        try:
            new_fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed while listing
    assert threads <= threads0 and fds <= fds0, (threads0, threads, fds0, fds, new_fds)


def test_commits_reuse_one_call_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    c = _committer(monkeypatch)
    c.producer = TxnProducer()
    before = threading.active_count()
    assert all(c.commit(_cp(i), FakeConsumer([0])) for i in range(20))
    assert threading.active_count() == before + 1  # send-offsets, started once
    assert c.producer.calls.count("send_offsets_to_transaction") == 20
    c.close(0.1)


def test_a_process_that_cannot_start_a_thread_commits_nothing_and_raises_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: the per-commit ``send-offsets`` thread's ``start()`` raised ``RuntimeError:
    can't start new thread`` out of ``commit`` in a process that could start no thread (a thread
    limit, or an address-space limit below one thread stack). Now the commit returns False (the
    batch waits and is redone), and the committer is ready once a thread can start; a thread
    started before the limit keeps serving. ``Thread.start`` raises here what CPython raises
    then: the address-space cap this test first used did not stop every machine's thread (a
    fresh 2-core VM started it under the cap), so the test could not fail there."""
    real_start = threading.Thread.start

    def cannot_start(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    def limit(on: bool) -> None:
        monkeypatch.setattr(threading.Thread, "start", cannot_start if on else real_start)

    def commit(c: Committer, i: int) -> bool | str:
        try:
            return c.commit(_cp(i), FakeConsumer([0]))
        except BaseException as e:  # noqa: BLE001 (what the commit lets out is the finding)
            return type(e).__name__

    logged: list[str] = []

    class Log:  # the module's logger, recording event names (its output depends on the tier)
        def __getattr__(self, _level: str) -> object:
            return lambda event, **_kw: logged.append(event)

    monkeypatch.setattr(committer_mod, "log", Log())
    c = _committer(monkeypatch)
    c.producer = TxnProducer()
    try:
        limit(True)
        starved = [commit(c, i) for i in range(3)]
        ready = c.ready
        limit(False)
        then = commit(c, 3)
        limit(True)
        kept = [commit(c, i) for i in range(4, 8)]
    finally:
        limit(False)
        c.close(0.1)
    assert (starved, ready, then, kept) == ([False] * 3, False, True, [True] * 4)
    assert c.producer.calls.count("send_offsets_to_transaction") == 5
    assert logged.count("txn_thread_unavailable") == 3


class _SizeLimitedProducer:
    """A transactional producer double whose ``produce`` refuses a dead-letter record above
    ``limit`` bytes at once, as librdkafka's own ``message.max.bytes`` check does
    (``MSG_SIZE_TOO_LARGE``); it keeps what it accepted in ``produced``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.produced: list[tuple[str, bytes | None, bytes]] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic: str, key: bytes | None = None, value: bytes = b"", headers=None,
                on_delivery=None) -> None:
        from confluent_kafka import KafkaError, KafkaException

        if len(value) + len(key or b"") > self.limit:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))
        self.produced.append((topic, key, value))

    def send_offsets_to_transaction(self, *a) -> None:
        pass

    def commit_transaction(self, *a) -> None:
        pass


def test_a_dead_letter_the_producer_refuses_is_sent_minimal_in_the_same_transaction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas import codec

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    k = load_settings().kafka
    c = Committer(k, "tx-unit-0", WorkerMetrics())
    c.producer = p = _SizeLimitedProducer(limit=20_000)
    big = codec.make_dead_letter(key=bytes(range(256)) * 100, value=b"\x00not json{", headers=None,
                                 topic="up", partition=2, offset=7, code="NOT_JSON", error="bad")
    small = codec.make_dead_letter(key=b"u1", value=b"x", headers=None, topic="up", partition=2,
                                   offset=8, code="NOT_JSON", error="bad")
    assert c.commit(Checkpoint.of([Msg(2, 7), Msg(2, 8)], [], [big, small]),
                    FakeConsumer()) is True
    letters = [codec.decode_dead_letter(v) for t, _, v in p.produced if t == k.dlq_topic]
    assert [(d.source.offset, d.key_b64 is None, d.key_size) for d in letters] == [
        (7, True, 25_600), (8, False, None)]
    assert letters[0].error == "minimal dead letter (MSG_SIZE_TOO_LARGE): bad"
    assert c.metrics.minimal_dead_letters._value.get() == 1
    assert c.minimal_sources == {}  # committed: nothing left to remember


def test_refused_dead_letters_of_partitions_no_longer_held_are_forgotten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43 (committer maps kept for revoked partitions): the source of a dead letter the
    broker refused stayed in ``minimal_sources`` until that dead letter committed, which never
    happens once its partition is revoked first: 100 such records left 100 entries. Now a commit
    keeps only the partitions its consumer holds."""
    c = _committer(monkeypatch)
    c.producer = TxnProducer()
    too_big = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large")
    for off in range(100):  # refused in a delivery report; the partition (1) is then revoked
        c._delivered(("uploads", 1, off), too_big)
    c._delivered(("uploads", 0, 5), too_big)  # a partition still held
    assert len(c.minimal_sources) == 101
    assert c.commit(_cp(0), FakeConsumer([0])) is True
    assert c.minimal_sources == {("uploads", 0, 5): "MSG_SIZE_TOO_LARGE"}
    c.close(0.1)
