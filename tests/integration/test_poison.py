"""Issue 31: nothing one record, one object or one fault can do stops a partition.

One test per finding of the issue, each against the real stack. A test marked
``xfail(strict=True, reason="issue 31: ...")`` reproduces a finding that is not fixed yet: it
fails today (its assertion message gives the figure, e.g. "0 of 5 good uploads got a result in
45 s") and the marker comes off with the fix. Every poison kind of ``benchmarks/faults/poison.py``
has one fast case in :func:`test_one_poison_record_does_not_stop_its_partition`, which runs real
``cardstream worker`` processes restarted whenever one exits (as Kubernetes restarts a pod).
"""

from __future__ import annotations

import base64
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from pydantic import SecretStr

from benchmarks.common import ResultWatcher
from benchmarks.faults import poison
from benchmarks.faults.proxy import FaultProxy
from benchmarks.faults.suite import DATA_LIMIT, POD_ENV
from processors.base import Processor
from processors.registry import spec, stand_in
from processors.sleep import SleepProcessor
from schemas import codec
from schemas.reasons import Status
from streams.health import Health
from streams.kafka import consumer, transactional_producer
from streams.procs import settings_env
from streams.produce import UploadProducer
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import Worker

from .helpers import dead_letters, read_committed, results, write_images

pytestmark = pytest.mark.integration

GOOD = 5


def _good(prod: UploadProducer, n: int = GOOD, partition: int | None = 0,
          tag: str = "good") -> list[str]:
    """``n`` valid card uploads (claim checks) produced to ``partition``; their upload ids."""
    ids = []
    for i in range(n):
        uid = f"{tag}-{uuid.uuid4().hex[:8]}-{i}"
        key, value, _ = codec.encode_upload(prod.event_for(uid, "card", poison.png(96, 128, seed=i),
                                                           "g.png", None))
        poison.send(prod, key, value, partition)
        ids.append(uid)
    return ids


def _uploaded(settings: Settings, n: int, partition: int | None = None) -> list[str]:
    """``n`` good uploads (:func:`_good`), delivered; their upload ids."""
    prod = UploadProducer(settings)
    ids = _good(prod, n, partition)
    assert prod.flush() == []
    return ids


def _procs(**kw: float) -> dict[str, Processor]:
    return {t: stand_in(t, **{"call_ms": 5.0, **kw}) for t in ("card", "id_photo")}


def _run(w: Worker) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``w`` on a thread until ``w.stop()``; what escapes its loop lands in the list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            w.run()
        except BaseException as e:  # noqa: BLE001 (the test reports whatever escaped the loop)
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


def _finish(w: Worker, t: threading.Thread, errors: list[BaseException]) -> None:
    """Stop ``w`` (run by :func:`_run`) and fail on anything that escaped its loop."""
    w.stop()
    t.join(30)
    assert not errors, errors


def _exactly_once(rs: list, good: list[str], why: str = "") -> None:
    """One committed result per upload of ``good``, none lost, none doubled."""
    ids = Counter(r.upload_id for r in rs)
    assert set(ids) == set(good)
    assert max(ids.values()) == 1, (f"{sum(v - 1 for v in ids.values())} duplicate results of "
                                    f"{len(good)}{why}")


def _batches_started(w: Worker) -> float:
    """How many poll batches ``w`` has started (the count of its batch-size histogram)."""
    return next(x.value for x in w.metrics.batch_size.collect()[0].samples
                if x.name.endswith("_count"))


def _dl_id(d) -> str:
    """A dead letter's upload id, else its record key (our poison records' keys are their ids)."""
    return d.upload_id or base64.b64decode(d.key_b64 or "").decode(errors="replace")


def _wait_for(cond, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


# --- every poison kind, through real worker processes ----------------------------------------

class _Supervised:
    """One ``cardstream worker`` process (slot 0) restarted whenever it exits, as Kubernetes
    restarts a pod, with its data segment limited to ``data_limit`` bytes (``RLIMIT_DATA``: what
    a pod's memory limit is to a batch of huge images; the limit turns the blow-up into a
    ``MemoryError`` instead of the kernel's OOM kill, both end the process)."""

    def __init__(self, s: Settings, log: Path, args: list[str], data_limit: int) -> None:
        self.s, self.log, self.args, self.data_limit = s, log, args, data_limit
        self.restarts = 0
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        exe = Path(sys.executable).with_name("cardstream")
        with open(self.log, "ab") as f:
            p = subprocess.Popen([str(exe), "worker", "--slot", "0", "--http-port", "0",
                                  *self.args], env={**settings_env(self.s), **POD_ENV},
                                 stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        # set from here, not in a preexec_fn (unsafe with the test's threads); the worker
        # allocates its batches long after it started
        resource.prlimit(p.pid, resource.RLIMIT_DATA, (self.data_limit, self.data_limit))
        return p

    def poll(self) -> None:
        """Restart the worker if it has exited."""
        if self.proc.poll() is not None:
            self.restarts += 1
            self.proc = self._start()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _supervised_run(settings: Settings, tmp_path: Path, want: int, timeout_s: float,
                    max_wait_ms: int) -> tuple[dict, _Supervised]:
    """Run one supervised sleep-processor worker (max_batch 16) until ``want`` outputs (results
    and dead letters) are committed or ``timeout_s`` passed; returns (upload id -> result, the
    supervisor, stopped)."""
    args = ["--processor", "card=sleep,id_photo=sleep", "--sleep-ms", "5", "--max-batch", "16",
            "--max-wait-ms", str(max_wait_ms)]
    with ResultWatcher(settings) as rw:
        sup = _Supervised(settings, tmp_path / "worker.log", args, DATA_LIMIT)
        try:
            end = time.monotonic() + timeout_s
            while time.monotonic() < end and len(rw.results) < want:
                sup.poll()
                time.sleep(0.2)
        finally:
            sup.stop()
        return dict(rw.results), sup


#: kind -> (records of that kind sent, what each must end as: a result status or "dead_letter",
#: the reason / dead-letter code (None: any), seconds the five good uploads may take)
EXPECT = {
    "not_json": (1, "dead_letter", "NOT_JSON", 45),
    "big_key": (1, "dead_letter", "KEY_MISMATCH", 45),
    "raise": (1, "dead_letter", "PROCESSING_ERROR", 45),
    "refused_key": (1, "rejected", "OBJECT_REFUSED", 45),
    "huge_image": (8, "accepted", None, 60),
    "crash": (1, "dead_letter", "POISON", 90),
    "hang": (1, "dead_letter", "POISON", 120),
    "scan_bomb": (1, "rejected", "IMAGE_TOO_COMPLEX", 45),
    "tile_bomb": (1, "rejected", "IMAGE_TOO_COMPLEX", 45),
    "alpha_png": (1, "accepted", None, 60),
    "gzip_lie": (1, "accepted", None, 45),
    "brotli_lie": (1, "accepted", None, 45),
    "deflate_lie": (1, "accepted", None, 45),
    "gzip_bomb": (1, "rejected", "UNSUPPORTED_FORMAT", 45),
}
FAILS_TODAY: dict[str, str] = {
}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.xfail(
    strict=True, reason=FAILS_TODAY[k])) if k in FAILS_TODAY else k for k in EXPECT])
def test_one_poison_record_does_not_stop_its_partition(settings: Settings, tmp_path: Path,
                                                       kind: str) -> None:
    """The poison record(s), then five good uploads, all on partition 0, read by one worker
    process (restarted when it exits): every record ends as one result or one dead letter, the
    good ones accepted, within the time given, with at most 3 restarts (none unless the input
    crashes or hangs the process)."""
    n, want, code, timeout_s = EXPECT[kind]
    prod = UploadProducer(settings)
    bad = [f"{kind.replace('_', '-')}-{i}" for i in range(n)]
    for uid in bad:
        poison.send(prod, *poison.record(kind, prod, uid), partition=0)
    good = _good(prod)
    assert prod.flush() == []
    got, sup = _supervised_run(settings, tmp_path, n + GOOD, timeout_s, max_wait_ms=200)
    ok = sum(1 for u in good if u in got and got[u].status == "accepted")
    assert ok == GOOD, (f"{ok} of {GOOD} good uploads got a result in {timeout_s} s behind "
                        f"{n} {kind} record(s); the worker restarted {sup.restarts} times")
    assert sup.restarts <= (3 if kind in ("crash", "hang") else 0)
    rs, ds = results(settings, GOOD, timeout_s=10), dead_letters(settings, 0, timeout_s=3)
    outputs = Counter([r.upload_id for r in rs] + [_dl_id(d) for d in ds])
    assert max(outputs.values()) == 1, f"duplicates: {outputs.most_common(3)}"
    if want == "dead_letter":
        assert sorted((_dl_id(d), str(d.error_code)) for d in ds) == [(u, code) for u in bad]
    else:
        by_id = {r.upload_id: r for r in rs}
        assert [str(by_id[u].status) for u in bad] == [want] * n
        if code is not None:
            assert [[str(x) for x in by_id[u].reasons] for u in bad] == [[code]] * n
    if kind == "big_key":
        (d,) = ds
        assert (d.key_truncated, d.key_size) == (True, poison.BIG_KEY_BYTES)


def test_a_dead_letter_the_broker_refuses_goes_out_minimal(settings: Settings) -> None:
    """The dead-letter topic's own limit (20 000 bytes) is below the dead letter of a record
    with a 30 KB random key and a value that is not JSON (its dead letter keeps the key, about 70 KB
    as a record): the broker refuses it, which fails the transaction. Before: the batch was redone
    for ever and the five good uploads behind it waited (0 of 5). Now the dead letter goes out in
    its minimal form (code, source, no key, value or headers) and the partition moves on."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from streams.kafka import admin

    a = admin(settings.kafka)
    res = ConfigResource(ConfigResource.Type.TOPIC, settings.kafka.dlq_topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "20000",
                    incremental_operation=AlterConfigOpType.SET)])
    for f in a.incremental_alter_configs([res]).values():
        f.result(30)
    prod = UploadProducer(settings)
    poison.send(prod, os.urandom(30_000), b"\x00not json{", partition=0)  # incompressible
    good = _good(prod)
    assert prod.flush() == []
    w = Worker(settings, _procs(), Storage(settings.s3))
    t, errors = _run(w)
    rs = results(settings, GOOD, timeout_s=45)
    ds = dead_letters(settings, 1, timeout_s=10)
    _finish(w, t, errors)
    assert sorted(r.upload_id for r in rs) == sorted(good), (
        f"{len(rs)} of {GOOD} good uploads got a result behind a dead letter the broker refuses")
    (d,) = ds
    assert (str(d.error_code), d.source.partition, d.source.offset) == ("NOT_JSON", 0, 0)
    assert (d.key_b64, d.value_b64, tuple(d.headers)) == (None, None, ())
    assert (d.key_truncated, d.key_size, d.value_size) == (True, 30_000, 10)
    assert d.error.startswith("minimal dead letter (MSG_SIZE_TOO_LARGE): value is not JSON")
    assert d.quarantine is not None and d.quarantine.size_bytes == 10
    assert w.metrics.minimal_dead_letters._value.get() == 1


def test_the_dead_letter_budget_is_a_setting(settings: Settings) -> None:
    """``CARDSTREAM_WORKER__DLQ_RECORD_MAX_BYTES`` at its 16 KiB minimum: the 30 KB key of a
    record that is not JSON is cut to 2 KiB (an eighth) and the whole dead letter fits 16 KiB."""
    s = settings.model_copy(update={"worker": settings.worker.model_copy(
        update={"dlq_record_max_bytes": 16 * 1024})})
    prod = UploadProducer(s)
    poison.send(prod, b"k" * 30_000, b"\x00not json{", partition=0)
    good = _good(prod)
    assert prod.flush() == []
    w = Worker(s, _procs(), Storage(s.s3))
    t, errors = _run(w)
    rs = results(s, GOOD, timeout_s=45)
    msgs = read_committed(s, s.kafka.dlq_topic, 1, 10)
    _finish(w, t, errors)
    assert sorted(r.upload_id for r in rs) == sorted(good)
    (m,) = msgs
    d = codec.decode_dead_letter(m.value())
    assert (d.key_truncated, d.key_size, len(m.key())) == (True, 30_000, 2048)
    assert codec.dead_letter_record_size(d) <= 16 * 1024


def test_a_crash_in_the_middle_of_a_batch_is_found_and_dead_lettered(settings: Settings,
                                                                    tmp_path: Path) -> None:
    """Three good uploads, one that kills the worker process (SIGSEGV), three more, all on
    partition 0 and in one batch: the restarted worker runs the batch's events one by one from
    the committed offset, finds the record, and after its second crash alone dead-letters it
    POISON; the six good ones are accepted once each, within four restarts."""
    prod = UploadProducer(settings)
    before = _good(prod, 3, tag="before")
    poison.send(prod, *poison.record("crash", prod, "crash-mid"), partition=0)
    after = _good(prod, 3, tag="after")
    assert prod.flush() == []
    _, sup = _supervised_run(settings, tmp_path, 7, 120, max_wait_ms=500)
    rs, ds = results(settings, 6, timeout_s=10), dead_letters(settings, 1, timeout_s=10)
    assert sorted(r.upload_id for r in rs) == sorted(before + after), (
        f"{len(rs)} of 6 good uploads got a result; {sup.restarts} restarts")
    assert {str(r.status) for r in rs} == {"accepted"}
    assert [(_dl_id(d), str(d.error_code), d.source.offset) for d in ds] == [
        ("crash-mid", "POISON", 3)]
    assert 2 <= sup.restarts <= 4


# --- store errors ------------------------------------------------------------------------------

def _through_a_blip(settings: Settings, s3, mode: str, blip_s: float) -> tuple[list, list]:
    """Run a worker whose store (``s3``, reached through the fault proxy) answers in ``mode``
    until the worker has met it twice and ``blip_s`` more, then normally; read up to 10 results
    for 30 s. Returns ``(results, what escaped the worker loop)``."""
    with FaultProxy.for_store(s3) as px:
        px.mode = mode
        store = Storage(s3.model_copy(update={"endpoint": px.endpoint}), retries=2,
                        backoff_s=0.05, timeout_s=2.0)
        w = Worker(settings, _procs(), store)
        t, errors = _run(w)
        _wait_for(lambda: px.counts[mode] >= 2 or errors, 30, f"the worker to meet the {mode}s")
        time.sleep(blip_s)
        px.mode = "pass"
        rs = results(settings, 10, timeout_s=30)
        w.stop()
        t.join(30)
    return rs, errors  # the caller asserts on errors with its own message


def test_store_answering_503_without_xml_pauses_and_recovers(settings: Settings) -> None:
    """A proxy in front of MinIO answers 503 with an HTML body for 5 s (the minio client raises
    InvalidResponseError / ServerError, not S3Error): the worker must pause and retry, not die."""
    good = _uploaded(settings, 10)
    rs, errors = _through_a_blip(settings, settings.s3, "503", 5.0)
    assert not errors, f"{type(errors[0]).__name__} escaped the worker loop: {errors[0]}"[:300]
    assert sorted(r.upload_id for r in rs) == sorted(good)


def test_least_privilege_worker_recovers_after_a_store_blip(settings: Settings,
                                                            run_id: str) -> None:
    """Credentials for the worker's data path only (s3:GetObject on the uploads bucket's objects,
    s3:PutObject on the results bucket's): MinIO refuses them HEAD bucket (which needs
    s3:ListBucket) with AccessDenied. The store drops connections for 3 s, then answers again.
    Before: the health check took that AccessDenied for "still down" and the worker waited for
    ever (0 of 10 results in 30 s); an S3 answer of any kind now says the store is back."""
    from streams.access import admin_client

    s3 = settings.s3
    adm = admin_client(s3)
    user, password = f"lp-{run_id}", f"lp-secret-{uuid.uuid4().hex}"
    adm.user_add(user, password)
    adm.policy_add(user, policy={"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": [f"arn:aws:s3:::{s3.uploads_bucket}/*"]},
        {"Effect": "Allow", "Action": ["s3:PutObject"],
         "Resource": [f"arn:aws:s3:::{s3.results_bucket}/*"]}]})
    adm.policy_set(user, user=user)
    try:
        good = _uploaded(settings, 10)
        lp = s3.model_copy(update={"access_key": user, "secret_key": SecretStr(password)})
        rs, errors = _through_a_blip(settings, lp, "reset", 3.0)
        assert not errors, errors
        assert len(rs) == 10, f"{len(rs)} of 10 uploads got a result in 30 s after the blip"
        assert sorted(r.upload_id for r in rs) == sorted(good)
    finally:
        adm.user_remove(user)
        adm.policy_remove(user)


# --- the consumer group and the transaction ----------------------------------------------------

def test_partition_revoked_and_assigned_back_in_flight_is_not_committed_twice(
        settings: Settings) -> None:
    """Two uploads on each of 6 partitions in one batch that computes for 8 s; meanwhile a second
    member joins the group (takes some partitions) and leaves (they come back)."""
    good = [u for p in range(6) for u in _uploaded(settings, 2, partition=p)]
    s = settings.model_copy(update={"worker": settings.worker.model_copy(
        update={"max_batch": 32, "max_wait_ms": 2000})})
    w = Worker(s, _procs(call_ms=8000.0, item_ms=0.0), Storage(s.s3))
    t, errors = _run(w)
    _wait_for(lambda: _batches_started(w) >= 1, 30, "the first batch to start computing")
    other = consumer(s.kafka, s.kafka.group_id)
    taken: list[int] = []
    other.subscribe([s.kafka.uploads_topic],
                    on_assign=lambda c, ps: taken.extend(tp.partition for tp in ps))
    try:
        end = time.monotonic() + 6
        while not taken and time.monotonic() < end:
            other.poll(0.1)
    finally:
        other.close()
    assert taken, "the second member got no partition while the batch computed"
    rs = results(s, 12, timeout_s=60, settle_s=20)  # a batch computes 8 s: wait past a second
    _finish(w, t, errors)
    _exactly_once(rs, good, f" (partitions {sorted(taken)} moved and came back)")


class _LostCommitAnswer:
    """A real transactional Producer whose first ``commit_transaction`` commits, but whose
    answer is lost: that call and the next four raise a retriable ``_TIMED_OUT``, as librdkafka
    does when the coordinator's EndTxn answer does not come within the timeout; the sixth call
    returns, as librdkafka's resumed commit returns the (successful) outcome."""

    def __init__(self, producer) -> None:
        self.producer, self.calls = producer, 0

    def commit_transaction(self, *a) -> None:
        self.calls += 1
        if self.calls == 1:
            self.producer.commit_transaction(*a)
        if self.calls <= 5:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected: commit answer lost",
                                            retriable=True))

    def __getattr__(self, name: str):
        return getattr(self.producer, name)


class _CommitOutcomeUnknown(Worker):
    def start(self) -> None:
        super().start()
        self.committer.producer = _LostCommitAnswer(self.committer.producer)


def test_commit_of_unknown_outcome_is_never_committed_twice(settings: Settings) -> None:
    good = _uploaded(settings, 8)
    w = _CommitOutcomeUnknown(settings, _procs(), Storage(settings.s3))
    t, errors = _run(w)
    rs = results(settings, 8, timeout_s=45, settle_s=8)
    _finish(w, t, errors)
    _exactly_once(rs, good)


# --- the processor -------------------------------------------------------------------------------

class _FailsFirst(SleepProcessor):
    """The sleep processor raising on every call during its first ``fail_s`` seconds (from its
    first call): a transient device fault, e.g. CUDA out of memory."""

    def __init__(self, task: str, fail_s: float) -> None:
        s = spec(task)
        super().__init__(task, artifact=s.main_artifact, payload=s.stand_in, call_ms=5.0)
        self.fail_s, self.t0, self.failed = fail_s, None, 0

    def process_batch(self, items):
        self.t0 = self.t0 or time.monotonic()
        if time.monotonic() - self.t0 < self.fail_s:
            self.failed += 1
            raise RuntimeError("CUDA out of memory (injected)")
        return super().process_batch(items)


def test_transient_processor_failure_does_not_dead_letter_good_uploads(settings: Settings) -> None:
    good = _uploaded(settings, 10)
    procs = {t: _FailsFirst(t, fail_s=4.0) for t in ("card", "id_photo")}
    w = Worker(settings, procs, Storage(settings.s3))
    t, errors = _run(w)
    rs = results(settings, 10, timeout_s=45, settle_s=3)
    ds = dead_letters(settings, 0, timeout_s=3)
    _finish(w, t, errors)
    assert procs["card"].failed > 0
    assert (len(ds), len(rs)) == (0, 10), (
        f"{len(ds)} of 10 good uploads became {sorted({str(d.error_code) for d in ds})} dead "
        f"letters during a {procs['card'].fail_s:.0f} s processor fault; {len(rs)} got a result")
    assert sorted(r.upload_id for r in rs) == sorted(good)
    assert {r.status for r in rs} == {Status.ACCEPTED}


def test_liveness_fails_while_a_compute_hangs(settings: Settings) -> None:
    """The processor's first call blocks for 12 s; /live must fail before it returns (the
    health's stall bound is 3 s here)."""
    _uploaded(settings, 3, partition=0)
    w = Worker(settings, _procs(call_ms=12_000.0), Storage(settings.s3), health=Health(stall_s=3.0))
    t, errors = _run(w)
    _wait_for(lambda: _batches_started(w) >= 1, 30, "the first batch to start")
    t0 = time.monotonic()
    seen_dead = False
    while time.monotonic() - t0 < 8:
        seen_dead = seen_dead or not w.health.live()
        time.sleep(0.1)
    _finish(w, t, errors)
    assert seen_dead, "/live stayed 200 for 8 s while the batch's compute was stuck"


# --- replay -------------------------------------------------------------------------------------

def test_replay_of_a_transactional_uploads_topic_stops_at_the_window_end(
        settings: Settings, tmp_path: Path) -> None:
    """Uploads produced in transactions: one committed, one aborted, then (after the window's
    end) another committed: on every partition the window ends on a commit or abort marker or on
    aborted records, which no read_committed consumer ever receives; the replay must still stop,
    with the first transaction's uploads and no other."""
    from streams.replay import run_replay

    files = write_images(tmp_path / "imgs", 4)
    prod = UploadProducer(settings)
    k = settings.kafka
    tp = transactional_producer(k, f"{k.transactional_id_prefix}-uploader")
    from_ms = int(time.time() * 1000)

    def transaction(ids: list[str], commit: bool = True) -> None:
        tp.begin_transaction()
        for i, uid in enumerate(ids):
            ev = prod.event_for(uid, "card", files[i % 4].read_bytes(), files[i % 4].name, None)
            key, value, headers = codec.encode_upload(ev)
            tp.produce(k.uploads_topic, key=key, value=value, headers=headers)
        if commit:
            tp.commit_transaction(30)
        else:
            # librdkafka#4849: an abort whose EndTxn overtakes the AddPartitionsToTxn of records
            # still in flight fails fatally (INVALID_TXN_STATE); delivered records prove the
            # coordinator holds the transaction as ongoing.
            assert tp.flush(30) == 0
            tp.abort_transaction(30)

    transaction([f"tx1-{i}" for i in range(8)])
    transaction([f"aborted-{i}" for i in range(6)], commit=False)  # skipped by read_committed
    time.sleep(1.5)  # the markers are written after commit_transaction returns: before to_ms
    to_ms = int(time.time() * 1000)
    time.sleep(0.5)
    transaction([f"tx2-{i}" for i in range(4)])
    box: list = []
    th = threading.Thread(target=lambda: box.append(run_replay(
        settings, from_ms, to_ms, _procs(), results_topic=f"{k.results_topic}.replay",
        group=f"{k.group_id}-replay")), daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive(), "the replay was still waiting for its window's end after 60 s"
    (report,) = box
    assert (report["events"], report["replayed"]) == (8, 8), json.dumps(report)[:300]
    side = settings.model_copy(update={"kafka": k.model_copy(
        update={"results_topic": f"{k.results_topic}.replay"})})
    assert sorted(r.upload_id for r in results(side, 8, timeout_s=10)) == sorted(
        f"tx1-{i}" for i in range(8))
