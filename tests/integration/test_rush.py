"""The rush features against the real stack: the backfill gate's view of the live group's lag;
deadlines, the result cache and the shadow model through a real worker."""

from __future__ import annotations

import hashlib
from pathlib import Path

from confluent_kafka import TopicPartition

from schemas.reasons import ReasonCode
from streams.backfill import LiveLag, YieldGate
from streams.kafka import consumer, plain_producer
from streams.settings import BackfillSettings, Settings


def test_live_lag_is_what_the_live_group_has_not_committed(settings: Settings) -> None:
    k = settings.kafka
    p = plain_producer(k)
    for i in range(12):
        p.produce(k.uploads_topic, key=f"u{i}".encode(), value=b"{}", partition=i % 3)
    assert p.flush(10) == 0
    lag = LiveLag(k, k.group_id, k.uploads_topic)
    try:
        assert lag() == 0  # the group never committed: no live worker to yield to
        c = consumer(k, k.group_id)
        c.commit(offsets=[TopicPartition(k.uploads_topic, 0, 0),
                          TopicPartition(k.uploads_topic, 1, 2)], asynchronous=False)
        c.close()
        assert lag() == 4 + 2  # partitions 0 and 1 hold 4 each; partition 2 has no live owner
        gate = YieldGate(lag, BackfillSettings(yield_lag=6, quiet_s=0.0, check_s=0.05))
        assert gate.wait() == 0.0 and gate.yields == 0
        gate = YieldGate(lag, BackfillSettings(yield_lag=5, quiet_s=0.0, check_s=0.05))
        stops = iter([False, False, True])
        assert gate.wait(stop=lambda: next(stops)) > 0.0 and gate.yields == 1
    finally:
        lag.close()


def test_stale_cached_and_shadowed_uploads_through_the_real_stack(settings: Settings,
                                                                   tmp_path: Path) -> None:
    """Four uploads through a real worker: one past its deadline (STALE, no GET of its missing
    object), two with the same bytes (one from the cache, its own object in MinIO, same
    bytes), one more; every upload answered by a model or the cache is also compared by a
    shadow version (share 1), the comparisons committed on the shadow topic."""
    import threading

    from schemas import codec
    from schemas.models import UploadEvent
    from streams.produce import UploadProducer
    from streams.settings import ShadowSettings
    from streams.storage import Storage
    from streams.worker import Worker
    from tests.doubles import stand_ins
    from tests.integration.helpers import read_committed, results, write_images

    k = settings.kafka
    s = settings.model_copy(update={"shadow": ShadowSettings(
        task="card", model_file=tmp_path / "shadow.onnx", share=1.0,
        topic=f"{k.results_topic}.shadow")})
    a, b = (p.read_bytes() for p in write_images(tmp_path, 2))
    prod = UploadProducer(s)
    stale = UploadEvent.model_validate({
        "upload_id": "late", "task": "card", "deadline": "2020-01-01T00:00:00Z",
        "image": {"ref": {"bucket": s.s3.uploads_bucket, "key": "never/put.jpg"}}})
    for ev in (stale, prod.event_for("first", "card", a, "a.jpg", None),
               prod.event_for("again", "card", a, "a2.jpg", None),
               prod.event_for("other", "card", b, "b.jpg", None)):
        prod.send(ev)
    assert prod.flush(10) == []
    w = Worker(s, stand_ins(call_ms=1.0), Storage(s.s3), shadow=stand_ins(call_ms=1.0)["card"])
    th = threading.Thread(target=w.run, daemon=True)
    th.start()
    try:
        rs = {r.upload_id: r for r in results(s, 4, timeout_s=90)}
        diffs = [codec.decode_shadow_diff(m.value())
                 for m in read_committed(s, s.shadow.topic, 3, timeout_s=30, settle_s=1.0)]
    finally:
        w.stop()
        th.join(60)
    assert rs["late"].reasons == (ReasonCode.STALE,) and rs["late"].model is None
    # the two repeats sit in different partitions: whichever the batch holds first runs the
    # model, the other is the cache's
    first, again = sorted((rs["first"], rs["again"]), key=lambda r: bool(r.cache_hit))
    assert (first.cache_hit, again.cache_hit) == (None, True)
    assert first.timings.batch_size > 0
    assert again.timings.batch_size == 0 and again.card.quad == first.card.quad
    fr, ar = first.card.rectified, again.card.rectified
    assert ar.key != fr.key and f"/{again.upload_id}/" in ar.key and ar.sha256 == fr.sha256
    st = Storage(s.s3)
    assert hashlib.sha256(st.get(ar.bucket, ar.key)).hexdigest() == ar.sha256
    assert sorted(d.upload_id for d in diffs) == ["again", "first", "other"]
    assert all(not d.verdict_changed and d.measures == {"quad_iou": 1.0} for d in diffs)
    reg = w.metrics.registry
    assert reg.get_sample_value("cardstream_result_reasons_total",
                                {"task": "card", "reason": "STALE"}) == 1.0
    assert reg.get_sample_value("cardstream_cache_hits_total", {"task": "card"}) == 1.0
    assert reg.get_sample_value("cardstream_shadow_diffs_total",
                                {"task": "card", "change": "none"}) == 3.0
