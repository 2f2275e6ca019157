"""streams.tracing: W3C trace context from Kafka headers (valid, absent, malformed), spans and
their parentage on an in-memory exporter, context passed on with tracing off, and the OTLP/HTTP
export of a process with tracing on (to a real HTTP listener, in a subprocess: the global
tracer provider can be set once per process)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import textwrap
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from streams.metrics import WorkerMetrics
from streams.settings import Settings
from streams.tracing import Spans, Tracing, extract, headers_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


@pytest.fixture()
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture()
def tracing(exporter: InMemorySpanExporter) -> Tracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(WorkerMetrics(), provider)


def invalid_count(t: Tracing) -> float:
    return t.metrics.registry.get_sample_value("cardstream_trace_context_invalid_total")


def test_a_valid_traceparent_is_continued() -> None:
    ctx, malformed = extract([("content-type", b"application/json"),
                              ("traceparent", VALID.encode())])
    assert not malformed and ctx is not None
    from opentelemetry import trace
    sc = trace.get_current_span(ctx).get_span_context()
    assert (f"{sc.trace_id:032x}", f"{sc.span_id:016x}", sc.is_remote) == (TRACE, PARENT, True)


@pytest.mark.parametrize("headers", [None, [], [("content-type", b"application/json")]])
def test_no_traceparent_starts_a_trace_uncounted(headers: list | None) -> None:
    assert extract(headers) == (None, False)


@pytest.mark.parametrize("value", [
    b"garbage",
    b"",
    f"00-{'0' * 32}-{PARENT}-01".encode(),  # all-zero trace id
    f"00-{TRACE}-{'0' * 16}-01".encode(),  # all-zero parent id
    f"ff-{TRACE}-{PARENT}-01".encode(),  # version ff is invalid
    f"00-{TRACE.upper()}-{PARENT}-01".encode(),  # uppercase hex
    f"00-{TRACE[:-1]}-{PARENT}-01".encode(),  # 31 hex digits
    f"00-{TRACE}-{PARENT}-01-extra".encode(),  # version 00 has exactly four fields
    f"00-{TRACE}-{PARENT}-01".encode() + b" " * 600,  # beyond 512 characters
    b"\xff\xfe00-" + TRACE.encode(),  # not UTF-8
    None,  # a header without a value
])
def test_a_malformed_traceparent_is_ignored_and_counted(tracing: Tracing,
                                                        exporter: InMemorySpanExporter,
                                                        value: bytes | None) -> None:
    assert extract([("traceparent", value)]) == (None, True)
    span = tracing.upload_span("t", 0, 7, [("traceparent", value)])
    span.end()
    (s,) = exporter.get_finished_spans()
    assert s.parent is None and f"{s.context.trace_id:032x}" != TRACE  # a new trace
    assert invalid_count(tracing) == 1.0


def test_two_different_traceparents_are_malformed_two_equal_ones_are_not() -> None:
    other = f"00-{'1' * 32}-{PARENT}-01".encode()
    assert extract([("traceparent", VALID.encode()), ("traceparent", other)]) == (None, True)
    ctx, malformed = extract([("traceparent", VALID.encode()), ("TraceParent", VALID.encode())])
    assert ctx is not None and not malformed


def test_upload_span_continues_the_producer_trace(tracing: Tracing,
                                                  exporter: InMemorySpanExporter) -> None:
    span = tracing.upload_span("uploads", 3, 120, [("traceparent", VALID.encode()),
                                                   ("tracestate", b"vendor=abc")])
    out = dict(headers_of(span))
    Tracing.end_upload(span, upload_id="u1", task="card", status="rejected",
                       reasons=["NO_CARD", "BLURRY"])
    (s,) = exporter.get_finished_spans()
    assert s.name == Spans.UPLOAD and s.kind is SpanKind.CONSUMER
    assert f"{s.context.trace_id:032x}" == TRACE and f"{s.parent.span_id:016x}" == PARENT
    assert s.parent.is_remote
    assert out["traceparent"] == f"00-{TRACE}-{s.context.span_id:016x}-01".encode()
    assert out["tracestate"] == b"vendor=abc"
    assert s.attributes["messaging.destination.partition.id"] == "3"
    assert s.attributes["messaging.kafka.offset"] == 120
    assert s.attributes["cardstream.reasons"] == ("NO_CARD", "BLURRY")
    assert s.status.status_code is StatusCode.UNSET
    assert invalid_count(tracing) == 0.0


def test_batch_and_child_spans_parentage_and_links(tracing: Tracing,
                                                   exporter: InMemorySpanExporter) -> None:
    ups = [tracing.upload_span("uploads", 0, i, None) for i in range(3)]
    batch = tracing.batch_span(ups)
    for u in ups:
        Tracing.link_batch(u, batch)
    with tracing.span(Spans.PROCESS, batch, **{"cardstream.task": "card"}):
        # a processor's span (the OpenTelemetry API, no parent given) nests under the current one
        tracing.tracer.start_span(Spans.MODEL).end()
    tracing.interval(Spans.POLL, batch, 1_000, 2_000)
    with pytest.raises(KeyError), tracing.span(Spans.FETCH, ups[0]):
        raise KeyError("uploads/Jane Doe.jpg")  # a message may quote a producer's key
    batch.end()
    for u in ups:
        Tracing.end_upload(u, upload_id="u", task="card", dead_letter="NOT_JSON")
    spans = {(s.name, s.context.span_id): s for s in exporter.get_finished_spans()}
    by_name: dict[str, list] = {}
    for (name, _), s in spans.items():
        by_name.setdefault(name, []).append(s)
    (b,) = by_name[Spans.BATCH]
    assert b.parent is None
    assert {ln.context.span_id for ln in b.links} == {u.get_span_context().span_id for u in ups}
    assert {u.context.trace_id for u in by_name[Spans.UPLOAD]} .isdisjoint({b.context.trace_id})
    for u in by_name[Spans.UPLOAD]:
        assert [ln.context.span_id for ln in u.links] == [b.context.span_id]
        assert u.status.status_code is StatusCode.ERROR and u.status.description == "NOT_JSON"
    (p,) = by_name[Spans.PROCESS]
    (m,) = by_name[Spans.MODEL]
    (poll,) = by_name[Spans.POLL]
    assert p.parent.span_id == b.context.span_id and m.parent.span_id == p.context.span_id
    assert (poll.start_time, poll.end_time,
            poll.parent.span_id) == (1_000, 2_000, b.context.span_id)
    (f,) = by_name[Spans.FETCH]
    assert f.parent.span_id == ups[0].get_span_context().span_id
    assert f.status.status_code is StatusCode.ERROR and f.status.description == "KeyError"
    assert not f.events  # no exception event: its message is not recorded


def test_tracing_off_records_nothing_but_passes_the_context_on() -> None:
    off = Tracing(WorkerMetrics())
    assert not off.on
    span = off.upload_span("uploads", 0, 1, [("traceparent", VALID.encode())])
    with off.span(Spans.FETCH, span):
        pass
    assert dict(headers_of(span)) == {"traceparent": VALID.encode()}
    assert headers_of(off.upload_span("uploads", 0, 2, None)) == []
    assert headers_of(off.upload_span("uploads", 0, 3, [("traceparent", b"junk")])) == []
    assert invalid_count(off) == 1.0


def test_settings_are_off_by_default_and_bounded() -> None:
    s = Settings()
    assert s.tracing.enabled is False
    with pytest.raises(ValueError):
        Settings(tracing={"sample_ratio": 1.5})


class _Collector(http.server.BaseHTTPRequestHandler):
    got: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Collector.got.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_tracing_on_exports_otlp_http_to_the_configured_endpoint() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        code = textwrap.dedent(f"""
            from opentelemetry import trace
            from streams.metrics import WorkerMetrics
            from streams.settings import TracingSettings
            from streams.tracing import Tracing
            t = Tracing.from_settings(TracingSettings(enabled=True, otlp_endpoint={url!r},
                                                      service_name="cs-test"), WorkerMetrics())
            assert t.on
            s = t.upload_span("uploads", 0, 1, [("traceparent", b"{VALID}")])
            t.end_upload(s, upload_id="u-otlp", task="card", status="accepted")
            trace.get_tracer_provider().shutdown()  # flushes the batch processor
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        server.shutdown()
    (path, ctype, body) = _Collector.got[-1]
    assert (path, ctype) == ("/v1/traces", "application/x-protobuf")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    req = ExportTraceServiceRequest.FromString(body)
    (rs,) = req.resource_spans
    assert ({a.key: a.value.string_value for a in rs.resource.attributes}["service.name"]
            == "cs-test")
    (span,) = rs.scope_spans[0].spans
    assert span.name == Spans.UPLOAD and span.trace_id.hex() == TRACE
    assert span.parent_span_id.hex() == PARENT
