"""The status app (faust-streaming) against the real stack: verdicts, window stats, restart
recovery from the changelog, read_committed, and routing between two instances."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from jsonschema import Draft202012Validator, FormatChecker

from schemas import codec
from schemas.models import UploadEvent, VerificationResult
from streams.kafka import admin, consumer, delete_topics, transactional_producer
from streams.produce import UploadProducer
from streams.settings import Settings
from streams.status_app import StatusSettings, changelog_topics

from .helpers import ROOT, read_committed, settings_env, start_worker, stop_worker, write_images

pytestmark = pytest.mark.integration

N_CARD, N_PHOTO, N_MISSING = 110, 80, 10  # 200 uploads
WINDOW_S = 60


def _schema(name: str) -> Draft202012Validator:
    s = json.loads((ROOT / "schemas" / f"status_{name}.v1.schema.json").read_text())
    return Draft202012Validator(s, format_checker=FormatChecker())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_status(s: Settings, app_id: str, port: int, data_dir: Path,
                  log: Path) -> subprocess.Popen:
    env = settings_env(s)
    env.update({"CARDSTREAM_STATUS__APP_ID": app_id, "CARDSTREAM_STATUS__DATA_DIR": str(data_dir),
                "CARDSTREAM_STATUS__SESSION_TIMEOUT_S": "6"})
    cmd = [str(ROOT / ".venv" / "bin" / "cardstream"), "status", "--web-port", str(port)]
    return subprocess.Popen(cmd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            cwd=ROOT, start_new_session=True)


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, json.loads(body) if body else None


def _health(port: int) -> dict | None:
    try:
        return _get(port, "/healthz")[1]
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def _wait_healthy(port: int, p: subprocess.Popen, log: Path, timeout_s: float = 60.0,
                  partitions: int | None = None) -> dict:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        assert p.poll() is None, f"status app exited: {log.read_text()[-3000:]}"
        try:
            code, body = _get(port, "/healthz")
            last = body
            if code == 200 and (partitions is None or len(body["partitions"]) == partitions):
                _schema("health").validate(body)
                return body
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"status app not healthy after {timeout_s} s: "
                         f"{last}\n{log.read_text()[-3000:]}")


def _verdicts(port: int, msgs: list) -> dict[str, tuple[int, Any]]:
    out = {}
    for m in msgs:
        uid = m.key().decode()
        out[uid] = _get(port, f"/uploads/{uid}")
    return out


def _wait_all_verdicts(port: int, msgs: list,
                       timeout_s: float = 60.0) -> dict[str, tuple[int, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = _verdicts(port, msgs)
        if all(code == 200 for code, _ in got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(1.0)


def _check_verdicts(got: dict[str, tuple[int, Any]],
                    latest: dict[str, tuple[Any, VerificationResult]]) -> None:
    v = _schema("upload")
    for uid, (m, r) in latest.items():
        code, body = got[uid]
        assert code == 200, (uid, code, body)
        v.validate(body)
        assert body["upload_id"] == uid
        assert body["status"] == r.status and body["reasons"] == list(r.reasons)
        assert body["task"] == r.task and body["total_ms"] == r.timings.total_ms
        assert body["result"] == {"partition": m.partition(), "offset": m.offset(),
                                  "timestamp_ms": m.timestamp()[1]}


def _committed(s: Settings, app_id: str) -> list[int]:
    """The status app group's committed offsets on the results partitions (-1001: none)."""
    c = consumer(s.kafka, app_id)
    try:
        tps = c.committed([TopicPartition(s.kafka.results_topic, p) for p in range(3)], timeout=10)
    finally:
        c.close()
    return [tp.offset for tp in tps]


def _wait_committed_past(s: Settings, app_id: str, msgs: list, timeout_s: float = 30.0) -> None:
    """Wait until the group has committed past the last result record of every partition (a
    transactional topic ends with a commit marker, so this is last offset + 1, not the end)."""
    want = [max((m.offset() + 1 for m in msgs if m.partition() == p),
                default=-1001) for p in range(3)]
    deadline = time.monotonic() + timeout_s
    while (got := _committed(s, app_id)) != want:
        assert time.monotonic() < deadline, (got, want)
        time.sleep(0.5)


def _reset_offsets(s: Settings, app_id: str, timeout_s: float = 30.0) -> None:
    """Set the (empty) group's results offsets to 0, retrying while the killed members expire."""
    a = admin(s.kafka)
    req = ConsumerGroupTopicPartitions(app_id,
                                       [TopicPartition(s.kafka.results_topic, p, 0)
                                        for p in range(3)])
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            res = a.alter_consumer_group_offsets([req])[app_id].result()
            errs = [tp.error for tp in res.topic_partitions if tp.error is not None]
            if not errs:
                return
        except KafkaException:
            pass  # UNKNOWN_MEMBER_ID / non-empty group until the killed members' sessions expire
        assert time.monotonic() < deadline, "could not rewind the group"
        time.sleep(1.0)


def _expected_windows(msgs: list, task: str) -> dict[int, dict]:
    """Per-window counts computed directly from the committed result records."""
    w: dict[int,
            dict] = defaultdict(lambda: {"count": 0, "by_status": Counter(), "by_reason": Counter(),
                                              "total_ms": [], "batch": 0})
    for m in msgs:
        r = codec.decode_result(m.value())
        if r.task != task:
            continue
        ts = m.timestamp()[1]
        e = w[ts - ts % (WINDOW_S * 1000)]
        e["count"] += 1
        e["by_status"][str(r.status)] += 1
        e["by_reason"].update(str(x) for x in r.reasons)
        e["total_ms"].append(r.timings.total_ms)
        e["batch"] += r.timings.batch_size
    return w


def _check_stats(port: int, msgs: list) -> dict[str, Any]:
    answers = {}
    for task in ("card", "id_photo"):
        code, body = _get(port, f"/stats?task={task}&window={WINDOW_S}&last=3600")
        assert code == 200, body
        _schema("stats").validate(body)
        assert body["complete"] and body["partitions"]["answered"] == [0, 1, 2]
        exp = _expected_windows(msgs, task)
        assert [w["start"] for w in body["windows"]] == sorted(exp)
        for win in body["windows"]:
            e = exp[win["start"]]
            assert win["count"] == e["count"]
            assert win["by_status"] == dict(e["by_status"])
            assert win["by_reason"] == dict(e["by_reason"])
            assert win["results_per_s"] == pytest.approx(e["count"] / WINDOW_S)
            assert win["batch_size_avg"] == pytest.approx(e["batch"] / e["count"])
            xs = sorted(e["total_ms"])
            for p in (50, 95, 99):  # nearest rank, 5 % buckets
                true = xs[max(1, math.ceil(p / 100 * len(xs))) - 1]
                assert true <= win["total_ms"][f"p{p}"] <= true * 1.05 + 1e-9
            assert win["total_ms"]["max"] == xs[-1] and win["total_ms"]["min"] == xs[0]
        assert body["total"]["count"] == sum(e["count"] for e in exp.values())
        # coarser windows are exact sums of the base windows
        code2, body2 = _get(port, f"/stats?task={task}&window={2 * WINDOW_S}&last=3600")
        assert code2 == 200 and sum(w["count"] for w in body2["windows"]) == body["total"]["count"]
        answers[task] = body["windows"]
    return answers


def test_status_app_verdicts_stats_restart_and_routing(settings: Settings, tmp_path: Path,
                                                       run_id: str) -> None:
    good = write_images(tmp_path / "imgs", 16)
    bad = []
    for i in range(4):  # truncated JPEGs -> rejected results with a reason code
        p = tmp_path / "imgs" / f"bad{i}.jpg"
        p.write_bytes(good[i].read_bytes()[:200])
        bad.append(p)
    files = good + bad
    prod = UploadProducer(settings)
    prod.produce_files(files, "card", count=N_CARD, concurrency=8)
    prod.produce_files(files, "id_photo", count=N_PHOTO, concurrency=8)
    for i in range(N_MISSING):  # claim checks to objects that do not exist -> OBJECT_NOT_FOUND
        prod.send(UploadEvent.model_validate({
            "upload_id": f"missing-{run_id}-{i}", "task": "card",
            "image": {"ref": {"bucket": settings.s3.uploads_bucket, "key": f"nowhere/{i}.jpg"}}}))
    assert not prod.flush()
    n = N_CARD + N_PHOTO + N_MISSING

    app_id = f"st-{run_id}"
    port_a, port_b = _free_port(), _free_port()
    log_w, log_a, log_b = (tmp_path / "worker.log", tmp_path / "status_a.log",
                           tmp_path / "status_b.log")
    procs: list[subprocess.Popen] = []
    try:
        procs.append(start_worker(settings, 0, log_w, "--processor", "card=sleep,id_photo=sleep",
                                  "--sleep-ms", "20"))
        a = _start_status(settings, app_id, port_a, tmp_path / "data_a", log_a)
        procs.append(a)
        msgs = read_committed(settings, settings.kafka.results_topic, n, timeout_s=90, settle_s=2)
        assert len(msgs) >= n
        results = [(m, codec.decode_result(m.value())) for m in msgs]
        assert {str(r.status) for _, r in results} >= {"accepted", "rejected"}
        # the worker's librdkafka partitioner is crc32(key) % partitions: the rule the app routes by
        assert all(zlib.crc32(m.key()) % 3 == m.partition() for m in msgs)
        latest = {}
        for m, r in results:
            latest[r.upload_id] = (m, r)
        assert len(latest) == n

        _wait_healthy(port_a, a, log_a)
        got = _wait_all_verdicts(port_a, msgs)
        _check_verdicts(got, latest)
        code, body = _get(port_a, f"/uploads/unknown-{run_id}")
        assert code == 404 and body["error"] == "UNKNOWN_UPLOAD"
        _schema("error").validate(body)
        for bad_id in ("a%20b", "x" * 129, "a%2Fb", "."):
            code, body = _get(port_a, f"/uploads/{bad_id}")
            assert code == 400 and body["error"] == "INVALID_UPLOAD_ID", (bad_id, code, body)
        code, body = _get(port_a, "/stats?task=nope")
        assert code == 400 and body["error"] == "INVALID_TASK"
        code, body = _get(port_a, f"/stats?task=card&window={WINDOW_S + 1}")
        assert code == 400 and body["error"] == "INVALID_WINDOW"

        # read_committed: a result in an aborted transaction is never seen; a committed one is
        tx = transactional_producer(settings.kafka, f"tx-status-{run_id}")
        template = latest[next(iter(latest))][1]
        for uid, commit in ((f"aborted-{run_id}", False), (f"committed-{run_id}", True)):
            tx.begin_transaction()
            r = template.model_copy(update={"upload_id": uid})
            key, value, headers = codec.encode_result(r)
            tx.produce(settings.kafka.results_topic, key=key, value=value, headers=headers)
            tx.flush(10)
            if commit:
                tx.commit_transaction(10)
            else:
                tx.abort_transaction(10)
        deadline = time.monotonic() + 30
        while _get(port_a,
                   f"/uploads/committed-{run_id}")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _get(port_a, f"/uploads/committed-{run_id}")[0] == 200
        assert _get(port_a, f"/uploads/aborted-{run_id}")[0] == 404

        msgs = read_committed(settings, settings.kafka.results_topic, n + 1, timeout_s=30,
                              settle_s=1)
        stats_before = _check_stats(port_a, msgs)

        # kill -9 and start again: the tables come back from the changelog, answers unchanged.
        # Every result offset was committed before the kill, so nothing is re-read from the
        # results topic: the answers after the restart can only come from the changelog.
        _wait_committed_past(settings, app_id, msgs)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        a = _start_status(settings, app_id, port_a, tmp_path / "data_a2", log_a)
        procs.append(a)
        _wait_healthy(port_a, a, log_a, partitions=3)
        got = _verdicts(port_a, [m for m, _ in latest.values()])
        _check_verdicts(got, latest)
        assert _check_stats(port_a, msgs) == stats_before

        # a second instance: partitions split; every query answered right on either instance
        b = _start_status(settings, app_id, port_b, tmp_path / "data_b", log_b)
        procs.append(b)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert b.poll() is None, log_b.read_text()[-3000:]
            ha, hb = _health(port_a), _health(port_b)
            if ha and hb and ha["status"] == hb["status"] == "ok" and \
                    sorted(ha["partitions"] + hb["partitions"]) == [0, 1, 2] and hb["partitions"]:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"no split: {ha} {hb}\n{log_b.read_text()[-3000:]}")
        for port in (port_a, port_b):
            _check_verdicts(_verdicts(port, [m for m, _ in latest.values()]), latest)
            assert _check_stats(port, msgs) == stats_before

        # kill both, rewind the group to offset 0 and start one: every result is read a second
        # time on top of the recovered tables and nothing is counted twice
        for p in (a, b):
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        _reset_offsets(settings, app_id)
        assert _committed(settings, app_id) == [0, 0, 0]
        a = _start_status(settings, app_id, port_a, tmp_path / "data_a3", log_a)
        procs.append(a)
        _wait_healthy(port_a, a, log_a, partitions=3)
        _wait_committed_past(settings, app_id, msgs)
        _check_verdicts(_verdicts(port_a, [m for m, _ in latest.values()]), latest)
        assert _check_stats(port_a, msgs) == stats_before
    finally:
        for p in reversed(procs):
            stop_worker(p, timeout_s=20)
        delete_topics(admin(settings.kafka),
                      list(changelog_topics(StatusSettings(app_id=app_id)).values()))
