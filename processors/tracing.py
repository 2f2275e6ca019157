"""Spans of the processors' steps (the pixel decode, each batched model call) on the
OpenTelemetry API alone (``processors`` imports nothing of ``streams``).

They nest under the caller's current span (the worker's ``cardstream.process``,
``streams/tracing.py``) through OpenTelemetry's global tracer provider, which the worker installs
when tracing is on; otherwise the API's no-op tracer makes each one cost a few microseconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

TRACER = trace.get_tracer("cardstream.processors")
"""The processors' tracer (a proxy: it follows the global provider once one is installed)."""

DECODE = "cardstream.decode"
MODEL = "cardstream.model"


@contextmanager
def span(name: str, tracer: trace.Tracer = TRACER, context: Context | None = None,
         attributes: Mapping[str, AttributeValue] | None = None) -> Iterator[Span]:
    """A span around a block, current in this thread while it runs (child of ``context``'s span,
    or of the thread's current one). An exception marks it as an error with the exception's type
    only (a message may quote an object key or a path) and is raised on.

    Args:
        name: the span name.
        tracer: the tracer (default: the processors').
        context: the parent's context; None: the current one.
        attributes: span attributes (ids, codes and sizes only; never image bytes).
    """
    with tracer.start_as_current_span(name, context=context, attributes=attributes,
                                      record_exception=False,
                                      set_status_on_exception=False) as s:
        try:
            yield s
        except BaseException as e:
            s.set_status(Status(StatusCode.ERROR, type(e).__name__))
            raise
