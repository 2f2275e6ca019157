"""Unit tier for streams helpers: keys, payloads, time parsing, replay diff, health endpoints, settings."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from schemas.models import VerificationResult
from streams.health import Health, serve
from streams.metrics import WorkerMetrics
from streams.replay import TimeArgError, diff_results, parse_time_ms
from streams.settings import load_settings
from streams.worker import object_key, task_payload


def test_object_key_layout() -> None:
    assert object_key("card", "u2netp-1", "abc.1", "rectified", "jpg") == "card/u2netp-1/abc.1/rectified.jpg"


def test_task_payload_fills_defaults_and_refs() -> None:
    p = task_payload("card", {"quad": None, "confidence": 0.2, "doc_type": None, "extra": 1}, {})
    assert p.doc_type == "unknown" and p.quad is None and p.rectified is None and p.confidence == 0.2
    p2 = task_payload("id_photo", {"size": "two_inch", "background": "blue", "width": 413, "height": 579}, {})
    assert (p2.width, p2.height, p2.face_box, p2.photo) == (413, 579, None, None)


@pytest.mark.parametrize(("text", "ms"), [
    ("2026-11-29T17:00:00Z", 1795971600000),
    ("2026-11-29T17:00:00", 1795971600000),
    ("2026-11-29T18:00:00+01:00", 1795971600000),
    ("1795971600000", 1795971600000),
])
def test_parse_time_ms(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize("bad", ["1795971600", "yesterday", "2026-13-01"])
def test_parse_time_ms_refuses_seconds_and_junk(bad: str) -> None:
    with pytest.raises(TimeArgError):
        parse_time_ms(bad)


def _result(uid: str, status: str, reasons: list[str], quad: list | None, at: str) -> VerificationResult:
    return VerificationResult.model_validate({
        "upload_id": uid, "task": "card", "status": status, "reasons": reasons,
        "card": {"quad": quad, "confidence": 0.9, "doc_type": "id_card", "rectified": None},
        "model": {"name": "m", "version": "1", "provider": "CPUExecutionProvider"},
        "timings": {"queue_ms": 1.0, "batch_size": 1, "inference_ms": 1.0, "total_ms": 2.0},
        "source": {"topic": "t", "partition": 0, "offset": 0}, "processed_at": at})


def test_diff_results_counts_changes_and_iou() -> None:
    sq = [[0, 0], [100, 0], [100, 50], [0, 50]]
    half = [[0, 0], [50, 0], [50, 50], [0, 50]]
    before = [_result("a", "accepted", [], sq, "2026-01-01T00:00:00Z"),
              _result("b", "accepted", [], sq, "2026-01-01T00:00:00Z"),
              _result("b", "rejected", ["BLURRY"], sq, "2025-01-01T00:00:00Z")]  # older: ignored
    after = [_result("a", "accepted", [], sq, "2026-02-01T00:00:00Z"),
             _result("b", "rejected", ["GLARE"], half, "2026-02-01T00:00:00Z"),
             _result("c", "accepted", [], sq, "2026-02-01T00:00:00Z")]
    d = diff_results(before, after)
    s = d.summary()
    assert (d.compared, s["verdicts_changed"], s["reasons_changed"], s["missing_original"]) == (2, 1, 1, 1)
    assert d.quad_iou["a"] == pytest.approx(1.0, abs=1e-6)
    assert d.quad_iou["b"] == pytest.approx(0.5, abs=1e-6)


def test_health_endpoints() -> None:
    h, m = Health(stall_s=0.3), WorkerMetrics()
    srv = serve(h, m, 0, host="127.0.0.1")
    port = srv.server_address[1]

    def code(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        assert code("/ready") == 503
        h.ready = True
        assert code("/ready") == 200
        h.tick()
        assert code("/live") == 200
        time.sleep(0.4)
        assert code("/live") == 503  # the loop stalled
        m.results.labels("card", "accepted").inc(3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            body = r.read().decode()
        assert 'cardstream_results_total{status="accepted",task="card"} 3.0' in body
    finally:
        srv.shutdown()


def test_settings_env_nesting_and_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARDSTREAM_WORKER__MAX_BATCH", "8")
    monkeypatch.setenv("CARDSTREAM_KAFKA__CONFIG", '{"security.protocol": "SASL_SSL", '
                       '"sasl.username": "svc", "linger.ms": 7}')
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "hunter2")
    s = load_settings()
    assert s.worker.max_batch == 8
    # TLS/SASL properties move into their fields (the status app's aiokafka reads those)
    assert s.kafka.config == {"linger.ms": 7}
    assert (s.kafka.security_protocol, s.kafka.sasl_username) == ("SASL_SSL", "svc")
    assert "hunter2" not in repr(s)
    with pytest.raises(ValueError):
        s.worker.max_batch = 4  # type: ignore[misc]


def test_latency_settings_defaults_env_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings()
    assert s.worker.poll_interval_ms == 10
    assert s.kafka.transaction_retry_backoff_ms == 2
    monkeypatch.setenv("CARDSTREAM_WORKER__POLL_INTERVAL_MS", "3")
    monkeypatch.setenv("CARDSTREAM_KAFKA__TRANSACTION_RETRY_BACKOFF_MS", "20")
    s = load_settings()
    assert (s.worker.poll_interval_ms, s.kafka.transaction_retry_backoff_ms) == (3, 20)
    monkeypatch.setenv("CARDSTREAM_WORKER__POLL_INTERVAL_MS", "0")
    with pytest.raises(ValueError):
        load_settings()


def test_librdkafka_log_lines_are_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from streams.kafka import base_config, plain_producer
    from streams.logs import configure_logging

    configure_logging("INFO")
    k = load_settings().kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:1"})
    assert "logger" in base_config(k)
    p = plain_producer(k)  # nothing listens on port 1: librdkafka logs the refused connection
    deadline = time.monotonic() + 10
    lines: list[dict] = []
    while time.monotonic() < deadline and not lines:
        p.poll(0.2)
        err = capsys.readouterr().err
        lines = [json.loads(x) for x in err.splitlines() if x.startswith("{") and "librdkafka" in x]
    assert lines, "no librdkafka line logged"
    assert lines[0]["event"] == "librdkafka" and lines[0]["facility"] and "rdkafka" in lines[0]["client"]
    assert lines[0]["level"] in ("error", "warning", "info")


def test_repeated_librdkafka_lines_are_written_once_per_window_with_a_count(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import logging

    from streams.logs import LibrdkafkaLog, configure_logging

    configure_logging("INFO")
    now = [0.0]
    lg = LibrdkafkaLog(repeat_s=10.0, clock=lambda: now[0])
    refused = "[thrd:127.0.0.1:9092/bootstrap]: Connect to ipv4#127.0.0.1:9092 failed (after {}ms)"
    for i in range(50):  # 50 refused connections in 5 s, each after a different number of ms
        now[0] = i * 0.1
        lg.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", refused.format(i))
    lg.log(logging.INFO, "%s [%s] %s", "FAIL", "rdkafka#producer-2", refused.format(0))  # other client
    now[0] = 10.5
    lg.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", refused.format(7))
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"librdkafka"' in x]
    assert [(x["client"], x.get("suppressed")) for x in lines] == [
        ("rdkafka#consumer-1", None), ("rdkafka#producer-2", None), ("rdkafka#consumer-1", 49)]
    assert lines[2]["message"].endswith("(after 7ms)") and lines[2]["level"] == "error"


def test_worker_port_in_use_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second worker on a host with the same --http-port exits 2 with what to do, before any
    model loads or Kafka call (it was an uncaught OSError traceback)."""
    import socket

    from typer.testing import CliRunner

    from streams.cli import app

    monkeypatch.setenv("CARDSTREAM_S3__ACCESS_KEY", "unit")  # the store client is only built
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "unit-secret")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(app, ["worker", "--tasks", "card", "--processor", "card=sleep",
                                     "--http-port", str(port)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert f"cannot serve /ready, /live, /metrics on port {port}" in r.output
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)


class _Msg:
    """A consumed event as the worker sees it (confluent-kafka ``Message``'s accessors)."""

    def __init__(self, partition: int, offset: int) -> None:
        self._p, self._o = partition, offset

    def topic(self) -> str:
        return "uploads"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        return TIMESTAMP_CREATE_TIME, int(time.time() * 1000)


class _NoSeekConsumer:
    """A consumer with nothing more to fetch that fails the test if the worker seeks."""

    def consume(self, n: int, timeout_s: float) -> list:
        return []

    def assignment(self) -> list:
        return []

    def position(self, parts: list) -> list:
        return []

    def seek(self, tp) -> None:
        raise AssertionError(f"seek({tp.partition}, {tp.offset}): a redo must not seek")


def test_a_failed_batch_is_redone_from_memory_in_offset_order_without_seeking(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.worker import Worker

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_WORKER__MAX_BATCH", "4")
    w = Worker(load_settings(), {}, storage=None)
    w.consumer = _NoSeekConsumer()
    w._revoked.add(("uploads", 2))
    w._done_parts = {0, 1}
    # batch k (partitions 0 and 1), batch k+1 behind it, then what was prefetched meanwhile
    k = [_Msg(0, 10), _Msg(1, 4), _Msg(0, 11)]
    k1 = [_Msg(1, 5), _Msg(2, 7)]
    w._carry = [_Msg(0, 12), _Msg(1, 6)]
    w._redo(k + k1)
    first, second = w._poll_batch(), w._poll_batch()
    assert [(m.partition(), m.offset()) for m in first] == [(0, 10), (1, 4), (0, 11), (1, 5)]
    assert [(m.partition(), m.offset()) for m in second] == [(0, 12), (1, 6)]  # 2 was revoked
    assert w._poll_batch() == []
    assert w._done_parts == set()  # replay mode: redone partitions are not done yet
    assert w.metrics.redone._value.get() == 5


class _PauseRecorder:
    """A consumer assigned ``parts`` of ``uploads`` that records what the worker pauses and
    resumes (nothing to fetch)."""

    def __init__(self, parts: list[int]) -> None:
        from confluent_kafka import TopicPartition

        self.parts = [TopicPartition("uploads", p) for p in parts]
        self.calls: list[tuple[str, list[int]]] = []

    def assignment(self) -> list:
        return list(self.parts)

    def pause(self, tps: list) -> None:
        self.calls.append(("pause", sorted(tp.partition for tp in tps)))

    def resume(self, tps: list) -> None:
        self.calls.append(("resume", sorted(tp.partition for tp in tps)))

    def consume(self, n: int, timeout_s: float) -> list:
        return []

    def position(self, parts: list) -> list:
        return [type(tp)(tp.topic, tp.partition, -1001) for tp in parts]  # no position yet

    def get_watermark_offsets(self, tp, cached: bool = False) -> tuple[int, int]:
        return 0, 0


def test_a_partition_is_paused_only_once_it_has_delivered_an_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka can lose the start offset of a partition paused before its fetcher started
    (issues #2190, #5591): such a partition is paused when its first event arrives. Resume
    touches only what was paused, and a partition revoked while paused (librdkafka keeps it
    paused) is resumed when it is assigned again."""
    from streams.worker import Worker

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    w = Worker(load_settings(), {}, storage=None)
    c = w.consumer = _PauseRecorder([0, 1, 2])
    p0, p1, p2 = c.parts
    w._on_assign(c, c.parts)
    w._observe_fetch([_Msg(0, 10)])        # partition 0 is fetching; 1 and 2 not yet
    assert c.calls == []                   # nothing paused while fetching goes on
    w._pause()
    w._pause()                             # idempotent
    assert c.calls == [("pause", [0])]
    w._observe_fetch([_Msg(1, 3), _Msg(1, 4), _Msg(0, 11)])
    assert c.calls[1:] == [("pause", [1])]  # 1 paused at its first event, once
    w._on_revoke(c, [p0])                  # 0 goes to another worker while paused
    c.parts = [p1, p2]
    w._resume()
    w._resume()
    assert c.calls[2:] == [("resume", [1])]  # not 0 (not assigned), not 2 (never paused)
    c.parts = [p0, p1, p2]
    w._on_assign(c, [p0])                  # 0 comes back, still paused in librdkafka
    assert c.calls[3:] == []               # not resumed from inside the callback
    w._poll_batch()                        # the loop resumes it
    assert c.calls[3:] == [("resume", [0])]
    w._poll_batch()
    w._pause()                             # 1 delivered since its assignment; 0 and 2 did not
    assert c.calls[4:] == [("pause", [1])]


def test_list_images_takes_regular_files_only(tmp_path: Path) -> None:
    """A folder or a FIFO named like an image is not an upload (reading a FIFO would block)."""
    import os

    from streams.produce import list_images

    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / "a.PNG").write_bytes(b"\x89PNG")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "adir.jpg").mkdir()
    os.mkfifo(tmp_path / "fifo.jpg")
    assert [p.name for p in list_images(tmp_path)] == ["a.PNG", "b.jpg"]


@pytest.mark.parametrize("since", ["junk", "1796300186"])
def test_results_refuses_a_bad_since_as_a_usage_error(since: str) -> None:
    from typer.testing import CliRunner

    from streams.cli import app

    r = CliRunner().invoke(app, ["results", "--since", since], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "--since" in r.output and "Traceback" not in r.output
    assert ("epoch milliseconds" in r.output)


@pytest.mark.parametrize(("args", "says"), [
    (["--task", "bogus"], "'bogus' is not one of 'card', 'id_photo'"),
    (["--task", "card", "--rate", "-1"], "--rate"),
    (["--task", "card", "--concurrency", "0"], "--concurrency"),
    (["--task", "card", "--count", "-3"], "--count"),
    (["--task", "card", "--max-seconds", "0"], "--max-seconds"),
])
def test_produce_refuses_bad_options_before_connecting(tmp_path, args: list[str], says: str) -> None:
    from typer.testing import CliRunner

    from streams.cli import app

    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    r = CliRunner().invoke(app, ["produce", "--dir", str(tmp_path), *args], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert says in r.output and "Traceback" not in r.output


class _StuckProducer:
    """A transactional producer whose ``send_offsets_to_transaction`` never returns (librdkafka
    #5456); it records every call, and fails the test if the worker calls it after that."""

    def __init__(self) -> None:
        import threading

        self.calls: list[str] = []
        self.release = threading.Event()

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, *a, **kw) -> None:
        self.calls.append("produce")

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        self.calls.append(f"send_offsets({timeout})")
        self.release.wait()  # blocks past its own timeout, as librdkafka does

    def __getattr__(self, name: str):  # commit_transaction, abort_transaction, flush, ...
        raise AssertionError(f"{name} called on a stuck producer")


def test_a_stuck_send_offsets_replaces_the_producer_and_the_batch_is_redone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import streams.worker as worker_mod
    from streams.worker import Worker

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    w = Worker(load_settings(), {}, storage=None)
    w.TXN_CALL_TIMEOUT_S, w.STUCK_GRACE_S = 0.2, 0.3
    w.consumer = type("C", (), {"consumer_group_metadata": lambda self: "group-metadata"})()
    stuck, fresh = _StuckProducer(), object()
    w.producer = stuck
    built = []
    monkeypatch.setattr(worker_mod, "transactional_producer",
                        lambda k, tid: built.append(tid) or fresh)
    t0 = time.monotonic()
    assert w._transact([]) is False  # not committed: the caller redoes the batch
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 3.0
    assert stuck.calls == ["begin", "send_offsets(0.2)"]  # no commit or abort on the stuck one
    assert w.producer is fresh and built == [w.transactional_id]
    assert w.metrics.transactions.labels("stuck")._value.get() == 1
    assert w.committed_events == 0
    stuck.release.set()


def test_the_worker_says_when_the_store_answers_again(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from streams.logs import configure_logging
    from streams.worker import Worker

    configure_logging("INFO")
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    answers = iter([False, True, True])
    store = type("S", (), {"healthy": lambda self: next(answers)})()
    w = Worker(load_settings(), {}, storage=store)
    w.consumer = type("C", (), {"poll": lambda self, t: time.sleep(t)})()
    w._wait_for_storage()  # one 0.5 s wait, polling all the while
    back = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"storage_back"' in x]
    assert len(back) == 1 and 0.5 <= back[0]["waited_s"] < 2.0
    w._wait_for_storage()  # already up: no line
    assert '"storage_back"' not in capsys.readouterr().err
