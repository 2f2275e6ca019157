"""Traces through the real worker, Kafka and MinIO: the spans of a batch and their parentage,
read with the OpenTelemetry SDK's in-memory exporter, and the trace context in the result's and
the dead letter's headers (streams/tracing.py).

The exporter sits on the process's global tracer provider (installed here once for the session,
as the worker would install its own), so the processors' decode and model-call spans, which use
the OpenTelemetry API alone, land there too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schemas import codec
from streams.kafka import plain_producer
from streams.produce import UploadProducer
from streams.samples import write_samples
from streams.settings import Settings, TracingSettings
from streams.storage import Storage
from streams.tracing import Spans
from streams.worker import Worker, build_processors
from tests.integration.helpers import read_committed

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    current = trace.get_tracer_provider()
    provider = current if isinstance(current, TracerProvider) else TracerProvider()
    if provider is not current:
        trace.set_tracer_provider(provider)
    exp = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    yield exp
    exp.shutdown()


def tree(spans: list[ReadableSpan], root: ReadableSpan, depth: int = 0) -> list[str]:
    """The span tree under ``root`` as indented lines (name, ms, key attributes)."""
    keys = ("cardstream.upload_id", "cardstream.status", "cardstream.task",
            "cardstream.model.name", "cardstream.model.rows", "cardstream.process.items",
            "cardstream.decode.images", "cardstream.batch.events", "cardstream.dead_letter")
    attrs = " ".join(f"{k.rsplit('.', 1)[-1]}={root.attributes[k]}" for k in keys
                     if k in root.attributes)
    line = (f"{'  ' * depth}{root.name} [{(root.end_time - root.start_time) / 1e6:.1f} ms]"
            f"{' ' + attrs if attrs else ''}"
            f"{' links=' + str(len(root.links)) if root.links else ''}")
    kids = sorted((s for s in spans if s.parent is not None
                   and s.parent.span_id == root.context.span_id), key=lambda s: s.start_time)
    return [line] + [x for k in kids for x in tree(spans, k, depth + 1)]


def test_spans_and_their_parentage_through_the_real_stack(
        settings: Settings, tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    s = settings.model_copy(update={"tracing": TracingSettings(enabled=True)})
    cards = write_samples(tmp_path)["card"]  # card scenes: accepted, a rectified output PUT
    imgs = [p.read_bytes() for p in (cards * 3)[:3]]
    prod = UploadProducer(s, inline=True)
    sent = {"traced": f"00-{TRACE}-{PARENT}-01".encode(), "plain": None, "malformed": b"00-xyz"}
    k = s.kafka
    p = plain_producer(k)
    for (uid, tp), data in zip(sent.items(), imgs, strict=True):
        key, value, headers = codec.encode_upload(prod.event_for(uid, "card", data, "u.jpg", None))
        p.produce(k.uploads_topic, key=key, value=value, partition=0,
                  headers=headers + ([("traceparent", tp)] if tp else []))
    p.produce(k.uploads_topic, key=b"junk", value=b"not json", partition=0,
              headers=[("traceparent", f"00-{TRACE}-{'1' * 16}-01".encode())])
    assert p.flush(10) == 0
    exporter.clear()
    w = Worker(s, build_processors(s, ["card"]), Storage(s.s3))
    assert w.tracing.on
    w.warm_up()
    exporter.clear()  # warm-up's model calls are no upload's
    th = threading.Thread(target=w.run, daemon=True)
    th.start()
    try:
        res = read_committed(s, k.results_topic, 3, timeout_s=120)
        dl = read_committed(s, k.dlq_topic, 1, timeout_s=30, settle_s=0.5)
    finally:
        w.stop()
        th.join(60)
    time.sleep(0.2)
    spans = list(exporter.get_finished_spans())
    ups = {sp.attributes.get("cardstream.upload_id"): sp for sp in spans if sp.name == Spans.UPLOAD}
    assert set(ups) >= {"traced", "plain", "malformed"}
    # the producer's trace is continued; absent or malformed: a new root trace
    t = ups["traced"]
    assert f"{t.context.trace_id:032x}" == TRACE and f"{t.parent.span_id:016x}" == PARENT
    assert ups["plain"].parent is None and ups["malformed"].parent is None
    assert w.metrics.registry.get_sample_value("cardstream_trace_context_invalid_total") == 1.0
    # the result's record carries its upload span's context
    by_uid = {codec.decode_result(m.value()).upload_id: dict(m.headers()) for m in res}
    stored = {r.upload_id for r in map(lambda m: codec.decode_result(m.value()), res)
              if r.card is not None and r.card.rectified is not None}
    assert stored, "no sample card was rectified: no PUT span to check"
    for uid, sp in ups.items():
        if uid in by_uid:
            assert by_uid[uid]["traceparent"] == (
                f"00-{sp.context.trace_id:032x}-{sp.context.span_id:016x}-"
                f"{sp.context.trace_flags:02x}").encode()
    # the dead letter's too: the producer's trace, a span of its own
    (d,) = dl
    dh = dict(d.headers())
    assert dh["traceparent"].decode().startswith(f"00-{TRACE}-")
    junk = next(sp for sp in spans if sp.name == Spans.UPLOAD
                and sp.attributes.get("cardstream.dead_letter") == "NOT_JSON")
    assert dh["traceparent"] == f"00-{TRACE}-{junk.context.span_id:016x}-01".encode()  # its flags
    assert f"{junk.parent.span_id:016x}" == "1" * 16
    # per upload: fetch and put under the upload span; the batch: poll, process (decode, model
    # calls under it), transaction; links both ways
    for uid in ("traced", "plain", "malformed"):
        kids = {sp.name for sp in spans if sp.parent is not None
                and sp.parent.span_id == ups[uid].context.span_id}
        assert kids == {Spans.FETCH} | ({Spans.PUT} if uid in stored else set()), (uid, kids)
    batch_ids = {ln.context.span_id for ln in t.links}
    (batch,) = [sp for sp in spans if sp.name == Spans.BATCH and sp.context.span_id in batch_ids]
    assert batch.parent is None and t.context.span_id in {ln.context.span_id for ln in batch.links}
    under = {sp.name for sp in spans if sp.parent is not None
             and sp.parent.span_id == batch.context.span_id}
    assert {Spans.PROCESS, Spans.TRANSACTION} <= under
    procs = [sp for sp in spans if sp.name == Spans.PROCESS
             and sp.parent.span_id == batch.context.span_id]
    in_process = {sp.name for sp in spans if sp.parent is not None
                  and sp.parent.span_id in {x.context.span_id for x in procs}}
    assert {Spans.DECODE, Spans.MODEL} <= in_process
    # no personal data in attributes: no subject_ref, no object key, no image bytes
    for sp in spans:
        for key, v in sp.attributes.items():
            assert "subject" not in key and "key" not in key.split(".")[-1], key
            assert not (isinstance(v, bytes | bytearray)), key
    print("\n" + "\n".join(tree(spans, t)))
    print("\n".join(tree(spans, batch)))
