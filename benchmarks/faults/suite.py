"""The fault suite: issue 31's table (and its soak), from real worker processes on a real stack.

Each fault runs on fresh topics (6 partitions), buckets and consumer group, with its own worker
processes (``cardstream worker``, the ``sleep`` processor, slots 0..N-1, each restarted when it
exits as Kubernetes restarts a pod, each with its data segment limited like a pod's memory), fed
by an open-loop producer at a fixed rate. The workers reach MinIO through
:class:`~benchmarks.faults.proxy.FaultProxy`; the producer and the reader talk to the stack
directly. While the uploads are produced the fault is injected; then the suite reads the results
and dead-letter topics until every record is accounted for or nothing has moved for a while, and
tallies the row (:func:`benchmarks.faults.ledger.tally`).

Faults (:data:`FAULTS`):

``poison``       5 % of the records are poison of every kind of ``benchmarks.faults.poison``
                 (the huge images as one burst of 8 on one partition, "a batch of huge images");
``sigkill``      5 SIGKILLs, each of a worker that is computing a batch (its ``/metrics``: more
                 batches started than computed), restarted at once;
``broker``       ``kill -9`` of the Kafka broker, ``scripts/stack up`` 5 s later;
``broker_long``  the same, ``up`` 75 s later (:data:`BROKER_LONG_DOWN_S`: past a stuck commit's
                 bound and the producer's rebuild, issue 43);
``minio_down``   MinIO killed (``kill -9``) and restarted 30 s later;
``minio_503``    the proxy answers 503 with an HTML body for 30 s;
``scale``        the group scaled 1 -> 3 (two workers started) -> 1 (SIGTERM to those two).

The stall column is measured from the end of the fault (the end of production for ``poison``).
The soak (``--soak``, :mod:`benchmarks.faults.soak`) first measures the group's capacity on a
backlog, then runs at 70 % of it for 30 min with no fault and reports each worker's RSS growth;
``python -m benchmarks.faults`` (:mod:`benchmarks.faults.__main__`) runs either.
"""

from __future__ import annotations

import random
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from benchmarks.common import free_port, fresh_stack, scrape
from benchmarks.faults import poison
from benchmarks.faults.ledger import Output, Produced, tally
from benchmarks.faults.proxy import FaultProxy
from benchmarks.faults.stack import OwnStack
from schemas import codec
from schemas.formats import utc_now_rfc3339
from schemas.models import UploadEvent
from streams.kafka import consumer
from streams.procs import settings_env
from streams.produce import UploadProducer
from streams.settings import Settings

FAULTS = ("poison", "sigkill", "broker", "broker_long", "minio_down", "minio_503", "scale")
#: how long the ``broker_long`` row keeps Kafka down (s): longer than a stuck
#: ``send_offsets_to_transaction``'s bound plus a producer rebuild's ``init_transactions``
#: (``Committer.TXN_CALL_TIMEOUT_S + STUCK_GRACE_S + 30 s``, 65 s: issue 43)
BROKER_LONG_DOWN_S = 75.0
PARTITIONS = 6
#: RLIMIT_DATA of each worker process: its pod memory limit. A sleep-processor worker's data
#: segment is about 390 MB (measured: VmData 387 MB), a decoded 40 MP image 120 MB: a batch of 8
#: of them does not fit.
DATA_LIMIT = 1024 * 1024 * 1024
#: the workers' settings for that pod: a decode budget of 256 MiB per batch, one 40 MP image
#: (240 MB at its decode peak) at a time (``CARDSTREAM_WORKER__DECODE_BUDGET_BYTES``); a compute
#: deadline of 20 s plus 0.5 s per event (a batch of the sleep processor takes < 1 s, its GETs'
#: retries < 5 s)
POD_ENV = {"CARDSTREAM_WORKER__DECODE_BUDGET_BYTES": str(256 * 1024 * 1024),
           "CARDSTREAM_WORKER__COMPUTE_DEADLINE_S": "20",
           "CARDSTREAM_WORKER__COMPUTE_DEADLINE_PER_ITEM_S": "0.5"}
#: a worker slot's RSS may grow by less than this during the soak (issue 31)
SOAK_RSS_GROWTH_MAX = 0.05


@dataclass
class Options:
    """What one run does (``python -m benchmarks.faults --help``).

    Attributes:
        workers: worker processes per fault (the scale fault goes 1 -> ``workers`` -> 1).
        rate: uploads per second produced during a fault (open loop).
        seconds: how long uploads are produced per fault (s); the fault sits inside.
        sleep_ms: per-call latency of the sleep processor (ms; + 2 ms per item).
        max_batch: events per poll batch of each worker.
        drain_idle_s: stop reading once nothing new has come for this long (s) after the fault.
        drain_max_s: stop reading this long after the fault at the latest (s).
        faults: which rows to run, in order.
        out: folder of ``summary.json`` and the worker logs.
        soak_minutes: 0 for the fault table; otherwise the soak's length (min).
        soak_load: share of the measured capacity offered during the soak.
        soak_sleep_ms / soak_max_batch: the soak's sleep per call and poll batch: a capacity
            set by the sleep (3 workers x 4 items / 208 ms, about 58/s) rather than by the two
            cores the whole stack shares here.
    """

    workers: int = 3
    rate: float = 10.0
    seconds: float = 60.0
    sleep_ms: float = 100.0
    max_batch: int = 16
    faults: Sequence[str] = FAULTS
    drain_idle_s: float = 120.0
    drain_max_s: float = 240.0
    out: Path = Path("out/faults")
    soak_minutes: float = 0.0
    soak_load: float = 0.7
    soak_sleep_ms: float = 200.0
    soak_max_batch: int = 4


# --- worker processes ------------------------------------------------------------------------
@dataclass
class Slot:
    """One worker slot: its current process, HTTP port and how often it was restarted."""

    slot: int
    proc: subprocess.Popen
    port: int
    restarts: int = 0
    killed: int = 0
    wanted: bool = True  # restart when it exits


class Group:
    """The worker processes of one fault, restarted when they exit while wanted.

    Args:
        s: the fault's settings (topics, group, buckets); the workers' S3 endpoint is
            ``s3_endpoint`` (the fault proxy).
        s3_endpoint: where the workers reach MinIO.
        logs: folder of the worker logs.
        args: ``cardstream worker`` arguments after ``--slot`` and ``--http-port``.
    """

    def __init__(self, s: Settings, s3_endpoint: str, logs: Path, args: Sequence[str]) -> None:
        self.s = s.model_copy(update={"s3": s.s3.model_copy(update={"endpoint": s3_endpoint})})
        self.logs, self.args = logs, list(args)
        self.slots: dict[int, Slot] = {}
        self._lock = threading.Lock()

    def _spawn(self, slot: int, port: int) -> subprocess.Popen:
        exe = Path(sys.executable).with_name("cardstream")
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{self.s.kafka.group_id}-slot{slot}.log", "ab") as f:
            p = subprocess.Popen([str(exe), "worker", "--slot", str(slot), "--http-port",
                                  str(port), *self.args], env={**settings_env(self.s), **POD_ENV},
                                 stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        resource.prlimit(p.pid, resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))
        return p

    def start(self, slot: int) -> None:
        """Start (or want again) worker ``slot``."""
        with self._lock:
            old = self.slots.get(slot)
            if old is not None and old.proc.poll() is None:
                old.wanted = True
                return
            port = free_port()
            self.slots[slot] = Slot(slot, self._spawn(slot, port), port,
                                    restarts=old.restarts if old else 0)

    def supervise(self) -> None:
        """Restart every wanted worker that has exited (call often)."""
        with self._lock:
            for sl in self.slots.values():
                if sl.wanted and sl.proc.poll() is not None:
                    sl.restarts += 1
                    sl.port = free_port()
                    sl.proc = self._spawn(sl.slot, sl.port)

    def computing(self) -> list[int]:
        """Slots whose worker is computing a batch now: its ``/metrics`` count more poll
        batches started than compute stages finished."""
        busy = []
        for sl in list(self.slots.values()):
            if sl.proc.poll() is not None:
                continue
            try:
                m = scrape(sl.port)
            except OSError:
                continue
            started = m.get("cardstream_poll_batch_size_count{}", 0.0)
            computed = m.get("cardstream_batch_stage_seconds_count{stage=compute}", 0.0)
            if started > computed:
                busy.append(sl.slot)
        return busy

    def sigkill(self, slot: int) -> None:
        """SIGKILL worker ``slot`` (the supervisor restarts it)."""
        with self._lock:
            sl = self.slots[slot]
            sl.proc.kill()
            sl.proc.wait()
            sl.killed += 1

    def retire(self, slot: int, timeout_s: float = 60.0) -> None:
        """SIGTERM worker ``slot`` and wait for its exit (it is not restarted)."""
        with self._lock:
            sl = self.slots[slot]
            sl.wanted = False
        sl.proc.terminate()
        try:
            sl.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            sl.proc.kill()
            sl.proc.wait()

    def stop(self) -> None:
        """Stop every worker (SIGTERM, SIGKILL after 30 s)."""
        for slot in list(self.slots):
            self.retire(slot, 30.0)

    def threads_fds(self) -> dict[int, tuple[int, int]]:
        """Threads and open file descriptors of each live worker (``/proc/PID``): a producer
        left behind keeps its librdkafka threads and sockets."""
        out = {}
        for sl in self.slots.values():
            try:
                status = Path(f"/proc/{sl.proc.pid}/status").read_text().splitlines()
                threads = next(int(x.split()[1]) for x in status if x.startswith("Threads:"))
                out[sl.slot] = (threads, len(list(Path(f"/proc/{sl.proc.pid}/fd").iterdir())))
            except (OSError, StopIteration):
                continue
        return out

    def rss_mib(self) -> dict[int, float]:
        """Resident set size of each live worker (MiB, from ``/proc/PID/status``)."""
        out = {}
        for sl in self.slots.values():
            try:
                for line in Path(f"/proc/{sl.proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[sl.slot] = int(line.split()[1]) / 1024.0
            except OSError:
                continue
        return out


# --- uploads and outputs ---------------------------------------------------------------------
class Uploads:
    """The open-loop producer of a fault: good uploads (claim checks to a pool of small PNGs
    PUT beforehand, so uploads go on while MinIO is down) and, for ``poison``, poison records.

    Every delivery report becomes a :class:`~benchmarks.faults.ledger.Produced`.
    """

    def __init__(self, s: Settings, pool: int = 16) -> None:
        self.s = s
        self.prod = UploadProducer(s)
        self.refs = []
        for i in range(pool):
            ev = self.prod.event_for(f"pool-{i}", "card", poison.png(96, 128, seed=i), "p.png",
                                     None)
            self.refs.append(ev.image)
        self.produced: list[Produced] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self.prefix = uuid.uuid4().hex[:8]

    def _report(self, kind: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            with self._lock:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.produced.append(Produced(msg.partition(), msg.offset(), time.time(), kind))
        return on_delivery

    def good(self, i: int) -> None:
        """Produce good upload number ``i``."""
        ev = UploadEvent.model_validate({"upload_id": f"{self.prefix}-{i:06d}", "task": "card",
                                         "image": self.refs[i % len(self.refs)].canonical(),
                                         "submitted_at": utc_now_rfc3339()})
        key, value, headers = codec.encode_upload(ev)
        self._send(key, value, "good", headers=headers)

    def bad(self, kind: str, i: int, partition: int | None = None) -> None:
        """Produce poison record number ``i`` of ``kind`` (to ``partition`` when given)."""
        key, value = poison.record(kind, self.prod, f"{self.prefix}-{kind.replace('_', '-')}-{i}")
        self._send(key, value, kind, **({} if partition is None else {"partition": partition}))

    def _send(self, key: bytes | None, value: bytes | None, kind: str, **kw: Any) -> None:
        self.prod.producer.produce(self.s.kafka.uploads_topic, key=key, value=value,
                                   on_delivery=self._report(kind), **kw)
        self.prod.producer.poll(0)

    def flush(self, timeout_s: float = 330.0) -> int:
        """Wait for the delivery reports; returns how many are still missing."""
        return self.prod.producer.flush(timeout_s)


class Outputs:
    """Reads the results and dead-letter topics (read_committed, every partition from the
    beginning, no consumer group) on a thread; :attr:`got` holds an
    :class:`~benchmarks.faults.ledger.Output` per record read, :attr:`last_t` when the last one
    came."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.got: list[Output] = []
        self.last_t = time.time()
        self._stop = threading.Event()
        self._c = consumer(s.kafka, f"faults-reader-{uuid.uuid4().hex[:8]}",
                           **{"fetch.wait.max.ms": 50})
        md = self._c.list_topics(timeout=15)
        topics = (s.kafka.results_topic, s.kafka.dlq_topic)
        self._c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics
                        for p in md.topics[t].partitions])
        self._t = threading.Thread(target=self._loop, name="faults-reader", daemon=True)
        self._t.start()

    def _loop(self) -> None:
        dlq = self.s.kafka.dlq_topic
        while not self._stop.is_set():
            for m in self._c.consume(500, 0.2):
                if m.error() is not None:
                    continue
                now = time.time()
                if m.topic() == dlq:
                    d = codec.decode_dead_letter(m.value())
                    o = Output(d.source.partition, d.source.offset, now, "dead_letter",
                               str(d.error_code))
                else:
                    r = codec.decode_result(m.value())
                    o = Output(r.source.partition, r.source.offset, now, "result", str(r.status))
                self.got.append(o)
                self.last_t = now

    def close(self) -> None:
        """Stop reading."""
        self._stop.set()
        self._t.join(10)
        self._c.close()


# --- one fault -------------------------------------------------------------------------------
@dataclass
class Run:
    """The pieces of one fault's run, handed to its fault action."""

    opts: Options
    stack: OwnStack
    proxy: FaultProxy
    group: Group
    uploads: Uploads
    t0: float
    notes: list[str] = field(default_factory=list)
    #: per slot ``(threads, fds)`` when the fault was injected (a kill), else at the start
    held_at_fault: dict[int, tuple[int, int]] = field(default_factory=dict)

    def at(self, t: float) -> None:
        """Sleep (supervising the workers) until ``t`` s after the start of production."""
        while time.time() < self.t0 + t:
            self.group.supervise()
            time.sleep(0.1)


def _poison_plan(n: int) -> dict[int, str]:
    """Which of ``n`` records are poison: every 20th (5 %), kinds in turn, the huge images as
    one burst (their kind's first turn becomes a burst of 8 on one partition)."""
    return {i: poison.KINDS[(i // 20) % len(poison.KINDS)] for i in range(10, n, 20)}


def _fault_poison(r: Run) -> float:
    """The poison records are part of the production: the fault ends with it."""
    r.at(r.opts.seconds)
    return time.time()


def _fault_sigkill(r: Run) -> float:
    step = r.opts.seconds / 6
    for k in range(5):
        r.at(step * (k + 1))
        end = time.time() + 10
        busy: list[int] = []
        while not busy and time.time() < end:
            busy = r.group.computing()
            r.group.supervise()
            time.sleep(0.05)
        slot = random.choice(busy) if busy else random.choice(list(r.group.slots))
        r.group.sigkill(slot)
        r.notes.append(f"SIGKILL slot {slot} at {time.time() - r.t0:.1f} s"
                       + ("" if busy else " (no batch was computing)"))
    return time.time()


def _kill_and_up(r: Run, service: str, at: float, down_s: float) -> float:
    """``kill -9`` the stack's ``service`` at ``at`` s, ``scripts/stack up`` ``down_s`` later;
    returns when it is back."""
    r.at(at)
    r.held_at_fault = r.group.threads_fds()
    r.stack.kill(service)
    r.notes.append(f"{service} kill -9 at {time.time() - r.t0:.1f} s")
    r.at(at + down_s)
    took = r.stack.up()
    r.notes.append(f"{service} back (scripts/stack up took {took:.1f} s) at "
                   f"{time.time() - r.t0:.1f} s")
    return time.time()


def _fault_broker(r: Run) -> float:
    return _kill_and_up(r, "kafka", r.opts.seconds / 3, 5.0)


def _fault_broker_long(r: Run) -> float:
    return _kill_and_up(r, "kafka", r.opts.seconds / 6, BROKER_LONG_DOWN_S)


def _fault_minio_down(r: Run) -> float:
    return _kill_and_up(r, "minio", r.opts.seconds / 4, 30.0)


def _fault_minio_503(r: Run) -> float:
    r.at(r.opts.seconds / 4)
    r.proxy.mode = "503"
    r.at(r.opts.seconds / 4 + 30)
    r.proxy.mode = "pass"
    r.notes.append(f"503 answered {r.proxy.counts['503']} requests")
    return time.time()


def _fault_scale(r: Run) -> float:
    r.at(r.opts.seconds / 4)
    for slot in range(1, r.opts.workers):
        r.group.start(slot)
    r.notes.append(f"scaled 1 -> {r.opts.workers} at {time.time() - r.t0:.1f} s")
    r.at(r.opts.seconds * 2 / 3)
    for slot in range(1, r.opts.workers):
        r.group.retire(slot)
    r.notes.append(f"scaled {r.opts.workers} -> 1 at {time.time() - r.t0:.1f} s")
    return time.time()


ACTIONS: dict[str, Callable[[Run], float]] = {
    "poison": _fault_poison, "sigkill": _fault_sigkill, "broker": _fault_broker,
    "broker_long": _fault_broker_long,
    "minio_down": _fault_minio_down, "minio_503": _fault_minio_503, "scale": _fault_scale}


def worker_args(o: Options, soak: bool = False) -> list[str]:
    """``cardstream worker`` arguments of the suite's workers (of the soak's with ``soak``)."""
    sleep_ms, batch = (o.soak_sleep_ms, o.soak_max_batch) if soak else (o.sleep_ms, o.max_batch)
    return ["--tasks", "card", "--processor", "card=sleep", "--sleep-ms", str(sleep_ms),
            "--max-batch", str(batch), "--max-wait-ms", "10"]


def run_fault(name: str, base: Settings, stack: OwnStack, o: Options) -> dict[str, Any]:
    """One row of the table: fresh topics and workers, uploads at ``o.rate`` for ``o.seconds``
    with the fault injected, then the tally."""
    with fresh_stack(base, PARTITIONS) as s, FaultProxy.for_store(s.s3) as proxy:
        group = Group(s, proxy.endpoint, o.out / "logs", worker_args(o))
        first = 1 if name == "scale" else o.workers
        for slot in range(first):
            group.start(slot)
        outputs = Outputs(s)
        uploads = Uploads(s)
        time.sleep(8)  # let the group form before the clock starts
        t0 = time.time()
        run = Run(o, stack, proxy, group, uploads, t0)
        plan = _poison_plan(int(o.rate * o.seconds)) if name == "poison" else {}
        producing = threading.Thread(target=_produce, args=(run, plan), daemon=True)
        run.held_at_fault = group.threads_fds()
        try:
            producing.start()
            fault_end = ACTIONS[name](run)
            producing.join()
            missing = uploads.flush()
            if missing:
                run.notes.append(f"{missing} uploads never acknowledged by the broker")
            want = len(uploads.produced)
            while True:
                group.supervise()
                now = time.time()
                done = len({(x.partition, x.offset) for x in outputs.got}) >= want
                if done or now - fault_end > o.drain_max_s or (
                        now - max(outputs.last_t, fault_end) > o.drain_idle_s):
                    break
                time.sleep(0.5)
            until = time.time()
            held_after = group.threads_fds()
        finally:
            group.stop()
            outputs.close()
        row = {"fault": name, **tally(uploads.produced, outputs.got, fault_end, until),
               "workers": o.workers, "observed_s_after_fault": round(until - fault_end, 1),
               "worker_restarts": sum(sl.restarts for sl in group.slots.values()),
               "sigkills": sum(sl.killed for sl in group.slots.values()),
               # per slot: [threads, fds] at the fault (a kill; else at the start), after the drain
               "threads_fds": {sl: [run.held_at_fault.get(sl), held_after.get(sl)]
                               for sl in sorted(set(run.held_at_fault) | set(held_after))},
               "notes": run.notes + uploads.errors[:3]}
        return row


def _produce(r: Run, plan: dict[int, str]) -> None:
    """Open loop: record ``i`` at ``t0 + i / rate``; the poison plan's records instead of good
    ones where it says so."""
    n = int(r.opts.rate * r.opts.seconds)
    huge_done = False
    for i in range(n):
        delay = r.t0 + i / r.opts.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        kind = plan.get(i)
        if kind is None:
            r.uploads.good(i)
        elif kind == "huge_image":
            burst = 1 if huge_done else 8
            for j in range(burst):
                r.uploads.bad(kind, i * 10 + j, partition=i % PARTITIONS)
            huge_done = True
        else:
            r.uploads.bad(kind, i)


# --- the whole run ---------------------------------------------------------------------------
def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The table's totals: sums of the counts, the worst stall."""
    keys = ("uploads", "results", "dead_letters", "lost", "duplicates")
    out: dict[str, Any] = {k: sum(int(r[k]) for r in rows) for k in keys}
    out["max_stall_s"] = max((float(r["max_stall_s"]) for r in rows), default=0.0)
    return out


def goals_met(row: dict[str, Any]) -> bool:
    """Issue 31's goal for a row: every upload accounted for once, no stall over 60 s (the
    poison row has no stall goal)."""
    return (row["lost"] == 0 and row["duplicates"] == 0
            and row["results"] + row["dead_letters"] == row["uploads"]
            and (row["fault"] == "poison" or row["max_stall_s"] <= 60.0))


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    """The issue's table on stdout."""
    print(f"{'fault':<11} {'uploads':>7} {'results':>7} {'dead':>5} {'lost':>5} {'dup':>4} "
          f"{'stall s':>8} {'restarts':>8}  goal")
    for r in rows:
        print(f"{r['fault']:<11} {r['uploads']:>7} {r['results']:>7} {r['dead_letters']:>5} "
              f"{r['lost']:>5} {r['duplicates']:>4} {r['max_stall_s']:>8} "
              f"{r['worker_restarts']:>8}  {'met' if r['goals_met'] else 'MISSED'}")


__all__ = ["ACTIONS", "FAULTS", "Group", "Options", "Outputs", "Uploads", "goals_met",
           "print_table", "run_fault", "totals"]
