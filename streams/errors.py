"""Errors of the streaming side (Kafka, MinIO, worker loop, CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.errors import CardstreamError


class StreamsError(CardstreamError):
    """Root of the errors raised by ``streams``."""


class SettingsError(StreamsError, ValueError):
    """The ``CARDSTREAM_*`` environment does not make valid settings; the message names each
    variable and what is wrong with it (never its value, which may be a secret)."""


class StorageError(StreamsError):
    """An object store call failed after its retries (MinIO unavailable, bad credentials)."""


class ObjectNotFound(StorageError):
    """The claim-check object named by an upload does not exist (reason ``OBJECT_NOT_FOUND``)."""


class KeySegmentError(StreamsError, ValueError):
    """An operator's value that becomes an object-key segment (``--model-version``, a replay's
    ``model_version``) is not one: keys are ``{task}/{model_version}/{upload_id}/...``, and a
    value with ``/``, a ``.`` or ``..`` segment or characters outside ``[A-Za-z0-9._-]`` would
    leave its prefix or be refused by the store for every output (issue 43's fresh-user trial:
    ``'../../evil'`` looped on the store's refusals).

    Attributes:
        option: the option or argument that carried the value (``--model-version``).
    """

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


class KafkaSetupError(StreamsError):
    """A Kafka client could not be built or a topic is missing or misconfigured."""


class BrokerUnavailable(KafkaSetupError):
    """No Kafka broker answered a request made before any work (metadata, offsets, an admin
    call) within its timeout: nothing listens at the bootstrap address, its name does not
    resolve, or the brokers are down (:func:`streams.kafka.setup_error`). The message names the
    request and the bootstrap servers."""


class DeliveryError(StreamsError):
    """Events produced (``cardstream produce``, the demo's uploads) were not all acknowledged:
    a delivery report carried an error, or some were still undelivered when the flush's wait
    ended (no broker answering). The message names the topic and the bootstrap servers.

    Attributes:
        sent: the uploads not known to have failed (delivered, or in flight when the wait
            ended), as :meth:`streams.produce.UploadProducer.produce_files` returns them; empty
            where the raiser does not say.
    """

    sent: Sequence[Any] = ()


class ProducerStuck(StreamsError):
    """A transactional producer call has not returned long after its own timeout (librdkafka
    #5456: ``send_offsets_to_transaction`` can block for ever once the group coordinator it
    cached went away, e.g. after a broker restart); the producer is abandoned, not reused."""


class ObjectRefused(StorageError):
    """The object store refused the request for this input: an S3 4xx answer with its own error
    code that no retry changes (e.g. 400 ``XMinioInvalidObjectName`` for the key ``a//b.jpg``,
    ``KeyTooLongError``), or the client refusing the input before sending it.

    Attributes:
        code: the S3 error code (``XMinioInvalidObjectName``) or the client's exception name.
        status: the HTTP status (None when nothing was sent).
    """

    def __init__(self, message: str, code: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class ObjectTooLarge(StorageError):
    """The claim-check object is larger than the byte limit (reason ``IMAGE_TOO_LARGE``)."""


class ProcessorUnavailable(StreamsError):
    """A processor raised for a whole bucket, then for items alone, and also for a probe item
    (a plain synthetic image): the processor is broken (a CUDA out-of-memory, a lost device
    context), not the inputs. The worker puts the batch back, pauses and fails readiness for a
    while (the breaker), instead of dead-lettering good uploads."""


class StorageUnavailable(StorageError):
    """MinIO did not answer within the retries while a batch was loaded or stored: the worker
    puts the batch back, pauses and retries once the store answers; nothing is committed."""


class StoreRefused(StorageUnavailable):
    """The object store answered a batch's call with a refusal that no wait clears (a PUT into
    a missing bucket, a denied permission or SSE setting, a quota: an S3 error answer below 500,
    :func:`streams.storage.refusal_code`). The worker fails readiness, counts it
    (``cardstream_store_refusals_total{code}``), waits longer each time, and stops after
    ``WorkerSettings.store_refusal_limit_s`` of refusals in a row (issue 43: it recomputed the
    batch in a hot loop, ready and live).

    Attributes:
        code: the S3 error code (``NoSuchBucket``, ``AccessDenied``...).
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code
