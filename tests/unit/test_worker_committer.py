"""The worker's committer (unit tier): a stuck producer is replaced and the batch redone."""

from __future__ import annotations

import time

import pytest

import streams.worker.committer as committer_mod
from streams.metrics import WorkerMetrics
from streams.settings import load_settings
from streams.worker.committer import Checkpoint, Committer
from tests.doubles import FakeConsumer, Msg, StuckProducer


def test_checkpoint_offsets_are_one_past_each_partitions_last_event() -> None:
    cp = Checkpoint.of([Msg(0, 10), Msg(1, 4), Msg(0, 11)], [], [])
    assert sorted((tp.partition, tp.offset) for tp in cp.offsets) == [(0, 12), (1, 5)]
    assert cp.events == 3


def test_a_stuck_send_offsets_replaces_the_producer_and_the_batch_is_redone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    c = Committer(load_settings().kafka, "tx-unit-0", WorkerMetrics())
    c.TXN_CALL_TIMEOUT_S, c.STUCK_GRACE_S = 0.2, 0.3
    stuck, fresh = StuckProducer(), object()
    c.producer = stuck
    built = []
    monkeypatch.setattr(committer_mod, "transactional_producer",
                        lambda k, tid: built.append(tid) or fresh)
    t0 = time.monotonic()
    assert c.commit(Checkpoint.of([], [], []), FakeConsumer()) is False  # redo the batch
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 3.0
    assert stuck.calls == ["begin", "send_offsets(0.2)"]  # no commit or abort on the stuck one
    assert c.producer is fresh and built == [c.transactional_id]
    assert c.metrics.transactions.labels("stuck")._value.get() == 1
    assert c.committed_events == 0
    stuck.release.set()


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
