"""JSON-lines logging: librdkafka's lines, warnings, library records, the processors' scripts
(unit tier)."""

from __future__ import annotations

import time

import pytest

from streams.settings import load_settings


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
    assert (lines[0]["event"] == "librdkafka" and lines[0]["facility"]
            and "rdkafka" in lines[0]["client"])
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
    lg.log(logging.INFO, "%s [%s] %s", "FAIL", "rdkafka#producer-2",
           refused.format(0))  # other client
    now[0] = 10.5
    lg.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", refused.format(7))
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"librdkafka"' in x]
    assert [(x["client"], x.get("suppressed")) for x in lines] == [
        ("rdkafka#consumer-1", None), ("rdkafka#producer-2", None), ("rdkafka#consumer-1", 49)]
    assert lines[2]["message"].endswith("(after 7ms)") and lines[2]["level"] == "error"


def test_python_warnings_are_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """Pillow's warnings on a hostile upload's EXIF come out as one JSON line each."""
    import io
    import json
    import warnings

    from PIL import Image

    from streams.logs import configure_logging

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        configure_logging("INFO")
        capsys.readouterr()
        warnings.warn("Corrupt EXIF data.  Expecting to read 2 bytes\nbut only got 0.", UserWarning,
                      stacklevel=1)
        img = Image.new("RGB", (8, 8))
        img.save(buf := io.BytesIO(), "JPEG", exif=b"Exif\x00\x00II*\x00\x08\x00\x00\x00\xff\xff")
        Image.open(io.BytesIO(buf.getvalue())).getexif()
        err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(x.startswith("{") for x in lines), err
    first = json.loads(lines[0])
    assert (first["event"], first["category"]) == ("python_warning", "UserWarning")
    assert first["message"].startswith("Corrupt EXIF data. Expecting to read 2 bytes but only")
    assert first["where"].startswith("test_logs.py:")


def test_a_librarys_records_at_debug_are_json_lines_without_their_message() -> None:
    """A fresh user's CARDSTREAM_LOG_LEVEL=DEBUG had Pillow's PNG chunk trace (``STREAM
    b'IHDR' 16 13``) on stderr as raw text among the JSON lines. Run in a child process: the
    root logger's handlers and structlog's cached loggers are per process."""
    import json
    import subprocess
    import sys

    code = ("import io; from PIL import Image; from streams.logs import configure_logging; "
            "configure_logging('DEBUG'); b = io.BytesIO(); "
            "Image.new('RGB', (4, 4)).save(b, 'PNG'); Image.open(io.BytesIO(b.getvalue())).load()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines and all(x.startswith("{") for x in lines), out.stderr
    rows = [json.loads(x) for x in lines]
    pil = [r for r in rows if r.get("logger", "").startswith("PIL")]
    assert pil and all(r["event"] == "library_log" and r["level"] == "debug" for r in pil)
    assert "IHDR" not in out.stderr  # the record's message is never written


def _json_lines(stderr: str) -> list[dict]:
    """Each line of ``stderr`` as a JSON object with the set-up's keys (fails on any other)."""
    import json

    rows = []
    for line in stderr.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line on stderr: {line!r}")
        assert {"event", "level", "timestamp"} <= set(row), line
        rows.append(row)
    return rows


def test_a_processors_script_logs_json_lines_on_stderr_and_no_debug_at_info(tmp_path) -> None:
    """``python -m processors.card.evaluation quality --set DIR --json`` on a one-document set:
    its stdout is the figures alone (one JSON object) and its stderr JSON lines at INFO
    (``card_warm_up``); the debug ``int8_products`` is written nowhere. It wrote structlog's
    coloured console lines to stdout, the debug one among them, before its ``__main__``
    configured the shared set-up (a fresh user's trial)."""
    import json
    import subprocess
    import sys

    from processors.card.training.documents import write_set

    write_set(tmp_path, 1, seed=7)
    out = subprocess.run([sys.executable, "-m", "processors.card.evaluation", "quality",
                          "--set", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["documents"] == 1, out.stdout
    rows = _json_lines(out.stderr)
    assert [(r["event"], r["level"]) for r in rows if r["event"] == "card_warm_up"] == [
        ("card_warm_up", "info")], out.stderr
    assert all(r["level"] != "debug" for r in rows), out.stderr
    assert "int8_products" not in out.stdout + out.stderr


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_the_shared_set_up_serves_processors_without_streams(level: str) -> None:
    """:func:`processors.logs.configure_logging` in a child process that imports nothing from
    ``streams`` (the layering): a processors logger's debug event (``int8_products``) is a
    JSON line at DEBUG and dropped at INFO; its info event, a library's stdlib record and a
    Python warning are JSON lines at both. ``streams.logs`` names the same function."""
    import subprocess
    import sys

    import processors.logs
    import streams.logs

    assert streams.logs.configure_logging is processors.logs.configure_logging
    child = [
        "import logging, sys, warnings, structlog",
        "from processors.logs import configure_logging",
        f"configure_logging({level!r})",
        "from processors.runtime import int8_saturates",
        "int8_saturates()",  # its debug event: int8_products
        "structlog.get_logger('cardstream.card').info('card_warm_up', bucket=1)",
        "logging.getLogger('PIL.PngImagePlugin').info('STREAM b\"IHDR\" 16 13')",
        "warnings.warn('Corrupt EXIF data.', UserWarning, stacklevel=1)",
        "assert not [m for m in sys.modules if m.split('.')[0] == 'streams'], 'streams imported'",
    ]
    out = subprocess.run([sys.executable, "-c", "\n".join(child)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    rows = _json_lines(out.stderr)
    events = [(r["event"], r["level"]) for r in rows]
    want = [("card_warm_up", "info"), ("library_log", "info"), ("python_warning", "warning")]
    if level == "DEBUG":
        want.insert(0, ("int8_products", "debug"))
    assert events == want, out.stderr
    assert "IHDR" not in out.stderr


def test_a_cardstream_command_logs_json_lines_on_stderr_and_nothing_on_stdout() -> None:
    """``cardstream results --json`` with nothing listening at the bootstrap address
    (127.0.0.1:1): librdkafka's refused connections are JSON lines on stderr and stdout stays
    empty. ``results`` (like ``produce``, ``topics``, ``fetch``, ``demo``...) never set up the
    logging itself: its lines came out as structlog's default coloured console lines on stdout,
    among the results; the command line's root now sets it up for every command.

    The command gives up after its 10 s metadata wait with one plain line, ``cardstream:
    BrokerUnavailable: ...`` naming the topic and the address, and exit status 1; it was a
    ``cimpl.KafkaException`` traceback. The SASL password set is written nowhere."""
    import json
    import os
    import re
    import subprocess
    import sys

    secret = "sasl-password-never-printed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSTREAM_")}
    env.update(CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS="127.0.0.1:1", CARDSTREAM_LOG_LEVEL="info",
               CARDSTREAM_KAFKA__SECURITY_PROTOCOL="SASL_PLAINTEXT",
               CARDSTREAM_KAFKA__SASL_USERNAME="unit", CARDSTREAM_KAFKA__SASL_PASSWORD=secret)
    out = subprocess.run([sys.executable, "-c", "from streams.cli import main; main()",
                          "results", "--json"], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert out.returncode == 1, out.stderr
    assert out.stdout == ""
    assert "Traceback" not in out.stderr and secret not in out.stderr, out.stderr
    plain = [x for x in out.stderr.splitlines() if not x.startswith("{")]
    assert plain == [plain[0]] and plain[0].startswith(
        "cardstream: BrokerUnavailable: reading cardstream.results.v1: no answer from "
        "127.0.0.1:1 (_TRANSPORT: "), out.stderr
    console = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")  # structlog's console renderer
    logged = [x for x in out.stderr.splitlines()
              if x.startswith("{") or console.match(x) or "librdkafka" in x]
    rows = []
    for line in logged:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pytest.fail(f"a log line that is not JSON on stderr: {line!r}")
    assert any(r["event"] == "librdkafka" and r["level"] in ("error", "warning", "info")
               for r in rows), out.stderr
    assert all({"event", "level", "timestamp"} <= set(r) for r in rows), out.stderr
