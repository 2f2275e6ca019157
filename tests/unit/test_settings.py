"""The settings object (unit tier): environment nesting, bounds, one section per task."""

from __future__ import annotations

import pytest

from processors import registry
from streams.settings import load_settings
from streams.worker.loop import task_section


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
        s.worker.max_batch = 4  # type: ignore[misc]  # frozen: the assignment must raise


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


def test_every_task_with_settings_has_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARDSTREAM_IDPHOTO__MIN_FACE_PX", "90")
    monkeypatch.setenv("CARDSTREAM_CARD__DPI", "200")
    s = load_settings()
    assert (s.idphoto.min_face_px, s.card.dpi) == (90, 200)
    for t in registry.specs():
        assert isinstance(task_section(s, t.name), t.settings_model)
    assert s.worker.tasks == registry.names()


def test_the_dead_letter_budget_must_fit_the_dead_letter_topic(monkeypatch) -> None:
    from streams.errors import SettingsError

    monkeypatch.setenv("CARDSTREAM_WORKER__DLQ_RECORD_MAX_BYTES", str(512 * 1024))
    assert load_settings().worker.dlq_record_max_bytes == 512 * 1024
    monkeypatch.setenv("CARDSTREAM_KAFKA__TOPICS__DLQ_MAX_MESSAGE_BYTES", str(256 * 1024))
    with pytest.raises(SettingsError, match="dlq_record_max_bytes 524288 is above"):
        load_settings()
    monkeypatch.setenv("CARDSTREAM_WORKER__DLQ_RECORD_MAX_BYTES", str(8 * 1024))
    with pytest.raises(SettingsError, match="CARDSTREAM_WORKER__DLQ_RECORD_MAX_BYTES: Input "
                                            "should be greater than or equal to 16384"):
        load_settings()


def test_a_bad_setting_is_one_line_naming_its_variable(monkeypatch) -> None:
    """A trial's CARDSTREAM_RUNTIME__PRECISION=bogus printed a 50-line traceback."""
    import subprocess
    import sys

    from streams.errors import SettingsError

    monkeypatch.setenv("CARDSTREAM_RUNTIME__PRECISION", "bogus-secret-ish")
    monkeypatch.setenv("CARDSTREAM_GATEWAY__MAX_LAG", "abc")
    with pytest.raises(SettingsError) as e:
        load_settings()
    msg = str(e.value)
    assert "CARDSTREAM_RUNTIME__PRECISION: Input should be" in msg
    assert "CARDSTREAM_GATEWAY__MAX_LAG: Input should be a valid integer" in msg
    assert "bogus-secret-ish" not in msg and "\n" not in msg
    out = subprocess.run([sys.executable, "-c", "from streams.cli import main; main()", "card",
                          "no-such-file.jpg"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 2 and out.stdout == ""  # a misconfiguration, not a rejected image
    assert out.stderr.startswith("cardstream: SettingsError: CARDSTREAM_")
    assert len(out.stderr.strip().splitlines()) == 1 and "bogus" not in out.stderr


def test_the_log_level_is_a_level_name_in_any_case(monkeypatch) -> None:
    """A fresh user's CARDSTREAM_LOG_LEVEL=verbose ran silently at INFO."""
    from streams.errors import SettingsError

    monkeypatch.setenv("CARDSTREAM_LOG_LEVEL", "debug")
    assert load_settings().log_level == "DEBUG"
    monkeypatch.setenv("CARDSTREAM_LOG_LEVEL", "verbose")
    with pytest.raises(SettingsError, match="CARDSTREAM_LOG_LEVEL: Input should be 'DEBUG'"):
        load_settings()


def test_the_worker_slot_comes_from_the_settings_else_the_host_name(monkeypatch) -> None:
    """A StatefulSet pod ``cardstream-worker-2`` is slot 2 unless CARDSTREAM_WORKER__SLOT says
    otherwise (the settings read HOSTNAME, not ``cardstream worker``)."""
    monkeypatch.setenv("HOSTNAME", "cardstream-worker-2")
    assert load_settings().worker.slot == 2
    monkeypatch.setenv("CARDSTREAM_WORKER__SLOT", "5")
    assert load_settings().worker.slot == 5
    monkeypatch.delenv("CARDSTREAM_WORKER__SLOT")
    monkeypatch.setenv("HOSTNAME", "laptop")
    assert load_settings().worker.slot == 0
