"""Traces: the W3C trace context (``traceparent``, ``tracestate``) read from an upload record's
headers and written into its result's or dead letter's headers, and the worker's spans, on the
OpenTelemetry SDK (off by default: ``CARDSTREAM_TRACING__ENABLED``).

The spans of a batch (names in :class:`Spans`)::

    trace of the upload (continues the producer's traceparent, or starts when there is none)
      cardstream.upload          CONSUMER, one per event: batch formed -> committed
        cardstream.fetch         its image: GET (or inline base64) + header probe
        cardstream.put           its output objects' PUTs (or its dead letter's quarantine PUT)
      ... the result's / dead letter's headers carry this span's traceparent

    trace of the batch (its own root; linked to every upload span, and each upload span to it)
      cardstream.batch           the batch: formed -> committed
        cardstream.poll          the poll that closed the batch
        cardstream.process       one processor call on one batch bucket (task, items)
          cardstream.decode      the bucket's pixel decode (processors/pixels.py)
          cardstream.model       each batched model call (processors/runtime.py)
        cardstream.transaction   the Kafka transaction: results, dead letters, offsets

An upload's own work (its GET, its PUTs) is in its trace; what a batch shares (the model calls,
the transaction) is in the batch's, as OpenTelemetry's messaging conventions do for batches:
one span cannot have several parents, so the two are joined by span links both ways. The
processors use the OpenTelemetry API only (``processors`` imports nothing of ``streams``): their
``decode`` and ``model`` spans join the current span of the batch thread through the global
tracer provider, which :func:`global_provider` installs once per process when tracing is on.

A ``traceparent`` header that is not a valid W3C version-00 value (a bad length or character, an
all-zero id, a non-UTF-8 value, two different values) is ignored: a new trace starts, and it is
counted in ``cardstream_trace_context_invalid_total``. With tracing off no span is recorded, but
a valid incoming context still goes on, unchanged, into the result's headers (OpenTelemetry's
no-op tracer hands the parent's context on), so a downstream consumer continues the producer's
trace either way.

Attributes carry ids and codes only (no personal data, ``docs/SECURITY.md``): the upload id (an
opaque token the contract forbids to hold personal data, as in the logs), task, partition,
offset, batch and bucket sizes, byte sizes, the verdict and reason codes, model name, version
and provider. Never ``subject_ref``, image bytes or object keys chosen by a producer (a key may
hold a name); an exception is recorded as its type only (a message may quote a key).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from processors import tracing as ptracing
from processors.tracing import span as traced
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.settings import TracingSettings

Headers = Sequence[tuple[str, bytes | None]] | None
"""Kafka record headers as confluent-kafka gives them (``Message.headers()``)."""

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
INSTRUMENTATION = "cardstream"
"""The instrumentation scope of the worker's spans (the processors' is
``cardstream.processors``)."""


class Spans:
    """Span names (see the module doc for the tree)."""

    UPLOAD = "cardstream.upload"
    FETCH = "cardstream.fetch"
    PUT = "cardstream.put"
    BATCH = "cardstream.batch"
    POLL = "cardstream.poll"
    PROCESS = "cardstream.process"
    DECODE = ptracing.DECODE
    MODEL = ptracing.MODEL
    TRANSACTION = "cardstream.transaction"


class _HeaderGetter(Getter[Headers]):
    """Reads W3C trace-context fields from Kafka headers: keys compared without case (they are
    HTTP header names in the W3C spec), values decoded as UTF-8 (a value that is not is None)."""

    def get(self, carrier: Headers, key: str) -> list[str] | None:
        values = [_text(v) for k, v in carrier or () if k.lower() == key]
        return values or None  # type: ignore[return-value]  # None entries: see extract

    def keys(self, carrier: Headers) -> list[str]:
        return [k for k, _ in carrier or ()]


def _text(v: bytes | None) -> str | None:
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return None


_GETTER = _HeaderGetter()
_W3C = TraceContextTextMapPropagator()


def extract(headers: Headers) -> tuple[Context | None, bool]:
    """The trace context of a record's headers.

    Returns:
        ``(context, malformed)``: the context to continue (None: start a new trace) and whether
        a ``traceparent`` header was present but unusable (a bad value, an all-zero id,
        ``ff`` version, not UTF-8, or several different values).
    """
    values = _GETTER.get(headers, TRACEPARENT)
    if not values:
        return None, False
    if any(v is None for v in values) or len(set(values)) > 1:
        return None, True
    ctx = _W3C.extract(headers, getter=_GETTER)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None, True
    return ctx, False


def headers_of(span: Span) -> list[tuple[str, bytes]]:
    """``traceparent`` (and ``tracestate`` when there is one) of ``span``, as Kafka headers; ``[]``
    when ``span`` has no valid context (tracing off and no incoming context)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return [(k, v.encode("ascii")) for k, v in carrier.items()]


_PROVIDER_LOCK = threading.Lock()


def global_provider(settings: TracingSettings) -> TracerProvider:
    """The process's SDK tracer provider, built from ``settings`` and installed as
    OpenTelemetry's global one on first use (the processors' spans go through it); a provider
    already installed (a second worker in this process, a test's) is returned as it is.

    It samples ``sample_ratio`` of the traces it starts and follows the decision of an incoming
    sampled flag (``ParentBased``), and exports through OTLP/HTTP (protobuf) to
    ``otlp_endpoint`` in batches on a background thread (``BatchSpanProcessor``: a slow or absent
    collector drops spans, never holds the worker).
    """
    with _PROVIDER_LOCK:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            return current
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider(
            resource=Resource.create({"service.name": settings.service_name}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=settings.otlp_endpoint, timeout=settings.otlp_timeout_s)))
        trace.set_tracer_provider(provider)
        log.info("tracing_on", endpoint=settings.otlp_endpoint, sample_ratio=settings.sample_ratio)
        return provider


class Tracing:
    """The worker's side of tracing: trace context in and out, and its spans.

    Args:
        metrics: the worker's metrics (``trace_context_invalid``).
        provider: the SDK provider the spans go to (tests: one with an in-memory exporter);
            None: tracing off (OpenTelemetry's no-op tracer; incoming contexts still go on).

    Attributes:
        on: whether spans are recorded.
    """

    def __init__(self, metrics: WorkerMetrics, provider: TracerProvider | None = None) -> None:
        self.metrics = metrics
        self.on = provider is not None
        self.tracer: trace.Tracer = (provider.get_tracer(INSTRUMENTATION) if provider is not None
                                     else trace.NoOpTracer())

    @classmethod
    def from_settings(cls, settings: TracingSettings, metrics: WorkerMetrics) -> Tracing:
        """On (:func:`global_provider`) when ``settings.enabled``, else off."""
        return cls(metrics, global_provider(settings) if settings.enabled else None)

    # --- spans ---------------------------------------------------------------------------
    def upload_span(self, topic: str, partition: int, offset: int, headers: Headers,
                    start_ns: int | None = None) -> Span:
        """Start the span of one upload record (CONSUMER), continuing the trace of its
        ``traceparent`` header, or a new trace when there is none or it is malformed (counted).
        Ended by the caller (:meth:`end_upload`)."""
        ctx, malformed = extract(headers)
        if malformed:
            self.metrics.trace_context_invalid.inc()
        return self.tracer.start_span(
            Spans.UPLOAD, context=ctx if ctx is not None else Context(), kind=SpanKind.CONSUMER,
            start_time=start_ns,
            attributes={"messaging.system": "kafka", "messaging.operation.type": "process",
                        "messaging.destination.name": topic,
                        "messaging.destination.partition.id": str(partition),
                        "messaging.kafka.offset": offset})

    def batch_span(self, uploads: Iterable[Span], start_ns: int | None = None) -> Span:
        """Start the span of a batch: a root of its own, linked to each upload span (which are
        linked back by :meth:`link_batch`)."""
        links = [Link(s.get_span_context()) for s in uploads if s.get_span_context().is_valid]
        return self.tracer.start_span(Spans.BATCH, context=Context(), links=links,
                                      start_time=start_ns,
                                      attributes={"cardstream.batch.events": len(links)})

    @staticmethod
    def link_batch(upload: Span, batch: Span) -> None:
        """Link ``upload``'s span to its batch's (where its model call and transaction are)."""
        if batch.get_span_context().is_valid:
            upload.add_link(batch.get_span_context())

    def span(self, name: str, parent: Span, **attributes: Any) -> AbstractContextManager[Span]:
        """A child span of ``parent`` around a block, current in this thread while it runs (so
        the processors' spans nest under it); an exception marks it as an error with its type
        only, and is raised on (:func:`processors.tracing.span`)."""
        return traced(name, self.tracer, trace.set_span_in_context(parent), attributes)

    def interval(self, name: str, parent: Span, start_ns: int, end_ns: int,
                 **attributes: Any) -> None:
        """A child span of ``parent`` for an interval measured elsewhere (``time.time_ns()``)."""
        s = self.tracer.start_span(name, context=trace.set_span_in_context(parent),
                                   start_time=start_ns, attributes=attributes)
        s.end(end_time=end_ns)

    @staticmethod
    def end_upload(span: Span, *, upload_id: str | None = None, task: str | None = None,
                   status: str | None = None, reasons: Sequence[str] = (),
                   dead_letter: str | None = None, end_ns: int | None = None) -> None:
        """Name the upload's fate on its span and end it: the result's status and reason codes,
        or the dead-letter code (span status ERROR)."""
        attrs: dict[str, Any] = {"cardstream.upload_id": upload_id, "cardstream.task": task,
                                 "cardstream.status": status,
                                 "cardstream.dead_letter": dead_letter}
        span.set_attributes({k: v for k, v in attrs.items() if v is not None})
        if reasons:
            span.set_attribute("cardstream.reasons", [str(r) for r in reasons])
        if dead_letter is not None:
            span.set_status(Status(StatusCode.ERROR, dead_letter))
        span.end(end_time=end_ns)


Source = tuple[str, int, int]
"""A record's ``(topic, partition, offset)``."""


class BatchTrace:
    """The spans of one batch: an upload span per record (continuing its trace context) and the
    batch span, linked both ways (module doc). Built when the batch starts computing; ended once
    its transaction committed (:meth:`committed`) or when it is given up (:meth:`abandoned`).

    Args:
        tracing: the worker's :class:`Tracing`.
        records: the batch's records (confluent-kafka ``Message``: topic, partition, offset,
            headers).
        start_ns: when the batch started forming (``time.time_ns()``), None: now.

    Attributes:
        batch: the batch span.
    """

    def __init__(self, tracing: Tracing, records: Sequence[Any],
                 start_ns: int | None = None) -> None:
        self.tracing = tracing
        self._uploads: dict[Source, Span] = {}
        for m in records:
            self._uploads[(m.topic(), m.partition(), m.offset())] = tracing.upload_span(
                m.topic(), m.partition(), m.offset(), m.headers(), start_ns)
        self.batch = tracing.batch_span(self._uploads.values(), start_ns)
        for s in self._uploads.values():
            Tracing.link_batch(s, self.batch)

    def upload(self, m: Any) -> Span:
        """The upload span of record ``m``."""
        return self._uploads[(m.topic(), m.partition(), m.offset())]

    def headers(self) -> dict[Source, list[tuple[str, bytes]]]:
        """Per record: the trace-context headers its result or dead letter carries (its upload
        span's; none when it has no valid context)."""
        return {src: h for src, s in self._uploads.items() if (h := headers_of(s))}

    def committed(self, results: Iterable[Any], dead_letters: Iterable[Any]) -> None:
        """The batch committed: end each upload span with its result's status and reasons (or
        its dead letter's code) and the batch span. Records not answered in this transaction
        (revoked meanwhile) end as ``not committed``."""
        for r in results:
            s = self._uploads.pop((r.source.topic, r.source.partition, r.source.offset), None)
            if s is not None:
                Tracing.end_upload(s, upload_id=r.upload_id, task=str(r.task),
                                   status=str(r.status), reasons=[str(x) for x in r.reasons])
        for d in dead_letters:
            s = self._uploads.pop((d.source.topic, d.source.partition, d.source.offset), None)
            if s is not None:
                Tracing.end_upload(s, upload_id=d.upload_id, dead_letter=str(d.error_code))
        self.abandoned("not committed")

    def abandoned(self, why: str) -> None:
        """End every span not ended yet with an error ``why`` (the batch is put back and redone:
        its records get new upload spans then)."""
        for s in self._uploads.values():
            s.set_status(Status(StatusCode.ERROR, why))
            s.end()
        self._uploads.clear()
        if self.batch.is_recording():
            self.batch.end()
