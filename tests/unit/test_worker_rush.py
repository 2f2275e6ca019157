"""The worker's compute step with deadlines and the result cache (streams.deadlines,
streams.cache wired into streams.worker.compute), on the stand-in processors and the store
double."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from concurrent.futures import Future
from pathlib import Path

import cv2
import numpy as np
import pytest

from schemas import codec
from schemas.reasons import ReasonCode, Status
from streams.metrics import WorkerMetrics
from streams.settings import (
    CacheSettings,
    DeadlineSettings,
    Settings,
    ShadowSettings,
    load_settings,
)
from streams.shadow import Shadow, sampled
from streams.worker.compute import Compute, Processed, Rejected
from tests.doubles import Msg, StoreDouble, stand_ins

UPLOADS = "up-bucket"


def settings(**update: object) -> Settings:
    s = load_settings()
    return s.model_copy(update={"worker": s.worker.model_copy(update={"io_threads": 2}),
                                "s3": s.s3.model_copy(update={"allowed_buckets": (UPLOADS,)}),
                                **update})


def png(shade: int) -> bytes:
    ok, buf = cv2.imencode(".png", np.full((96, 128, 3), shade, np.uint8))
    assert ok
    return buf.tobytes()


def upload(offset: int, uid: str, *, data: bytes | None = None, ref: dict | None = None,
           deadline: str | None = None, options: dict | None = None) -> Msg:
    image = {"ref": ref} if ref is not None else {"inline_b64": base64.b64encode(data).decode()}
    ev = {"schema_version": 1, "upload_id": uid, "task": "card", "image": image,
          "submitted_at": "2026-12-04T00:00:00Z"}
    if deadline is not None:
        ev["deadline"] = deadline
    if options is not None:
        ev["options"] = options
    return Msg(0, offset, topic="t.uploads", key=uid.encode(), value=codec.dumps(ev))


def run(c: Compute, msgs: list[Msg], store: StoreDouble):
    computed = c.run(msgs)
    stored = c.stored(computed, lambda fs: [f.result() for f in fs if isinstance(f, Future)])
    return computed, c.records(stored.fates)[0]


def test_a_stale_upload_is_answered_without_fetch_or_compute() -> None:
    store = StoreDouble()
    procs = stand_ins(call_ms=0.0, item_ms=0.0)
    past, future = "2020-01-01T00:00:00Z", "2999-01-01T00:00:00+14:00"
    msgs = [upload(0, "late", ref={"bucket": UPLOADS, "key": "missing.jpg"}, deadline=past),
            upload(1, "epoch", data=png(10), deadline="1970-01-01T00:00:00Z"),
            upload(2, "fine", data=png(20), deadline=future)]
    c = Compute(settings(), procs, store, WorkerMetrics())
    try:
        computed, results = run(c, msgs, store)
    finally:
        c.close()
    late, epoch, fine = computed.fates
    # the missing object was never asked for: STALE, not OBJECT_NOT_FOUND
    assert isinstance(late, Rejected) and late.reason == ReasonCode.STALE
    assert isinstance(epoch, Rejected) and epoch.reason == ReasonCode.STALE
    assert isinstance(fine, Processed) and procs["card"].stats.images == 1
    stale = [r for r in results if r.upload_id in ("late", "epoch")]
    assert all((str(r.status), r.reasons, r.model, r.timings.batch_size)
               == ("rejected", (ReasonCode.STALE,), None, 0) for r in stale)


def test_a_replay_applies_no_deadline_and_max_age_applies_live() -> None:
    store = StoreDouble()
    old = upload(0, "old", data=png(30), deadline="2020-01-01T00:00:00Z")
    c = Compute(settings(), stand_ins(call_ms=0.0, item_ms=0.0), store, WorkerMetrics(),
                live=False)
    try:
        (f,) = c.run([old]).fates
    finally:
        c.close()
    assert isinstance(f, Processed)
    aged = Msg(0, 1, topic="t.uploads", key=b"aged", value=upload(1, "aged", data=png(30)).value(),
               timestamp_ms=1)  # a record stamped 1970: 7 days old
    s = settings(deadlines=DeadlineSettings(max_age_s={"card": 600}))
    c = Compute(s, stand_ins(call_ms=0.0, item_ms=0.0), store, WorkerMetrics())
    try:
        (f,) = c.run([aged]).fates
    finally:
        c.close()
    assert isinstance(f, Rejected) and f.reason == ReasonCode.STALE


def test_repeats_are_answered_from_the_cache_with_their_own_objects() -> None:
    store = StoreDouble()
    procs = stand_ins(call_ms=0.0, item_ms=0.0)
    a, b = png(40), png(50)
    c = Compute(settings(), procs, store, WorkerMetrics())
    try:
        batch1, res1 = run(c, [upload(0, "a1", data=a), upload(1, "a2", data=a),
                               upload(2, "b1", data=b),
                               upload(3, "a3", data=a, options={"doc_type": "passport"})], store)
        assert procs["card"].stats.images == 3  # a once, b, and a with other options
        batch2, res2 = run(c, [upload(4, "a4", data=a), upload(5, "b2", data=b)], store)
        assert procs["card"].stats.images == 3  # both from the cache: no model ran
        assert c.metrics.registry.get_sample_value("cardstream_inference_images_total",
                                                   {"task": "card"}) == 3
    finally:
        c.close()
    by = {r.upload_id: r for r in res1 + res2}
    assert {u for u, r in by.items() if r.cache_hit} == {"a2", "a4", "b2"}
    assert all(by[u].cache_hit is None for u in ("a1", "b1", "a3"))
    for hit, orig in (("a2", "a1"), ("a4", "a1"), ("b2", "b1")):
        h, o = by[hit], by[orig]
        assert (h.status, h.reasons, h.card.quad) == (o.status, o.reasons, o.card.quad)
        assert (h.timings.batch_size, h.timings.inference_ms) == (0, 0.0)
        assert h.model == o.model
        # its own object, same bytes, under its own upload id
        assert h.card.rectified.key != o.card.rectified.key and f"/{hit}/" in h.card.rectified.key
        assert h.card.rectified.sha256 == o.card.rectified.sha256
        assert store.objects[(h.card.rectified.bucket, h.card.rectified.key)] == \
            store.objects[(o.card.rectified.bucket, o.card.rectified.key)]
    assert c.metrics.registry.get_sample_value("cardstream_cache_bytes") > 0


def test_two_images_claiming_one_sha256_never_share_a_result() -> None:
    a, b = png(60), png(70)
    claim = hashlib.sha256(a).hexdigest()
    store = StoreDouble()
    store.objects[(UPLOADS, "a.png")] = a
    store.objects[(UPLOADS, "b.png")] = b
    procs = stand_ins(call_ms=0.0, item_ms=0.0)
    c = Compute(settings(), procs, store, WorkerMetrics())
    try:
        computed, results = run(c, [
            upload(0, "a", ref={"bucket": UPLOADS, "key": "a.png", "sha256": claim}),
            upload(1, "b", ref={"bucket": UPLOADS, "key": "b.png", "sha256": claim}),
            upload(2, "b-unclaimed", ref={"bucket": UPLOADS, "key": "b.png"})], store)
    finally:
        c.close()
    fa, fb, fb2 = computed.fates
    assert isinstance(fa, Processed) and not fa.cache_hit
    assert isinstance(fb, Rejected) and fb.reason == ReasonCode.CHECKSUM_MISMATCH
    # b's bytes hashed by the worker: not a's key, so computed, not served a's verdict
    assert isinstance(fb2, Processed) and not fb2.cache_hit
    assert procs["card"].stats.images == 2
    assert [str(r.status) for r in results] == [Status.ACCEPTED, Status.REJECTED, Status.ACCEPTED]


def test_cache_off_computes_every_repeat() -> None:
    store = StoreDouble()
    procs = stand_ins(call_ms=0.0, item_ms=0.0)
    c = Compute(settings(cache=CacheSettings(enabled=False)), procs, store, WorkerMetrics())
    try:
        _, results = run(c, [upload(0, "x1", data=png(80)), upload(1, "x2", data=png(80))], store)
    finally:
        c.close()
    assert procs["card"].stats.images == 2 and not any(r.cache_hit for r in results)


class _Strict:
    """A shadow version of the card stand-in that rejects (BLURRY) images darker than a shade
    and finds a quad half the frame's width: another verdict, another quad."""

    def __init__(self, inner: object, below: int) -> None:
        self.inner, self.below = inner, below

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def process_batch(self, items):
        out = []
        for it, o in zip(items, self.inner.process_batch(items), strict=True):
            px = cv2.imdecode(np.frombuffer(it.image.data, np.uint8), cv2.IMREAD_GRAYSCALE)
            w = it.image.width
            quad = [[0.0, 0.0], [w / 2, 0.0], [w / 2, float(it.image.height)],
                    [0.0, float(it.image.height)]]
            out.append(dataclasses.replace(
                o, payload={**o.payload, "quad": quad},
                status=Status.REJECTED if px.mean() < self.below else o.status,
                reasons=(ReasonCode.BLURRY,) if px.mean() < self.below else o.reasons))
        return out


def test_sampling_is_a_stable_share_of_upload_ids() -> None:
    ids = [f"u{i}" for i in range(4000)]
    got = [u for u in ids if sampled(u, 0.25)]
    assert 0.22 < len(got) / len(ids) < 0.28
    assert got == [u for u in ids if sampled(u, 0.25)]  # the same uploads every time
    assert not any(sampled(u, 0.0) for u in ids) and all(sampled(u, 1.0) for u in ids)


def test_shadow_compares_sampled_uploads_without_touching_the_live_results() -> None:
    store = StoreDouble()
    procs = stand_ins(call_ms=0.0, item_ms=0.0)
    shadow_proc = _Strict(stand_ins(call_ms=0.0, item_ms=0.0)["card"], below=45)
    s = settings(shadow=ShadowSettings(task="card", model_file=Path("shadow.onnx"), share=1.0))
    metrics = WorkerMetrics()
    c = Compute(s, procs, store, metrics, shadow=Shadow(s.shadow, shadow_proc, metrics))
    try:
        computed, results = run(c, [upload(0, "dark", data=png(30)),
                                    upload(1, "light", data=png(90)),
                                    upload(2, "bad", ref={"bucket": UPLOADS, "key": "gone"})],
                                store)
    finally:
        c.close()
    assert [str(r.status) for r in results] == ["accepted", "accepted", "rejected"]  # live
    by = {d.upload_id: d for d in computed.shadow}
    assert set(by) == {"dark", "light"}  # the missing object: no model ran, nothing compared
    dark, light = by["dark"], by["light"]
    assert (dark.verdict_changed, dark.reasons_changed) == (True, True)
    assert (str(dark.shadow.status), dark.shadow.reasons) == ("rejected", (ReasonCode.BLURRY,))
    assert (light.verdict_changed, light.reasons_changed) == (False, False)
    assert dark.measures["quad_iou"] == pytest.approx(0.5)  # half the frame against all of it
    assert dark.live.model == results[0].model and dark.source.offset == 0
    assert computed.shadow == c.stored(computed, lambda fs: None).shadow
    assert metrics.registry.get_sample_value("cardstream_shadow_seconds_count",
                                             {"task": "card"}) == 1.0


def test_a_failing_shadow_leaves_the_live_batch_alone() -> None:
    store = StoreDouble()
    procs = stand_ins(call_ms=0.0, item_ms=0.0)
    broken = stand_ins(call_ms=0.0, item_ms=0.0)["card"]
    broken.process_batch = lambda items: (_ for _ in ()).throw(RuntimeError("CUDA error"))
    s = settings(shadow=ShadowSettings(task="card", model_file=Path("shadow.onnx"), share=1.0))
    c = Compute(s, procs, store, WorkerMetrics(), shadow=Shadow(s.shadow, broken, WorkerMetrics()))
    try:
        computed, results = run(c, [upload(0, "x", data=png(30))], store)
    finally:
        c.close()
    assert computed.shadow == () and [str(r.status) for r in results] == ["accepted"]
