"""The worker's HTTP endpoints (unit tier): /ready, /live, /metrics."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from streams.health import Health, HealthServer, serve
from streams.metrics import WorkerMetrics


def test_health_endpoints() -> None:
    h, m = Health(stall_s=0.3), WorkerMetrics()
    srv = serve(h, m, 0, host="127.0.0.1")
    port = srv.server_address[1]

    def code(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        assert code("/ready") == 503
        h.ready = True
        assert code("/ready") == 200
        h.tick()
        assert code("/live") == 200
        time.sleep(0.4)
        assert code("/live") == 503  # the loop stalled
        m.results.labels("card", "accepted").inc(3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            body = r.read().decode()
        assert 'cardstream_results_total{status="accepted",task="card"} 3.0' in body
    finally:
        srv.shutdown()


def test_idle_connections_take_no_thread_and_do_not_block_the_probes() -> None:
    """Issue 43: 1,000 idle connections to ThreadingHTTPServer made 1,014 threads. Now 300 idle
    connections (more than ``max_connections``) add no thread, /live still answers, the
    oldest idle ones are closed to make room, and the rest are closed after the head timeout."""
    import socket

    h, m = Health(), WorkerMetrics()
    h.tick()
    # a head timeout well above the time 300 connects take on a loaded machine (at 1 s, under
    # load 10-13, the oldest timed out before the newest came, so fewer needed evicting: 237)
    srv = HealthServer(h, m, 0, host="127.0.0.1", max_connections=32, head_timeout_s=6.0)
    port = srv.server_address[1]
    threads = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/live", timeout=10) as r:
            assert (r.status, r.read()) == (200, b"live\n")
        assert threading.active_count() == threads
        end = time.monotonic() + 10  # the loop accepts them as fast as the machine lets it
        while srv.evicted < 300 - 32 and time.monotonic() < end:
            time.sleep(0.05)
        assert srv.evicted >= 300 - 32
        for s in idle:  # the rest are closed after the head timeout
            s.settimeout(20)
            assert s.recv(1) == b""  # closed by the server
    finally:
        for s in idle:
            s.close()
        srv.shutdown()


def test_a_broker_outage_fails_ready_with_its_reason_and_never_live() -> None:
    """The trial: ``/ready`` stayed 200 with the broker killed, and ``/live`` failed 10 s in
    (the session timed out: ``in_group`` False), so a liveness probe restarted the worker for
    the broker's outage. Now no broker answering, or the consumer out of its group, fails
    ``/ready`` (saying which), and ``/live`` stays 200."""
    from confluent_kafka import KafkaError, KafkaException

    from streams.reach import BrokerReach
    from streams.settings import KafkaSettings

    up = [False]

    def probe(_timeout_s: float) -> None:
        if not up[0]:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))

    broker = BrokerReach(KafkaSettings(), probe=probe)
    h, m = Health(stall_s=30.0, broker=broker), WorkerMetrics()
    h.ready = True
    h.tick()
    srv = serve(h, m, 0, host="127.0.0.1")
    port = srv.server_address[1]

    def get(path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    try:
        assert get("/ready") == (200, b"ready\n")
        broker.check()  # no broker answers
        assert (get("/ready"), get("/live")) == ((503, b"broker unreachable\n"), (200, b"live\n"))
        h.in_group = False  # the session timed out meanwhile
        assert (get("/ready"), get("/live")) == ((503, b"broker unreachable\n"), (200, b"live\n"))
        up[0] = True
        broker.check()  # back; the consumer not yet in its group again
        assert (get("/ready"), get("/live")) == ((503, b"out of the consumer group\n"),
                                                 (200, b"live\n"))
        h.in_group = True  # assigned again
        assert get("/ready") == (200, b"ready\n")
        h.ready = False  # the loop's own verdict still counts (a producer missing, ...)
        assert get("/ready") == (503, b"not ready\n")
    finally:
        srv.shutdown()
