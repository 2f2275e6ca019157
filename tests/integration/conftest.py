"""Integration tier: the real local stack (scripts/stack up), fresh uuid topics/groups per test."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from streams.settings import KafkaSettings, Settings, TopicSettings, load_settings


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    """Settings from the environment; fails (never skips) when the stack's env is not set."""
    if "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS" not in os.environ:
        pytest.fail("integration tests need the real stack: run `make test` "
                    "(or `scripts/stack up && eval \"$(scripts/stack env)\"`)")
    return load_settings()


@pytest.fixture
def run_id() -> str:
    """A fresh id for this test's topics, group and bucket."""
    return uuid.uuid4().hex[:12]


@contextlib.contextmanager
def fresh_settings(base_settings: Settings, run_id: str) -> Iterator[Settings]:
    """Settings whose topics, consumer group, transactional ids and buckets are named after
    ``run_id``: created on entry, deleted on exit (side topics named ``t-<id>.*`` too)."""
    from streams.kafka import admin, create_topics, delete_topics, topic_specs
    from streams.storage import Storage

    k = base_settings.kafka.model_copy(update={
        "uploads_topic": f"t-{run_id}.uploads",
        "results_topic": f"t-{run_id}.results",
        "dlq_topic": f"t-{run_id}.dlq",
        "group_id": f"g-{run_id}",
        "transactional_id_prefix": f"tx-{run_id}",
        "topics": TopicSettings(uploads_partitions=6, results_partitions=3, dlq_partitions=1),
    })
    s3 = base_settings.s3.model_copy(update={
        "uploads_bucket": f"up-{run_id}", "results_bucket": f"res-{run_id}",
        "quarantine_bucket": f"qua-{run_id}", "allowed_buckets": (f"up-{run_id}",),
    })
    s = base_settings.model_copy(update={"kafka": k, "s3": s3})
    a = admin(k)
    create_topics(a, topic_specs(k))
    buckets = [s3.uploads_bucket, s3.results_bucket, s3.quarantine_bucket]
    Storage(s3).ensure_buckets(buckets)
    try:
        yield s
    finally:
        extra = [t for t in a.list_topics(timeout=10).topics if t.startswith(f"t-{run_id}.")]
        delete_topics(a, sorted({k.uploads_topic, k.results_topic, k.dlq_topic, *extra}))
        st = Storage(s3)
        for b in buckets:
            for o in st.client.list_objects(b, recursive=True):
                st.client.remove_object(b, o.object_name)
            st.client.remove_bucket(b)


@pytest.fixture
def settings(base_settings: Settings, run_id: str) -> Iterator[Settings]:
    """Settings whose topics, consumer group, transactional ids and buckets are fresh for this test.

    The topics and buckets (uploads, results, and quarantine for dead letters' values) are
    created before the test; afterwards its topics (side topics named ``t-<id>.*`` too) and
    buckets are deleted.
    """
    with fresh_settings(base_settings, run_id) as s:
        yield s


@pytest.fixture
def kafka(settings: Settings) -> KafkaSettings:
    """This test's Kafka settings (fresh topics and group)."""
    return settings.kafka
