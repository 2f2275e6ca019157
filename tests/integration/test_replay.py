"""Replay/backfill against the real stack: same verdicts, empty windows, window bounds."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks.faults.proxy import FaultProxy
from streams.procs import settings_env
from streams.produce import UploadProducer
from streams.replay import offset_ranges, run_replay
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import Worker
from tests.doubles import stand_ins

from .helpers import dead_letters, results, write_images

pytestmark = pytest.mark.integration


def _procs() -> dict:
    return stand_ins(call_ms=5.0)


def test_replay_window_reproduces_verdicts(settings: Settings, tmp_path: Path) -> None:
    files = write_images(tmp_path / "imgs", 6)
    prod = UploadProducer(settings)
    early = prod.produce_files(files, "card", count=6)
    time.sleep(1.5)
    from_ms = int(time.time() * 1000)
    mid = prod.produce_files(files, "id_photo",
                             count=10) + prod.produce_files(files, "card", count=4)
    prod.send_raw(b"bad-1", b"not json")  # dead letters in the window: events, not results
    prod.send_raw(b"bad-2", b'{"upload_id": "bad-2"}')
    assert prod.flush() == []
    to_ms = int(time.time() * 1000) + 1
    time.sleep(1.5)
    late = prod.produce_files(files, "card", count=5)
    w = Worker(settings, _procs(), Storage(settings.s3))
    th = threading.Thread(target=w.run, daemon=True)  # until w.stop() below
    th.start()
    assert len(results(settings, 25, timeout_s=60)) == 25
    assert len(dead_letters(settings, 2, timeout_s=30)) == 2
    w.stop()
    th.join(30)

    ranges = offset_ranges(settings.kafka, settings.kafka.uploads_topic, from_ms, to_ms)
    assert sum(b - a for a, b in ranges.values()) == len(mid) + 2
    side = f"{settings.kafka.results_topic}.replay"
    report = run_replay(settings, from_ms, to_ms, _procs(), results_topic=side,
                        group=f"{settings.kafka.group_id}-replay")
    assert report["replayed"] == len(mid) == 14 and report["events"] == 16
    assert report["compared"] == 14
    assert report["verdicts_changed"] == 0 and report["reasons_changed"] == 0
    assert report["quad_iou_min"] == pytest.approx(1.0)
    replayed_ids = {r.upload_id for r in results(settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"results_topic": side})}), 14, timeout_s=10)}
    assert replayed_ids == {x.upload_id for x in mid}
    assert not replayed_ids & {x.upload_id for x in early + late}

    after = int(time.time() * 1000) + 60_000
    empty = run_replay(settings, after, after + 60_000, _procs(), results_topic=side + "2")
    assert empty["replayed"] == 0 and empty["events"] == 0


def test_read_to_end_starts_at_since_ms(settings: Settings) -> None:
    """The replay diff reads the original results from the window's start, not the whole topic:
    records stamped before ``since_ms`` are not read, on every partition."""
    from streams.kafka import plain_producer, read_to_end

    topic = settings.kafka.results_topic
    now = int(time.time() * 1000)
    p = plain_producer(settings.kafka)
    for i in range(9):  # 3 partitions: every partition gets old and new records
        p.produce(topic, value=f"old-{i}".encode(), partition=i % 3, timestamp=now - 3_600_000)
    for i in range(5):
        p.produce(topic, value=f"new-{i}".encode(), partition=i % 3, timestamp=now - 1_000)
    assert p.flush(30) == 0
    every = sorted(m.value().decode() for m in read_to_end(settings.kafka, topic))
    assert len(every) == 14
    since = sorted(m.value().decode() for m in read_to_end(settings.kafka, topic,
                                                          since_ms=now - 60_000))
    assert since == [f"new-{i}" for i in range(5)]
    assert list(read_to_end(settings.kafka, topic, since_ms=now + 60_000)) == []


def test_a_stopped_replay_reports_what_it_replayed(settings: Settings, tmp_path: Path) -> None:
    """Issue 42 left this open: a replay ended by SIGTERM wrote no report. ``stop`` (what the
    command's signal handler sets) finishes the batch in flight and reports the part done."""
    files = write_images(tmp_path / "imgs", 3)
    prod = UploadProducer(settings)
    from_ms = int(time.time() * 1000)
    sent = prod.produce_files(files, "card", count=12)
    assert prod.flush() == []
    to_ms = int(time.time() * 1000) + 1
    s = settings.model_copy(update={"worker": settings.worker.model_copy(update={"max_batch": 1}),
                                    "backfill": settings.backfill.model_copy(
                                        update={"yield_to_live": False})})
    stop = threading.Event()
    side = f"{settings.kafka.results_topic}.stopped"
    report = run_replay(s, from_ms, to_ms, stand_ins(call_ms=400.0), results_topic=side,
                        group=f"{settings.kafka.group_id}-stopped",
                        on_progress=lambda _n: stop.set(), stop=stop)
    assert report["events"] == len(sent) == 12 and report["stopped"] is True
    assert 1 <= report["replayed"] < 12  # the first batch done, the window not
    assert report["compared"] == 0  # no live worker ran: no originals to compare with
    again = run_replay(s, from_ms, to_ms, stand_ins(call_ms=5.0), results_topic=side,
                       group=f"{settings.kafka.group_id}-stopped")
    # went on from the group's last commit: 12 results on the side topic, none twice
    assert again["stopped"] is False and again["replayed"] == 12
    side_s = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"results_topic": side})})
    assert sorted(r.upload_id for r in results(side_s, 12, timeout_s=10)) == sorted(
        x.upload_id for x in sent)
    done = run_replay(s, from_ms, to_ms, stand_ins(call_ms=5.0), results_topic=side,
                      group=f"{settings.kafka.group_id}-stopped")
    assert (done["events"], done["replayed"], done["stopped"]) == (12, 12, False)  # nothing left


def test_a_group_that_replayed_another_window_is_refused(settings: Settings,
                                                        tmp_path: Path) -> None:
    """A trial replayed a window, then a wider one, then the first again with the same group:
    the third run started the window over and wrote 9 of its results a second time. A group's
    committed offsets outside the window now refuse the run before anything is read or
    written; a wider window that contains them goes on from them."""
    from streams.replay import ReplayGroupError

    files = write_images(tmp_path / "imgs", 2)
    prod = UploadProducer(settings)
    t0 = int(time.time() * 1000)
    first = prod.produce_files(files, "card", count=4)
    assert prod.flush() == []
    time.sleep(0.05)
    t1 = int(time.time() * 1000)
    later = prod.produce_files(files, "card", count=4)
    assert prod.flush() == []
    t2 = int(time.time() * 1000) + 1
    s = settings.model_copy(update={"backfill": settings.backfill.model_copy(
        update={"yield_to_live": False})})
    side, group = f"{settings.kafka.results_topic}.windows", f"{settings.kafka.group_id}-windows"
    side_s = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"results_topic": side})})
    narrow = run_replay(s, t0, t1, stand_ins(call_ms=5.0), results_topic=side, group=group)
    assert (narrow["events"], narrow["replayed"]) == (4, 4)
    wide = run_replay(s, t0, t2, stand_ins(call_ms=5.0), results_topic=side, group=group)
    assert (wide["events"], wide["replayed"], wide["stopped"]) == (8, 8, False)
    with pytest.raises(ReplayGroupError, match="replayed another window"):
        run_replay(s, t0, t1, stand_ins(call_ms=5.0), results_topic=side, group=group)
    got = sorted(r.upload_id for r in results(side_s, 8, timeout_s=10))
    assert got == sorted(x.upload_id for x in first + later)  # each once, none twice


def _cli(*args: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """``cardstream ARGS`` (the console script) with ``env``."""
    return subprocess.run([str(Path(sys.executable).with_name("cardstream")), *args], env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def _plain(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are not JSON log lines."""
    return [x for x in stderr.splitlines() if not x.startswith("{")]


def test_a_replay_with_the_store_down_is_one_line_and_leaves_nothing(settings: Settings,
                                                                     tmp_path: Path) -> None:
    """A fresh user's trial: ``cardstream replay`` with the object store down waited for ever
    (its worker pauses on a store outage) and left its side topics. The store is now asked
    before anything is written: one plain line naming the endpoint, exit 1, no side topic and
    no consumer group."""
    from streams.kafka import admin

    files = write_images(tmp_path / "imgs", 2)
    prod = UploadProducer(settings)
    from_ms = int(time.time() * 1000)
    prod.produce_files(files, "card", count=3)
    to_ms = int(time.time() * 1000) + 1
    k = settings.kafka
    side, group = f"{k.results_topic}.nostore", f"{k.group_id}-nostore"
    env = {**settings_env(settings), "CARDSTREAM_S3__ENDPOINT": "127.0.0.1:1",
           "CARDSTREAM_BACKFILL__YIELD_TO_LIVE": "false"}
    t0 = time.monotonic()
    r = _cli("replay", "--from", str(from_ms), "--to", str(to_ms), "--results-topic", side,
             "--group", group, "--report", str(tmp_path / "report.json"), env=env,
             timeout_s=150)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    lines = _plain(r.stderr)
    assert len(lines) == 1 and lines[0].startswith(
        f"cardstream: StorageError: HEAD {settings.s3.uploads_bucket}, "
        f"{settings.s3.results_bucket} at 127.0.0.1:1 failed after 4 attempts: "), r.stderr
    assert time.monotonic() - t0 < 120
    a = admin(k)
    assert not {side, f"{side}.dlq"} & set(a.list_topics(timeout=10).topics)
    assert group not in {g.group_id for g in a.list_consumer_groups().result().valid}
    assert not (tmp_path / "report.json").exists()


def _procs_flipping(px: FaultProxy, mode: str, call_ms: float) -> dict:
    """The stand-in processors, the first of which sets ``px`` to ``mode`` once warmed up: the
    store fails from the replay's first batch on, after its check before the start passed."""
    procs = stand_ins(call_ms=call_ms)
    first = next(iter(procs.values()))
    warm_up = first.warm_up

    def then_down() -> None:
        warm_up()
        px.mode = mode

    first.warm_up = then_down
    return procs


def test_a_replay_whose_store_is_down_from_its_first_batch_gives_up_and_deletes_its_topics(
        settings: Settings, tmp_path: Path) -> None:
    """The store answers the check before the start, then fails every call (a proxy's 503):
    the replay gives up after ``CARDSTREAM_BACKFILL__STORE_OUTAGE_LIMIT_S`` (2 s here) instead
    of waiting for ever, and since nothing was replayed it deletes the side topics it made;
    its group committed nothing. Before, it waited until ``stop`` (set after 90 s here)."""
    from streams.errors import StorageUnavailable
    from streams.kafka import admin

    files = write_images(tmp_path / "imgs", 2)
    prod = UploadProducer(settings)
    from_ms = int(time.time() * 1000)
    prod.produce_files(files, "card", count=4)
    to_ms = int(time.time() * 1000) + 1
    k = settings.kafka
    side, group = f"{k.results_topic}.storedown", f"{k.group_id}-storedown"
    stop = threading.Event()
    timer = threading.Timer(90, stop.set)
    timer.start()
    try:
        with FaultProxy.for_store(settings.s3) as px:
            s = settings.model_copy(update={
                "s3": settings.s3.model_copy(update={"endpoint": px.endpoint}),
                "backfill": settings.backfill.model_copy(
                    update={"yield_to_live": False, "store_outage_limit_s": 2.0})})
            t0 = time.monotonic()
            with pytest.raises(StorageUnavailable) as ei:
                run_replay(s, from_ms, to_ms, _procs_flipping(px, "503", 5.0),
                           results_topic=side, group=group, stop=stop)
            assert time.monotonic() - t0 < 60
    finally:
        timer.cancel()
    said = str(ei.value)
    assert said.startswith("the object store did not answer for "), said
    assert said.endswith(f"; 0 of 4 events replayed on {side}; the side topics it made "
                         f"({side}, {side}.dlq) deleted"), said
    a = admin(k)
    assert not {side, f"{side}.dlq"} & set(a.list_topics(timeout=10).topics)
    assert group not in {g.group_id for g in a.list_consumer_groups().result().valid}


def test_a_replay_whose_store_goes_down_midway_gives_up_and_says_how_to_go_on(
        settings: Settings, tmp_path: Path) -> None:
    """The store fails (a proxy's 503) once the first batches are committed: the replay gives
    up after the outage limit (2 s here), its message says how many events were replayed and
    how to go on, and its group and side topic are kept; once the store answers, the same
    replay goes on from the last committed batch to the window's end, none twice. Before, it
    waited until ``stop`` (set after 90 s here)."""
    from streams.errors import StorageUnavailable

    files = write_images(tmp_path / "imgs", 3)
    prod = UploadProducer(settings)
    from_ms = int(time.time() * 1000)
    sent = prod.produce_files(files, "card", count=12)
    to_ms = int(time.time() * 1000) + 1
    k = settings.kafka
    side, group = f"{k.results_topic}.midway", f"{k.group_id}-midway"
    stop = threading.Event()
    timer = threading.Timer(90, stop.set)
    timer.start()
    try:
        with FaultProxy.for_store(settings.s3) as px:
            s = settings.model_copy(update={
                "s3": settings.s3.model_copy(update={"endpoint": px.endpoint}),
                "worker": settings.worker.model_copy(update={"max_batch": 1}),
                "backfill": settings.backfill.model_copy(
                    update={"yield_to_live": False, "store_outage_limit_s": 2.0})})

            def down(_n: int) -> None:
                px.mode = "503"

            with pytest.raises(StorageUnavailable) as ei:
                run_replay(s, from_ms, to_ms, stand_ins(call_ms=400.0), results_topic=side,
                           group=group, on_progress=down, stop=stop)
            said = str(ei.value)
            got = re.search(r"; (\d+) of 12 events replayed on (\S+); to go on: the same "
                            r"command with --group (\S+) --results-topic (\S+)$", said)
            assert got is not None, said
            assert 1 <= int(got[1]) < 12 and got.groups()[1:] == (side, group, side)
            px.mode = "pass"
            again = run_replay(s, from_ms, to_ms, stand_ins(call_ms=5.0), results_topic=side,
                               group=group, stop=stop)
    finally:
        timer.cancel()
    assert (again["events"], again["replayed"], again["stopped"]) == (12, 12, False)
    side_s = settings.model_copy(update={"kafka": k.model_copy(update={"results_topic": side})})
    assert sorted(r.upload_id for r in results(side_s, 12, timeout_s=10)) == sorted(
        x.upload_id for x in sent)
