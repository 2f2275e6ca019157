"""Dead-letter payloads go to the quarantine bucket, not into Kafka.

A record that becomes a dead letter may hold an inline image (``image.inline_b64``), a
``subject_ref``, or bytes nobody could parse (a producer that sent the image itself as the
value). The dead-letter topic keeps its records for days and is read by whoever operates the
pipeline, so the dead letter keeps none of the value's bytes: the whole value is PUT (SSE-S3) to
the quarantine bucket, which expires its objects after ``S3Settings.quarantine_expiry_days`` (1 by
default) and which only the admin (operator) can read, and the dead letter carries a
:class:`~schemas.models.QuarantineRef` instead (``value_b64`` ``""``, ``value_truncated`` true,
``value_size``).

The object key is ``{source topic}/{partition}/{offset}``: deterministic, like the worker's output
keys, so a batch that is redone (aborted transaction, MinIO outage) rewrites the same object with
the same bytes, and a replay of the same record too.
"""

from __future__ import annotations

from schemas import codec
from schemas.models import DeadLetter, QuarantineRef
from streams.settings import S3Settings
from streams.storage import Storage

#: media type of a quarantined value (arbitrary bytes: the value may not even be JSON)
QUARANTINE_CONTENT_TYPE = "application/octet-stream"

def quarantine_key(topic: str, partition: int, offset: int) -> str:
    """The object key of the record ``topic``/``partition``/``offset``:
    ``"{topic}/{partition}/{offset}"``."""
    return f"{topic}/{partition}/{offset}"


def quarantine_value(storage: Storage, s3: S3Settings, value: bytes, *, topic: str,
                     partition: int, offset: int) -> QuarantineRef:
    """PUT a dead letter's original ``value`` to ``s3.quarantine_bucket`` (SSE-S3 when
    ``s3.sse``) and return the reference for the dead letter.

    Args:
        storage: a client with the worker role (PUT on the quarantine bucket).
        value: the record value, any bytes (size in bytes is kept in the reference).
        topic, partition, offset: where the record was read (the object key).

    Raises:
        StorageError: the PUT still failed after the retries: the store is unavailable, so the
            worker must pause like for any other PUT (never dead-letter without the payload).
    """
    st = storage.put(s3.quarantine_bucket, quarantine_key(topic, partition, offset), value,
                     QUARANTINE_CONTENT_TYPE)
    return QuarantineRef(bucket=st.bucket, key=st.key, size_bytes=st.size_bytes, sha256=st.sha256)


def quarantined_dead_letter(storage: Storage, s3: S3Settings, *, key: bytes | None,
                            value: bytes | None, headers: codec.HeadersIn, topic: str,
                            partition: int, offset: int, code: str, error: str,
                            upload_id: str | None = None,
                            max_record_bytes: int = codec.DLQ_RECORD_MAX_BYTES) -> DeadLetter:
    """The dead letter of a record, its value quarantined (:func:`quarantine_value`) when it has
    one: the drop-in for :func:`schemas.codec.make_dead_letter` in the worker.

    A null or empty value has nothing to hide and is not PUT (the dead letter says
    ``value_b64`` ``null`` / ``""`` and no ``quarantine``). ``max_record_bytes`` is the dead
    letter's size budget (bytes, :func:`schemas.codec.make_dead_letter`).

    Raises:
        StorageError: the quarantine PUT failed (see :func:`quarantine_value`).
        ContractError: ``SCHEMA_INVALID`` from ``make_dead_letter`` (arguments out of range).
    """
    ref = (quarantine_value(storage, s3, bytes(value), topic=topic, partition=partition,
                            offset=offset) if value else None)
    return codec.make_dead_letter(key=key, value=value, headers=headers, topic=topic,
                                  partition=partition, offset=offset, code=code, error=error,
                                  max_value_bytes=0, upload_id=upload_id, quarantine=ref,
                                  max_record_bytes=max_record_bytes)
