"""The HTTP gateway's answers (``cardstream gateway``): its error codes and the ``202`` body.

The JSON Schema files ``gateway_error.v1.schema.json`` and ``gateway_upload.v1.schema.json``
are the contract for HTTP clients; the models here mirror them (``tests/unit/test_gateway.py``
keeps the two equal). A ``200`` answer of ``POST /v1/uploads?wait_ms=N`` and of
``GET /v1/uploads/{id}`` is the VerificationResult itself, byte for byte as on the results topic.

Refusals of the image itself carry the worker's own reason codes (:class:`~schemas.reasons.
ReasonCode`: ``UNSUPPORTED_FORMAT``, ``IMAGE_TOO_LARGE``, ``IMAGE_TOO_SMALL``,
``CORRUPT_IMAGE``), found by the same header probe the worker runs
(:func:`processors.decode.probe_image`); the others are :class:`GatewayCode`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from schemas import formats as F
from schemas.models import TASK_NAME_PATTERN, UploadId
from schemas.reasons import ReasonCode


class GatewayCode(StrEnum):
    """Why the gateway refused a request (the ``error`` field), with its HTTP status
    (:data:`HTTP_STATUS`)."""

    UNAUTHORIZED = "UNAUTHORIZED"
    RATE_LIMITED = "RATE_LIMITED"
    OVERLOADED = "OVERLOADED"
    BACKLOG = "BACKLOG"
    UNAVAILABLE = "UNAVAILABLE"
    BODY_TOO_LARGE = "BODY_TOO_LARGE"
    BODY_TIMEOUT = "BODY_TIMEOUT"
    BODY_INCOMPLETE = "BODY_INCOMPLETE"
    EMPTY_BODY = "EMPTY_BODY"
    BAD_MULTIPART = "BAD_MULTIPART"
    TOO_MANY_PARTS = "TOO_MANY_PARTS"
    AMBIGUOUS_FIELD = "AMBIGUOUS_FIELD"
    UNKNOWN_TASK = "UNKNOWN_TASK"
    OPTIONS_INVALID = "OPTIONS_INVALID"
    INVALID_UPLOAD_ID = "INVALID_UPLOAD_ID"
    INVALID_PARAMETER = "INVALID_PARAMETER"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    UNKNOWN_UPLOAD = "UNKNOWN_UPLOAD"
    NO_OUTPUT = "NO_OUTPUT"
    UNKNOWN_ARTIFACT = "UNKNOWN_ARTIFACT"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    BAD_REQUEST = "BAD_REQUEST"
    INTERNAL_ERROR = "INTERNAL_ERROR"


#: The image refusals the gateway answers with the worker's reason codes (the header probe's).
IMAGE_CODES = (ReasonCode.UNSUPPORTED_FORMAT, ReasonCode.IMAGE_TOO_LARGE,
               ReasonCode.IMAGE_TOO_SMALL, ReasonCode.CORRUPT_IMAGE, ReasonCode.IMAGE_TOO_COMPLEX)

#: the status of an image refusal whose reason code is not listed here (a probe rule added later)
IMAGE_REFUSED_STATUS = 422

#: code -> HTTP status (RFC 9110; 429 RFC 6585). 404, not 403, for another client's upload.
HTTP_STATUS: dict[str, int] = {
    GatewayCode.UNAUTHORIZED: 401, GatewayCode.RATE_LIMITED: 429, GatewayCode.OVERLOADED: 503,
    GatewayCode.BACKLOG: 503, GatewayCode.UNAVAILABLE: 503, GatewayCode.BODY_TOO_LARGE: 413,
    GatewayCode.BODY_TIMEOUT: 408, GatewayCode.BODY_INCOMPLETE: 400, GatewayCode.EMPTY_BODY: 400,
    GatewayCode.BAD_MULTIPART: 400, GatewayCode.TOO_MANY_PARTS: 400,
    GatewayCode.AMBIGUOUS_FIELD: 400, GatewayCode.UNKNOWN_TASK: 400,
    GatewayCode.OPTIONS_INVALID: 422, GatewayCode.INVALID_UPLOAD_ID: 400,
    GatewayCode.INVALID_PARAMETER: 400, GatewayCode.IDEMPOTENCY_KEY_REUSED: 409,
    GatewayCode.UNKNOWN_UPLOAD: 404, GatewayCode.NO_OUTPUT: 404,
    GatewayCode.UNKNOWN_ARTIFACT: 404, GatewayCode.NOT_FOUND: 404,
    GatewayCode.METHOD_NOT_ALLOWED: 405, GatewayCode.BAD_REQUEST: 400,
    GatewayCode.INTERNAL_ERROR: 500,
    ReasonCode.UNSUPPORTED_FORMAT: 415, ReasonCode.IMAGE_TOO_LARGE: 413,
    ReasonCode.IMAGE_TOO_SMALL: 422, ReasonCode.CORRUPT_IMAGE: 422,
    ReasonCode.IMAGE_TOO_COMPLEX: 422,
}

#: Version of the gateway's JSON answers (``schema_version``).
GATEWAY_SCHEMA_VERSION = 1


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GatewayError(_Answer):
    """An error answer: ``error`` (a :class:`GatewayCode` or an image :class:`ReasonCode`),
    a one-line ``message`` (never an input's value), ``retry_after_s`` (s) for 429 and 503
    (also the ``Retry-After`` header), and ``upload_id`` when the request named one."""

    schema_version: int = GATEWAY_SCHEMA_VERSION
    error: Annotated[str, Field(pattern=F.CODE_PATTERN)]
    message: Annotated[str, Field(max_length=500)]
    retry_after_s: Annotated[int, Field(ge=1)] | None = None
    upload_id: UploadId | None = None


class UploadAccepted(_Answer):
    """The ``202`` answer: the upload is stored and its UploadEvent is on the uploads topic.

    Attributes:
        upload_id: ``{client}.{id}`` (the client's own id, a digest of its idempotency key,
            or a random one).
        task: the upload's task.
        status: ``pending`` (no committed result yet).
        replayed: true when this POST repeated an earlier one (same id, same image and
            options): nothing new was stored.
        result: the path of ``GET /v1/uploads/{upload_id}``.
    """

    schema_version: int = GATEWAY_SCHEMA_VERSION
    upload_id: UploadId
    task: Annotated[str, Field(pattern=TASK_NAME_PATTERN)]
    status: str = "pending"
    replayed: bool = False
    result: str


__all__ = ["GATEWAY_SCHEMA_VERSION", "HTTP_STATUS", "IMAGE_CODES", "IMAGE_REFUSED_STATUS",
           "GatewayCode", "GatewayError", "UploadAccepted"]
