"""Kafka client factories (confluent-kafka) and topic administration.

Every client gets the same base configuration: bootstrap servers, the librdkafka pass-through
(``settings.kafka.config``, for TLS/SASL) and the SASL password from the secret.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streams.errors import KafkaSetupError
from streams.logs import LibrdkafkaLog
from streams.settings import KafkaSettings


def base_config(k: KafkaSettings) -> dict[str, Any]:
    """librdkafka properties shared by every client (bootstrap + pass-through + secret), and its
    log lines routed to the JSON-lines log (:class:`streams.logs.LibrdkafkaLog`)."""
    conf: dict[str, Any] = {"bootstrap.servers": k.bootstrap_servers, "logger": LibrdkafkaLog(),
                            **k.config}
    if k.sasl_password is not None:
        conf["sasl.password"] = k.sasl_password.get_secret_value()
    return conf


def admin(k: KafkaSettings) -> AdminClient:
    """An AdminClient for ``k``."""
    return AdminClient(base_config(k))


def transactional_producer(k: KafkaSettings, transactional_id: str, **extra: Any) -> Producer:
    """An idempotent transactional Producer; ``init_transactions`` already called.

    ``retry.backoff.ms`` is ``k.transaction_retry_backoff_ms`` (see :class:`KafkaSettings`): with
    librdkafka's 100 ms default, a transaction started right after a commit waits ~100 ms.

    Raises:
        KafkaSetupError: the transaction coordinator could not be reached within 30 s.
    """
    conf = {
        **base_config(k),
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "retry.backoff.ms": k.transaction_retry_backoff_ms,
        **extra,
    }
    p = Producer(conf)
    try:
        p.init_transactions(30)
    except KafkaException as e:
        raise KafkaSetupError(f"init_transactions({transactional_id}) failed: {e}") from e
    return p


def plain_producer(k: KafkaSettings, **extra: Any) -> Producer:
    """An idempotent, non-transactional Producer (uploads from the platform / load generator)."""
    return Producer({**base_config(k), "enable.idempotence": True, "acks": "all",
                     "linger.ms": 5, **extra})


def consumer(k: KafkaSettings, group_id: str, **extra: Any) -> Consumer:
    """A read_committed Consumer with manual commits.

    Defaults: ``enable.auto.commit=false``, ``isolation.level=read_committed``,
    ``auto.offset.reset=earliest``, cooperative-sticky assignment.
    """
    conf = {
        **base_config(k),
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        **extra,
    }
    return Consumer(conf)


def topic_specs(k: KafkaSettings) -> list[NewTopic]:
    """The project's topics as ``NewTopic`` specs (partitions, replication, retention; the
    dead-letter topic's ``max.message.bytes`` above the dead letters' size budget)."""
    t = k.topics
    return [
        NewTopic(k.uploads_topic, t.uploads_partitions, t.replication_factor,
                 config={"retention.ms": str(t.uploads_retention_ms)}),
        NewTopic(k.results_topic, t.results_partitions, t.replication_factor,
                 config={"retention.ms": str(t.results_retention_ms)}),
        NewTopic(k.dlq_topic, t.dlq_partitions, t.replication_factor,
                 config={"retention.ms": str(t.results_retention_ms),
                         "max.message.bytes": str(t.dlq_max_message_bytes)}),
    ]


def create_topics(a: AdminClient, specs: list[NewTopic], timeout_s: float = 30.0) -> dict[str, str]:
    """Create ``specs``; an existing topic is left as it is.

    Returns:
        topic -> ``created`` or ``exists``.

    Raises:
        KafkaSetupError: any other creation failure.
    """
    out: dict[str, str] = {}
    futures = a.create_topics(specs, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, fut in futures.items():
        try:
            fut.result()
            out[name] = "created"
        except KafkaException as e:
            if e.args and e.args[0].name() == "TOPIC_ALREADY_EXISTS":
                out[name] = "exists"
            else:
                raise KafkaSetupError(f"creating topic {name} failed: {e}") from e
    return out


def delete_topics(a: AdminClient, names: list[str], timeout_s: float = 30.0) -> None:
    """Delete topics, ignoring ones that do not exist, and return once the broker's metadata no
    longer lists them (the controller accepts a deletion before the brokers drop the topic, so a
    list or a create right after the futures resolve can still see it).

    Raises:
        KafkaSetupError: a deletion failed, or a topic is still listed after ``timeout_s`` s.
    """
    if not names:
        return
    for name, fut in a.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as e:
            if e.args and e.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise KafkaSetupError(f"deleting topic {name} failed: {e}") from e
    deadline = time.monotonic() + timeout_s
    while left := sorted(set(names) & set(a.list_topics(timeout=10).topics)):
        if time.monotonic() > deadline:
            raise KafkaSetupError(f"topics {left} still listed {timeout_s:.0f} s after deletion")
        time.sleep(0.05)


def describe_topics(a: AdminClient, names: list[str], timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Partitions, replication and retention of ``names`` (missing topics get ``exists: False``)."""
    md = a.list_topics(timeout=timeout_s)
    res = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names if n in md.topics]
    configs = {r.name: f.result() for r, f in a.describe_configs(res).items()} if res else {}
    rows = []
    for n in names:
        t = md.topics.get(n)
        if t is None:
            rows.append({"topic": n, "exists": False})
            continue
        parts = t.partitions
        cfg = configs.get(n, {})
        rows.append({
            "topic": n, "exists": True, "partitions": len(parts),
            "replication": min((len(p.replicas) for p in parts.values()), default=0),
            "retention_ms": int(cfg["retention.ms"].value) if "retention.ms" in cfg else None,
        })
    return rows
