"""How many verdicts the status app holds: bytes per verdict and the upload rate it can sustain.

``python -m benchmarks.status_capacity [--verdicts 50000] [--stores memory://,rocksdb://]``
(the local stack up, ``eval "$(scripts/stack env)"``).

For each table store, on a fresh results topic (3 partitions): start ``cardstream status`` (its
own app id and data folder), wait for ``/healthz`` 200, read its resident set (``VmRSS``), then
produce ``--verdicts`` results (card, accepted, an object ref: the shape of the worker's) keyed by
upload id, wait until the app's consumer group has committed every one, and read again:

* ``rss_per_verdict``: the growth of the app's resident set per verdict (B) over the last of
  ``--stages`` rounds of ``--verdicts`` (the steady state: RocksDB's memtables and block caches,
  bounded, fill during the first rounds; ``first_stage_rss_per_verdict`` is the first's);
* ``disk_per_verdict``: the growth of its data folder per verdict over the last round (B;
  RocksDB's files);
* ``ingest_per_s``: verdicts applied per second while catching up (from the first result
  produced to the last offset committed);
* ``healthz_ms``: one ``/healthz`` answer with every verdict held (it used to walk the table);
* ``sustainable_per_s``: the upload rate whose verdicts fit for the retention (7 days) in
  ``--memory-mib`` (the chart's 1 GiB limit) less the app's RSS before any verdict, and for
  RocksDB also in ``--disk-gib`` of volume: ``room / (bytes per verdict * retention)``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from benchmarks.common import free_port, fresh_stack, machine_info, stop_status_app
from schemas import codec
from schemas.models import VerificationResult
from streams.kafka import consumer, plain_producer
from streams.procs import settings_env
from streams.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "schemas" / "examples" / "verification_result.valid.card_accepted.json"


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _healthz(port: int) -> tuple[int, dict[str, Any] | None, float]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as r:
            return r.status, json.loads(r.read()), (time.perf_counter() - t0) * 1000
    except urllib.error.HTTPError as e:
        return e.code, None, (time.perf_counter() - t0) * 1000
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None, (time.perf_counter() - t0) * 1000


def _results(s: Settings, n: int, run: str) -> list[tuple[bytes, bytes]]:
    """``n`` results of the worker's shape, upload ids ``{run}-{i}`` (records' key and value)."""
    base = json.loads(TEMPLATE.read_text())
    out = []
    for i in range(n):
        uid = f"{run}-{i:07d}"
        d = {**base, "upload_id": uid}
        d["card"] = {**base["card"], "rectified": {
            **base["card"]["rectified"], "bucket": s.s3.results_bucket,
            "key": f"card/corners-1.0.0/{uid}/rectified.jpg",
            "sha256": uuid.uuid4().hex + uuid.uuid4().hex}}
        d["source"] = {**base["source"], "topic": s.kafka.uploads_topic, "offset": i}
        key, value, _ = codec.encode_result(VerificationResult.model_validate(d))
        out.append((key, value))
    return out


def _committed_all(s: Settings, group: str, ends: dict[int, int]) -> bool:
    c = consumer(s.kafka, group)
    try:
        got = c.committed([TopicPartition(s.kafka.results_topic, p) for p in ends], timeout=10)
    finally:
        c.close()
    return all(tp.offset >= ends[tp.partition] for tp in got)


def _stage(s: Settings, p: subprocess.Popen, log: Path, data_dir: Path, group: str,
           records: list[tuple[bytes, bytes]]) -> tuple[float, int, int]:
    """Produce ``records`` and wait until the app's group has committed them all; returns
    (seconds taken, the app's RSS after, its data folder's bytes after)."""
    prod = plain_producer(s.kafka, **{"linger.ms": 50})
    t0 = time.monotonic()
    for key, value in records:
        while True:
            try:
                prod.produce(s.kafka.results_topic, key=key, value=value)
                break
            except BufferError:
                prod.poll(0.1)
    assert prod.flush(60) == 0
    c = consumer(s.kafka, f"{group}-probe")
    try:
        ends = {part: c.get_watermark_offsets(TopicPartition(s.kafka.results_topic, part),
                                              timeout=10)[1] for part in range(3)}
    finally:
        c.close()
    while not _committed_all(s, group, ends):
        if p.poll() is not None or time.monotonic() - t0 > 1800:
            raise RuntimeError(f"status app did not catch up: {log.read_text()[-2000:]}")
        time.sleep(1.0)
    took = time.monotonic() - t0
    time.sleep(5)
    return took, _rss(p.pid), _du(data_dir)


def measure(base: Settings, store: str, n: int, memory_mib: int, disk_gib: float,
            retention_s: float, logs: Path, stages_n: int = 2) -> dict[str, Any]:
    """One store's row (module docstring)."""
    with fresh_stack(base, partitions=3) as s:
        run = uuid.uuid4().hex[:8]
        data_dir = Path(tempfile.mkdtemp(prefix=f"status-cap-{run}-"))
        port = free_port()
        env = {**settings_env(s), "CARDSTREAM_STATUS__APP_ID": f"cap-{run}",
               "CARDSTREAM_STATUS__DATA_DIR": str(data_dir), "CARDSTREAM_STATUS__STORE": store,
               "CARDSTREAM_STATUS__WEB_PORT": str(port)}
        log = logs / f"status-{run}.log"
        exe = Path(sys.executable).with_name("cardstream")
        p = subprocess.Popen([str(exe), "status"], env=env, stdout=open(log, "ab"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            end = time.monotonic() + 120
            while _healthz(port)[0] != 200:
                if p.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"status app not healthy: {log.read_text()[-2000:]}")
                time.sleep(0.5)
            time.sleep(3)
            rss0 = _rss(p.pid)
            stages, took = [], 0.0
            for k in range(stages_n):  # the last stage's growth is the steady state's
                t, rss, disk = _stage(s, p, log, data_dir, f"cap-{run}",
                                      _results(s, n, f"{run}{k}"))
                stages.append((rss, disk))
                took += t
            code, body, hz_ms = _healthz(port)
        finally:
            stop_status_app(p, s.kafka, f"cap-{run}")
            shutil.rmtree(data_dir, ignore_errors=True)
    (rss1, disk1), (rss2, disk2) = stages[-2:]
    rss_pv = max(rss2 - rss1, 0) / n
    disk_pv = max(disk2 - disk1, 0) / n
    room = memory_mib * 1024 * 1024 - rss0
    by_mem = room / (rss_pv * retention_s) if rss_pv > 0 else float("inf")
    by_disk = disk_gib * 1024**3 / (disk_pv * retention_s) if disk_pv > 0 else float("inf")
    return {"store": store, "verdicts": stages_n * n, "rss_before_mib": round(rss0 / 2**20, 1),
            "rss_after_mib": [round(r / 2**20, 1) for r, _ in stages],
            "disk_after_mib": [round(d / 2**20, 1) for _, d in stages],
            "first_stage_rss_per_verdict": round(max(stages[0][0] - rss0, 0) / n, 1),
            "rss_per_verdict": round(rss_pv, 1), "disk_per_verdict": round(disk_pv, 1),
            "disk_mib": round(disk2 / 2**20, 1), "ingest_per_s": round(stages_n * n / took, 1),
            "healthz_ms": round(hz_ms, 1), "healthz_verdicts": (body or {}).get("verdicts"),
            "sustainable_per_s_memory": round(by_mem, 2),
            "sustainable_per_s_disk": round(by_disk, 2) if store.startswith("rocksdb") else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.status_capacity",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--verdicts", type=int, default=50_000)
    ap.add_argument("--stores", default="memory://,rocksdb://")
    ap.add_argument("--stages", type=int, default=2,
                    help="produce --verdicts this many times; the last stage's growth is reported")
    ap.add_argument("--memory-mib", type=int, default=1024, help="the pod's memory limit")
    ap.add_argument("--disk-gib", type=float, default=20.0, help="the RocksDB volume")
    ap.add_argument("--retention-days", type=float, default=7.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/status_capacity.json"))
    a = ap.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    logs = a.out.parent / "logs"
    logs.mkdir(exist_ok=True)
    rows = []
    print("| store | verdicts | RSS before MiB | RSS B/verdict | disk B/verdict | ingest /s | "
          "/healthz ms | sustainable uploads/s (memory) | (disk) |\n|---|---:|---:|---:|---:|---:|"
          "---:|---:|---:|", flush=True)
    for store in [x for x in a.stores.split(",") if x]:
        r = measure(load_settings(), store, a.verdicts, a.memory_mib, a.disk_gib,
                    a.retention_days * 86400, logs, max(a.stages, 2))
        rows.append(r)
        print(f"| {store} | {r['verdicts']} | {r['rss_before_mib']} | {r['rss_per_verdict']} | "
              f"{r['disk_per_verdict']} | {r['ingest_per_s']} | {r['healthz_ms']} | "
              f"{r['sustainable_per_s_memory']} | {r['sustainable_per_s_disk']} |", flush=True)
    a.out.write_text(json.dumps({"rows": rows, "machine": machine_info(),
                                 "load": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
