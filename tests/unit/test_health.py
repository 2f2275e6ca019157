"""The worker's HTTP endpoints (unit tier): /ready, /live, /metrics."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from streams.health import Health, serve
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
