"""HTTP endpoints of a worker: ``/ready`` (after warm-up, while the loop can go on: a producer,
the store and the processors answering, a broker answering, in its consumer group), ``/live``
(loop not stalled, no batch computing past its deadline), ``/metrics``."""

from __future__ import annotations

import asyncio
import threading
import time
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streams.metrics import WorkerMetrics
from streams.reach import BrokerReach


class Health:
    """Readiness and liveness state shared by the loop and the HTTP server.

    ``/ready`` (:meth:`not_ready`) fails while the loop says it cannot go on (``ready``), while
    no broker answers (``broker``) and while the consumer is out of its group (``in_group``);
    none of these fails ``/live``: a broker outage must not get the process restarted (before,
    ``in_group`` failed ``/live`` 10 s into an outage, when the session timed out, so a
    liveness probe restarted every worker of a cluster whose broker was down for over a minute).

    Args:
        stall_s: ``/live`` fails when the loop has not ticked for this long (s), or when a batch
            has been computing for this long plus ``per_item_s`` per event of the batch (a hung
            processor or decode: the loop itself keeps ticking meanwhile) — set them above the
            worst batch (the worker's ``compute_deadline_s`` and
            ``compute_deadline_per_item_s``).
        per_item_s: the deadline's allowance per event of the batch (s).
        broker: whether a broker answers (:class:`~streams.reach.BrokerReach`; None: not
            watched).

    Attributes:
        ready: the loop's own verdict: warmed up, with a transactional producer, the store not
            refusing and the processor breaker closed (set by the loop).
        in_group: False from a lost assignment (the session timed out: the coordinator did not
            answer for ``session.timeout.ms``) until the next assignment (set by the intake's
            rebalance callbacks).
        compute_since: monotonic start of the batch computing now (None: none is).
        deadline_s: that batch's compute deadline (s): ``stall_s + per_item_s * events``.
    """

    def __init__(self, stall_s: float = 120.0, per_item_s: float = 0.0,
                 broker: BrokerReach | None = None) -> None:
        self.ready = False
        self.in_group = True
        self.broker = broker
        self.stall_s = stall_s
        self.per_item_s = per_item_s
        self.last_tick = time.monotonic()
        self.deadline_s = stall_s
        self.compute_since: float | None = None

    def computing(self, events: int) -> float:
        """A batch of ``events`` starts computing now: its deadline is ``stall_s`` plus
        ``per_item_s`` per event (issue 43: a batch of 9 uploads on 2 busy cores ran past a flat
        120 s and the worker exited). Returns its start (monotonic), for :meth:`computed`."""
        self.deadline_s = self.stall_s + self.per_item_s * max(events, 0)
        since = self.compute_since = time.monotonic()
        return since

    def computed(self, since: float) -> None:
        """The batch whose compute started at ``since`` (monotonic) has finished computing
        (any thread; a later batch's start is left alone)."""
        if self.compute_since == since:
            self.compute_since = None

    def overdue_s(self) -> float:
        """Seconds the batch computing now has run past its deadline (0.0 when none is late)."""
        since = self.compute_since
        return 0.0 if since is None else max(time.monotonic() - since - self.deadline_s, 0.0)

    def tick(self) -> None:
        """Called by the loop on every iteration."""
        self.last_tick = time.monotonic()

    def not_ready(self) -> str | None:
        """Why ``/ready`` fails now (None: ready): ``not ready`` (warming up, or the loop holds
        its batch: no producer, a store refusing, the breaker open), ``broker unreachable``,
        ``out of the consumer group``."""
        if not self.ready:
            return "not ready"
        if self.broker is not None and not self.broker.reachable:
            return "broker unreachable"
        if not self.in_group:
            return "out of the consumer group"
        return None

    def live(self) -> bool:
        """True while the loop ticks and no batch computes past the deadline."""
        return (time.monotonic() - self.last_tick) < self.stall_s and self.overdue_s() == 0.0


class HealthServer:
    """``/ready``, ``/live`` and ``/metrics`` over HTTP/1.0 on one thread, whatever the clients do.

    One asyncio event loop on a daemon thread serves every connection (the standard library's
    ``ThreadingHTTPServer`` started a thread per connection and kept it while the client stayed
    silent: 1,000 idle connections made 1,014 threads, issue 43). A connection must send its
    request head (at most ``head_max_bytes``) within ``head_timeout_s``; it gets one answer and
    is closed. At most ``max_connections`` are open at once: a new one closes the connection
    that has waited longest, so idle clients can neither take the process's file descriptors
    or threads from its Kafka and S3 clients nor keep a probe from being answered.

    Attributes:
        server_address: ``(host, port)`` listened on (port 0 at start picks a free one).
        evicted: connections closed to make room for a newer one.
    """

    def __init__(self, health: Health, metrics: WorkerMetrics, port: int, host: str = "0.0.0.0",
                 *, max_connections: int = 64, head_timeout_s: float = 5.0,
                 head_max_bytes: int = 8192) -> None:
        self.health, self.metrics = health, metrics
        self.max_connections, self.head_timeout_s = max_connections, head_timeout_s
        self.head_max_bytes = head_max_bytes
        self.evicted = 0
        self._open: dict[asyncio.Task, None] = {}  # connections in the order they came
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(
            self._serve, host, port, limit=head_max_bytes, backlog=128))
        self.server_address = self._server.sockets[0].getsockname()[:2]
        self._thread = threading.Thread(target=self._loop.run_forever, name="health-http",
                                        daemon=True)
        self._thread.start()

    def answer(self, method: str, path: str) -> tuple[int, bytes, str]:
        """``(status, body, content type)`` for one request."""
        if method not in ("GET", "HEAD"):
            return 405, b"method not allowed\n", "text/plain"
        if path == "/ready":
            why = self.health.not_ready()
            return (200, b"ready\n", "text/plain") if why is None else (
                503, f"{why}\n".encode(), "text/plain")
        if path == "/live":
            ok = self.health.live()
            return (200, b"live\n", "text/plain") if ok else (503, b"stalled\n", "text/plain")
        if path == "/metrics":
            return 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
        return 404, b"not found\n", "text/plain"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None  # start_server runs each connection as a task
        if len(self._open) >= self.max_connections:
            next(iter(self._open)).cancel()
            self.evicted += 1
        self._open[me] = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout_s)
            method, path = (head.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
            code, body, ctype = self.answer(method, path.split("?", 1)[0])
            writer.write(f"HTTP/1.0 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {ctype}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                         + (body if method != "HEAD" else b""))
            await asyncio.wait_for(writer.drain(), self.head_timeout_s)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError, asyncio.CancelledError):
            pass  # silent, too long, gone or evicted: closed below
        finally:
            self._open.pop(me, None)
            writer.close()

    def shutdown(self) -> None:
        """Stop listening, close the loop's thread (open connections are dropped)."""
        async def stop() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def serve(health: Health, metrics: WorkerMetrics, port: int, host: str = "0.0.0.0") -> HealthServer:
    """Start the HTTP server (:class:`HealthServer`) on its daemon thread and return it (``port``
    0 picks a free port)."""
    return HealthServer(health, metrics, port, host)
