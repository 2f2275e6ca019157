"""Object storage (MinIO / any S3) for claim-check uploads and worker outputs.

Every failure of a call is classified by what it means (:func:`classify`):

* **missing** (:class:`ObjectNotFound`, reason ``OBJECT_NOT_FOUND``): the store says there is no
  such key or bucket (``NoSuchKey``, ``NoSuchBucket``, a 404);
* **refused** (:class:`ObjectRefused`): the store refused the request for this input (an S3
  4xx with its own code, e.g. 400 ``XMinioInvalidObjectName`` for ``a//b.jpg``), or the client
  refused the input before sending it; retrying cannot help, so it is raised at once;
* **outage** (:class:`StorageError` after the retries): anything that says nothing about the
  input: 5xx answers, answers that are not S3 XML (a proxy's or load balancer's 502/503 with an
  HTML or empty body, which the minio client raises as ``InvalidResponseError`` or
  ``ServerError``, or XML that does not parse), connection and timeout errors, and the 4xx codes
  of credentials, permissions, clocks and throttling (401, 403 ``AccessDenied``, 408, 409, 423,
  429, ``SlowDown``...): the worker pauses and commits nothing, it never rejects an upload for
  those.

Reads and writes retry outages as ``S3Settings.retry`` says (:mod:`streams.retry`). Connections
use TLS by default (``S3Settings.secure``, the CA of ``S3Settings.ca_file``) and every PUT asks
for SSE-S3 (``S3Settings.sse``).
"""

from __future__ import annotations

import hashlib
import http.client
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any, TypeVar
from xml.etree.ElementTree import ParseError

import urllib3
from minio import Minio
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError
from minio.sse import SseS3

from streams import retry
from streams.errors import ObjectNotFound, ObjectRefused, ObjectTooLarge, StorageError
from streams.logs import key_tag
from streams.retry import RetryPolicy
from streams.settings import S3Settings

T = TypeVar("T")
_MISSING = {"NoSuchKey", "NoSuchBucket", "NoSuchObject", "NoSuchVersion"}
#: largest object written with one PUT (bytes): S3's single-PUT limit, 5 GiB. A multipart upload's
#: parts carry no SSE header, so the role policies (:mod:`streams.access`), which refuse a PUT
#: without one, would refuse them.
SINGLE_PUT_MAX_BYTES = 5 * 1024**3
#: a GET's body is read in chunks of this many bytes (counted against its limit as they come)
GET_CHUNK_BYTES = 1024 * 1024


#: S3 4xx codes that say nothing about the input (credentials, permissions, clocks, throttling,
#: a server starting up): an outage, not a refusal (AWS S3 and MinIO error code lists)
_NOT_THE_INPUT = {"AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "ExpiredToken",
                  "InvalidToken", "TokenRefreshRequired", "SignatureDoesNotMatch",
                  "RequestTimeTooSkewed", "RequestTimeout", "SlowDown", "OperationAborted",
                  "XMinioServerNotInitialized", "XMinioAdminCredentialsMismatch"}
#: HTTP statuses of the same kind (RFC 9110: 401, 403, 408, 409, 429; RFC 4918: 423)
_NOT_THE_INPUT_STATUS = {401, 403, 408, 409, 423, 429}


#: S3 error answers that a wait may clear (throttling, a busy or starting server): an outage,
#: never a refusal (:func:`refusal_code`)
_TRANSIENT_CODES = {"SlowDown", "RequestTimeout", "OperationAborted", "ServiceUnavailable",
                    "InternalError", "XMinioServerNotInitialized"}


def refusal_code(exc: BaseException) -> str | None:
    """The S3 error code when ``exc`` (raised by a :class:`Storage` call, the store's error as
    its cause) is the store's own refusal that no wait clears: an S3 error answer below 500, not
    throttling (``NoSuchBucket`` for a PUT, ``AccessDenied``, ``InvalidArgument`` for an SSE
    setting, a quota); None when the store did not answer, answered 5xx, or throttled."""
    cause = exc.__cause__
    if not isinstance(cause, S3Error) or cause.code in _TRANSIENT_CODES:
        return None
    status = getattr(cause.response, "status", None) or 0
    return None if status >= 500 else (cause.code or str(status))


#: S3 error codes that refuse the object key itself (AWS S3 and MinIO error code lists)
_KEY_CODES = {"KeyTooLongError", "XMinioInvalidObjectName", "InvalidObjectName"}


def key_refused(exc: ObjectRefused) -> bool:
    """Whether ``exc`` refuses the object's key itself, so only this object's writer can change
    it: the client refused the request before sending it (no status: the minio package's
    ``ValueError`` for a ``.`` or ``..`` segment or an empty name), or the store answered with
    a key's error code (``XMinioInvalidObjectName``, ``KeyTooLongError``). Every other refusal
    (a missing bucket, an SSE setting, a quota) is the store's and holds for every key."""
    return exc.status is None or exc.code in _KEY_CODES


class StoreFault(StrEnum):
    """What a failed object store call means (:func:`classify`)."""

    MISSING = "missing"
    REFUSED = "refused"
    OUTAGE = "outage"


def classify(exc: BaseException) -> StoreFault | None:
    """What ``exc``, raised by a minio client call, means (see the module docstring).

    Args:
        exc: the exception the call raised.

    Returns:
        :class:`StoreFault`; None for an exception that is not the store's nor the network's
        (a bug: let it propagate).
    """
    if isinstance(exc, S3Error):
        status = getattr(exc.response, "status", None)
        if exc.code in _MISSING or status == 404:
            return StoreFault.MISSING
        if exc.code in _NOT_THE_INPUT or status in _NOT_THE_INPUT_STATUS:
            return StoreFault.OUTAGE
        if status is not None and 400 <= status < 500:
            return StoreFault.REFUSED
        return StoreFault.OUTAGE
    if isinstance(exc, (MinioException, urllib3.exceptions.HTTPError, OSError,
                        http.client.HTTPException, ParseError)):
        return StoreFault.OUTAGE  # InvalidResponseError, ServerError: not the store's own answer
    if isinstance(exc, ValueError):
        return StoreFault.REFUSED  # the client refused the input before sending it
    return None


def _describe(exc: BaseException) -> str:
    """A one-line name for a store error: class, S3 code or HTTP status; never a body (a
    proxy's error page) or a key."""
    if isinstance(exc, S3Error):
        return f"{type(exc).__name__} {exc.code} ({getattr(exc.response, 'status', '?')})"
    if isinstance(exc, InvalidResponseError):
        return f"{type(exc).__name__} ({exc._code})"
    if isinstance(exc, ServerError):
        return f"{type(exc).__name__} ({exc.status_code})"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return f"{type(exc).__name__} ({type(exc.reason).__name__})"  # e.g. NewConnectionError
    return type(exc).__name__


def http_client(s3: S3Settings, timeout_s: float = 10.0, maxsize: int = 32) -> urllib3.PoolManager:
    """The urllib3 pool for ``s3``: certificates checked against ``s3.ca_file`` (else
    ``SSL_CERT_FILE``, else the system's trust store), the client certificate when set, no
    retries of its own (callers retry), ``timeout_s`` (s) to connect and to read."""
    ca = str(s3.ca_file) if s3.ca_file else os.environ.get("SSL_CERT_FILE")
    client_cert: dict[str, Any] = ({"cert_file": str(s3.cert_file), "key_file": str(s3.key_file)}
                   if s3.cert_file and s3.key_file else {})
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s), maxsize=maxsize,
        retries=urllib3.Retry(total=0), cert_reqs="CERT_REQUIRED", ca_certs=ca, **client_cert)


@dataclass(frozen=True, slots=True)
class StoredObject:
    """What a PUT stored: ``bucket``, ``key``, ``size_bytes`` (bytes), hex ``sha256``."""

    bucket: str
    key: str
    size_bytes: int
    sha256: str


class Storage:
    """A thread-safe MinIO client with retries.

    Args:
        s3: connection settings (credentials from the environment) and ``s3.retry``, how an
            outage is retried (:mod:`streams.retry`).
        retries: calls per request before giving up, instead of ``s3.retry.attempts``.
        backoff_s: the first wait between them (s), instead of ``s3.retry.first_s``.
        timeout_s: connect/read timeout per request (s).

    Raises:
        StorageError: credentials are not set.
    """

    def __init__(self, s3: S3Settings, retries: int | None = None, backoff_s: float | None = None,
                 timeout_s: float = 10.0) -> None:
        if not s3.access_key or s3.secret_key is None or not s3.secret_key.get_secret_value():
            # (empty ones too: the minio client raised ValueError for an empty secret key, a
            # traceback, and an empty access key was refused by the store, AccessDenied)
            raise StorageError("set CARDSTREAM_S3__ACCESS_KEY and CARDSTREAM_S3__SECRET_KEY, "
                               "neither empty (the local stack prints them: scripts/stack env)")
        self.client = Minio(s3.endpoint, access_key=s3.access_key,
                            secret_key=s3.secret_key.get_secret_value(), secure=s3.secure,
                            region=s3.region, http_client=http_client(s3, timeout_s))
        self.s3 = s3
        given = {"attempts": retries, "first_s": backoff_s}
        self.policy = RetryPolicy.model_validate(
            {**s3.retry.model_dump(), **{k: v for k, v in given.items() if v is not None}})

    def retry(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` (one call of ``self.client``), retried as ``self.policy`` says while it fails
        with an outage (:func:`classify`).

        Args:
            what: the call, for the error message (``"PUT bucket/key:…"``: object keys only as
                :func:`streams.logs.key_tag`, since the messages reach the logs).

        Raises:
            ObjectNotFound: the store says the key or bucket does not exist.
            ObjectRefused: the store (or the client) refused the request for this input.
            StorageError: still an outage after the policy's attempts (or raised by ``fn``).
        """
        try:
            return retry.call(fn, self.policy, lambda e: classify(e) is StoreFault.OUTAGE)
        except StorageError:
            raise  # e.g. ObjectTooLarge, decided by fn itself
        except Exception as e:
            kind = classify(e)
            if kind is None:
                raise
            if kind is StoreFault.MISSING:
                raise ObjectNotFound(f"{what}: {_describe(e)}") from e
            if kind is StoreFault.REFUSED:
                code = e.code if isinstance(e, S3Error) and e.code else type(e).__name__
                raise ObjectRefused(f"{what} refused: {_describe(e)}", code,
                                    getattr(getattr(e, "response", None), "status", None)) from e
            raise StorageError(f"{what} at {self.s3.endpoint} failed after "
                               f"{self.policy.attempts} attempts: {_describe(e)}") from e

    def get(self, bucket: str, key: str, max_bytes: int | None = None) -> bytes:
        """GET an object's bytes: the bytes stored, never a transport decoding of them.

        The store keeps whatever ``Content-Encoding`` the uploader sent and answers with it;
        urllib3 would decode ``gzip``/``deflate`` (and ``br``/``zstd`` where their packages are
        installed) while reading, so a body that is not what its header says failed as a
        "store outage" (retried for ever) and a 1 MB gzip body decoded to 1 GiB before any limit
        (issue 43). The body is read raw (``decode_content=False``) in chunks, and the bytes
        actually read are counted against ``max_bytes``, whatever ``Content-Length`` says.

        Raises:
            ObjectNotFound: no such bucket/key.
            ObjectRefused: the store refused the request for this key (e.g. ``a//b.jpg``).
            ObjectTooLarge: the object is larger than ``max_bytes`` (bytes).
            StorageError: still failing after the retries (an outage).
        """
        def once() -> bytes:
            r = self.client.get_object(bucket, key)
            try:
                n = int(r.headers.get("Content-Length", "0") or 0)
                if max_bytes is not None and n > max_bytes:
                    raise ObjectTooLarge(f"object is {n} bytes, limit {max_bytes}")
                buf = bytearray()
                for chunk in r.stream(GET_CHUNK_BYTES, decode_content=False):
                    buf += chunk
                    if max_bytes is not None and len(buf) > max_bytes:
                        raise ObjectTooLarge(f"object is more than {max_bytes} bytes (read)")
                return bytes(buf)
            finally:
                r.close()
                r.release_conn()
        return self.retry(f"GET {bucket}/{key_tag(key)}", once)

    def put(self, bucket: str, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None, if_absent: bool = False) -> StoredObject:
        """PUT ``data`` in one request, with SSE-S3 when ``s3.sse`` (overwrites: keys are
        deterministic, so a redelivery writes the same bytes).

        Args:
            metadata: user metadata, stored as ``x-amz-meta-<name>`` headers.
            if_absent: a conditional write (``If-None-Match: *``, S3's conditional PUT): the
                store refuses it with 412 when the key exists, so two writers of one key
                cannot overwrite each other (the gateway's idempotent uploads). The minio
                package's public ``put_object`` cannot send that header (it turns unknown
                headers into user metadata), so this one case goes through its
                ``_put_object``, the single-request PUT that ``put_object`` itself calls.

        Returns:
            The stored object's ref with size (bytes) and sha256.

        Raises:
            ObjectRefused: the store refused the request for this key or body (status 412:
                ``if_absent`` and the key exists).
            StorageError: still failing after the retries (an outage); ``data`` above
                :data:`SINGLE_PUT_MAX_BYTES` (5 GiB).
        """
        if len(data) > SINGLE_PUT_MAX_BYTES:
            raise StorageError(f"PUT {bucket}/{key_tag(key)}: {len(data)} bytes, above one PUT's "
                               "limit")
        sse = SseS3() if self.s3.sse else None
        what = f"PUT {bucket}/{key_tag(key)}"
        if if_absent:
            headers: dict[str, str | list[str] | tuple[str]] = {
                "Content-Type": content_type, "If-None-Match": "*",
                **{f"x-amz-meta-{k}": v for k, v in (metadata or {}).items()},
                **(sse.headers() if sse else {})}
            self.retry(what, lambda: self.client._put_object(bucket, key, data, headers))
        else:
            part = max(len(data),
                       5 * 1024**2)  # one part = one PUT (the minio package's minimum is 5 MiB)
            self.retry(what, lambda: self.client.put_object(
                bucket, key, io.BytesIO(data), len(data), content_type=content_type,
                metadata=dict(metadata or {}), sse=sse, part_size=part))
        return StoredObject(bucket, key, len(data), hashlib.sha256(data).hexdigest())

    def delete(self, bucket: str, key: str) -> None:
        """DELETE an object (S3 answers a key that does not exist as deleted too).

        Raises:
            ObjectRefused: the store refused the request for this key.
            StorageError: still failing after the retries (an outage; a 403 ``AccessDenied``,
                for a role without ``s3:DeleteObject``, is one too: :func:`classify`).
        """
        self.retry(f"DELETE {bucket}/{key_tag(key)}",
                   lambda: self.client.remove_object(bucket, key))

    def list_names(self, bucket: str, prefix: str, recursive: bool = False) -> list[str]:
        """The names under ``prefix`` in ``bucket``: object keys, and with ``recursive`` False
        the common prefixes one ``/`` further (which end with ``/``), listed whole.

        Raises:
            ObjectNotFound: no such bucket.
            ObjectRefused: the store refused the listing.
            StorageError: still failing after the retries (an outage).
        """
        return self.retry(f"LIST {bucket}/{key_tag(prefix)}", lambda: [
            o.object_name for o in self.client.list_objects(bucket, prefix=prefix,
                                                            recursive=recursive)
            if o.object_name is not None])

    def ensure_buckets(self, names: list[str]) -> dict[str, str]:
        """Create missing buckets. Returns bucket -> ``created`` / ``exists``."""
        out = {}
        for b in names:
            if self.retry(f"HEAD {b}", partial(self.client.bucket_exists, b)):
                out[b] = "exists"
            else:
                self.retry(f"MAKE {b}", partial(self.client.make_bucket, b))
                out[b] = "created"
        return out

    def healthy(self) -> bool:
        """True when the store answers now: a HEAD of the uploads and results buckets (no
        retries) gets an S3 answer, whatever it says.

        The question is whether the store is back after an outage, not whether these
        credentials may do everything: a 403 ``AccessDenied`` (credentials for the data path
        only, without ``s3:ListBucket``) or a 404 is the store's own answer, so it counts.
        Only what says nothing about the store counts as down: connection and TLS errors,
        timeouts, a proxy's 5xx (``ServerError``, ``InvalidResponseError``). A HEAD per bucket
        needs only ``s3:ListBucket`` on those buckets when allowed at all, which the worker's
        role has (:mod:`streams.access`); listing all buckets would need
        ``s3:ListAllMyBuckets``.
        """
        try:
            self._ask()
        except Exception:
            return False
        return True

    def check(self) -> None:
        """Return when the store answers, as :meth:`healthy` asks it (any S3 answer counts),
        its outages retried as ``self.policy`` says: the check of a command that would
        otherwise wait on the store for ever once its work started (``cardstream replay``).

        Raises:
            StorageError: no answer after the policy's attempts (connection refused, a
                timeout, a TLS error, a proxy's 5xx), naming the endpoint.
        """
        self.retry(f"HEAD {self.s3.uploads_bucket}, {self.s3.results_bucket}", self._ask)

    def _ask(self) -> None:
        """HEAD the uploads and results buckets once; an S3 answer, whatever it says, returns
        (see :meth:`healthy`).

        Raises:
            Exception: what the minio client raised for a call the store did not answer.
        """
        try:
            for b in (self.s3.uploads_bucket, self.s3.results_bucket):
                self.client.bucket_exists(b)
        except S3Error:
            return  # the store answered (AccessDenied, NoSuchBucket...)
