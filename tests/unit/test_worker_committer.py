"""The worker's committer (unit tier): a stuck producer is replaced and the batch redone."""

from __future__ import annotations

import time

import pytest

import streams.worker.committer as committer_mod
from streams.metrics import WorkerMetrics
from streams.settings import load_settings
from streams.worker.committer import Checkpoint, Committer
from tests.doubles import Msg, StuckProducer


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
    assert c.commit(Checkpoint.of([], [], []), "group-metadata") is False  # redo the batch
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 3.0
    assert stuck.calls == ["begin", "send_offsets(0.2)"]  # no commit or abort on the stuck one
    assert c.producer is fresh and built == [c.transactional_id]
    assert c.metrics.transactions.labels("stuck")._value.get() == 1
    assert c.committed_events == 0
    stuck.release.set()
