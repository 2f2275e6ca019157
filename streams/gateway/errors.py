"""Errors of the HTTP gateway."""

from __future__ import annotations

from schemas.gateway import HTTP_STATUS, IMAGE_REFUSED_STATUS, GatewayCode
from streams.errors import ObjectRefused, StorageError, StreamsError
from streams.logs import log


class GatewayError(StreamsError):
    """Root of the errors raised by :mod:`streams.gateway`."""


class ApiKeysError(GatewayError):
    """The API keys file is missing, unreadable or has a bad line (the message names the line
    number, never a key)."""


class PortUnavailable(GatewayError):
    """A port the gateway was to listen on could not be bound (in use, or not allowed).

    Attributes:
        option: the CLI option and setting that chose the port (``--port /
            CARDSTREAM_GATEWAY__PORT`` or ``--admin-port / CARDSTREAM_GATEWAY__ADMIN_PORT``).
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


class Refused(GatewayError):
    """A request answered with an error: the HTTP status of ``code`` (:data:`schemas.gateway.
    HTTP_STATUS`; a probe reason code not listed there is 422) and the JSON body
    :class:`schemas.gateway.GatewayError`.

    Attributes:
        code: a :class:`~schemas.gateway.GatewayCode` or an image
            :class:`~schemas.reasons.ReasonCode`.
        status: the HTTP status.
        retry_after_s: seconds for ``Retry-After`` (429, 503), else None.
        upload_id: the upload the request named, when known.
    """

    def __init__(self, code: str, message: str, retry_after_s: int | None = None,
                 upload_id: str | None = None) -> None:
        super().__init__(message)
        self.code = str(code)
        self.status = HTTP_STATUS.get(self.code, IMAGE_REFUSED_STATUS)
        self.retry_after_s = retry_after_s
        self.upload_id = upload_id


def store_unavailable(e: StorageError, retry_after_s: int, upload_id: str | None = None,
                      ) -> Refused:
    """The answer to a request whose object-store call failed: 503 ``UNAVAILABLE`` with
    ``Retry-After``, naming the store's code where it refused the request for its input
    (``ObjectRefused``); otherwise "unavailable", whether nothing answered or the store refused
    the gateway itself (wrong credentials, throttling: ``streams.storage.classify`` counts those
    as outages), with the cause, which the client is not told, in a ``gateway_store_unavailable``
    log line (the error's text names the call and a key's tag only)."""
    if isinstance(e, ObjectRefused):
        what = f"the object store refused the request ({e.code})"
    else:
        what = "the object store is unavailable"
        log.warning("gateway_store_unavailable", error=type(e).__name__, cause=str(e),
                    upload_id=upload_id)
    return Refused(GatewayCode.UNAVAILABLE, what, retry_after_s=retry_after_s,
                   upload_id=upload_id)


__all__ = ["ApiKeysError", "GatewayError", "Refused", "store_unavailable"]
