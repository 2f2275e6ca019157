"""Issue 43: hostile bytes and operator slips, each against the real stack.

One test per item of the issue that is not a poison kind of ``benchmarks/faults/poison.py``
(those run in ``test_poison.py``'s :func:`test_one_poison_record_does_not_stop_its_partition`).
Each docstring gives the figure before the fix.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.common import free_port, stop_status_app
from streams import procs
from streams.settings import Settings

from .helpers import results
from .test_poison import _uploaded

pytestmark = pytest.mark.integration

SLEEP_WORKER = ("--processor", "card=sleep,id_photo=sleep", "--sleep-ms", "5", "--max-wait-ms",
                "200")


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def _get(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.status


def test_idle_connections_to_the_workers_port_take_no_threads(settings: Settings,
                                                               tmp_path: Path) -> None:
    """Item 10. A real ``cardstream worker`` with its HTTP port; 1,000 connections opened and
    left silent. Before: 1,014 threads (one per connection, no timeout). Now the worker's
    thread count does not move, ``/live`` answers while they are open, and five uploads sent
    meanwhile are answered."""
    port = free_port()
    w = procs.start_worker(settings, 0, tmp_path / "worker.log", SLEEP_WORKER, http_port=port)
    idle: list[socket.socket] = []
    try:
        end = time.monotonic() + 60
        while True:
            try:
                if _get(port, "/ready") == 200:
                    break
            except OSError:
                pass
            assert w.proc.poll() is None and time.monotonic() < end, (
                (tmp_path / "worker.log").read_text()[-2000:])
            time.sleep(0.3)
        before = _threads(w.proc.pid)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
        time.sleep(1.0)
        during = _threads(w.proc.pid)
        assert _get(port, "/live") == 200
        good = _uploaded(settings, 5)
        rs = results(settings, 5, timeout_s=45)
        assert sorted(r.upload_id for r in rs) == sorted(good)
        assert during - before <= 2, f"{during - before} threads more with 1,000 idle connections"
    finally:
        for s in idle:
            s.close()
        procs.stop_workers([w])


def test_the_status_apps_views_want_the_token_but_healthz(settings: Settings, tmp_path: Path,
                                                           run_id: str) -> None:
    """Item 9. ``cardstream status`` with an API token: before, faust's ``/`` and ``/router/*``
    answered without it and listed instances, topics and partitions. Now every path but
    ``/healthz`` answers 401 ``UNAUTHORIZED`` without the token, and the same paths answer
    with it."""
    import json
    import subprocess
    import sys
    import urllib.error

    port, token, app_id = free_port(), f"tok-{run_id}", f"st-{run_id}"
    env = {**procs.settings_env(settings), "CARDSTREAM_STATUS__APP_ID": app_id,
           "CARDSTREAM_STATUS__DATA_DIR": str(tmp_path / "status"),
           "CARDSTREAM_STATUS__API_TOKEN": token, "CARDSTREAM_STATUS__WEB_PORT": str(port)}
    log = tmp_path / "status.log"
    p = subprocess.Popen([str(Path(sys.executable).with_name("cardstream")), "status"], env=env,
                         stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)

    def get(path: str, auth: bool) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=(
            {"Authorization": f"Bearer {token}"} if auth else {}))
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    try:
        end = time.monotonic() + 90
        while True:
            try:
                if get("/healthz", False)[0] == 200:
                    break
            except OSError:
                pass
            assert p.poll() is None and time.monotonic() < end, log.read_text()[-2000:]
            time.sleep(0.5)
        paths = ["/", "/router/", "/router/some-key/", "/uploads/u1", "/stats?task=card",
                 "/stats/local?task=card", "/nothing-here"]
        without = {path: get(path, False) for path in paths}
        assert {path: code for path, (code, _) in without.items()} == dict.fromkeys(paths, 401)
        assert all(json.loads(body)["error"] == "UNAUTHORIZED" for _, body in without.values())
        with_token = {path: get(path, True)[0] for path in paths}
        assert with_token["/"] == 200 and with_token["/router/"] == 200
        assert with_token["/uploads/u1"] == 404 and with_token["/nothing-here"] == 404
        assert get("/healthz", False)[0] == 200
    finally:
        stop_status_app(p, settings.kafka, app_id)


# --- the record: every part read defensively, once (item 1) ---------------------------------

#: hostile record shapes: (raw header names and values, the dead-letter code or None for a result)
HOSTILE_RECORDS = {
    "header_name_not_utf8": ([(b"\xff\xfe-trace", b"1")], "UNREADABLE_RECORD"),
    "header_name_lone_surrogate_bytes": ([(b"content-type", b"application/json"),
                                          (b"\xed\xa0\x80x", b"v")], "UNREADABLE_RECORD"),
    "header_value_not_utf8": ([(b"x-note", b"\xff\xfe\x00")], None),
    "many_headers": ([(f"h{i}".encode(), b"v" * 64) for i in range(500)], None),
}


@pytest.mark.parametrize("shape", list(HOSTILE_RECORDS))
def test_a_hostile_record_is_read_once_and_never_stops_its_partition(
        settings: Settings, tmp_path: Path, shape: str) -> None:
    """Item 1. A valid upload whose record carries hostile headers, produced through librdkafka
    as a non-Python producer does, then five good uploads, all on partition 0, read by a real
    ``cardstream worker`` (restarted when it exits). Before: ``Message.headers()`` raised
    ``SystemError`` in ``Compute.parse`` for a header name that is not UTF-8, the worker died,
    and its ``POISON`` dead letter called ``headers()`` again: the partition crash-looped (5 of
    10 good uploads answered in 240 s). Now the record is one UNREADABLE_RECORD dead letter
    or one result, the good uploads are accepted, and the worker never restarts."""
    from benchmarks.faults import poison
    from schemas import codec
    from streams.produce import UploadProducer

    from .helpers import dead_letters
    from .test_poison import GOOD, _dl_id, _good, _supervised_run

    headers, code = HOSTILE_RECORDS[shape]
    prod = UploadProducer(settings)
    uid = f"hostile-{shape.replace('_', '-')}"
    key, value, _ = codec.encode_upload(prod.event_for(uid, "card", poison.png(96, 128), "h.png",
                                                       None))
    poison.send_with_raw_headers(settings, key, value, headers, partition=0)
    good = _good(prod)
    assert prod.flush() == []
    got, sup = _supervised_run(settings, tmp_path, 1 + GOOD, 60, max_wait_ms=200)
    ok = sum(1 for u in good if u in got and got[u].status == "accepted")
    assert (ok, sup.restarts) == (GOOD, 0), (
        f"{ok} of {GOOD} good uploads answered in 60 s behind a {shape} record; "
        f"{sup.restarts} restarts")
    ds = dead_letters(settings, 1 if code else 0, timeout_s=5)
    if code:
        assert [(_dl_id(d), str(d.error_code)) for d in ds] == [(uid, code)]
        assert got[uid].status == "dead_letter"
    else:
        assert ds == [] and got[uid].status == "accepted"


# --- output keys (item 5) ----------------------------------------------------------------------

def test_a_repeated_upload_id_never_overwrites_a_committed_results_bytes(
        settings: Settings) -> None:
    """Item 5. Three records under one upload id on partition 0: an image, the same image again
    (a redelivery), another image (a producer retry with other bytes). Before: the third
    upload's output overwrote the first's at the same key, so the first committed result's
    ``sha256`` no longer matched its object. Now every committed result's ref holds the bytes it
    describes: the redelivery shares the first's key (same bytes), the other image has its own."""
    import hashlib

    from benchmarks.faults import poison
    from schemas import codec
    from streams.produce import UploadProducer
    from streams.storage import Storage
    from streams.worker import Worker

    from .test_poison import _finish, _procs, _run

    prod = UploadProducer(settings, inline=True)  # a claim check would share its upload key too
    for seed in (1, 1, 2):
        ev = prod.event_for("same-id", "card", poison.png(96, 128, seed=seed), "s.png", None)
        poison.send(prod, *codec.encode_upload(ev)[:2], partition=0)
    assert prod.flush() == []
    w = Worker(settings, _procs(), Storage(settings.s3))
    t, errors = _run(w)
    rs = results(settings, 3, timeout_s=45)
    _finish(w, t, errors)
    st = Storage(settings.s3)
    by_offset = sorted(rs, key=lambda r: r.source.offset)
    assert [(r.upload_id, str(r.status)) for r in by_offset] == [("same-id", "accepted")] * 3, [
        (r.status, r.reasons) for r in by_offset]
    refs = [r.card.rectified for r in by_offset]
    assert [hashlib.sha256(st.get(x.bucket, x.key)).hexdigest() for x in refs] == [
        x.sha256 for x in refs]
    assert refs[0].key == refs[1].key != refs[2].key
    assert refs[0].sha256 == refs[1].sha256 != refs[2].sha256


# --- the store refusing while it answers (item 6) ---------------------------------------------

def test_a_store_that_refuses_puts_stops_the_worker_loudly_and_loses_nothing(
        settings: Settings, tmp_path: Path) -> None:
    """Item 6. The worker's results bucket does not exist: every PUT is answered
    ``NoSuchBucket``. Before: the batch, models included, was recomputed in a hot loop (541
    ``storage_unavailable`` lines in the window, ``/ready`` and ``/live`` 200, no exit). Now
    ``/ready`` fails, ``cardstream_store_refusals_total{code="NoSuchBucket"}`` counts, each retry
    waits longer, and after ``store_refusal_limit_s`` (8 s here) the process exits 1 with the
    error; nothing was committed, and a worker started once the bucket exists answers all five."""
    import json
    import subprocess
    import sys

    from streams.storage import Storage

    good = _uploaded(settings, 5)
    missing = f"{settings.s3.results_bucket}-gone"
    s3 = settings.s3.model_copy(update={"results_bucket": missing})
    s = settings.model_copy(update={"s3": s3})
    port = free_port()
    log = tmp_path / "worker.log"
    env = {**procs.settings_env(s), "CARDSTREAM_WORKER__STORE_REFUSAL_LIMIT_S": "8"}
    p = subprocess.Popen([str(Path(sys.executable).with_name("cardstream")), "worker", "--slot",
                          "0", "--http-port", str(port), *SLEEP_WORKER], env=env,
                         stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    seen_unready = refusals = 0.0
    try:
        end = time.monotonic() + 90
        while p.poll() is None and time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    for line in r.read().decode().splitlines():
                        if line.startswith('cardstream_store_refusals_total{code="NoSuchBucket"}'):
                            refusals = max(refusals, float(line.split()[-1]))
                seen_unready = seen_unready or float(_get(port, "/ready") != 200)
            except OSError:  # 503 (HTTPError) or not listening yet / any more
                seen_unready = seen_unready or float(refusals > 0)
            time.sleep(0.3)
        rc = p.wait(30) if p.poll() is None else p.returncode
    finally:
        if p.poll() is None:
            p.kill()
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    refused = [x for x in lines if x.get("event") == "store_refused"]
    assert rc == 1, f"exit {rc}: {log.read_text()[-1500:]}"
    assert refused and {x["code"] for x in refused} == {"NoSuchBucket"}
    assert 2 <= len(refused) <= 8, f"{len(refused)} refusals logged in 8 s (a hot loop?)"
    assert sum(1 for x in lines if x.get("event") == "storage_unavailable") == 0
    assert refusals >= 1 and seen_unready
    assert results(settings, 0, timeout_s=3) == []
    Storage(s.s3).ensure_buckets([missing])
    w = procs.start_worker(s, 0, tmp_path / "worker2.log", SLEEP_WORKER)
    try:
        rs = results(settings, 5, timeout_s=60)
    finally:
        procs.stop_workers([w])
        from benchmarks.common import remove_buckets
        remove_buckets(Storage(s.s3), [missing])
    assert sorted(r.upload_id for r in rs) == sorted(good)


# --- the read items ------------------------------------------------------------------------------

def test_the_lag_gauge_drops_partitions_the_worker_no_longer_holds(settings: Settings) -> None:
    """Read item "stale lag gauges for revoked partitions". Uploads wait on all 6 partitions
    behind a slow processor; a second member joins and takes some partitions. Before: the
    worker's ``cardstream_consumer_lag`` kept the last value of every partition it ever held
    (a dashboard summing the group's lag counted them twice). Now, at its next update, the
    gauge has exactly the partitions the worker holds."""
    from streams.kafka import consumer
    from streams.storage import Storage
    from streams.worker import Worker

    from .test_poison import _batches_started, _finish, _procs, _run, _wait_for

    for p in range(6):
        _uploaded(settings, 4, partition=p)
    s = settings.model_copy(update={"worker": settings.worker.model_copy(
        update={"max_batch": 2, "max_wait_ms": 50})})
    w = Worker(s, _procs(call_ms=1500.0, item_ms=0.0), Storage(s.s3))
    t, errors = _run(w)

    def lag_labels() -> set[str]:
        return {x.labels["partition"] for x in w.metrics.lag.collect()[0].samples}

    other = consumer(s.kafka, s.kafka.group_id)
    try:
        _wait_for(lambda: _batches_started(w) >= 1 and len(lag_labels()) == 6, 40,
                  "the lag gauge of all 6 partitions")
        taken: list[int] = []
        other.subscribe([s.kafka.uploads_topic],
                        on_assign=lambda c, ps: taken.extend(tp.partition for tp in ps))
        end = time.monotonic() + 30
        while not taken and time.monotonic() < end:
            other.poll(0.1)
        assert taken, "the second member got no partition"
        mine = {str(p) for p in range(6)} - {str(p) for p in taken}
        end = time.monotonic() + 20
        while lag_labels() != mine and time.monotonic() < end:
            other.poll(0.2)
        assert lag_labels() == mine, (
            f"lag gauge labels {sorted(lag_labels())} while the worker holds {sorted(mine)}")
    finally:
        other.close()
        _finish(w, t, errors)


def test_a_crash_in_the_overlapping_second_batch_is_isolated_at_the_first_restart(
        settings: Settings, tmp_path: Path) -> None:
    """Read item "the isolation range after a crash covers one batch, not the overlapping
    second". A real worker (max_batch 4) reads 8 records of partition 0: four good ones, then a
    good one, one that crashes the process (SIGSEGV), two good ones. The store holds each PUT
    3 s, so the second batch computes, and crashes, while the first's PUTs are still in flight:
    nothing is committed and 8 records were read past the committed offset. Before: the restart
    isolated only offsets 0-3, ran 4-7 as a batch again and crashed a second time in it (4
    restarts before the POISON dead letter); now it isolates both batches (0-7) and the record
    is found alone at once: 3 restarts (one in the batch, two alone), the 7 good ones accepted
    once each."""
    from benchmarks.faults import poison
    from benchmarks.faults.proxy import FaultProxy
    from benchmarks.faults.suite import DATA_LIMIT
    from streams.produce import UploadProducer

    from .helpers import dead_letters
    from .test_poison import _dl_id, _good, _Supervised

    prod = UploadProducer(settings)
    good = _good(prod, 4, tag="first") + _good(prod, 1, tag="second")
    poison.send(prod, *poison.record("crash", prod, "crash-2nd"), partition=0)
    good += _good(prod, 2, tag="third")
    assert prod.flush() == []
    from benchmarks.common import ResultWatcher

    with FaultProxy.for_store(settings.s3) as px, ResultWatcher(settings) as rw:
        px.mode = "slow_put"
        s = settings.model_copy(update={"s3": settings.s3.model_copy(
            update={"endpoint": px.endpoint})})
        sup = _Supervised(s, tmp_path / "worker.log",
                          [*SLEEP_WORKER[:4], "--max-batch", "4", "--max-wait-ms", "500"],
                          DATA_LIMIT)
        try:
            end = time.monotonic() + 150
            while time.monotonic() < end and len(rw.results) < 8:
                sup.poll()
                if sup.restarts:
                    px.mode = "pass"  # the first crash happened with the first batch unstored
                time.sleep(0.2)
        finally:
            sup.stop()
    rs = results(settings, 7, timeout_s=10)
    ds = dead_letters(settings, 1, timeout_s=10)
    assert sorted(r.upload_id for r in rs) == sorted(good)
    assert [(_dl_id(d), str(d.error_code), d.source.offset) for d in ds] == [
        ("crash-2nd", "POISON", 5)]
    assert sup.restarts == 3, f"{sup.restarts} restarts before the POISON dead letter"


# --- replay into the live topic (item 7) ------------------------------------------------------

def test_a_replay_into_the_live_results_topic_or_group_is_refused(settings: Settings) -> None:
    """Item 7. Three uploads answered by a worker, then a replay of their window with
    ``--results-topic`` set to the live results topic (and, separately, ``--group`` set to the
    live group). Before: not refused; the downstream readers got 3 extra results for 3 uploads.
    Now both are refused before anything is read or written (the CLI with exit 2 naming
    ``--allow-live``), and the live topic still holds 3 results."""
    import subprocess
    import sys

    from streams.replay import LiveTargetError, run_replay
    from streams.storage import Storage
    from streams.worker import Worker

    from .test_poison import _finish, _procs, _run

    from_ms = int(time.time() * 1000) - 1000
    good = _uploaded(settings, 3)
    w = Worker(settings, _procs(), Storage(settings.s3))
    t, errors = _run(w)
    assert len(results(settings, 3, timeout_s=45)) == 3
    _finish(w, t, errors)
    to_ms = int(time.time() * 1000) + 1000
    k = settings.kafka
    for kw in ({"results_topic": k.results_topic}, {"group": k.group_id},
               {"results_topic": k.dlq_topic.removesuffix(".dlq")} if k.dlq_topic.endswith(".dlq")
               else {"results_topic": k.dlq_topic}):
        with pytest.raises(LiveTargetError):
            run_replay(settings, from_ms, to_ms, _procs(), **kw)
    cli = subprocess.run([str(Path(sys.executable).with_name("cardstream")), "replay", "--from",
                          str(from_ms), "--to", str(to_ms), "--results-topic", k.results_topic],
                         env=procs.settings_env(settings), capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 2 and "--allow-live" in cli.stderr, (cli.returncode, cli.stderr[-500:])
    rs = results(settings, 3, timeout_s=10)
    assert sorted(r.upload_id for r in rs) == sorted(good)
