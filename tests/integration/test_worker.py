"""The worker against the real stack: batches, exactly-once results, DLQ, MinIO outage, kills."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from schemas.reasons import Status
from streams.produce import UploadProducer
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import Worker
from streams.worker.committer import Committer
from tests.doubles import stand_ins

from .helpers import dead_letters, results, start_worker, stop_worker, write_images

pytestmark = pytest.mark.integration


def _worker(s: Settings, bucket: int = 8, call_ms: float = 5.0) -> Worker:
    return Worker(s, stand_ins(call_ms=call_ms, item_ms=0.5, bucket=bucket), Storage(s.s3))


def _run_until(w: Worker, idle_exit_s: float | None = None) -> threading.Thread:
    """Run ``w`` on a thread until the test calls ``w.stop()`` (after reading the results it
    waits for), or after ``idle_exit_s`` without events when given. No idle exit by default: with
    the two cores shared with a training run, a worker that left after 4 s without events had
    committed 96 of 100 results, the other 4 events still uncommitted on the topic (seen in
    ``.ci/run``), and the test failed on the worker's early exit, not on a lost event."""
    t = threading.Thread(target=w.run, kwargs={"idle_exit_s": idle_exit_s}, daemon=True)
    t.start()
    return t


def _check_objects(s: Settings, rs) -> None:
    st = Storage(s.s3)
    for r in rs:
        payload = r.card if r.card is not None else r.id_photo
        ref = payload.rectified if r.card is not None else payload.photo
        assert ref is not None, r.upload_id
        prefix, tag, name = ref.key.rsplit("/", 2)
        assert (prefix, name) == (f"{r.task}/{r.model.version}/{r.upload_id}",
                                  f"{'rectified' if r.card else 'photo'}.png")
        assert len(tag) == 16 and int(tag, 16) >= 0  # input_tag: 16 hex digits
        assert hashlib.sha256(st.get(ref.bucket, ref.key)).hexdigest() == ref.sha256


def test_batches_one_call_per_bucket_and_exactly_once(settings: Settings, tmp_path: Path) -> None:
    # distinct images (a repeat would be answered from the result cache, no model call)
    files = write_images(tmp_path / "imgs", 60)
    prod = UploadProducer(settings)
    sent = prod.produce_files(files, "card", count=60, concurrency=8)
    sent += prod.produce_files(files, "id_photo", count=40, concurrency=8)
    worker = settings.worker.model_copy(update={"max_batch": 32, "max_wait_ms": 200})
    s = settings.model_copy(update={"worker": worker})
    w = _worker(s, bucket=8)
    t = _run_until(w)
    rs = results(s, 100, timeout_s=90)
    w.stop()
    t.join(30)
    assert sorted(r.upload_id for r in rs) == sorted(x.upload_id for x in sent)
    assert {r.status for r in rs} == {Status.ACCEPTED}
    # the worker hands each task's share of a poll batch to its processor in chunks of the
    # bucket: one call per chunk, so calls = sum over results of 1 / (size of its call)
    calls = {t: p.stats.calls for t, p in w.compute.processors.items()}
    chunks: Counter = Counter()
    for r in rs:
        assert 1 <= r.timings.batch_size <= 8
        chunks[str(r.task)] += 1 / r.timings.batch_size
    assert calls == {t: round(n) for t, n in chunks.items()}
    assert max(r.timings.batch_size for r in rs) == 8
    assert w.metrics.inference_calls.labels("card")._value.get() == calls["card"]
    # poll batches were larger than one event on average
    hist = w.metrics.batch_size.collect()[0].samples
    count = next(x.value for x in hist if x.name.endswith("_count"))
    total = next(x.value for x in hist if x.name.endswith("_sum"))
    assert total == 100 and total / count > 1
    _check_objects(s, rs)


def test_bad_events_go_to_dlq_and_worker_continues(settings: Settings, tmp_path: Path) -> None:
    import json

    prod = UploadProducer(settings)
    bad = [
        (b"x", b"\x00\x01garbage{"),                                      # NOT_JSON
        (b"u1", json.dumps({"upload_id": "u1", "task": "selfie_video",
                            "image": {"ref": {"bucket": settings.s3.uploads_bucket,
                                              "key": "a"}}}).encode()),
        (b"../../etc/passwd", json.dumps({"upload_id": "../../etc/passwd", "task": "card",
                                          "image": {"ref": {"bucket": settings.s3.uploads_bucket,
                                                            "key": "a"}}}).encode()),
        (b"u9", json.dumps({"upload_id": "u9", "task": "card",
                            "image": {"ref": {"bucket": "someone-elses", "key": "a"}}}).encode()),
    ]
    for k, v in bad:
        prod.send_raw(k, v)
    missing = json.dumps({"upload_id": "u3", "task": "card",
                          "image": {"ref": {"bucket": settings.s3.uploads_bucket,
                                            "key": "does/not/exist.jpg"}}})
    prod.send_raw(b"u3", missing.encode())
    prod.send(prod.event_for("txt1", "card", b"hello, this is not an image", "a.txt", None))
    jpg = write_images(tmp_path / "one", 1)[0].read_bytes()
    forged = prod.event_for("forged", "card", jpg, "f.jpg", None)
    ref = forged.image.ref.model_copy(update={"sha256": "0" * 64})
    prod.send(forged.model_copy(update={"image": forged.image.model_copy(update={"ref": ref})}))
    files = write_images(tmp_path / "imgs", 3)
    good = prod.produce_files(files, "card")
    assert prod.flush() == []
    w = _worker(settings)
    t = _run_until(w)
    rs = results(settings, 6, timeout_s=60)
    ds = dead_letters(settings, 4, timeout_s=30)
    w.stop()
    t.join(30)
    by_id = {r.upload_id: r for r in rs}
    assert (by_id["u3"].status == Status.REJECTED
            and [str(x) for x in by_id["u3"].reasons] == ["OBJECT_NOT_FOUND"])
    assert [str(x) for x in by_id["txt1"].reasons] == ["UNSUPPORTED_FORMAT"]
    assert [str(x) for x in by_id["forged"].reasons] == ["CHECKSUM_MISMATCH"]
    assert all(by_id[g.upload_id].status == Status.ACCEPTED for g in good)
    # no model ran on an upload whose object could not be loaded (the contract's null model)
    assert [by_id[u].model for u in ("u3", "txt1", "forged")] == [None, None, None]
    assert all(by_id[g.upload_id].model is not None for g in good)
    assert sorted(str(d.error_code) for d in ds) == sorted(["NOT_JSON", "SCHEMA_INVALID",
                                                            "SCHEMA_INVALID", "BUCKET_NOT_ALLOWED"])
    # the dead letter names the upload when its id is itself valid
    assert sorted(d.upload_id or "-" for d in ds) == ["-", "-", "u1", "u9"]
    st = Storage(settings.s3)
    keys = [o.object_name for o in st.client.list_objects(settings.s3.results_bucket,
                                                          recursive=True)]
    assert all(".." not in k and not k.startswith("/") for k in keys)
    # operators read the same dead letters with `cardstream results --dead-letters`
    from typer.testing import CliRunner

    from streams.cli import app
    from streams.procs import settings_env

    out = CliRunner().invoke(app, ["results", "--dead-letters"], env=settings_env(settings))
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert len(lines) == 4
    assert sorted(ln.split()[2] for ln in lines) == sorted(str(d.error_code) for d in ds)
    # without a readable upload_id the line shows the record key, marked as such
    assert sorted(ln.split()[1] for ln in lines) == ["key=../../etc/passwd", "key=x", "u1", "u9"]


def _wait_for(cond, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_partitions_revoked_while_paused_are_fetched_when_they_come_back(
        settings: Settings, tmp_path: Path) -> None:
    """The worker pauses its partitions while the store is down; another member of the group
    takes some of them meanwhile (fetches, commits nothing) and leaves after the store is back,
    so they come back to the worker after it resumed. librdkafka keeps them paused across the
    revocation: every upload must still get its result, exactly once."""
    from streams.kafka import consumer

    files = write_images(tmp_path / "imgs", 10)
    sent = UploadProducer(settings, inline=False).produce_files(files, "card", count=30)
    down = settings.s3.model_copy(update={"endpoint": "127.0.0.1:1"})
    w = Worker(settings, stand_ins(call_ms=5.0), Storage(down, retries=2, backoff_s=0.05,
                                                          timeout_s=1.0))
    t = _run_until(w)
    _wait_for(lambda: w.intake.paused, 60, "the worker to pause on the store outage")
    other = consumer(settings.kafka, settings.kafka.group_id)
    got: list[int] = []
    other.subscribe([settings.kafka.uploads_topic], on_assign=lambda c, ps: got.extend(
        tp.partition for tp in ps))
    try:
        end = time.monotonic() + 60
        while not got and time.monotonic() < end:
            other.poll(0.1)
        assert got, "the second member got no partition"
        end = time.monotonic() + 2
        while time.monotonic() < end:
            other.poll(0.1)
        assert len(w.intake.consumer.assignment()) == 6 - len(got)
        # the store is back; the worker resumes what it holds
        w.compute.storage = Storage(settings.s3)
        _wait_for(lambda: not w.intake.paused, 60, "the worker to resume")
    finally:
        other.close()  # its partitions go back to the worker
    rs = results(settings, 30, timeout_s=90)
    w.stop()
    t.join(30)
    missing = sorted({x.upload_id for x in sent} - {r.upload_id for r in rs})
    assert sorted(r.upload_id for r in rs) == sorted(x.upload_id for x in sent), (
        f"missing {missing}; dead letters "
        f"{[(d.upload_id, str(d.error_code)) for d in dead_letters(settings, 1, timeout_s=5)]}")


@pytest.mark.parametrize("inline", [False, True], ids=["get_fails", "put_fails"])
def test_minio_outage_commits_nothing_until_back(settings: Settings, tmp_path: Path,
                                                 inline: bool) -> None:
    """Store unreachable (wrong endpoint for the worker) -> nothing committed; then all. Claim
    checks fail at the GET; inline images fail at the PUT of the outputs, with the next batch
    already computing behind it (both are rewound)."""
    files = write_images(tmp_path / "imgs", 10)
    sent = UploadProducer(settings, inline=inline).produce_files(files, "card", count=30)
    down = settings.s3.model_copy(update={"endpoint": "127.0.0.1:1"})
    w = Worker(settings, stand_ins(call_ms=5.0), Storage(down, retries=2, backoff_s=0.05,
                                                          timeout_s=1.0))
    t = _run_until(w, idle_exit_s=60)
    time.sleep(8)
    from .helpers import read_committed

    assert read_committed(settings, settings.kafka.results_topic, 1, timeout_s=3, settle_s=0) == []
    w.compute.storage = Storage(settings.s3)  # the store is back
    rs = results(settings, 30, timeout_s=60)
    w.stop()
    t.join(30)
    assert sorted(r.upload_id for r in rs) == sorted(x.upload_id for x in sent)
    _check_objects(settings, rs)


class _AbortOneCommit(Committer):
    """The first commit made while the next batch already computes fails as an abortable error,
    so the worker really aborts that open transaction (its results and offsets are already
    sent) with a batch in flight behind it."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker.settings.kafka, worker.transactional_id, worker.metrics,
                         worker.ledger)
        self.worker, self.injected = worker, False

    def commit_transaction(self) -> None:
        from confluent_kafka import KafkaError, KafkaException

        if not self.injected and self.worker.computing:
            self.injected = True
            raise KafkaException(KafkaError(KafkaError._STATE, "injected", txn_requires_abort=True))
        super().commit_transaction()


def test_aborted_transaction_redoes_the_batch_computing_behind_it(settings: Settings,
                                                                   tmp_path: Path) -> None:
    """Batch k+1 computes while batch k commits; k's transaction aborts -> k+1 is thrown away
    too, both are redone: exactly one committed result per upload, none lost."""
    files = write_images(tmp_path / "imgs", 10)
    sent = UploadProducer(settings).produce_files(files, "card", count=40)
    s = settings.model_copy(update={"worker": settings.worker.model_copy(update={"max_batch": 4})})
    w = Worker(s, stand_ins(call_ms=30.0, item_ms=0.5, bucket=4), Storage(s.s3))
    w.committer = abort = _AbortOneCommit(w)
    t = _run_until(w)
    rs = results(s, 40, timeout_s=90)
    w.stop()
    t.join(30)
    assert abort.injected
    assert w.metrics.transactions.labels("aborted")._value.get() == 1
    ids = Counter(r.upload_id for r in rs)
    assert set(ids) == {x.upload_id for x in sent} and max(ids.values()) == 1
    _check_objects(s, rs)


@pytest.mark.parametrize("workers", [1, 2])
def test_600_uploads_two_tasks_with_kills(settings: Settings, tmp_path: Path, workers: int) -> None:
    """600 uploads, N worker processes; with 2 workers one is SIGKILLed mid-run twice and
    restarted."""
    files = write_images(tmp_path / "imgs", 30)
    prod = UploadProducer(settings)
    sent = prod.produce_files(files, "card", count=300, concurrency=16)
    sent += prod.produce_files(files, "id_photo", count=300, concurrency=16)
    args = ["--processor", "card=sleep,id_photo=sleep", "--sleep-ms", "150", "--max-batch", "16"]
    procs = {i: start_worker(settings, i, tmp_path / f"w{i}.log", *args) for i in range(workers)}
    try:
        if workers == 2:
            for _ in range(2):
                time.sleep(6)
                stop_worker(procs[1], signal.SIGKILL)
                procs[1] = start_worker(settings, 1, tmp_path / "w1.log", *args)
        rs = results(settings, 600, timeout_s=240, settle_s=5)
    finally:
        codes = [stop_worker(p) for p in procs.values()]
    ids = Counter(r.upload_id for r in rs)
    assert len(rs) == 600, (tmp_path / "w0.log").read_text()[-3000:]
    assert set(ids) == {x.upload_id for x in sent}
    assert max(ids.values()) == 1
    assert codes == [0] * workers  # SIGTERM: clean exit
    _check_objects(settings, rs[::20])


class _SlowFirstProduce:
    """A real transactional Producer whose first ``produce`` returns only after 1.5 s, so the
    broker's fence (the AddPartitions answer) has arrived before the second ``produce``: that one
    fails with a bare ``_FATAL``, whose cause comes out of the next ``poll``."""

    def __init__(self, producer) -> None:
        self.producer, self.slept = producer, False

    def produce(self, *a, **kw) -> None:
        self.producer.produce(*a, **kw)
        if not self.slept:
            self.slept = True
            time.sleep(1.5)

    def __getattr__(self, name: str):
        return getattr(self.producer, name)


class _FencedOnce(Committer):
    """Before its first transaction a second producer with the same transactional.id starts (a
    second instance of this slot), so that transaction fails as the real broker fences it: in
    ``begin``/``commit`` (``at="commit"``) or in the middle of the produce loop (``at="produce"``,
    see :class:`_SlowFirstProduce`)."""

    def __init__(self, worker: Worker, at: str = "commit") -> None:
        super().__init__(worker.settings.kafka, worker.transactional_id, worker.metrics,
                         worker.ledger)
        self.usurper, self.at = None, at

    def commit(self, cp, consumer) -> bool:
        from streams.kafka import transactional_producer

        if self.usurper is None:
            self.usurper = transactional_producer(self.kafka, self.transactional_id)
            if self.at == "produce":
                self.producer = _SlowFirstProduce(self.producer)
        return super().commit(cp, consumer)


@pytest.mark.parametrize("at", ["commit", "produce"])
def test_fenced_worker_takes_its_id_back_and_redoes_the_batch(settings: Settings, tmp_path: Path,
                                                              at: str) -> None:
    """Another instance of the slot fences the worker mid-stream (the broker answers _FENCED):
    the worker must not die (a fenced producer's flush raised out of the loop), counts the
    fence (also when librdkafka only says _FATAL in ``produce``), rebuilds its producer and
    redoes the batch: every upload exactly once."""
    files = write_images(tmp_path / "imgs", 6)
    sent = UploadProducer(settings).produce_files(files, "card", count=24)
    w = Worker(settings, stand_ins(call_ms=5.0, bucket=8), Storage(settings.s3))
    w.committer = _FencedOnce(w, at=at)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            w.run()  # until w.stop() below (no idle exit: see _run_until)
        except BaseException as e:  # noqa: BLE001 (the test reports whatever escaped the loop)
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    rs = results(settings, 24, timeout_s=90)
    w.stop()
    t.join(60)
    assert not errors, errors
    assert w.metrics.transactions.labels("fenced")._value.get() == 1
    assert w.metrics.transactions.labels("aborted")._value.get() == 0
    ids = Counter(r.upload_id for r in rs)
    assert set(ids) == {x.upload_id for x in sent} and max(ids.values()) == 1
