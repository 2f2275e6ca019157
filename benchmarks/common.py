"""Shared pieces of the benchmarks: fresh topics, a committed-results watcher, worker processes.

Every benchmark step runs on its own uuid-named topics, consumer group, transactional-id prefix
and buckets (like ``tests/integration/conftest.py``), so runs never collide with the demo, the
tests or each other. Only 127.0.0.1 traffic (the local stack of ``scripts/stack``).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from schemas import codec
from schemas.errors import CardstreamError
from streams import procs
from streams.errors import KafkaSetupError
from streams.kafka import admin, create_topics, delete_topics, read_topic, topic_specs
from streams.procs import WorkerProc
from streams.settings import KafkaSettings, Settings, TopicSettings
from streams.storage import Storage

ROOT = Path(__file__).resolve().parents[1]


class BenchError(CardstreamError):
    """A benchmark step could not complete (stack missing, worker died, results missing)."""


def run_main(main: Callable[[], int]) -> None:
    """Exit with ``main()``'s code; a :class:`BenchError` is one line on stderr and exit 1."""
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        sys.exit(1)


# --- fresh topics and buckets ----------------------------------------------------------------
def fresh_settings(base: Settings, run_id: str, partitions: int = 6, **worker: object) -> Settings:
    """``base`` with uuid-named topics, group, transactional ids and buckets for ``run_id``.

    Args:
        base: settings from the environment (``scripts/stack env``).
        run_id: short unique id (hex) naming everything of this step.
        partitions: partitions of the uploads topic.
        worker: overrides of ``WorkerSettings`` fields (``max_batch``, ``max_wait_ms``...).
    """
    k = base.kafka.model_copy(update={
        "uploads_topic": f"bench-{run_id}.uploads",
        "results_topic": f"bench-{run_id}.results",
        "dlq_topic": f"bench-{run_id}.dlq",
        "group_id": f"bench-{run_id}",
        "transactional_id_prefix": f"bench-tx-{run_id}",
        "topics": TopicSettings(uploads_partitions=partitions, results_partitions=3,
                                dlq_partitions=1),
    })
    s3 = base.s3.model_copy(update={
        "uploads_bucket": f"bench-up-{run_id}", "results_bucket": f"bench-res-{run_id}",
        "quarantine_bucket": f"bench-qua-{run_id}", "allowed_buckets": (f"bench-up-{run_id}",),
    })
    w = base.worker.model_copy(update={"http_port": 0, **worker})
    return base.model_copy(update={"kafka": k, "s3": s3, "worker": w})


@contextmanager
def fresh_stack(base: Settings, partitions: int = 6, **worker: object) -> Iterator[Settings]:
    """Create fresh topics + buckets (see :func:`fresh_settings`); delete both afterwards.

    Raises:
        KafkaSetupError / StorageError: the local stack is not reachable.
    """
    s = fresh_settings(base, uuid.uuid4().hex[:12], partitions, **worker)
    a = admin(s.kafka)
    create_topics(a, topic_specs(s.kafka))
    store = Storage(s.s3)
    buckets = [s.s3.uploads_bucket, s.s3.results_bucket, s.s3.quarantine_bucket]
    store.ensure_buckets(buckets)
    try:
        yield s
    finally:
        delete_topics(a, [s.kafka.uploads_topic, s.kafka.results_topic, s.kafka.dlq_topic])
        remove_buckets(store, buckets)


def remove_buckets(store: Storage, names: Sequence[str]) -> None:
    """Delete every object of the buckets ``names``, then the buckets (missing ones are skipped)."""
    from minio.deleteobjects import DeleteObject

    c = store.client
    for b in names:
        if not c.bucket_exists(b):
            continue
        objs = [DeleteObject(o.object_name) for o in c.list_objects(b, recursive=True)]
        for err in c.remove_objects(b, objs):  # lazy: iterating performs the deletes
            raise BenchError(f"cannot delete {err.name} from {b}: {err.message}")
        c.remove_bucket(b)


def wait_group(s: Settings, members: int, partitions: int, timeout_s: float = 60.0) -> float:
    """Wait until the consumer group ``s.kafka.group_id`` is stable with ``members`` members that
    together hold all ``partitions`` partitions of the uploads topic.

    Returns:
        Seconds waited.

    Raises:
        BenchError: not reached within ``timeout_s``.
    """
    a = admin(s.kafka)
    t0 = time.monotonic()
    last = "no description"
    while time.monotonic() - t0 < timeout_s:
        try:
            d = a.describe_consumer_groups([s.kafka.group_id])[s.kafka.group_id].result(10)
            held = sum(len(m.assignment.topic_partitions) for m in d.members)
            last = f"state={d.state} members={len(d.members)} partitions={held}"
            if str(d.state).endswith("STABLE") and len(d.members) == members and held == partitions:
                return time.monotonic() - t0
        except Exception as e:  # the group does not exist until the first member joins
            last = str(e)
        time.sleep(0.2)
    raise BenchError(f"group {s.kafka.group_id} not settled in {timeout_s} s ({last})")


# --- committed results -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Got:
    """A committed result as the watcher saw it.

    Attributes:
        recv_ms: wall-clock epoch ms when the read_committed consumer received it.
        submitted_ms: the upload's ``submitted_at`` (epoch ms).
        status: ``accepted`` / ``rejected`` / ``failed``; ``dead_letter`` for a DLQ record.
        total_ms: the worker's ``timings.total_ms`` (submitted -> result produced, ms).
        batch_size: ``timings.batch_size`` (images in its inference call).
    """

    recv_ms: float
    submitted_ms: float
    status: str
    total_ms: float
    batch_size: int

    @property
    def latency_ms(self) -> float:
        """Client-observed end-to-end latency: ``submitted_at`` -> committed result read (ms)."""
        return self.recv_ms - self.submitted_ms


def epoch_ms(rfc3339: str) -> float:
    """RFC 3339 timestamp -> epoch milliseconds."""
    return dt.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000.0


class ResultWatcher:
    """Reads the results and dead-letter topics (read_committed) on a thread, from the beginning.

    The reader (:func:`streams.kafka.read_topic`) is *assigned* every partition (no group join),
    so it sees results as soon as their transaction commits; ``fetch.wait.max.ms`` is 10 ms so
    its own polling adds little latency. Each result is stamped when the reader hands it over,
    which is as soon as a poll returns one: ``consume(n, timeout)`` instead waits out its whole
    timeout unless ``n`` records arrive (measured: ``consume(1000, 0.5)`` with one record ready
    returns after 500 ms), which stamped results up to 50 ms late. Use as a context manager.

    Args:
        s: settings naming the topics.

    Raises:
        BenchError: the topics are not in the cluster metadata after 15 s.
    """

    def __init__(self, s: Settings) -> None:
        self.settings = s
        self.results: dict[str, Got] = {}
        self._cond = threading.Condition()
        self._events: dict[str, threading.Event] = {}
        self._stop = threading.Event()
        self._reader = read_topic(s.kafka, [s.kafka.results_topic, s.kafka.dlq_topic], follow=True,
                                  poll_s=0.05, wait_topics_s=15.0,
                                  config={"fetch.wait.max.ms": 10, "fetch.min.bytes": 1})
        try:
            next(self._reader)  # assigned from the beginning before the first upload
        except KafkaSetupError as e:
            raise BenchError(str(e)) from e
        self._t = threading.Thread(target=self._loop, name="result-watcher", daemon=True)

    def __enter__(self) -> ResultWatcher:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(10)
        self._reader.close()

    def _loop(self) -> None:
        dlq = self.settings.kafka.dlq_topic
        for msgs in self._reader:
            if self._stop.is_set():
                return
            now = time.time() * 1000.0
            got = {}
            for m in msgs:
                if m.topic() == dlq:
                    d = codec.decode_dead_letter(m.value())
                    uid = d.upload_id or (m.key() or b"").decode(errors="replace")
                    got[uid] = Got(now, now, "dead_letter", 0.0, 0)
                    continue
                r = codec.decode_result(m.value())
                got[r.upload_id] = Got(now, epoch_ms(r.submitted_at) if r.submitted_at else now,
                                       str(r.status), r.timings.total_ms, r.timings.batch_size)
            if got:
                with self._cond:
                    for k, v in got.items():
                        self.results.setdefault(k, v)  # the first committed copy counts
                        ev = self._events.pop(k, None)
                        if ev is not None:
                            ev.set()
                    self._cond.notify_all()

    def wait_one(self, upload_id: str, timeout_s: float) -> Got | None:
        """The result of ``upload_id``, waiting up to ``timeout_s`` (None on timeout).

        One event per waiter, so hundreds of closed-loop users do not all wake on every result.
        """
        with self._cond:
            if upload_id in self.results:
                return self.results[upload_id]
            ev = self._events.setdefault(upload_id, threading.Event())
        ev.wait(timeout_s)
        with self._cond:
            self._events.pop(upload_id, None)
            return self.results.get(upload_id)

    def wait_all(self, upload_ids: Iterable[str], timeout_s: float) -> dict[str, Got]:
        """Results of every id in ``upload_ids`` that arrived within ``timeout_s`` (s)."""
        ids = list(upload_ids)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while any(u not in self.results for u in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            return {u: self.results[u] for u in ids if u in self.results}


class InlineSender:
    """Produces UploadEvents with the image inline (no MinIO PUT on the producer side), so the
    load generator stays cheap; the worker still PUTs every output to MinIO.

    Each event is sent at once (``linger.ms`` 0): ``plain_producer``'s 5 ms of linger would add
    5 ms to every sample of the open loop, whose events are 16 ms apart at 62/s and so never
    share a produce request. Latency still runs from the ``produce()`` call (``submitted_at``).

    Args:
        s: settings (uploads topic, inline limit).
        task: task of every event.
        files: small image files, cycled.
    """

    def __init__(self, s: Settings, task: str, files: Sequence[Path]) -> None:
        from streams.produce import UploadProducer

        self.task = task
        self.producer = UploadProducer(s, inline=True, **{"linger.ms": 0})
        self.blobs = [(f.name, f.read_bytes()) for f in files]
        self.prefix = uuid.uuid4().hex[:10]

    def send(self, i: int) -> str:
        """Produce event number ``i`` (thread-safe); returns its upload id."""
        from streams.produce import make_upload_id

        name, data = self.blobs[i % len(self.blobs)]
        uid = make_upload_id(self.prefix, name, i)
        self.producer.send(self.producer.event_for(uid, self.task, data, name, None))
        return uid

    def flush(self, timeout_s: float = 30.0) -> list[str]:
        """Wait for delivery; returns delivery errors."""
        return self.producer.flush(timeout_s)


# --- worker subprocesses ---------------------------------------------------------------------
def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kill_and_wait(pid: int, timeout_s: float = 10.0, every_s: float = 0.05) -> bool:
    """SIGKILL ``pid`` and wait until it is gone, at most ``timeout_s`` (s), looking every
    ``every_s``: whether it is gone (the fault suite's kills and the integration tests' broker
    and store kills)."""
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(every_s)
    return False


def start_worker(s: Settings, slot: int, logs: Path, args: Sequence[str],
                 env: Mapping[str, str] | None = None) -> WorkerProc:
    """Start ``cardstream worker --slot N --http-port P ARGS`` on a free port (log under ``logs``;
    ``env``: more environment variables)."""
    return procs.start_worker(s, slot, logs / f"worker-{s.kafka.group_id}-{slot}.log", args,
                              http_port=free_port(), env=env)


def stop_workers(workers: Sequence[WorkerProc], timeout_s: float = 30.0) -> list[int]:
    """SIGTERM every worker, wait (SIGKILL after ``timeout_s``); returns their exit codes."""
    return procs.stop_workers(workers, timeout_s=timeout_s)


def check_alive(workers: Sequence[WorkerProc]) -> None:
    """Raise :class:`BenchError` naming the log of any worker that has exited."""
    for w in workers:
        if w.proc.poll() is not None:
            raise BenchError(f"worker exited with {w.proc.returncode}; log: {w.log}")


def scrape(port: int) -> dict[str, float]:
    """A worker's ``/metrics`` as ``{"name{label=...}": value}`` (Prometheus text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(smp.labels.items()))
            out[f"{smp.name}{{{labels}}}"] = smp.value
    return out


# --- inputs and statistics -------------------------------------------------------------------
def small_jpegs(folder: Path, sources: Sequence[Path], width: int = 160) -> list[Path]:
    """Copies of ``sources`` scaled to ``width`` px wide as JPEG (q 85) under ``folder``: cheap
    to decode, so load and scaling runs measure the pipeline rather than this CPU."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for src in sources:
        im = cv2.imread(str(src), cv2.IMREAD_COLOR)
        h = max(1, round(im.shape[0] * width / im.shape[1]))
        p = folder / f"small_{src.stem}.jpg"
        cv2.imwrite(str(p), cv2.resize(im, (width, h), interpolation=cv2.INTER_AREA),
                    [cv2.IMWRITE_JPEG_QUALITY, 85])
        out.append(p)
    return out


def pct(xs: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100, linear interpolation) of ``xs``, rounded to 0.1; None if
    empty."""
    return round(float(np.percentile(np.asarray(xs, float), q)), 1) if len(xs) else None


def latency_stats(lat_ms: Sequence[float]) -> dict[str, float | None]:
    """``avg_ms``, ``p50_ms``, ``p95_ms``, ``p99_ms``, ``max_ms`` of latencies in ms."""
    avg = round(float(np.mean(lat_ms)), 1) if len(lat_ms) else None
    return {"avg_ms": avg, "p50_ms": pct(lat_ms, 50), "p95_ms": pct(lat_ms, 95),
            "p99_ms": pct(lat_ms, 99), "max_ms": pct(lat_ms, 100)}


def machine_info() -> dict[str, object]:
    """Where the figures came from: CPU model and count, memory, OS, Python, ONNX Runtime, git
    commit, UTC date, and the 1-minute load average (other processes share this machine)."""
    import onnxruntime as ort

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = next(int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text()
                   .splitlines() if line.startswith("MemTotal"))
    except (OSError, StopIteration):
        mem = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                capture_output=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    return {"date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpu": cpu, "cpu_count": os.cpu_count(), "mem_mib": mem,
            "os": platform.platform(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "ort_providers": ort.get_available_providers(),
            "git_commit": commit, "load_avg_1m": round(os.getloadavg()[0], 2)}


def stop_status_app(p: subprocess.Popen, k: KafkaSettings, app_id: str) -> None:
    """SIGTERM a ``cardstream status`` process (SIGKILL after 30 s) and delete its changelog
    topics (``{app_id}-*-changelog``), which its start created on the shared broker."""
    from streams.status_app import changelog_topics
    from streams.status_settings import StatusSettings

    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
    delete_topics(admin(k), list(changelog_topics(StatusSettings(app_id=app_id)).values()))
