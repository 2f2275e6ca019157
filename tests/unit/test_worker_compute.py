"""The worker's compute part (unit tier): the load step (probe, not decode), dead letters and the
quarantine of their values."""

from __future__ import annotations

import base64
import hashlib
from concurrent.futures import wait

import cv2
import numpy as np
import pytest

from processors.decode import EncodedImage
from schemas import codec
from schemas.reasons import DeadLetterCode, ReasonCode, Status
from streams.errors import KeySegmentError, ObjectRefused, StorageUnavailable, StoreRefused
from streams.metrics import WorkerMetrics
from streams.settings import CacheSettings, Settings, load_settings
from streams.storage import StoredObject
from streams.worker.compute import Compute, DeadLettered, Processed, check_key_segment
from tests.doubles import Msg, StoreDouble, stand_ins

NOT_JSON = b"\xff\xd8\xff\xe0 a JPEG sent as the event itself"


def _compute(store: StoreDouble, dlq_value_max_bytes: int = 0) -> Compute:
    s: Settings = load_settings()
    s = s.model_copy(update={"worker": s.worker.model_copy(
        update={"dlq_value_max_bytes": dlq_value_max_bytes, "io_threads": 2})})
    return Compute(s, stand_ins(call_ms=0.0, item_ms=0.0), store, WorkerMetrics())


def _batch() -> list[Msg]:
    return [Msg(3, 41, topic="t.uploads", key=b"k1", value=NOT_JSON),
            Msg(3, 42, topic="t.uploads", key=b"k2", value=None)]


def test_dead_letter_values_go_to_the_quarantine_bucket() -> None:
    store = StoreDouble()
    c = _compute(store)
    try:
        computed = c.run(_batch())
        assert [type(f) for f in computed.fates] == [DeadLettered, DeadLettered]
        stored = c.stored(computed, wait)
        results, letters = c.records(stored.fates)
    finally:
        c.close()
    assert results == [] and [str(d.error_code) for d in letters] == [DeadLetterCode.NOT_JSON] * 2
    # the whole value, under {topic}/{partition}/{offset}; the null value puts nothing
    assert store.objects == {("quarantine", "t.uploads/3/41"): NOT_JSON}
    d, tomb = letters
    assert (d.value_b64, d.value_truncated, d.value_size) == ("", True, len(NOT_JSON))
    assert (d.quarantine.bucket, d.quarantine.key, d.quarantine.size_bytes,
            d.quarantine.sha256) == (
        "quarantine", "t.uploads/3/41", len(NOT_JSON), hashlib.sha256(NOT_JSON).hexdigest())
    assert (tomb.value_b64, tomb.quarantine) == (None, None)


def test_quarantine_outage_is_the_batchs_not_a_dead_letter_without_payload() -> None:
    c = _compute(StoreDouble(down=True))
    try:
        computed = c.run(_batch())
        with pytest.raises(StorageUnavailable, match="quarantine/t.uploads/3/41"):
            c.stored(computed, wait)
        with pytest.raises(TypeError):  # no dead letter was built to commit
            c.records(computed.fates)
    finally:
        c.close()


def test_dlq_value_max_bytes_keeps_bytes_on_the_topic_instead() -> None:
    store = StoreDouble()
    c = _compute(store, dlq_value_max_bytes=4)
    try:
        computed = c.run(_batch()[:1])
        stored = c.stored(computed, wait)
        _, (d,) = c.records(stored.fates)
    finally:
        c.close()
    assert store.objects == {}
    assert (base64.b64decode(d.value_b64), d.value_truncated,
            d.quarantine) == (NOT_JSON[:4], True, None)


def _inline_card(upload_id: str, data: bytes) -> bytes:
    return codec.dumps({"schema_version": 1, "upload_id": upload_id, "task": "card",
                        "image": {"inline_b64": base64.b64encode(data).decode()}})


def test_load_probes_and_the_processor_decodes() -> None:
    """The load step hands the processor a probed upload (bytes + validated header, no pixel
    decoded); pixel data that fails then is the processor's ``rejected`` CORRUPT_IMAGE, a
    result with its verdict, as before the processors took bytes."""
    noisy = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    jpeg = cv2.imencode(".jpg", noisy)[1].tobytes()
    cut = jpeg[: len(jpeg) * 6 // 10]  # the header survives, the scan data does not
    c = _compute(StoreDouble())
    try:
        ev = codec.decode_upload(b"whole", _inline_card("whole", jpeg), None)
        probed = c.load(ev).image
        assert isinstance(probed, EncodedImage) and probed.data == jpeg
        assert (probed.format, probed.width, probed.height) == ("jpeg", 160, 120)
        assert isinstance(c.load(codec.decode_upload(b"cut", _inline_card("cut", cut), None)).image,
                          EncodedImage)  # the probe does not read the scan data
        computed = c.run([Msg(0, 1, topic="t.uploads", key=b"whole",
                              value=_inline_card("whole", jpeg)),
                          Msg(0, 2, topic="t.uploads", key=b"cut", value=_inline_card("cut", cut))])
    finally:
        c.close()
    whole, bad = computed.fates
    assert isinstance(whole, Processed) and whole.outcome.status == Status.ACCEPTED
    assert whole.outcome.payload["quad"][2] == [160.0, 120.0]  # the stand-in's frame, probed size
    assert isinstance(bad, Processed) and bad.outcome.status == Status.REJECTED
    assert bad.outcome.reasons == (ReasonCode.CORRUPT_IMAGE,)


def test_memory_chunks_keep_each_run_within_the_budget() -> None:
    from streams.worker.compute import memory_chunks

    assert memory_chunks([3, 3, 3, 9, 1], 6) == [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 5)]
    assert memory_chunks([1] * 5, 100) == [slice(0, 5)]
    assert memory_chunks([], 6) == []


def test_a_batch_decodes_and_processes_in_chunks_within_the_decode_budget() -> None:
    """Eight 600x800 inline PNGs (each 20.1 MB at its decode peak, from its header: Pillow's
    RGB image and the BGR result, 7 B/px, and the decoder's 16 MiB) with a 45 MB budget:
    decoded and processed two at a time, all accepted; with the default budget, one model call
    for all eight."""
    import json

    import cv2
    import numpy as np

    from processors.decode import decoded_bytes, probe_image
    from schemas import codec

    ok, png = cv2.imencode(".png", np.full((600, 800, 3), 90, np.uint8))
    assert ok and decoded_bytes(probe_image(png.tobytes(), load_settings().decode)) == (
        600 * 800 * 7 + 16 * 1024 * 1024)
    value = {"schema_version": 1, "task": "card", "submitted_at": "2026-12-04T00:00:00Z",
             "image": {"inline_b64": base64.b64encode(png.tobytes()).decode()}}
    msgs = [Msg(0, i, topic="t.uploads", key=f"u{i}".encode(),
                value=codec.dumps({**value, "upload_id": f"u{i}"})) for i in range(8)]
    assert json.loads(msgs[0].value())["upload_id"] == "u0"
    for budget, calls in ((45_000_000, [2, 2, 2, 2]), (1024**3, [8])):
        s = load_settings()
        s = s.model_copy(update={"worker": s.worker.model_copy(
            update={"decode_budget_bytes": budget, "io_threads": 2}),
            "cache": CacheSettings(enabled=False)})  # eight equal images: computed each
        procs = stand_ins(call_ms=0.0, item_ms=0.0)
        sizes: list[int] = []
        run = procs["card"].process_batch
        procs["card"].process_batch = (lambda items, run=run, sizes=sizes:
                                       sizes.append(len(items)) or run(items))
        c = Compute(s, procs, StoreDouble(), WorkerMetrics())
        try:
            computed = c.run(msgs)
        finally:
            c.close()
        assert sizes == calls
        assert [str(f.outcome.status) for f in computed.fates] == ["accepted"] * 8


def test_items_failing_alone_are_dead_letters_only_while_the_processor_passes_a_probe() -> None:
    """A processor raising on the upload ``u1`` alone: ``u1`` is a PROCESSING_ERROR dead letter,
    ``u0`` accepted. A processor raising on every call (the probe too): the breaker, the batch
    raised as ProcessorUnavailable, no dead letter."""
    import cv2
    import numpy as np

    from schemas import codec
    from streams.errors import ProcessorUnavailable

    ok, png = cv2.imencode(".png", np.full((96, 128, 3), 60, np.uint8))
    assert ok
    msgs = [Msg(0, i, topic="t.uploads", key=f"u{i}".encode(), value=codec.dumps({
        "schema_version": 1, "upload_id": f"u{i}", "task": "card",
        "submitted_at": "2026-12-04T00:00:00Z",
        "image": {"inline_b64": base64.b64encode(png.tobytes()).decode()}})) for i in range(2)]
    for broken, want in ((False, ["Processed", "DeadLettered"]), (True, None)):
        procs = stand_ins(call_ms=0.0, item_ms=0.0)
        run = procs["card"].process_batch

        def flaky(items, run=run, broken=broken):
            if broken or any(it.upload_id == "u1" for it in items):
                raise RuntimeError("CUDA error: an illegal memory access (injected)")
            return run(items)

        procs["card"].process_batch = flaky
        s = load_settings().model_copy(update={"cache": CacheSettings(enabled=False)})
        c = Compute(s, procs, StoreDouble(), WorkerMetrics())  # u0, u1 equal: computed each
        try:
            if want is None:
                with pytest.raises(ProcessorUnavailable, match="probe image too"):
                    c.run(msgs)
            else:
                computed = c.run(msgs)
                assert [type(f).__name__ for f in computed.fates] == want
                assert computed.fates[1].code == DeadLetterCode.PROCESSING_ERROR
        finally:
            c.close()


def test_dead_letter_upload_id_only_when_the_value_names_one() -> None:
    """A dead letter carries the event's upload_id when the refused value names exactly one
    valid id; a value naming two (duplicate key: NOT_JSON) carries none, not the last one."""
    store = StoreDouble()
    c = _compute(store)
    dup = b'{"upload_id":"first-1","task":"card","upload_id":"second-2"}'
    bad = b'{"upload_id":"good-1","task":"nope"}'
    try:
        computed = c.run([Msg(0, 1, topic="t.uploads", key=b"k", value=dup),
                          Msg(0, 2, topic="t.uploads", key=b"good-1", value=bad)])
        stored = c.stored(computed, wait)
        _, letters = c.records(stored.fates)
    finally:
        c.close()
    assert [(str(d.error_code), d.upload_id) for d in letters] == [
        (DeadLetterCode.NOT_JSON, None), (DeadLetterCode.SCHEMA_INVALID, "good-1")]


@pytest.mark.parametrize(("ts_ms", "low_s", "high_s"), [
    (1, 7 * 86400 - 1, 7 * 86400),       # 1970: bounded to the uploads topic's 7 days
    ("future", 0, 0),                    # a producer clock an hour ahead: 0, not negative
    ("now", 0, 30)])
def test_record_timestamps_far_off_do_not_poison_the_latencies(ts_ms, low_s, high_s) -> None:
    """Queue and total ms of a result (the status app's stats) and the latency histograms come
    from the producer's timestamp; one record stamped 1 must not add 56 years to them."""
    import time

    store = StoreDouble()
    jpeg = cv2.imencode(".jpg", np.full((120, 160, 3), 128, np.uint8))[1].tobytes()
    m = Msg(0, 1, topic="t.uploads", key=b"ts-1", value=_inline_card("ts-1", jpeg))
    now = int(time.time() * 1000)
    m._ts = {"future": now + 3_600_000, "now": now}.get(ts_ms, ts_ms)
    c = _compute(store)
    try:
        computed = c.run([m])
        stored = c.stored(computed, wait)
        (r,), _ = c.records(stored.fates)
        waits = c.metrics.queue_wait.collect()[0].samples
    finally:
        c.close()
    assert low_s * 1000 <= r.timings.total_ms <= high_s * 1000 + 1, r.timings
    assert r.timings.queue_ms <= r.timings.total_ms
    assert next(s.value for s in waits if s.name.endswith("_sum")) <= high_s + 1


def _inline_uploads(n: int) -> list[Msg]:
    ok, png = cv2.imencode(".png", np.full((96, 128, 3), 60 + n, np.uint8))
    assert ok
    return [Msg(0, i, topic="t.uploads", key=f"u{i}".encode(), value=codec.dumps({
        "schema_version": 1, "upload_id": f"u{i}", "task": "card",
        "submitted_at": "2026-12-04T00:00:00Z",
        "image": {"inline_b64": base64.b64encode(png.tobytes()).decode()}})) for i in range(n)]


class _RefusingStore(StoreDouble):
    """A store whose output PUTs for the upload ``u1`` are refused as ``refusal`` says."""

    def __init__(self, refusal: ObjectRefused) -> None:
        super().__init__()
        self.refusal = refusal

    def put(self, bucket: str, key: str, data: bytes, content_type: str) -> StoredObject:
        if "/u1/" in key:
            raise self.refusal
        return super().put(bucket, key, data, content_type)


def test_an_output_key_refused_dead_letters_its_event_and_commits_the_others() -> None:
    """Issue 43: an output PUT the minio client refused (a ``ValueError``: no status) was the
    batch's "outage" and the batch was redone in a hot loop; now that event is a
    ``PROCESSING_ERROR`` dead letter (its value quarantined) and the others' results commit."""
    store = _RefusingStore(ObjectRefused("PUT results/card/…: ValueError", "ValueError"))
    s = load_settings().model_copy(update={"cache": CacheSettings(enabled=False)})
    c = Compute(s, stand_ins(call_ms=0.0, item_ms=0.0), store, WorkerMetrics())
    try:
        computed = c.run(_inline_uploads(3))
        assert [type(f).__name__ for f in computed.fates] == ["Processed"] * 3
        results, letters = c.records(c.stored(computed, wait).fates)
    finally:
        c.close()
    assert [r.upload_id for r in results] == ["u0", "u2"]
    assert sorted(k.split("/")[2] for b, k in store.objects if b == "results") == ["u0", "u2"]
    (d,) = letters
    assert (str(d.error_code), d.upload_id, d.quarantine.key) == (
        DeadLetterCode.PROCESSING_ERROR, "u1", "t.uploads/0/1")
    assert "refused an output key (ValueError)" in d.error


def test_a_refusal_for_every_key_is_the_store_refusing_never_an_outage() -> None:
    """A refusal that is not the key's (here an SSE setting, no S3 answer kept as its cause)
    is :class:`StoreRefused` (readiness down, paused longer each time), never
    :class:`StorageUnavailable`'s immediate redo."""
    c = Compute(load_settings(), stand_ins(call_ms=0.0, item_ms=0.0),
                _RefusingStore(ObjectRefused("PUT refused", "InvalidArgument", 400)),
                WorkerMetrics())
    try:
        computed = c.run(_inline_uploads(2))
        with pytest.raises(StoreRefused) as ei:
            c.stored(computed, wait)
    finally:
        c.close()
    assert ei.value.code == "InvalidArgument"


@pytest.mark.parametrize("version", ["../../evil", "a/b", "..", "", "v 2", "x" * 129, "é"])
def test_a_model_version_that_is_not_a_key_segment_is_refused_up_front(version: str) -> None:
    with pytest.raises(KeySegmentError, match="model_version") as ei:
        Compute(load_settings(), stand_ins(call_ms=0.0, item_ms=0.0), StoreDouble(),
                WorkerMetrics(), model_version=version)
    assert ei.value.option == "model_version"
    assert check_key_segment("--model-version", "card-v2.1_rc") == "card-v2.1_rc"
