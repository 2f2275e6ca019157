"""The one frozen settings object, built at start-up from the environment and passed down.

Environment prefix ``CARDSTREAM_``, nested sections with ``__``: ``CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS``,
``CARDSTREAM_S3__SECRET_KEY``, ``CARDSTREAM_WORKER__MAX_BATCH``. Any librdkafka property can be
passed through with ``CARDSTREAM_KAFKA__CONFIG='{"security.protocol": "SASL_SSL", ...}'`` (JSON),
for TLS/SASL. Secrets are ``SecretStr`` and never logged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from processors.card.settings import CardSettings
from processors.decode import DecodeSettings
from processors.idphoto.settings import IdPhotoSettings
from processors.runtime import RuntimeSettings
from streams.status_settings import StatusSettings


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


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


class KafkaSettings(_Frozen):
    """Kafka connection and topics.

    Attributes:
        bootstrap_servers: ``host:port[,host:port]``.
        uploads_topic / results_topic / dlq_topic: topic names (v1 contracts).
        group_id: consumer group of the workers.
        transactional_id_prefix: a worker slot's transactional.id is ``{prefix}-{slot}``.
        config: extra librdkafka properties (TLS/SASL...), applied to every client.
        sasl_password: SASL password (secret), set as ``sasl.password`` when present.
        transaction_retry_backoff_ms: ``retry.backoff.ms`` of the workers' transactional
            producer (the first retry of a request; librdkafka doubles it per retry up to
            ``retry.backoff.max.ms``, 1 s). A transaction that begins right after the previous
            commit is refused with CONCURRENT_TRANSACTIONS until the coordinator has written that
            commit's markers, and librdkafka retries ``send_offsets_to_transaction``'s
            AddOffsetsToTxn after this backoff: at librdkafka's default of 100 ms back-to-back
            transactions took a median 98 ms on the local stack, at 2 ms a median 4 ms.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    uploads_topic: str = "cardstream.uploads.v1"
    results_topic: str = "cardstream.results.v1"
    dlq_topic: str = "cardstream.dlq.v1"
    group_id: str = "cardstream"
    transactional_id_prefix: str = "cardstream-worker"
    config: dict[str, Any] = Field(default_factory=dict)
    sasl_password: SecretStr | None = None
    transaction_retry_backoff_ms: int = Field(2, ge=1, le=10_000)
    topics: TopicSettings = Field(default_factory=TopicSettings)


class S3Settings(_Frozen):
    """Object store (MinIO) connection.

    Attributes:
        endpoint: ``host:port`` without scheme.
        secure: use TLS.
        access_key / secret_key: credentials, from the environment only (secret_key is a secret;
            ``scripts/stack env`` prints the local stack's).
        region: bucket region.
        uploads_bucket: where producers put claim-check images.
        results_bucket: where workers put outputs.
        allowed_buckets: buckets an UploadEvent may reference (default: the uploads bucket).
        sse: request SSE-S3 (server-side encryption with the server's KMS key) on PUT.
    """

    endpoint: str = "127.0.0.1:9000"
    secure: bool = False
    access_key: str | None = None
    secret_key: SecretStr | None = None
    region: str = "us-east-1"
    uploads_bucket: str = "uploads"
    results_bucket: str = "results"
    allowed_buckets: tuple[str, ...] = ("uploads",)
    sse: bool = False


class WorkerSettings(_Frozen):
    """Worker loop.

    Attributes:
        max_batch: events per poll batch (closes the batch when reached).
        max_wait_ms: ms to wait for a batch to fill after its first event (events prefetched
            while the previous batch computed count from when they arrived).
        poll_interval_ms: while a batch computes (or its PUTs run) the loop wakes as soon as
            it is done, and this often meanwhile to move prefetched events into the next batch
            and serve rebalance callbacks.
        tasks: tasks this worker serves.
        slot: worker slot number (stable transactional.id across restarts of the slot).
        io_threads: thread pool size for MinIO GET/PUT and decode.
        http_port: port of /ready, /live, /metrics (0: off).
        max_poll_interval_ms: librdkafka max.poll.interval.ms (above the worst batch).
        inline_max_bytes: largest inline image (bytes, before base64).
        dlq_value_max_bytes: original value bytes kept in a dead letter.
        shutdown_timeout_s: bound on graceful SIGTERM handling.
    """

    max_batch: int = Field(32, ge=1, le=10_000)
    max_wait_ms: int = Field(10, ge=0, le=60_000)
    poll_interval_ms: int = Field(10, ge=1, le=1_000)
    tasks: tuple[str, ...] = ("card", "id_photo")
    slot: int = Field(0, ge=0)
    io_threads: int = Field(8, ge=1, le=256)
    http_port: int = Field(8080, ge=0, le=65535)
    max_poll_interval_ms: int = Field(300_000, ge=10_000)
    inline_max_bytes: int = Field(512 * 1024, ge=0)
    dlq_value_max_bytes: int = Field(64 * 1024, ge=0)
    shutdown_timeout_s: float = Field(30.0, gt=0)


class Settings(BaseSettings):
    """All settings of a cardstream process (frozen)."""

    model_config = SettingsConfigDict(
        env_prefix="CARDSTREAM_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    s3: S3Settings = Field(default_factory=S3Settings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    decode: DecodeSettings = Field(default_factory=DecodeSettings)
    card: CardSettings = Field(default_factory=CardSettings)
    idphoto: IdPhotoSettings = Field(default_factory=IdPhotoSettings)
    status: StatusSettings = Field(default_factory=StatusSettings)
    log_level: str = "INFO"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment (``CARDSTREAM_*``) plus keyword overrides."""
    return Settings(**overrides)
