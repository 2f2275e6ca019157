"""What tracing costs (issue 42): worker throughput with tracing off and on, same run.

A ``cardstream worker`` subprocess drains a backlog of ``n`` inline uploads on fresh topics, once
per pass; passes alternate off, on, on, off (so a drift of the machine's load falls on both
alike). Tracing on exports every span (sample ratio 1) over OTLP/HTTP to a collector stand-in in
this process (:class:`Sink`: it answers every export and counts the spans it received), so the
cost includes building, batching, encoding and sending the spans. Throughput is uploads per
second from the worker's first to its last committed result. With the ``sleep`` stand-in
processor (``--processor card=sleep``) the pipeline itself is all the work there is, the worst
case for tracing's share; with the real model it is that share of a real batch.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.common import (
    InlineSender,
    ResultWatcher,
    fresh_stack,
    start_worker,
    stop_workers,
    wait_group,
)
from streams.settings import Settings

PARTITIONS = 6


class Sink(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP collector stand-in on 127.0.0.1: answers 200 to every export and counts
    the spans received (``spans``)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        sink = self
        self.spans = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest.FromString(body)
                sink.spans += sum(len(ss.spans) for rs in req.resource_spans
                                  for ss in rs.scope_spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


def one_pass(base: Settings, files: Sequence[Path], logs: Path, n: int, traced: bool,
             sink: Sink, args: Sequence[str]) -> dict[str, Any]:
    """Backlog of ``n`` uploads, then the worker drains it; uploads/s."""
    env = {"CARDSTREAM_TRACING__ENABLED": "true" if traced else "false",
           "CARDSTREAM_TRACING__OTLP_ENDPOINT": sink.url, "CARDSTREAM_CACHE__ENABLED": "false"}
    with fresh_stack(base, PARTITIONS) as s, ResultWatcher(s) as rw:
        sender = InlineSender(s, "card", files)
        ids = [sender.send(i) for i in range(n)]
        sender.flush()
        w = start_worker(s, 0, logs, list(args), env)
        spans0 = sink.spans
        try:
            wait_group(s, 1, PARTITIONS, timeout_s=300.0)
            got = rw.wait_all(ids, 1800.0)
        finally:
            stop_workers([w])
        time.sleep(1.0)  # the last export batch
    recv = sorted(g.recv_ms for g in got.values())
    secs = (recv[-1] - recv[0]) / 1000.0
    return {"tracing": "on" if traced else "off", "uploads": len(got),
            "uploads_per_s": round((len(got) - 1) / secs, 2), "spans_exported": sink.spans - spans0}


def run_tracing_cost(base: Settings, files: Sequence[Path], logs: Path, n: int = 600,
                     processor: str = "sleep") -> dict[str, Any]:
    """Passes off, on, on, off; the median throughput ratio on / off."""
    args = ["--tasks", "card"] + (["--processor", "card=sleep", "--sleep-ms", "20"]
                                  if processor == "sleep" else [])
    sink = Sink()
    try:
        rows = [one_pass(base, files, logs, n, t, sink, args) for t in (False, True, True, False)]
    finally:
        sink.shutdown()
    off = median(r["uploads_per_s"] for r in rows if r["tracing"] == "off")
    on = median(r["uploads_per_s"] for r in rows if r["tracing"] == "on")
    return {"processor": processor, "n": n, "rows": rows,
            "throughput_on_over_off": round(on / off, 4),
            "cost_percent": round(100.0 * (1.0 - on / off), 2)}
