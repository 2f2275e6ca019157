"""The seeds' load table through HTTP: 10, 50, 100, 150 and 300 concurrent clients posting 2 MP
card photos to two ``cardstream gateway`` instances and waiting for the verdict, next to the
same clients on the Kafka path in the same run.

Per mode (``sleep``: the fixed-latency sleep processor, which measures the path itself; ``real``:
the card model on this machine's CPU), one worker, two gateways (clients alternate between them,
as behind a load balancer; a GET after a 202 goes to the other one), and per level a phase of
``duration_s`` after ``warm_s`` for each path (both with the sleep processor, where the two are
compared; HTTP only with the real model, whose Kafka path has no backpressure and would leave a
backlog of hours behind at 300 clients on this CPU). Between levels the uploads topic is left to
drain (bounded), so each level starts without a backlog.

* **kafka**: each client PUTs the photo as a claim check, produces its UploadEvent
  (:class:`streams.produce.UploadProducer`, what a platform on Kafka does) and waits for its
  committed result (:class:`benchmarks.common.ResultWatcher`, read_committed), then the next;
* **http**: each client POSTs the photo (``?task=card&wait_ms=30000``, with ``Expect:
  100-continue`` as curl sends for large bodies) and, on a 202, GETs the
  verdict with a wait; a 429 or 503 is a **backpressure answer**: the request ends there,
  counted apart from errors and verdicts, and the client waits ``Retry-After`` before its next
  one. The gateways' ``max_lag`` is set to what the worker clears in a few seconds
  (:data:`MAX_LAG`), so the queue a client can meet is bounded by it.

Latency: the client's clock, request start -> verdict received. QPS: verdicts received inside the
window per second. Errors: any other HTTP status, a transport error, no verdict within
``timeout_s``, or a ``failed`` result. Only requests started inside the window count.

Goals (issue 41): at 300 clients no errors and no timeouts; with the sleep processor the HTTP
P99 within 20 ms of the Kafka path's P99 of the same level and run.

Usage::

    eval "$(scripts/stack env)" && .venv/bin/python -m benchmarks.gateway [--modes sleep,real]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ResultWatcher,
    check_alive,
    free_port,
    fresh_stack,
    latency_stats,
    machine_info,
    run_main,
    scrape,
    start_worker,
    stop_workers,
    wait_group,
)
from streams import procs
from streams.gateway.settings import GatewaySettings
from streams.settings import Settings, load_settings

LEVELS = (10, 50, 100, 150, 300)
#: the gateways' ``max_lag`` per mode: a few seconds of the worker's throughput on this 2-core
#: box under the session's load (sleep ~12/s: 64 = 5 s; card model ~0.3/s: 4 = 13 s)
MAX_LAG = {"sleep": 64, "real": 4}
PARTITIONS = 6
CLIENT, KEY = "bench", "bench-key-0123456789abcdef"
RESULTS = Path(__file__).resolve().parent / "results"


def _row(path: str, clients: int, records: list[tuple[float, float | None, str]], backpressure: int,
         duration_s: float) -> dict[str, Any]:
    """A table row from ``(start_ms, latency_ms or None, outcome)`` records of the requests
    started inside the window. QPS: their verdicts over the time from the first start to the
    last verdict, at least ``duration_s`` (a closed loop whose requests outlast the window
    still gets its throughput)."""
    ok = [lat for _, lat,
          outcome in records if lat is not None and outcome not in ("error", "backpressure")]
    errors = sum(outcome == "error" for _, _, outcome in records)
    ends = [t + lat for t, lat, outcome in records if lat is not None and outcome != "backpressure"]
    span_s = max(duration_s,
                 (max(ends) - min(t for t, _, _ in records)) / 1000.0) if ends else duration_s
    return {"path": path, "clients": clients, "requests": len(records),
            "qps": round(len(ok) / span_s, 2), **latency_stats(ok), "errors": errors,
            "backpressure": backpressure + sum(outcome == "backpressure" for _, _,
                                               outcome in records),
            "rejected": sum(outcome == "rejected" for _, _, outcome in records)}


def own_ms(before: list[dict[str, float]], after: list[dict[str, float]]) -> float | None:
    """The gateways' own mean ms per upload over a phase, from their metrics: the mean time of a
    POST (``cardstream_gateway_request_seconds{route="/v1/uploads"}``) less the mean time its
    verdict was waited for (``cardstream_gateway_wait_seconds``): receiving the body, the
    checks, the claim-check PUT and the produce, summed over both instances."""
    def delta(name: str) -> float:
        return sum(a.get(name, 0.0) - b.get(name, 0.0) for a, b in zip(after, before, strict=True))

    n = delta("cardstream_gateway_request_seconds_count{route=/v1/uploads}")
    if n <= 0:
        return None
    post = delta("cardstream_gateway_request_seconds_sum{route=/v1/uploads}")
    waited = sum(delta(f"cardstream_gateway_wait_seconds_sum{{outcome={o},request=post}}")
                 for o in ("result", "timeout"))
    return round(1000.0 * (post - waited) / n, 1)


def kafka_phase(s: Settings, rw: ResultWatcher, blobs: Sequence[bytes], clients: int,
                warm_s: float, duration_s: float, timeout_s: float, prefix: str) -> dict[str, Any]:
    """``clients`` threads: claim-check PUT + produce + committed result, in a closed loop."""
    from streams.produce import UploadProducer

    prod = UploadProducer(s, **{"linger.ms": 2})
    counter = itertools.count()
    records: list[tuple[float, float | None, str]] = []
    t0 = time.time() * 1000.0
    w0, w1 = t0 + warm_s * 1000.0, t0 + (warm_s + duration_s) * 1000.0

    def user() -> None:
        while time.time() * 1000.0 < w1:
            i = next(counter)
            start = time.time() * 1000.0
            try:
                uid = f"{prefix}-{i:07d}"
                prod.send(prod.event_for(uid, "card", blobs[i % len(blobs)], "card.jpg", None))
                got = rw.wait_one(uid, timeout_s)
            except Exception:  # noqa: BLE001 (counted as an error)
                got = None
            end = time.time() * 1000.0
            outcome = "error" if got is None or got.status in ("failed",
                                                               "dead_letter") else got.status
            if w0 <= start < w1:
                records.append((start, end - start if got else None, outcome))

    threads = [threading.Thread(target=user, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(warm_s + duration_s + timeout_s + 30)
    prod.flush(10)
    return _row("kafka", clients, records, 0, duration_s)


async def http_phase(urls: Sequence[str], blobs: Sequence[bytes], clients: int, warm_s: float,
                     duration_s: float, timeout_s: float) -> dict[str, Any]:
    """``clients`` coroutines: POST with wait (GET with wait after a 202), in a closed loop."""
    import aiohttp

    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "image/jpeg"}
    counter = itertools.count()
    records: list[tuple[float, float | None, str]] = []
    t0 = time.time() * 1000.0
    w0, w1 = t0 + warm_s * 1000.0, t0 + (warm_s + duration_s) * 1000.0
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)

    async def one(session: aiohttp.ClientSession, i: int) -> tuple[float | None, str]:
        """One request: (latency ms or None, outcome: the verdict's status, "backpressure" or
        "error")."""
        start = time.time() * 1000.0
        deadline = time.monotonic() + timeout_s
        # Expect: 100-continue (as curl sends for large bodies): a refused POST costs its
        # headers, not its 2 MP body
        async with session.post(f"{urls[i % len(urls)]}/v1/uploads?task=card&wait_ms=30000",
                                data=blobs[i % len(blobs)], headers=auth, expect100=True) as r:
            status, body = r.status, await r.read()
            retry = float(r.headers.get("Retry-After", "1"))
        if status in (429, 503):
            lat = time.time() * 1000.0 - start
            await asyncio.sleep(retry)  # before this client's next request
            return lat, "backpressure"
        if status not in (200, 202):
            return None, "error"
        res = json.loads(body)
        other = urls[(i + 1) % len(urls)]  # the GET goes to the other instance
        while status != 200:
            if time.monotonic() > deadline:
                return None, "error"
            async with session.get(f"{other}{res['result']}?wait_ms=30000", headers=auth) as g:
                status, body = g.status, await g.read()
            if status not in (200, 404):
                return None, "error"
        verdict = json.loads(body)["status"]
        return time.time() * 1000.0 - start, "error" if verdict == "failed" else str(verdict)

    async def user(session: aiohttp.ClientSession) -> None:
        while time.time() * 1000.0 < w1:
            i = next(counter)
            start = time.time() * 1000.0
            try:
                lat, outcome = await one(session, i)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                lat, outcome = None, "error"
            if w0 <= start < w1:
                records.append((start, lat, outcome))

    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        await asyncio.gather(*(user(session) for _ in range(clients)))
    return _row("http", clients, records, 0, duration_s)


def run_mode(base: Settings, mode: str, blobs: Sequence[bytes], logs: Path, levels: Sequence[int],
             warm_s: float, duration_s: float, timeout_s: float, sleep_ms: float) -> dict[str, Any]:
    """One worker (``sleep`` or ``real`` card processor), two gateways; per level the Kafka path
    (sleep mode only) and the HTTP path, after the uploads topic has drained."""
    from streams.gateway.limits import UploadsLag

    with fresh_stack(base, PARTITIONS) as s, ResultWatcher(s) as rw:
        keys = logs / f"gateway-keys-{s.kafka.group_id}"
        logs.mkdir(parents=True, exist_ok=True)
        keys.write_text(f"{CLIENT}:{KEY}\n")
        gs = s.model_copy(update={"gateway": GatewaySettings(
            api_keys_file=keys, rate_per_s=1e6, burst=1_000_000, results_lookback_s=0,
            max_lag=MAX_LAG[mode])})
        lag = UploadsLag(s.kafka)
        args = ["--tasks", "card"] + (["--processor", "card=sleep", "--sleep-ms", str(sleep_ms)]
                                      if mode == "sleep" else [])
        workers = [start_worker(s, 0, logs, args)]
        gws: list[procs.GatewayProc] = []
        try:
            wait_group(s, 1, PARTITIONS, timeout_s=600.0)
            for i in range(2):
                gws.append(procs.start_gateway(gs, logs / f"gateway-{mode}-{i}.log", free_port(),
                                               free_port()))
            urls = [g.url for g in gws]
            rows = []
            for level in levels:
                check_alive(workers)
                drain(lag)
                k = (kafka_phase(s, rw, blobs, level, warm_s, duration_s, timeout_s,
                                 f"k{level}-{mode}") if mode == "sleep" else None)
                drain(lag)
                before = [scrape(g.admin_port) for g in gws]
                h = asyncio.run(http_phase(urls, blobs, level, warm_s if mode == "sleep" else 0.0,
                                           duration_s, timeout_s))
                own = own_ms(before, [scrape(g.admin_port) for g in gws])
                over = (round(h["p99_ms"] - k["p99_ms"], 1)
                        if k and h["p99_ms"] is not None and k["p99_ms"] is not None else None)
                rows += [*([k] if k else []),
                         {**h, "p99_over_kafka_ms": over, "gateway_own_ms": own}]
                kline = (f"kafka: {k['qps']:>6}/s p99 {k['p99_ms']} ms err {k['errors']}" if k
                         else "")
                print(f"[{mode}] {level:>3} clients  {kline}   http: {h['qps']:>6}/s p99 "
                      f"{h['p99_ms']} ms err {h['errors']} backpressure {h['backpressure']}  "
                      f"(p99 +{over} ms, gateway's own {own} ms per upload; load "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
            return {"mode": mode, "processor": (f"sleep ({sleep_ms:g} ms per call + 2 ms per item)"
                                                if mode == "sleep" else "card model (CPU)"),
                    "rows": rows}
        finally:
            lag.close()
            stop_workers([*workers, *[procs.WorkerProc(g.proc, 0, g.log) for g in gws]], 30)


def drain(lag: Any, timeout_s: float = 300.0) -> None:
    """Wait until the workers have consumed the uploads topic (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and lag.read_high()[0] > 0:
        time.sleep(0.5)


def plot(result: dict[str, Any], path: Path) -> None:
    """P99 and mean latency per path and mode against clients, QPS on the right axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = result["modes"]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.4), dpi=110, squeeze=False)
    for ax, m in zip(axes[0], modes, strict=True):
        ax2 = ax.twinx()
        for p, color in (("kafka", "C0"), ("http", "C1")):
            rows = [r for r in m["rows"] if r["path"] == p]
            if not rows:
                continue
            x = [r["clients"] for r in rows]
            ax.plot(x, [r["p99_ms"] for r in rows], "^-", color=color, label=f"{p} p99 (ms)")
            ax.plot(x, [r["avg_ms"] for r in rows], "o:", color=color, label=f"{p} mean (ms)")
            ax2.plot(x, [r["qps"] for r in rows], "D--", color=color, alpha=0.4,
                     label=f"{p} verdicts/s")
        ax.set_xlabel("concurrent clients (closed loop, 2 MP card photos)")
        ax.set_ylabel("request -> verdict (ms)")
        ax2.set_ylabel("verdicts/s")
        ax.set_title(f"{m['processor']}", fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    fig.suptitle(result["title"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    cols = ["clients", "path", "qps", "avg_ms", "p95_ms", "p99_ms", "errors", "backpressure",
            "p99_over_kafka_ms", "gateway_own_ms"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in sorted(rows, key=lambda r: (r["clients"], r["path"] != "kafka")):
        out.append("| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in cols) + " |")
    return "\n".join(out)


def run_gateway(base: Settings, logs: Path, modes: Sequence[str] = ("sleep", "real"),
                levels: Sequence[int] = LEVELS, warm_s: float = 3.0, duration_s: float = 20.0,
                real_duration_s: float = 30.0, timeout_s: float = 180.0,
                sleep_ms: float = 20.0, images: int = 8) -> dict[str, Any]:
    """Both modes; returns ``{"machine", "modes": [run_mode(...)], "goals"}``."""
    import logging

    from benchmarks.phone import SIZES, scenes

    # the Kafka path's 300 threads share the store client's pool of 32 connections: urllib3 says
    # so for every connection it does not keep
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)

    blobs = scenes("card", SIZES["2mp"], images)
    machine = machine_info()
    out: dict[str,
              Any] = {"machine": machine,
                      "image_bytes_mean": round(sum(map(len, blobs)) / len(blobs)),
                           "title": f"{machine['cpu']} x{machine['cpu_count']}, "
                                    f"{machine['date_utc'][:10]}",
                           "modes": []}
    for mode in modes:
        out["modes"].append(run_mode(base, mode, blobs, logs, levels, warm_s,
                                     real_duration_s if mode == "real" else duration_s, timeout_s,
                                     sleep_ms))
    top = max(levels)
    goals: dict[str, Any] = {}
    for m in out["modes"]:
        h = next(r for r in m["rows"] if r["path"] == "http" and r["clients"] == top)
        goals[f"{m['mode']}_{top}_clients_errors"] = h["errors"]
        if m["mode"] == "sleep":
            # where the HTTP path met no backpressure, both paths queued alike and the P99s compare
            clean = [r for r in m["rows"] if r["path"] == "http" and not r["backpressure"]
                     and r["p99_over_kafka_ms"] is not None]
            goals["sleep_p99_over_kafka_ms"] = {r["clients"]: r["p99_over_kafka_ms"] for r in clean}
            goals["sleep_p99_over_kafka_met"] = bool(clean) and all(
                r["p99_over_kafka_ms"] <= 20.0 for r in clean)
            goals["sleep_gateway_own_ms"] = {r["clients"]: r["gateway_own_ms"] for r in m["rows"]
                                             if r["path"] == "http"}
    out["goals"] = goals
    out["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.gateway``: the table, ``gateway.json`` and ``gateway.png``."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="sleep,real")
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)))
    ap.add_argument("--seconds", type=float, default=20.0, help="window per level and path (sleep)")
    ap.add_argument("--real-seconds", type=float, default=30.0, help="window per level (real)")
    ap.add_argument("--warm", type=float, default=3.0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    if "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS" not in os.environ:
        print("the gateway benchmark needs the real stack: eval \"$(scripts/stack env)\"",
              file=sys.stderr)
        return 2
    from streams.logs import configure_logging

    configure_logging("WARNING")
    a.out.mkdir(parents=True, exist_ok=True)
    res = run_gateway(load_settings(), a.out / "logs", [m for m in a.modes.split(",") if m],
                      [int(x) for x in a.levels.split(",")], a.warm, a.seconds, a.real_seconds)
    res["command"] = " ".join(["python -m benchmarks.gateway", *(argv or sys.argv[1:])])
    (a.out / "gateway.json").write_text(json.dumps(res, indent=2) + "\n")
    plot(res, a.out / "gateway.png")
    for m in res["modes"]:
        print(f"\n{m['mode']}: {m['processor']}\n{table(m['rows'])}")
    print(f"\ngoals: {res['goals']}\nwrote {a.out}/gateway.json and gateway.png", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
