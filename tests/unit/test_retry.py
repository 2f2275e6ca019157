"""The one retry policy (streams/retry.py) and its settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streams import retry
from streams.errors import SettingsError
from streams.retry import Backoff, RetryPolicy
from streams.settings import load_settings


def test_waits_double_up_to_the_cap_and_stop_after_the_attempts() -> None:
    p = RetryPolicy(first_s=0.2, cap_s=0.8, attempts=5)
    assert list(p.delays()) == [0.2, 0.4, 0.8, 0.8]
    assert list(RetryPolicy(first_s=1.0, cap_s=1.0, attempts=1).delays()) == []
    endless = RetryPolicy(first_s=1.0, cap_s=30.0).delays()
    assert [next(endless) for _ in range(8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    jittered = RetryPolicy(first_s=1.0, cap_s=4.0, jitter=0.5, attempts=5)
    assert list(jittered.delays(rng=lambda: 0.5)) == [1.25, 2.5, 5.0, 5.0]
    with pytest.raises(ValidationError, match="cap_s 0.5 is below first_s 1.0"):
        RetryPolicy(first_s=1.0, cap_s=0.5)


def test_call_retries_only_what_is_retriable_and_raises_the_last_error() -> None:
    slept: list[float] = []
    tries = iter([OSError("1"), OSError("2"), 42])

    def flaky() -> int:
        got = next(tries)
        if isinstance(got, Exception):
            raise got
        return got

    p = RetryPolicy(first_s=0.1, cap_s=1.0, attempts=3)
    assert retry.call(flaky, p, lambda e: isinstance(e, OSError), sleep=slept.append) == 42
    assert slept == [0.1, 0.2]
    slept.clear()

    def down() -> None:
        raise OSError(f"try {len(slept) + 1}")

    with pytest.raises(OSError, match="try 3"):
        retry.call(down, p, lambda e: True, sleep=slept.append)
    assert slept == [0.1, 0.2]
    with pytest.raises(ValueError):
        retry.call(lambda: int("x"), p, lambda e: isinstance(e, OSError), sleep=slept.append)
    assert slept == [0.1, 0.2]  # not retriable: raised at once


def test_backoff_keeps_its_place_across_calls_until_reset() -> None:
    b = Backoff(RetryPolicy(first_s=1.0, cap_s=4.0))
    assert [b.next(), b.next(), b.next(), b.next()] == [1.0, 2.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 1.0
    limited = Backoff(RetryPolicy(first_s=1.0, cap_s=3.0, attempts=2))
    assert [limited.next(), limited.next(), limited.next()] == [1.0, 3.0, 3.0]  # then the cap


def test_each_use_has_its_policy_in_settings_and_a_part_keeps_the_other_defaults(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings()
    assert (s.s3.retry.first_s, s.s3.retry.cap_s, s.s3.retry.jitter, s.s3.retry.attempts) == (
        0.2, 5.0, 0.1, 4)
    assert list(s.kafka.commit_retry.delays()) == [0.2, 0.4, 0.8, 0.8]
    assert (s.worker.store_wait.first_s, s.worker.store_wait.cap_s) == (0.5, 5.0)
    assert (s.worker.breaker.first_s, s.worker.breaker.cap_s) == (1.0, 30.0)
    monkeypatch.setenv("CARDSTREAM_S3__RETRY__ATTEMPTS", "6")
    monkeypatch.setenv("CARDSTREAM_WORKER__BREAKER__CAP_S", "60")
    s = load_settings()
    assert (s.s3.retry.first_s, s.s3.retry.cap_s, s.s3.retry.attempts) == (0.2, 5.0, 6)
    assert (s.worker.breaker.first_s, s.worker.breaker.cap_s) == (1.0, 60.0)
    monkeypatch.setenv("CARDSTREAM_WORKER__BREAKER__CAP_S", "0.5")
    with pytest.raises(SettingsError, match="CARDSTREAM_WORKER__BREAKER: .*cap_s 0.5 is below"):
        load_settings()
