"""The one frozen settings object, built at start-up from the environment and passed down.

Environment prefix ``CARDSTREAM_``, nested sections with ``__``:
``CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS``, ``CARDSTREAM_S3__SECRET_KEY``,
``CARDSTREAM_WORKER__MAX_BATCH``. TLS and SASL have their own fields
(``CARDSTREAM_KAFKA__SECURITY_PROTOCOL``, ``..._CA_FILE``, ``CARDSTREAM_S3__CA_FILE``...), which
both Kafka clients (confluent-kafka and the status app's aiokafka) read; any other librdkafka
property can be passed through with ``CARDSTREAM_KAFKA__CONFIG='{"socket.keepalive.enable": true}'``
(JSON; a password there is refused: secrets are ``SecretStr`` fields, from the environment only,
and never logged).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from processors import registry
from processors.card.settings import CardSettings
from processors.decode import DecodeSettings
from processors.idphoto.settings import IdPhotoSettings
from processors.runtime import RuntimeSettings
from schemas.codec import DLQ_RECORD_MAX_BYTES, DLQ_RECORD_MIN_BYTES
from streams.gateway.settings import GatewaySettings
from streams.retry import RetryPolicy
from streams.status_settings import StatusSettings


class _Frozen(BaseModel):
    # a refused value is not echoed in the error: it may be a secret
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    @model_validator(mode="before")
    @classmethod
    def _partial_retry_policies(cls, data: Any) -> Any:
        """A retry policy given in part (``CARDSTREAM_S3__RETRY__ATTEMPTS=6`` alone) keeps its
        field's defaults for the rest (:mod:`streams.retry`)."""
        if not isinstance(data, dict):
            return data
        for name, f in cls.model_fields.items():
            if isinstance(f.default, RetryPolicy) and isinstance(data.get(name), dict):
                data = {**data, name: {**f.default.model_dump(), **data[name]}}
        return data


class TopicSettings(_Frozen):
    """How ``cardstream topics create`` makes the topics.

    Attributes:
        uploads_partitions: partitions of the uploads topic (the ceiling on worker count).
        results_partitions / dlq_partitions: partitions of the results and dead-letter topics.
        replication_factor: replicas per partition (1 on the local one-node stack).
        uploads_retention_ms / results_retention_ms: retention (ms); 7 days by default so a
            replay window of a week is possible.
        dlq_max_message_bytes: ``max.message.bytes`` of the dead-letter topic (1 MiB), above
            the dead letters' size budget (``schemas.codec.DLQ_RECORD_MAX_BYTES``, 256 KiB), so
            a dead letter always fits.
    """

    uploads_partitions: int = 6
    results_partitions: int = 6
    dlq_partitions: int = 1
    replication_factor: int = 1
    uploads_retention_ms: int = 7 * 24 * 3600 * 1000
    results_retention_ms: int = 7 * 24 * 3600 * 1000
    dlq_max_message_bytes: int = Field(1024 * 1024, ge=64 * 1024)


#: librdkafka properties that hold a secret: refused in ``KafkaSettings.config`` (a ConfigMap or a
#: JSON blob in a values file would carry them); they come from SecretStr fields instead.
SECRET_KAFKA_PROPERTIES = ("sasl.password", "ssl.key.password", "ssl.keystore.password",
                           "ssl.truststore.password", "sasl.oauthbearer.client.secret",
                           "ssl.key.pem")


#: librdkafka properties in ``KafkaSettings.config`` that are moved into their own fields (so that
#: the status app's aiokafka client sees them too): property -> field.
LIFTED_KAFKA_PROPERTIES = {"security.protocol": "security_protocol",
                           "sasl.mechanism": "sasl_mechanism",
                           "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_username",
                           "ssl.ca.location": "ca_file", "ssl.certificate.location": "cert_file",
                           "ssl.key.location": "key_file"}


class KafkaSettings(_Frozen):
    """Kafka connection and topics.

    Attributes:
        bootstrap_servers: ``host:port[,host:port]``.
        uploads_topic / results_topic / dlq_topic: topic names (v1 contracts).
        group_id: consumer group of the workers.
        transactional_id_prefix: a worker slot's transactional.id is ``{prefix}-{slot}``.
        security_protocol: ``PLAINTEXT`` (the local stack's default listener), ``SSL``,
            ``SASL_PLAINTEXT`` or ``SASL_SSL`` (TLS + SASL; what a deployment should use).
        sasl_mechanism: ``SCRAM-SHA-512`` (default), ``SCRAM-SHA-256`` or ``PLAIN``.
        sasl_username: SASL user (not a secret).
        sasl_password: SASL password (secret, environment only).
        ca_file: PEM file of the CA(s) that signed the brokers' certificates (default: the
            system's trust store).
        cert_file / key_file: PEM client certificate and its private key, for brokers that
            require TLS client authentication (mTLS); ``key_password`` (secret) if the key is
            encrypted.
        config: extra librdkafka properties applied to every confluent-kafka client. The TLS/SASL
            ones of :data:`LIFTED_KAFKA_PROPERTIES` (``security.protocol``, ``sasl.username``...)
            are moved into their fields, so the status app's aiokafka client gets them too; a
            secret-bearing property (:data:`SECRET_KAFKA_PROPERTIES`) is refused.
        transaction_retry_backoff_ms: ``retry.backoff.ms`` of the workers' transactional
            producer (the first retry of a request; librdkafka doubles it per retry up to
            ``retry.backoff.max.ms``, 1 s). A transaction that begins right after the previous
            commit is refused with CONCURRENT_TRANSACTIONS until the coordinator has written that
            commit's markers, and librdkafka retries ``send_offsets_to_transaction``'s
            AddOffsetsToTxn after this backoff: at librdkafka's default of 100 ms back-to-back
            transactions took a median 98 ms on the local stack, at 2 ms a median 4 ms.
        commit_retry: how a worker retries ``commit_transaction`` while it fails with a
            retriable error (:class:`~streams.retry.RetryPolicy`; 0.2 s doubling to 0.8 s, 5
            calls; ``CARDSTREAM_KAFKA__COMMIT_RETRY__*``); still failing, the consumer group's
            committed offsets decide the outcome (``streams.worker.committer``).
        producer_wait: how often a worker without a transactional producer (the broker did not
            answer a new one's ``init_transactions``, e.g. down past a stuck commit's bound)
            tries again (0.5 s doubling to 5 s, jitter 0.1, until it works;
            ``CARDSTREAM_KAFKA__PRODUCER_WAIT__*``); each try blocks up to 5 s
            (``Committer.INIT_TIMEOUT_S``), its batch waits meanwhile.

    Raises:
        pydantic.ValidationError: a secret in ``config``; a property in ``config`` that
            contradicts its own field; SASL without a user name; a client key without its
            certificate (or the reverse).
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    uploads_topic: str = "cardstream.uploads.v1"
    results_topic: str = "cardstream.results.v1"
    dlq_topic: str = "cardstream.dlq.v1"
    group_id: str = "cardstream"
    transactional_id_prefix: str = "cardstream-worker"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    key_password: SecretStr | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    transaction_retry_backoff_ms: int = Field(2, ge=1, le=10_000)
    commit_retry: RetryPolicy = RetryPolicy(first_s=0.2, cap_s=0.8, attempts=5)
    producer_wait: RetryPolicy = RetryPolicy(first_s=0.5, cap_s=5.0, jitter=0.1)
    topics: TopicSettings = Field(default_factory=TopicSettings)

    @model_validator(mode="before")
    @classmethod
    def _lift_security_properties(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
            return data
        data, config = dict(data), dict(data["config"])
        for prop, name in LIFTED_KAFKA_PROPERTIES.items():
            if prop not in config:
                continue
            value = config.pop(prop)
            if data.get(name) not in (None, value):
                raise ValueError(f"kafka.config {prop}={value!r} contradicts {name}={data[name]!r}")
            data[name] = value
        data["config"] = config
        return data

    @field_validator("config")
    @classmethod
    def _no_secret_in_config(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = sorted(k for k in v if k.lower() in SECRET_KAFKA_PROPERTIES)
        if bad:
            raise ValueError(f"{', '.join(bad)} must not be in kafka.config (it may end up in a "
                             "ConfigMap or a log): set CARDSTREAM_KAFKA__SASL_PASSWORD / "
                             "CARDSTREAM_KAFKA__KEY_PASSWORD in the environment instead")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL_") and not self.sasl_username:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_username "
                             "(CARDSTREAM_KAFKA__SASL_USERNAME)")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (TLS client certificate)")
        return self

    @property
    def tls(self) -> bool:
        """True when the connection is encrypted (``SSL`` or ``SASL_SSL``)."""
        return self.security_protocol in ("SSL", "SASL_SSL")


class RoleCredentials(_Frozen):
    """An S3 user's access key and secret key (secret, environment only)."""

    access_key: str = Field(min_length=3)
    secret_key: SecretStr


class S3RoleSettings(_Frozen):
    """Credentials of the per-role MinIO users that ``cardstream buckets create`` creates (or
    updates) with their policies (:mod:`streams.access`). Only the set-up job (with the admin
    credentials) reads these; a role left unset gets its policy but no user. The status app has
    no role: it never touches the object store.

    Attributes:
        worker: reads uploads, writes results and quarantine (``CARDSTREAM_S3__ROLES__WORKER__*``).
        producer: writes uploads (the ticketing platform).
        ocr: reads results (downstream OCR).
        gateway: writes, reads and deletes uploads, reads results (``cardstream gateway``).
    """

    worker: RoleCredentials | None = None
    producer: RoleCredentials | None = None
    ocr: RoleCredentials | None = None
    gateway: RoleCredentials | None = None


class S3Settings(_Frozen):
    """Object store (MinIO) connection, buckets and their protection.

    Attributes:
        endpoint: ``host:port`` without scheme.
        secure: use TLS (default on; the local stack serves MinIO over TLS only).
        ca_file: PEM file of the CA(s) that signed the server's certificate (default: the
            system's trust store, or ``SSL_CERT_FILE``).
        cert_file / key_file: PEM client certificate and key, for a server that asks for one.
        access_key / secret_key: credentials, from the environment only (secret_key is a secret;
            ``scripts/stack env`` prints the local stack's).
        region: bucket region.
        uploads_bucket: where producers put claim-check images.
        results_bucket: where workers put outputs.
        quarantine_bucket: where dead-letter payloads go (they may hold image bytes), so that
            Kafka's dead letters carry a reference instead (:mod:`streams.quarantine`).
        allowed_buckets: buckets an UploadEvent may reference (default: the uploads bucket).
        sse: request SSE-S3 (server-side encryption with the server's KMS key) on every PUT
            (default on; the buckets also encrypt by default and the role policies refuse a PUT
            without it).
        uploads_expiry_days / results_expiry_days / quarantine_expiry_days: lifecycle rules set
            by ``cardstream buckets create``: objects are deleted this many days after they
            were written (7: the uploads topic's retention, so a replay window of a week still
            finds its images; 30: time for downstream OCR and disputes; 1: enough for an
            operator to look at a dead letter's payload the next working day). S3 lifecycle
            rules count whole days.
        roles: per-role users to create (:class:`S3RoleSettings`, set-up job only).
        retry: how a call the store answers with an outage is retried
            (:class:`~streams.retry.RetryPolicy`; 0.2 s doubling to 5 s, jitter 0.1, 4 calls;
            ``CARDSTREAM_S3__RETRY__*``), then raised as ``StorageError``.
    """

    endpoint: str = "127.0.0.1:9000"
    secure: bool = True
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    access_key: str | None = None
    secret_key: SecretStr | None = None
    region: str = "us-east-1"
    uploads_bucket: str = "uploads"
    results_bucket: str = "results"
    quarantine_bucket: str = "quarantine"
    allowed_buckets: tuple[str, ...] = ("uploads",)
    sse: bool = True
    uploads_expiry_days: int = Field(7, ge=1, le=36500)
    results_expiry_days: int = Field(30, ge=1, le=36500)
    quarantine_expiry_days: int = Field(1, ge=1, le=36500)
    roles: S3RoleSettings = Field(default_factory=S3RoleSettings)
    retry: RetryPolicy = RetryPolicy(first_s=0.2, cap_s=5.0, jitter=0.1, attempts=4)

    @model_validator(mode="after")
    def _consistent(self) -> S3Settings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (TLS client certificate)")
        return self


def hostname_ordinal(hostname: str) -> int:
    """The trailing ``-N`` of a host name (``cardstream-worker-2`` -> 2: a StatefulSet pod's
    ordinal, a stable worker slot), else 0."""
    m = re.search(r"-(\d+)$", hostname)
    return int(m.group(1)) if m else 0


def known_tasks(names: Iterable[str], what: str) -> None:
    """Check that ``names`` are registered tasks (:mod:`processors.registry`).

    Raises:
        ValueError: one is not; the message names ``what`` and the tasks there are.
    """
    unknown = sorted(set(names) - set(map(str, registry.names())))
    if unknown:
        raise ValueError(f"{what} names unknown tasks {unknown}; tasks: "
                         f"{', '.join(map(str, registry.names()))}")


class WorkerSettings(_Frozen):
    """Worker loop.

    Attributes:
        max_batch: events per poll batch (closes the batch when reached).
        max_wait_ms: ms to wait for a batch to fill after its first event (events prefetched
            while the previous batch computed count from when they arrived).
        poll_interval_ms: while a batch computes (or its PUTs run) the loop wakes as soon as
            it is done, and this often meanwhile to move prefetched events into the next batch
            and serve rebalance callbacks.
        tasks: tasks this worker serves (default: every task of :mod:`processors.registry`).
        slot: worker slot number (stable transactional.id across restarts of the slot); not
            set: the trailing ``-N`` of ``HOSTNAME`` (a StatefulSet pod's ordinal), else 0.
        io_threads: thread pool size for MinIO GET/PUT and decode.
        http_port: port of /ready, /live, /metrics (0: off).
        max_poll_interval_ms: librdkafka max.poll.interval.ms (above the worst batch).
        inline_max_bytes: largest inline image (bytes, before base64).
        dlq_value_max_bytes: original value bytes kept in a dead letter. 0 (default): none;
            an event's value may hold inline image bytes and ``subject_ref``, and the
            dead-letter topic keeps its records for days, so the worker PUTs the whole value to
            the quarantine bucket (:mod:`streams.quarantine`) and the dead letter keeps its size
            and a reference. Above 0: the dead letter keeps up to that many bytes of the value
            itself and nothing is quarantined (only for a dead-letter topic as closed as the
            uploads bucket).
        dlq_record_max_bytes: size budget of one dead-letter record (key + value + headers,
            bytes; ``schemas.codec.make_dead_letter``): 256 KiB by default, at least 16 KiB
            (``schemas.codec.DLQ_RECORD_MIN_BYTES``) and at most the dead-letter topic's
            ``kafka.topics.dlq_max_message_bytes``. A dead letter the broker still refuses is
            replaced by its minimal form (``schemas.codec.minimal_dead_letter``).
        poison_attempts: tries of a record alone, each ending the worker process (a crash,
            an out-of-memory kill, a hang past the compute deadline), after which it is not
            tried again but dead-lettered ``POISON`` (``streams.worker.attempts``).
        decode_budget_bytes: memory a batch's decoded images may take at once (bytes, 1 GiB by
            default; as each header declares, ``processors.decode.decoded_bytes``): a batch
            decodes and processes its images in chunks within it, instead of all at once
            (``max_batch`` x ``decode.max_pixels`` x 3 bytes: 3.8 GB at 32 x 40 MP). Size it to
            the pod's memory limit less the worker's own (~0.4 GB with the sleep processor).
        compute_deadline_s: a batch computing longer than this (s; parse, GETs, decode and
            model calls) fails ``/live``, and ``cardstream worker`` exits (code 70) so that it
            is restarted; the restarted worker counts the start (``poison_attempts``). With
            ``compute_deadline_per_item_s`` per event of the batch added, above the worst
            legitimate batch, GET retries included.
        compute_deadline_per_item_s: what each event of a batch adds to its compute deadline
            (s; 20 by default: a batch of 9 is given 300 s, of 32 760 s, one alone (a record
            isolated after a crash or hang) 140 s). Issue 43: a flat 120 s ended the worker
            (status 70) on a batch of 9 uploads on 2 cores at load 11.
        shutdown_timeout_s: bound on graceful SIGTERM handling.
        store_wait: how often a worker paused by a store outage asks whether the store
            answers again (:class:`~streams.retry.RetryPolicy`; 0.5 s doubling to 5 s;
            ``CARDSTREAM_WORKER__STORE_WAIT__*``); it keeps polling Kafka meanwhile. Its
            waits, one per outage in a row, are also the least pause before a failed batch is
            redone, however soon the store answers again.
        breaker: the processor breaker's pause (:class:`~streams.retry.RetryPolicy`; 1 s,
            doubled per failure in a row up to 30 s; ``CARDSTREAM_WORKER__BREAKER__*``).
        store_refusal: the pause after the object store refused a batch's call in a way no
            wait clears (a missing bucket, a denied permission or SSE, a quota:
            :class:`~streams.errors.StoreRefused`; 1 s doubled to 30 s;
            ``CARDSTREAM_WORKER__STORE_REFUSAL__*``); readiness fails meanwhile.
        store_refusal_limit_s: after refusals in a row for this long (s; 300), the worker
            stops with the error (``cardstream worker`` exits 1) instead of trying again.
        model_files: task -> an ONNX file its processor loads instead of the task's pinned
            main model (``TaskSpec.build``'s ``model_file``; the outputs' model version follows
            the file's digest), e.g. a shadow version promoted (:class:`ShadowSettings`).
    """

    max_batch: int = Field(32, ge=1, le=10_000)
    max_wait_ms: int = Field(10, ge=0, le=60_000)
    poll_interval_ms: int = Field(10, ge=1, le=1_000)
    tasks: tuple[str, ...] = Field(default_factory=lambda: tuple(map(str, registry.names())))
    slot: int = Field(default_factory=lambda: hostname_ordinal(os.environ.get("HOSTNAME", "")),
                      ge=0)
    io_threads: int = Field(8, ge=1, le=256)
    http_port: int = Field(8080, ge=0, le=65535)
    max_poll_interval_ms: int = Field(300_000, ge=10_000)
    inline_max_bytes: int = Field(512 * 1024, ge=0)
    dlq_value_max_bytes: int = Field(0, ge=0)
    dlq_record_max_bytes: int = Field(DLQ_RECORD_MAX_BYTES, ge=DLQ_RECORD_MIN_BYTES)
    poison_attempts: int = Field(2, ge=1, le=100)
    decode_budget_bytes: int = Field(1024**3, ge=1024**2)
    compute_deadline_s: float = Field(120.0, gt=0)
    compute_deadline_per_item_s: float = Field(20.0, ge=0)
    model_files: dict[str, Path] = Field(default_factory=dict)
    shutdown_timeout_s: float = Field(30.0, gt=0)
    store_wait: RetryPolicy = RetryPolicy(first_s=0.5, cap_s=5.0)
    breaker: RetryPolicy = RetryPolicy(first_s=1.0, cap_s=30.0)
    store_refusal: RetryPolicy = RetryPolicy(first_s=1.0, cap_s=30.0)
    store_refusal_limit_s: float = Field(300.0, gt=0)

    @field_validator("model_files")
    @classmethod
    def _model_files_of_tasks(cls, v: dict[str, Path]) -> dict[str, Path]:
        known_tasks(v, "worker.model_files")
        return v


class DeadlineSettings(_Frozen):
    """When an upload is too old to compute (:mod:`streams.deadlines`).

    Attributes:
        max_age_s: task -> maximum age (s) from the upload record's Kafka timestamp, e.g.
            ``CARDSTREAM_DEADLINES__MAX_AGE_S='{"card": 120}'``; an older upload is answered
            ``rejected`` with ``STALE`` without compute, as one past its own ``deadline`` is.
            A task not named has no maximum age (the default).
    """

    max_age_s: dict[str, float] = Field(default_factory=dict)

    @field_validator("max_age_s")
    @classmethod
    def _known_tasks(cls, v: dict[str, float]) -> dict[str, float]:
        known_tasks(v, "deadlines.max_age_s")
        if any(not s > 0 for s in v.values()):
            raise ValueError("max_age_s values are seconds above 0")
        return v


class CacheSettings(_Frozen):
    """The result cache of repeat uploads (:mod:`streams.cache`): per worker process.

    Attributes:
        enabled: answer a repeat (same image bytes, task, options, model version) from the
            cache.
        max_bytes: bound on the cached outcomes' artifact bytes (64 MiB by default: a few
            hundred card or ID-photo outputs).
        max_entries: bound on the number of cached outcomes.
    """

    enabled: bool = True
    max_bytes: int = Field(64 * 1024**2, ge=0)
    max_entries: int = Field(10_000, ge=0)


class BackfillSettings(_Frozen):
    """How a replay or backfill yields to the live workers (:mod:`streams.backfill`), and when
    it gives up on the object store.

    Attributes:
        yield_to_live: pause the replay while the live consumer group is busy.
        yield_lag: the live group's lag (uploads not committed, all partitions) above which the
            replay pauses before its next batch (32: a full batch waiting).
        quiet_s: how long the lag must stay within the bound before the replay resumes (s).
        check_s: how often the live lag is read (s).
        max_batch: the replay's batches hold at most this many events while it yields (a live
            upload arriving while one computes waits for at most that much of the replay).
        nice: the scheduling niceness ``cardstream replay`` lowers itself by before it loads
            its models (``os.nice``; 0: none), so that on shared CPU cores the kernel runs the
            live workers first. A GPU's time is shared by the gate alone.
        store_outage_limit_s: a replay whose batches find the object store unavailable (no
            answer, or an outage's answer: 5xx, credentials refused) for this long in a row
            (s; 60) stops with the error (``cardstream replay`` exits 1) instead of waiting for
            it as the live worker does; it may overrun by one batch's retried calls.
    """

    yield_to_live: bool = True
    yield_lag: int = Field(32, ge=0)
    quiet_s: float = Field(2.0, ge=0)
    check_s: float = Field(0.5, gt=0, le=60)
    max_batch: int = Field(4, ge=1, le=10_000)
    nice: int = Field(10, ge=0, le=19)
    store_outage_limit_s: float = Field(60.0, gt=0)


class ShadowSettings(_Frozen):
    """A shadow model version (:mod:`streams.shadow`): another model file of one task runs on
    a sampled share of live uploads beside the live one; each comparison goes to ``topic`` and
    the metrics, never into a result.

    Attributes:
        task: the task whose uploads are sampled (a task whose spec takes a model file:
            ``card``).
        model_file: the shadow version's ONNX file (its version is the processor's, from the
            file's digest).
        share: the sampled share of the task's live uploads (0: off; an upload is sampled by a
            hash of its ``upload_id``, so a redelivery is sampled the same way).
        topic: where the comparisons go (``ShadowDiff``, ``schemas/shadow_diff.v1.schema.json``).

    Promoting the shadow version is a settings change: its file as
    ``CARDSTREAM_WORKER__MODEL_FILES`` for the task, and ``share`` back to 0.

    Raises:
        pydantic.ValidationError: a share above 0 without a task or a model file.
    """

    task: str | None = None
    model_file: Path | None = None
    share: float = Field(0.0, ge=0.0, le=1.0)
    topic: str = Field("cardstream.shadow.v1", min_length=1, max_length=249)

    @model_validator(mode="after")
    def _complete(self) -> ShadowSettings:
        if self.share > 0 and (self.task is None or self.model_file is None):
            raise ValueError("shadow.share above 0 needs shadow.task and shadow.model_file")
        known_tasks([self.task] if self.task is not None else [], "shadow.task")
        return self


class TracingSettings(_Frozen):
    """OpenTelemetry traces of the worker (:mod:`streams.tracing`); off by default.

    Attributes:
        enabled: record spans and export them (``CARDSTREAM_TRACING__ENABLED``). Off, no span
            is recorded, but a valid incoming ``traceparent`` still goes on, unchanged, into the
            result's and the dead letter's headers.
        otlp_endpoint: the OTLP/HTTP traces URL of a collector (``/v1/traces``; 4318 is OTLP's
            HTTP port). Spans are exported in batches on a background thread; an unreachable
            collector drops them and never holds the worker.
        otlp_timeout_s: timeout of one export request (s).
        sample_ratio: share of the traces the worker starts itself (uploads without a
            ``traceparent``) that are recorded; an incoming context's sampled flag is followed.
        service_name: the ``service.name`` resource attribute.
    """

    enabled: bool = False
    otlp_endpoint: str = "http://127.0.0.1:4318/v1/traces"
    otlp_timeout_s: float = Field(10.0, gt=0, le=300)
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    service_name: str = Field("cardstream-worker", min_length=1, max_length=128)


class Settings(BaseSettings):
    """All settings of a cardstream process (frozen)."""

    model_config = SettingsConfigDict(
        env_prefix="CARDSTREAM_", env_nested_delimiter="__", frozen=True, extra="ignore",
        hide_input_in_errors=True,
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    s3: S3Settings = Field(default_factory=S3Settings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    decode: DecodeSettings = Field(default_factory=DecodeSettings)
    card: CardSettings = Field(default_factory=CardSettings)
    idphoto: IdPhotoSettings = Field(default_factory=IdPhotoSettings)
    status: StatusSettings = Field(default_factory=StatusSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    deadlines: DeadlineSettings = Field(default_factory=DeadlineSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    backfill: BackfillSettings = Field(default_factory=BackfillSettings)
    shadow: ShadowSettings = Field(default_factory=ShadowSettings)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """JSON log lines on stderr at this level and above (``CARDSTREAM_LOG_LEVEL``, any case);
    another value is a settings error, not a silent INFO."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_upper(cls, v: object) -> object:
        """``debug`` is ``DEBUG``: the level's name in any case."""
        return v.strip().upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _dead_letters_fit(self) -> Settings:
        """A dead letter's size budget must fit the dead-letter topic's message limit."""
        limit = self.kafka.topics.dlq_max_message_bytes
        if self.worker.dlq_record_max_bytes > limit:
            raise ValueError(f"worker.dlq_record_max_bytes {self.worker.dlq_record_max_bytes} is "
                             f"above kafka.topics.dlq_max_message_bytes {limit}")
        return self


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment (``CARDSTREAM_*``) plus keyword overrides.

    Raises:
        SettingsError: a value is refused; the message names each variable
            (``CARDSTREAM_RUNTIME__PRECISION: Input should be 'auto', ...``), one line. A trial's
            bad value printed a 50-line traceback before; so did an object or list setting
            that is not JSON (``CARDSTREAM_KAFKA__CONFIG='{bad'``), now named too.
    """
    from pydantic import ValidationError
    from pydantic_settings.exceptions import SettingsError as PydanticSettingsError

    from schemas.errors import field_errors
    from streams.errors import SettingsError

    prefix = Settings.model_config.get("env_prefix") or ""
    nested = Settings.model_config.get("env_nested_delimiter") or "__"
    try:
        return Settings(**overrides)
    except PydanticSettingsError as e:  # a complex value (an object, a list) is not JSON
        import json
        import os

        def parses(v: str) -> bool:
            try:
                json.loads(v)
            except ValueError:
                return False
            return True

        bad = sorted(k for k, v in os.environ.items()
                     if k.upper().startswith(prefix.upper()) and not parses(v)
                     and v.lstrip()[:1] in ("[", "{"))
        why = type(e.__cause__).__name__ if e.__cause__ else "unreadable"
        field = str(e).split('"')[1] if str(e).count('"') >= 2 else ""
        where = f"a {prefix}{field.upper()}{nested}* setting" if field else f"a {prefix}* setting"
        raise SettingsError(f"{', '.join(bad) or where}: not a JSON object "
                            f"or list ({why}; the value is not shown: it may be a secret); "
                            f"{e}") from None
    except ValidationError as e:
        raise SettingsError("; ".join(
            f"{prefix}{nested.join(str(x) for x in f.loc).upper()}: {f.msg}" if f.loc
            else f.msg for f in field_errors(e))) from None
