"""The upload producer (unit tier): what it does with the claim checks of events the broker did
not take."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from streams.errors import DeliveryError, StorageError
from streams.produce import UploadProducer
from streams.settings import load_settings
from tests.doubles import StoreDouble


class _Producer:
    """librdkafka's producer as :class:`UploadProducer` uses it: each event's delivery report
    comes at ``flush``, failed (``_MSG_TIMED_OUT``) for every other event, the second first."""

    def __init__(self) -> None:
        self.reports: list[Callable[[KafkaError | None, Any], None]] = []

    def list_topics(self, timeout: float = -1) -> Any:
        """The cluster's metadata as ``check_broker`` reads it: the uploads topic exists."""
        return SimpleNamespace(topics={"me.uploads": None})

    def produce(self, topic: str, key: bytes, value: bytes, headers: Any,
                on_delivery: Callable[[KafkaError | None, Any], None]) -> None:
        self.reports.append(on_delivery)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        for i, report in enumerate(self.reports):
            report(KafkaError(KafkaError._MSG_TIMED_OUT) if i % 2 else None, None)
        self.reports = []
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        return None

    def __len__(self) -> int:
        return 0


def _producer(monkeypatch: pytest.MonkeyPatch, store: StoreDouble) -> UploadProducer:
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_KAFKA__UPLOADS_TOPIC", "me.uploads")
    monkeypatch.setenv("CARDSTREAM_S3__ACCESS_KEY", "unit")
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "unit-secret")
    p = UploadProducer(load_settings())
    p.producer, p.storage = _Producer(), store
    return p


def test_the_claim_checks_of_events_not_delivered_are_deleted_the_others_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh user's trial: with the broker gone, ``cardstream produce`` left a claim-check
    object per image in the uploads bucket, none with an event. Of four uploads whose second
    and fourth events were not delivered, those two objects are deleted and the two delivered
    ones kept; the error says how many were not delivered, and that their objects are gone."""
    for i in range(4):
        (tmp_path / f"p{i}.jpg").write_bytes(b"\xff\xd8\xff" + bytes([i]))
    store = StoreDouble()
    p = _producer(monkeypatch, store)
    with pytest.raises(DeliveryError) as ei:
        p.produce_files(sorted(tmp_path.iterdir()), "card", prefix="u", concurrency=1)
    assert str(ei.value) == ("2 of 4 uploads not delivered to me.uploads at 127.0.0.1:1: "
                             "_MSG_TIMED_OUT: Local: Message timed out (and 1 more); their 2 "
                             "claim-check objects deleted")
    left = sorted(key.split("/")[1] for _, key in store.objects)
    assert [u.split("-")[1] for u in left] == ["000000", "000002"]
    # which went through, for the ids file: the delivered ones
    assert sorted(x.upload_id for x in ei.value.sent) == left


def test_a_claim_check_that_cannot_be_deleted_is_said_not_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting is best effort: the store refusing (or not answering) the first delete stops
    it, and the error line says how many objects are left and why, still a DeliveryError."""
    for i in range(4):
        (tmp_path / f"p{i}.jpg").write_bytes(b"\xff\xd8\xff" + bytes([i]))
    store = StoreDouble()

    def refused(bucket: str, key: str) -> None:
        raise StorageError(f"DELETE {bucket}/key:0123abcd/4B at 127.0.0.1:9000 failed after 4 "
                           "attempts: S3Error AccessDenied (403)")

    monkeypatch.setattr(store, "delete", refused)
    p = _producer(monkeypatch, store)
    with pytest.raises(DeliveryError) as ei:
        p.produce_files(sorted(tmp_path.iterdir()), "card", prefix="u", concurrency=1)
    assert str(ei.value).endswith(
        "; 2 of their 2 claim-check objects not deleted (StorageError: DELETE uploads/"
        "key:0123abcd/4B at 127.0.0.1:9000 failed after 4 attempts: S3Error AccessDenied "
        "(403))"), str(ei.value)
    assert len(store.objects) == 4
