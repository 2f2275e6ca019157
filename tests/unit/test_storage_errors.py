"""Store errors classified by what they mean (streams/storage.py: classify): missing, refused
for this input, outage; whatever type the minio client raises."""

from __future__ import annotations

import http.client
from xml.etree.ElementTree import ParseError

import pytest
import urllib3
from minio.error import InvalidResponseError, S3Error, ServerError

from streams.storage import StoreFault, classify


def _s3(code: str, status: int) -> S3Error:
    return S3Error(urllib3.HTTPResponse(status=status), code, "m", "/b/k", "r", "h")


@pytest.mark.parametrize(("exc", "want"), [
    (_s3("NoSuchKey", 404), StoreFault.MISSING),
    (_s3("NoSuchBucket", 404), StoreFault.MISSING),
    (_s3("ResourceNotFound", 404), StoreFault.MISSING),
    (_s3("XMinioInvalidObjectName", 400), StoreFault.REFUSED),  # the key a//b.jpg
    (_s3("KeyTooLongError", 400), StoreFault.REFUSED),
    (_s3("InvalidArgument", 400), StoreFault.REFUSED),
    (_s3("InvalidRange", 416), StoreFault.REFUSED),
    (_s3("MethodNotAllowed", 405), StoreFault.REFUSED),
    (_s3("AccessDenied", 403), StoreFault.OUTAGE),  # credentials/policy: never the upload's fault
    (_s3("InvalidAccessKeyId", 403), StoreFault.OUTAGE),
    (_s3("SignatureDoesNotMatch", 403), StoreFault.OUTAGE),
    (_s3("RequestTimeTooSkewed", 403), StoreFault.OUTAGE),
    (_s3("SlowDown", 503), StoreFault.OUTAGE),
    (_s3("RequestTimeout", 400), StoreFault.OUTAGE),  # a 400 that says nothing of the input
    (_s3("Whatever", 429), StoreFault.OUTAGE),
    (_s3("InternalError", 500), StoreFault.OUTAGE),
    (_s3("XMinioServerNotInitialized", 503), StoreFault.OUTAGE),
    # not the store's own answer: a proxy or load balancer in between
    (InvalidResponseError(503, "text/html", "<html>503</html>"), StoreFault.OUTAGE),
    (InvalidResponseError(404, "text/html", "<html>404</html>"), StoreFault.OUTAGE),
    (InvalidResponseError(502, None, None), StoreFault.OUTAGE),
    (ServerError("server failed with HTTP status code 503", 503), StoreFault.OUTAGE),
    (ParseError("no element found"), StoreFault.OUTAGE),
    (urllib3.exceptions.ProtocolError("Connection aborted."), StoreFault.OUTAGE),
    (urllib3.exceptions.MaxRetryError(None, "/", "refused"), StoreFault.OUTAGE),
    (ConnectionRefusedError(111, "Connection refused"), StoreFault.OUTAGE),
    (TimeoutError("timed out"), StoreFault.OUTAGE),
    (http.client.RemoteDisconnected("closed"), StoreFault.OUTAGE),
    (ValueError("object name cannot be empty"), StoreFault.REFUSED),  # refused before sending
    (TypeError("a bug"), None),
    (KeyError("a bug"), None),
], ids=lambda x: x if isinstance(x, str) else None)
def test_classify(exc: BaseException, want: StoreFault | None) -> None:
    assert classify(exc) == want


class _HeadClient:
    """A minio client double whose ``bucket_exists`` raises ``exc`` (or answers True)."""

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc

    def bucket_exists(self, bucket: str) -> bool:
        if self.exc is not None:
            raise self.exc
        return True


@pytest.mark.parametrize(("exc", "want"), [
    (None, True),
    (_s3("AccessDenied", 403), True),  # data-path-only credentials: the store still answers
    (_s3("NoSuchBucket", 404), True),
    (ServerError("server failed with HTTP status code 503", 503), False),  # a proxy's HEAD 503
    (InvalidResponseError(502, "text/html", "<html>502</html>"), False),
    (urllib3.exceptions.MaxRetryError(None, "/b", "refused"), False),
    (ConnectionRefusedError(), False),
])
def test_health_check_counts_any_s3_answer_as_the_store_answering(
        exc: BaseException | None, want: bool) -> None:
    from pydantic import SecretStr

    from streams.settings import S3Settings
    from streams.storage import Storage

    st = Storage(S3Settings(access_key="k", secret_key=SecretStr("s")))
    st.client = _HeadClient(exc)
    assert st.healthy() is want


class _FailingClient:
    """A minio client double whose ``get_object`` / ``put_object`` raise ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.calls = 0

    def get_object(self, bucket: str, key: str, *rest: object, **kw: object) -> None:
        self.calls += 1
        raise self.exc

    put_object = get_object


@pytest.mark.parametrize("exc", [
    _s3("NoSuchKey", 404), _s3("XMinioInvalidObjectName", 400), ConnectionRefusedError(111, "x")],
    ids=["missing", "refused", "outage"])
def test_storage_errors_name_the_key_only_by_its_tag(exc: BaseException) -> None:
    """The claim-check key is the producer's text (here a name and a document number): the
    errors that reach the logs (``storage_unavailable``, ``object_refused``) carry its
    :func:`key_tag`, never the key."""
    from pydantic import SecretStr

    from streams.errors import StorageError
    from streams.logs import key_tag
    from streams.settings import S3Settings
    from streams.storage import Storage

    key = "uploads/Jane Q Public/passport-X1234567.jpg"
    st = Storage(S3Settings(access_key="k", secret_key=SecretStr("s")), retries=2, backoff_s=0.0)
    st.client = _FailingClient(exc)
    for call in (lambda: st.get("b", key), lambda: st.put("b", key, b"x", "image/jpeg")):
        with pytest.raises(StorageError) as ei:
            call()
        msg = str(ei.value)
        assert "Jane" not in msg and "X1234567" not in msg, msg
        assert key_tag(key) in msg, msg


def test_key_tag_tells_keys_apart_and_hides_them() -> None:
    from streams.logs import key_tag

    a, b = key_tag("a/Jane.jpg"), key_tag("a/John.jpg")
    assert a != b and a == key_tag("a/Jane.jpg")
    assert a.startswith("key:") and a.endswith("/10B") and "Jane" not in a
    assert key_tag("\udcff").endswith("/3B")  # a lone surrogate (a hostile key) still tags


def test_a_key_the_minio_client_refuses_is_a_key_refusal_at_once_not_an_outage() -> None:
    """Issue 43's fresh-user trial: ``--model-version '../../evil'`` made output keys with a
    ``..`` segment, which the minio package refuses with a ``ValueError`` before sending; the
    PUT is :class:`ObjectRefused` on the first call (no retries) and :func:`key_refused`, so the
    worker dead-letters the event instead of treating the store as down."""
    from pydantic import SecretStr

    from streams.errors import ObjectRefused
    from streams.settings import S3Settings
    from streams.storage import Storage, key_refused

    st = Storage(S3Settings(access_key="k", secret_key=SecretStr("s"), endpoint="127.0.0.1:1"),
                 retries=3, backoff_s=5.0)  # a retry would wait 5 s and then fail to connect
    with pytest.raises(ObjectRefused) as ei:
        st.put("results", "card/../../evil/u1/0123/card.png", b"x", "image/png")
    assert (ei.value.code, ei.value.status) == ("ValueError", None)
    assert key_refused(ei.value)
    assert key_refused(ObjectRefused("PUT", "KeyTooLongError", 400))
    assert not key_refused(ObjectRefused("PUT", "InvalidArgument", 400))  # an SSE setting: the
    assert not key_refused(ObjectRefused("PUT", "NoSuchBucket", 404))    # store's, every key's
