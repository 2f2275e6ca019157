"""Smoke tests of the real local stack: transactions, read_committed, aiokafka, MinIO + SSE-S3."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid

import pytest
from confluent_kafka import TopicPartition

from streams.kafka import consumer, plain_producer, transactional_producer
from streams.settings import Settings
from streams.storage import Storage

pytestmark = pytest.mark.integration


def _drain(c, want: int, timeout_s: float = 20.0) -> list:
    import time

    out, t0 = [], time.monotonic()
    while len(out) < want and time.monotonic() - t0 < timeout_s:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m)
    # a little longer, to see anything that should not be there
    t1 = time.monotonic()
    while time.monotonic() - t1 < 1.5:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            out.append(m)
    return out


def test_transactions_read_committed_hides_aborted(settings: Settings, run_id: str) -> None:
    k = settings.kafka
    p = transactional_producer(k, f"{k.transactional_id_prefix}-smoke")
    p.begin_transaction()
    for i in range(5):
        p.produce(k.results_topic, key=f"c{i}".encode(), value=b"committed")
    p.commit_transaction()
    p.begin_transaction()
    for i in range(5):
        p.produce(k.results_topic, key=f"a{i}".encode(), value=b"aborted")
    assert p.flush(30) == 0  # librdkafka#4849: abort only once the records' partitions are added
    p.abort_transaction()
    c = consumer(k, k.group_id)
    c.subscribe([k.results_topic])
    got = _drain(c, 5)
    c.close()
    assert sorted(m.value() for m in got) == [b"committed"] * 5


def test_send_offsets_to_transaction_commits_group_offsets(settings: Settings) -> None:
    k = settings.kafka
    pp = plain_producer(k)
    for i in range(12):
        pp.produce(k.uploads_topic, key=f"u{i}".encode(), value=b"x")
    assert pp.flush(10) == 0
    c = consumer(k, k.group_id)
    c.subscribe([k.uploads_topic])
    msgs = _drain(c, 12)
    assert len(msgs) == 12
    p = transactional_producer(k, f"{k.transactional_id_prefix}-offsets")
    p.begin_transaction()
    offsets = {}
    for m in msgs:
        offsets[(m.topic(),
                 m.partition())] = max(offsets.get((m.topic(), m.partition()), -1), m.offset())
    tps = [TopicPartition(t, part, off + 1) for (t, part), off in offsets.items()]
    p.send_offsets_to_transaction(tps, c.consumer_group_metadata())
    p.commit_transaction()
    committed = c.committed(tps, timeout=10)
    c.close()
    assert {(t.partition, t.offset) for t in committed} == {(t.partition, t.offset) for t in tps}
    assert sum(t.offset for t in committed) - sum(
        min(m.offset() for m in msgs if m.partition() == t.partition) for t in committed) == 12


def test_aiokafka_consume_and_commit(settings: Settings) -> None:
    """faust-streaming's client (aiokafka) against the pinned broker."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    k = settings.kafka

    async def run() -> tuple[int, int]:
        prod = AIOKafkaProducer(bootstrap_servers=k.bootstrap_servers)
        await prod.start()
        for i in range(8):
            await prod.send_and_wait(k.dlq_topic, f"v{i}".encode(), key=f"k{i}".encode())
        await prod.stop()
        c = AIOKafkaConsumer(k.dlq_topic, bootstrap_servers=k.bootstrap_servers,
                             group_id=k.group_id + "-aio", enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
        await c.start()
        n = 0
        for _ in range(20):
            batch = await c.getmany(timeout_ms=1000)
            n += sum(len(v) for v in batch.values())
            if n >= 8:
                break
        await c.commit()
        off = await c.committed(ATP(k.dlq_topic, 0))
        await c.stop()
        return n, off

    n, off = asyncio.run(run())
    assert n == 8
    assert off == 8


def test_minio_put_get_stat_and_sse(settings: Settings) -> None:
    st = Storage(settings.s3)
    data = os.urandom(70_000)
    ref = st.put(settings.s3.results_bucket, f"smoke/{uuid.uuid4().hex}.bin", data,
                 "application/octet-stream")
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert st.get(ref.bucket, ref.key) == data
    stat = st.client.stat_object(ref.bucket, ref.key)
    assert stat.size == len(data)

    enc = Storage(settings.s3.model_copy(update={"sse": True}))
    ref2 = enc.put(settings.s3.results_bucket, "smoke/encrypted.bin", data,
                   "application/octet-stream")
    stat2 = enc.client.stat_object(ref2.bucket, ref2.key)
    assert stat2.metadata.get("x-amz-server-side-encryption") == "AES256"
    assert enc.get(ref2.bucket, ref2.key) == data


def test_missing_object_is_object_not_found(settings: Settings) -> None:
    from streams.errors import ObjectNotFound

    with pytest.raises(ObjectNotFound):
        Storage(settings.s3, retries=1).get(settings.s3.uploads_bucket, "does/not/exist.jpg")
