"""Kafka client factories (confluent-kafka) and topic administration.

Every client gets the same base configuration: bootstrap servers, TLS/SASL from the settings'
own fields (:func:`security_config`), the librdkafka pass-through (``settings.kafka.config``) and
the secrets (SASL password, client key password) from the environment.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streams.errors import BrokerUnavailable, KafkaSetupError
from streams.logs import LibrdkafkaLog
from streams.settings import KafkaSettings, ShadowSettings, TopicSettings


def security_config(k: KafkaSettings) -> dict[str, Any]:
    """The librdkafka properties of ``k``'s TLS/SASL fields (secrets included, so never log it).

    ``security.protocol`` always; with TLS ``ssl.ca.location`` (when ``ca_file`` is set),
    ``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.key.password`` (client
    certificate) and ``ssl.endpoint.identification.algorithm=https`` (librdkafka's default since
    2.0, set so that no pass-through turns it off unnoticed); with SASL ``sasl.mechanism``,
    ``sasl.username`` and ``sasl.password``.
    """
    conf: dict[str, Any] = {"security.protocol": k.security_protocol}
    if k.tls:
        conf["ssl.endpoint.identification.algorithm"] = "https"
        if k.ca_file is not None:
            conf["ssl.ca.location"] = str(k.ca_file)
        if k.cert_file is not None and k.key_file is not None:
            conf["ssl.certificate.location"] = str(k.cert_file)
            conf["ssl.key.location"] = str(k.key_file)
        if k.key_password is not None:
            conf["ssl.key.password"] = k.key_password.get_secret_value()
    if k.security_protocol.startswith("SASL_"):
        conf["sasl.mechanism"] = k.sasl_mechanism
        conf["sasl.username"] = k.sasl_username
        if k.sasl_password is not None:
            conf["sasl.password"] = k.sasl_password.get_secret_value()
    return conf


def base_config(k: KafkaSettings) -> dict[str, Any]:
    """librdkafka properties shared by every client (bootstrap, :func:`security_config`, then the
    pass-through ``k.config``), and its log lines routed to the JSON-lines log
    (:class:`streams.logs.LibrdkafkaLog`)."""
    return {"bootstrap.servers": k.bootstrap_servers, "logger": LibrdkafkaLog(),
            **security_config(k), **k.config}


class Admin(AdminClient):
    """An AdminClient that keeps its bootstrap servers, for the helpers here to name them in
    their errors (:func:`setup_error`).

    Attributes:
        bootstrap_servers: ``KafkaSettings.bootstrap_servers``.
    """

    def __init__(self, k: KafkaSettings) -> None:
        super().__init__(base_config(k))
        self.bootstrap_servers = k.bootstrap_servers


def admin(k: KafkaSettings) -> Admin:
    """An AdminClient for ``k``."""
    return Admin(k)


_NO_ANSWER = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                        KafkaError._TIMED_OUT, KafkaError._RESOLVE})
"""librdkafka's codes for a request no broker answered: nothing listening, a name that does not
resolve, no answer within the timeout (:class:`~streams.errors.BrokerUnavailable`)."""


def setup_error(e: KafkaException, what: str, where: str) -> KafkaSetupError:
    """``e``, raised by a client call made before any work (metadata, offsets, an admin call),
    as the project's error, whose message is one line: the request ``what``, the bootstrap
    servers ``where`` and librdkafka's error name and text (which carry no secret: no SASL
    password, no key password).

    Returns:
        :class:`~streams.errors.BrokerUnavailable` when no broker answered (:data:`_NO_ANSWER`),
        else :class:`~streams.errors.KafkaSetupError` (a refusal: authentication,
        authorization, a bad request).
    """
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    detail = f"{err.name()}: {err.str()}" if err is not None else str(e)
    detail = " ".join(detail.split())
    if err is not None and err.code() in _NO_ANSWER:
        return BrokerUnavailable(f"{what}: no answer from {where} ({detail})")
    return KafkaSetupError(f"{what} at {where} failed ({detail})")


@contextmanager
def setup_call(what: str, where: str) -> Iterator[None]:
    """A block of client calls made before any work (``with setup_call(...)``): a
    ``KafkaException`` from inside is raised as :func:`setup_error`'s error.

    Raises:
        BrokerUnavailable / KafkaSetupError: see :func:`setup_error`.
    """
    try:
        yield
    except KafkaException as e:
        raise setup_error(e, what, where) from e


def transactional_producer(k: KafkaSettings, transactional_id: str,
                           init_timeout_s: float | None = 30.0, **extra: Any) -> Producer:
    """An idempotent transactional Producer; ``init_transactions`` already called, unless
    ``init_timeout_s`` is None (the caller calls it, and may call it again after a retriable
    error: librdkafka resumes the operation, ``streams.worker.committer``).

    ``retry.backoff.ms`` is ``k.transaction_retry_backoff_ms`` (see :class:`KafkaSettings`): with
    librdkafka's 100 ms default, a transaction started right after a commit waits ~100 ms.

    Raises:
        KafkaSetupError: the transaction coordinator could not be reached within
            ``init_timeout_s``.
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
    if init_timeout_s is None:
        return p
    try:
        p.init_transactions(init_timeout_s)
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


def read_topic(k: KafkaSettings, topics: str | Sequence[str], *, since_ms: int | None = None,
               at_end: bool = False, follow: bool = False, poll_s: float = 0.5,
               idle_s: float = 10.0, wait_topics_s: float = 0.0, timeout_s: float = 10.0,
               config: Mapping[str, Any] | None = None
               ) -> Generator[list[Message], None, None]:
    """The committed records of ``topics`` (read_committed), as they are fetched: the one way
    the project reads a topic (``cardstream results``, replay, the demo, tests, benchmarks).

    The consumer is assigned every partition (no group join, nothing committed). Each partition
    starts at its beginning; with ``since_ms`` at its first record stamped at or after it
    (``offsets_for_times``); with ``at_end`` at its end now (only what arrives later).

    Args:
        k: Kafka settings.
        topics: one topic or several.
        since_ms: start time (epoch ms), see above. Without ``follow`` a partition with nothing
            at or after it is skipped; with ``follow`` it starts at its end.
        at_end: start every partition at its end.
        follow: keep reading until the caller stops iterating. Without it the reading ends once
            every partition has reached the high watermark captured at the start (a partition
            ending in a transaction marker counts by its position), or after ``idle_s``
            seconds without a record (a bound, not the usual end).
        poll_s: how long one poll waits for a record (s).
        idle_s: see ``follow`` (s).
        wait_topics_s: wait this long for topics missing from the metadata (a topic just
            created takes a moment to show up).
        timeout_s: per metadata / offset request (s).
        config: librdkafka settings for the consumer (e.g. ``{"fetch.wait.max.ms": 10}``).

    Yields:
        Lists of records (errors dropped) in per-partition offset order: as soon as a poll
        returns one, with whatever else is already fetched, so a caller can stamp arrival
        times; an empty list after each ``poll_s`` without a record (a caller that follows
        checks its own deadline then). Nothing for a missing topic without ``follow``.

    Raises:
        KafkaSetupError: with ``follow``, a topic is still missing after ``wait_topics_s``;
            the metadata or the offsets to start from could not be read
            (:class:`~streams.errors.BrokerUnavailable`: no broker answered; raised at the
            first ``next``, before anything is yielded).
    """
    names = [topics] if isinstance(topics, str) else list(topics)
    c = consumer(k, "cardstream-reader", **(config or {}))
    try:
        with setup_call(f"reading {', '.join(names)}", k.bootstrap_servers):
            deadline = time.monotonic() + wait_topics_s
            while True:
                md = c.list_topics(timeout=timeout_s).topics
                missing = [t for t in names if t not in md or md[t].error is not None
                           or not md[t].partitions]
                if not missing or time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
            if missing and follow:
                raise KafkaSetupError(f"topics {missing} not in the cluster metadata")
            parts = [TopicPartition(t, p) for t in names if t not in missing
                     for p in sorted(md[t].partitions)]
            if follow and not at_end and since_ms is None:  # from the beginning, no end: no marks
                marks = {(tp.topic, tp.partition): (0, 0) for tp in parts}
            else:
                marks = {(tp.topic, tp.partition): _watermarks(c, tp, timeout_s) for tp in parts}
            starts = {key: (hi if at_end else OFFSET_BEGINNING) for key, (_, hi) in marks.items()}
            if since_ms is not None and not at_end:
                found = c.offsets_for_times([TopicPartition(t, p, since_ms) for t, p in marks],
                                            timeout_s)
                starts = {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
                if follow:  # nothing since then yet: what arrives later
                    starts = {key: starts.get(key, hi) for key, (_, hi) in marks.items()}
        ends = {} if follow else {key: hi for key, (lo, hi) in marks.items()
                                  if key in starts and hi > max(lo, starts[key])}
        c.assign([TopicPartition(t, p, off) for (t, p), off in starts.items()
                  if follow or (t, p) in ends])
        last = time.monotonic()
        while follow or ends:
            first = c.poll(poll_s)
            msgs = [] if first is None else [first, *c.consume(1000, 0)]
            got = [m for m in msgs if m.error() is None]
            if got:
                last = time.monotonic()
            elif not follow and time.monotonic() - last > idle_s:
                return
            yield got
            if not follow:
                for m in got:
                    t, p, o = m.topic(), m.partition(), m.offset()  # set on every fetched record
                    if t is not None and p is not None and o is not None \
                            and o >= ends.get((t, p), 0) - 1:
                        ends.pop((t, p), None)
                pos = c.position([TopicPartition(t, p) for t, p in ends]) if ends else []
                for tp in pos:
                    if tp.offset >= ends[(tp.topic, tp.partition)]:
                        ends.pop((tp.topic, tp.partition))
    finally:
        c.close()


_NO_LEADER_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.UNKNOWN_TOPIC_OR_PART)
"""What a topic just created answers until its partitions' leaders are elected (the error
confluent-kafka raises from ``get_watermark_offsets`` does not carry librdkafka's retriable
flag, so the codes are named)."""


def _watermarks(c: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """``(low, high)`` watermarks of ``tp``, asked again while its leader is not elected yet
    (:data:`_NO_LEADER_YET`), up to ``timeout_s``.

    Raises:
        KafkaException: another error, or no leader after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return c.get_watermark_offsets(tp, timeout=timeout_s)
        except KafkaException as e:
            if e.args[0].code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def read_to_end(k: KafkaSettings, topic: str, since_ms: int | None = None,
                timeout_s: float = 10.0) -> Iterator[Message]:
    """Every committed record of ``topic`` up to the high watermarks captured now, one by one,
    streamed (memory stays bounded whatever the topic's size): :func:`read_topic` without
    ``follow``."""
    for batch in read_topic(k, topic, since_ms=since_ms, timeout_s=timeout_s):
        yield from batch


class Timestamped(Protocol):
    """A fetched record (``confluent_kafka.Message`` or the worker's ``Record``): its Kafka
    timestamp as ``(type, epoch ms)``."""

    def timestamp(self) -> tuple[int, int]: ...


def timestamp_ms(m: Timestamped) -> float:
    """A record's Kafka timestamp (epoch ms; CreateTime, set by its producer's clock)."""
    return float(m.timestamp()[1])


#: The oldest a record's timestamp may make it look (ms): the uploads topic's default retention
#: (:class:`streams.settings.TopicSettings`), beyond which no record is genuinely still there.
MAX_AGE_MS = float(TopicSettings.model_fields["uploads_retention_ms"].default)


def age_ms(m: Timestamped, now_ms: float) -> float:
    """``now_ms`` minus the record's timestamp (ms), bounded to ``[0, MAX_AGE_MS]``.

    The timestamp is the producer's (CreateTime): a clock ahead gives a negative age (0 here),
    and a timestamp of 1 (1970) would give 56 years of queue time, which one record would carry
    into the latency histograms' sums and the status app's mean and p99 (bounded to 7 days
    here)."""
    return min(max(now_ms - timestamp_ms(m), 0.0), MAX_AGE_MS)


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


def create_topics(a: Admin, specs: list[NewTopic], timeout_s: float = 30.0) -> dict[str, str]:
    """Create ``specs``; an existing topic is left as it is.

    Returns:
        topic -> ``created`` or ``exists``.

    Raises:
        KafkaSetupError: any other creation failure (:func:`setup_error`;
            :class:`~streams.errors.BrokerUnavailable`: no broker answered).
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
                raise setup_error(e, f"creating topic {name}", a.bootstrap_servers) from e
    return out


def delete_topics(a: Admin, names: list[str], timeout_s: float = 30.0) -> None:
    """Delete topics, ignoring ones that do not exist, and return once the broker's metadata no
    longer lists them (the controller accepts a deletion before the brokers drop the topic, so a
    list or a create right after the futures resolve can still see it).

    Raises:
        KafkaSetupError: a deletion failed, or a topic is still listed after ``timeout_s`` s
            (:func:`setup_error`; :class:`~streams.errors.BrokerUnavailable`: no broker
            answered).
    """
    if not names:
        return
    for name, fut in a.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as e:
            if e.args and e.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise setup_error(e, f"deleting topic {name}", a.bootstrap_servers) from e
    deadline = time.monotonic() + timeout_s
    while left := sorted(set(names) & topic_names(a)):
        if time.monotonic() > deadline:
            raise KafkaSetupError(f"topics {left} still listed {timeout_s:.0f} s after deletion")
        time.sleep(0.05)


def topic_names(a: Admin, timeout_s: float = 10.0) -> set[str]:
    """The names of the cluster's topics (its metadata).

    Raises:
        KafkaSetupError: the metadata could not be read (:func:`setup_error`;
            :class:`~streams.errors.BrokerUnavailable`: no broker answered in ``timeout_s``).
    """
    with setup_call("listing the topics", a.bootstrap_servers):
        return set(a.list_topics(timeout=timeout_s).topics)


def shared_topics(names: Iterable[str]) -> list[str]:
    """Those of ``names`` that are a default topic name (the uploads, results, dead-letter and
    shadow topics of :class:`KafkaSettings` and :class:`ShadowSettings`): topics every checkout
    and worker that sets no name of its own shares, so on a shared broker the live ones."""
    k, sh = KafkaSettings.model_fields, ShadowSettings.model_fields
    defaults = {k["uploads_topic"].default, k["results_topic"].default, k["dlq_topic"].default,
                sh["topic"].default}
    return [n for n in names if n in defaults]


def consuming_groups(a: Admin, names: Iterable[str],
                     timeout_s: float = 10.0) -> dict[str, list[str]]:
    """Topic -> the consumer groups (sorted) with a member assigned one of its partitions now,
    for those of ``names`` that have one (a worker, a ``cardstream results --follow``). A
    consumer that assigns partitions itself (a replay) has no members and is not seen.

    Raises:
        KafkaSetupError: the groups could not be listed, or a broker's part of the listing is
            missing (librdkafka returns those errors beside the groups it got, and an answer
            without them could miss the group that reads a topic) (:func:`setup_error`;
            :class:`~streams.errors.BrokerUnavailable`: no broker answered in ``timeout_s``).
    """
    wanted, out = set(names), dict[str, set[str]]()
    with setup_call("listing the consumer groups", a.bootstrap_servers):
        listed = a.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s + 5)
        if listed.errors:
            raise KafkaException(listed.errors[0])
    ids = [g.group_id for g in listed.valid]
    if not ids:
        return {}
    for gid, fut in a.describe_consumer_groups(ids, request_timeout=timeout_s).items():
        try:
            group = fut.result(timeout=timeout_s + 5)
        except KafkaException:
            continue  # gone (or being deleted) since it was listed
        for m in group.members:
            for tp in m.assignment.topic_partitions if m.assignment else []:
                if tp.topic in wanted:
                    out.setdefault(tp.topic, set()).add(gid)
    return {t: sorted(g) for t, g in out.items()}


def describe_topics(a: Admin, names: list[str],
                    timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Partitions, replication and retention of ``names`` (missing topics get ``exists: False``).

    Raises:
        KafkaSetupError: the metadata or the topics' configuration could not be read
            (:func:`setup_error`; :class:`~streams.errors.BrokerUnavailable`: no broker answered
            in ``timeout_s``).
    """
    with setup_call(f"describing {', '.join(names)}", a.bootstrap_servers):
        md = a.list_topics(timeout=timeout_s)
        res = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names if n in md.topics]
        configs = ({r.name: f.result() for r, f in a.describe_configs(res).items()} if res
                   else {})
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
