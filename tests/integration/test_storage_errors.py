"""Store errors against the real MinIO, directly and through the HTTP fault proxy: a missing
key, a key MinIO refuses, and outages whatever the minio client raises for them."""

from __future__ import annotations

import time

import pytest

from benchmarks.faults.proxy import FaultProxy
from streams.errors import ObjectNotFound, ObjectRefused, StorageError
from streams.settings import Settings
from streams.storage import Storage

pytestmark = pytest.mark.integration


def test_missing_and_refused_keys_are_not_outages(settings: Settings) -> None:
    """Each answered once, never retried: NoSuchKey is missing; the keys MinIO refuses (400
    XMinioInvalidObjectName for ``a//b.jpg``, a key over 1024 bytes) are refused for this input."""
    bucket = settings.s3.uploads_bucket
    with FaultProxy.for_store(settings.s3) as px:
        st = Storage(settings.s3.model_copy(update={"endpoint": px.endpoint}), retries=4)
        with pytest.raises(ObjectNotFound):
            st.get(bucket, "no/such/key.jpg")
        assert px.counts["pass"] == 1
        with pytest.raises(ObjectRefused) as ei:
            st.get(bucket, "a//b.jpg")
        assert (ei.value.code, ei.value.status) == ("XMinioInvalidObjectName", 400)
        assert px.counts["pass"] == 2
        with pytest.raises(ObjectRefused) as ei:
            st.put(settings.s3.results_bucket, "k" * 1100, b"x", "image/png")
        assert ei.value.status == 400
        assert px.counts["pass"] == 3


@pytest.mark.parametrize("mode", ["503", "502", "503-empty", "500-xml-cut", "reset"])
def test_a_failing_proxy_is_an_outage_retried_then_storage_error(settings: Settings,
                                                                 mode: str) -> None:
    """Whatever the minio client raises for it (InvalidResponseError, ServerError, ParseError,
    urllib3 errors), an answer that is not the store's own is retried and ends as the plain
    StorageError of an outage; and the same call goes through once the proxy passes again."""
    bucket = settings.s3.uploads_bucket
    st0 = Storage(settings.s3)
    st0.put(bucket, "ok.bin", b"payload", "application/octet-stream")
    with FaultProxy.for_store(settings.s3) as px:
        st = Storage(settings.s3.model_copy(update={"endpoint": px.endpoint}), retries=3,
                     backoff_s=0.01, timeout_s=2.0)
        px.mode = mode
        for call in (lambda: st.get(bucket, "ok.bin"),
                     lambda: st.put(bucket, "new.bin", b"x", "application/octet-stream")):
            with pytest.raises(StorageError) as ei:
                call()
            assert type(ei.value) is StorageError, ei.value
            assert "after 3 attempts" in str(ei.value) and "<html>" not in str(ei.value)
        assert px.counts[mode] == 6
        px.mode = "pass"
        assert st.get(bucket, "ok.bin") == b"payload"


def test_store_down_is_an_outage(settings: Settings) -> None:
    """Nothing listening (the proxy closed): connection refused, retried, StorageError."""
    px = FaultProxy.for_store(settings.s3).start()
    endpoint = px.endpoint
    px.close()
    st = Storage(settings.s3.model_copy(update={"endpoint": endpoint}), retries=2,
                 backoff_s=0.01, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(StorageError) as ei:
        st.get(settings.s3.uploads_bucket, "ok.bin")
    assert type(ei.value) is StorageError and time.monotonic() - t0 < 10


def test_a_conditional_put_refuses_an_existing_key_with_412(settings: Settings) -> None:
    """``put(if_absent=True)`` stores once with its metadata; the second writer of the key gets
    the store's 412 (not retried: the proxy saw one request) and the first bytes stay."""
    bucket = settings.s3.uploads_bucket
    with FaultProxy.for_store(settings.s3) as px:
        st = Storage(settings.s3.model_copy(update={"endpoint": px.endpoint}), retries=4)
        first = st.put(bucket, "once.bin", b"first", "application/octet-stream",
                       metadata={"client": "a"}, if_absent=True)
        assert first.size_bytes == 5 and px.counts["pass"] == 1
        with pytest.raises(ObjectRefused) as ei:
            st.put(bucket, "once.bin", b"second", "application/octet-stream", if_absent=True)
        assert ei.value.status == 412 and px.counts["pass"] == 2
    assert Storage(settings.s3).get(bucket, "once.bin") == b"first"
    meta = Storage(settings.s3).client.stat_object(bucket, "once.bin").metadata
    assert meta.get("x-amz-meta-client") == "a"
