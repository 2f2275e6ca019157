"""HTTP endpoints of a worker: ``/ready`` (after warm-up), ``/live`` (loop not stalled, no batch
computing past its deadline), ``/metrics``."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streams.metrics import WorkerMetrics


class Health:
    """Readiness and liveness state shared by the loop and the HTTP server.

    Args:
        stall_s: ``/live`` fails when the loop has not ticked for this long (s), or when a batch
            has been computing for this long (a hung processor or decode: the loop itself keeps
            ticking meanwhile) — set it above the worst batch (the worker's
            ``compute_deadline_s``). Whether the consumer has no assignment while others hold
            partitions is not detectable here, so the loop reports ``in_group`` itself.
    """

    def __init__(self, stall_s: float = 120.0) -> None:
        self.ready = False
        self.in_group = True
        self.stall_s = stall_s
        self.last_tick = time.monotonic()
        self.compute_since: float | None = None  # monotonic start of the batch computing now

    def computed(self, since: float) -> None:
        """The batch whose compute started at ``since`` (monotonic) has finished computing
        (any thread; a later batch's start is left alone)."""
        if self.compute_since == since:
            self.compute_since = None

    def overdue_s(self) -> float:
        """Seconds the batch computing now has run past ``stall_s`` (0.0 when none is late)."""
        since = self.compute_since
        return 0.0 if since is None else max(time.monotonic() - since - self.stall_s, 0.0)

    def tick(self) -> None:
        """Called by the loop on every iteration."""
        self.last_tick = time.monotonic()

    def live(self) -> bool:
        """True while the loop ticks, no batch computes past the deadline and the consumer is
        in its group."""
        since = self.compute_since
        return (self.in_group and (time.monotonic() - self.last_tick) < self.stall_s
                and (since is None or time.monotonic() - since < self.stall_s))


def serve(health: Health, metrics: WorkerMetrics, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Start the HTTP server on a daemon thread and return it (``port`` 0 picks a free port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            if self.path == "/ready":
                self._send(200 if health.ready else 503, b"ready\n" if health.ready else b"warming up\n")
            elif self.path == "/live":
                ok = health.live()
                self._send(200 if ok else 503, b"live\n" if ok else b"stalled\n")
            elif self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=srv.serve_forever, name="health-http", daemon=True).start()
    return srv
