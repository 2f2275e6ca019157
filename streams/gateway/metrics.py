"""Prometheus metrics of a gateway process (served on the admin port's ``/metrics``).

Labels are bounded: ``route`` is the route's template (``/v1/uploads/{id}``, never an id),
``status`` an HTTP status, ``code`` one of the answer codes of :mod:`schemas.gateway`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class GatewayMetrics:
    """The gateway's metrics in their own registry (so tests can build several).

    Metrics:
        cardstream_gateway_requests_total{route,method,status}: answered requests.
        cardstream_gateway_request_seconds{route}: request received -> answer written (s).
        cardstream_gateway_refusals_total{code}: error answers by code (backpressure ones:
            ``RATE_LIMITED``, ``OVERLOADED``, ``BACKLOG``).
        cardstream_gateway_wait_seconds{request,outcome}: how long a ``wait_ms`` request
            (``post`` or ``get``) waited for its verdict (``result``: it came; ``timeout``: 202
            or 404 after ``wait_ms``).
        cardstream_gateway_in_flight: uploads being received, stored or produced now.
        cardstream_gateway_waiting: requests waiting for a verdict now.
        cardstream_gateway_uploads_lag: the workers' lag on the uploads topic, as last read.
        cardstream_gateway_results_cached: results in this instance's cache.
        cardstream_gateway_uploads_total{outcome}: uploads ``produced``, ``replayed`` (answered
            from what was stored, nothing produced) or ``reproduced`` (a replay produced again).
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        lat = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
        self.requests = Counter("cardstream_gateway_requests", "Answered requests",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("cardstream_gateway_request_seconds", "Request to answer",
                                 ["route"], buckets=lat, registry=r)
        self.refusals = Counter("cardstream_gateway_refusals", "Error answers by code", ["code"],
                                registry=r)
        self.wait = Histogram("cardstream_gateway_wait_seconds", "Time waiting for a verdict",
                              ["request", "outcome"], buckets=lat, registry=r)
        self.in_flight = Gauge("cardstream_gateway_in_flight", "Uploads being received, stored "
                               "or produced", registry=r)
        self.waiting = Gauge("cardstream_gateway_waiting", "Requests waiting for a verdict",
                             registry=r)
        self.lag = Gauge("cardstream_gateway_uploads_lag", "Workers' lag on the uploads topic",
                         registry=r)
        self.cached = Gauge("cardstream_gateway_results_cached", "Results in the cache", registry=r)
        self.uploads = Counter("cardstream_gateway_uploads", "Uploads by outcome", ["outcome"],
                               registry=r)
