"""The rush helpers: deadlines (streams.deadlines) and the result cache (streams.cache)."""

from __future__ import annotations

import hashlib

import pytest
from confluent_kafka import KafkaError, KafkaException

from processors.base import Artifact, Outcome
from schemas.models import UploadEvent
from schemas.reasons import ReasonCode, Status
from streams.backfill import YieldGate
from streams.cache import ENTRY_OVERHEAD_BYTES, CacheKey, ResultCache, as_upload, cacheable
from streams.deadlines import deadline_ms, is_stale
from streams.settings import BackfillSettings, Settings
from streams.worker.compute import input_digest
from tests.doubles import Msg

NOW_MS = 1_795_970_000_000.0  # 2026-11-29T16:33:20Z


def event(deadline: str | None = None, task: str = "card") -> UploadEvent:
    return UploadEvent.model_validate({"upload_id": "u1", "task": task,
                                       "image": {"inline_b64": "AAAA"}, "deadline": deadline})


def record(age_s: float) -> Msg:
    return Msg(0, 0, timestamp_ms=int(NOW_MS - age_s * 1000))


@pytest.mark.parametrize("deadline, stale", [
    (None, False),
    ("2026-11-29T00:00:00Z", True),  # hours ago
    ("1970-01-01T00:00:00Z", True),  # the zero value of an unset clock: past
    ("9999-12-31T23:59:59.999+14:00", False),  # far future: never
    ("9999-12-31T23:59:59-23:59", False),  # beyond 9999 in UTC: still a number, still future
    ("0001-01-01T00:00:00+23:59", True),  # before year 1 in UTC
    ("2026-11-29T16:33:20.000Z", True),  # exactly now: passed
    ("2026-11-29T16:33:21.000Z", False),  # one second ahead
])
def test_own_deadline(deadline: str | None, stale: bool) -> None:
    assert deadline_ms(event("2026-11-29T16:33:20.000Z")) == NOW_MS
    assert is_stale(event(deadline), record(1.0), NOW_MS, {}) is stale


def test_max_age_per_task_from_the_record_timestamp() -> None:
    ages = {"card": 120.0}
    assert not is_stale(event(), record(119.0), NOW_MS, ages)
    assert is_stale(event(), record(121.0), NOW_MS, ages)
    assert not is_stale(event(task="id_photo"), record(10_000.0), NOW_MS, ages)
    # a producer clock ahead of ours: age 0, not stale; a record stamped 1970: 7 days, stale
    assert not is_stale(event(), Msg(0, 0, timestamp_ms=int(NOW_MS + 9e6)),
                        NOW_MS, ages)
    assert is_stale(event(), Msg(0, 0, timestamp_ms=1), NOW_MS, ages)
    # the earlier of the two applies
    assert is_stale(event("2026-11-29T16:33:00Z"), record(1.0), NOW_MS, ages)


def test_max_age_settings_name_known_tasks_and_positive_seconds() -> None:
    assert Settings(deadlines={"max_age_s": {"card": 90}}).deadlines.max_age_s == {"card": 90.0}
    for bad in ({"cards": 90}, {"card": 0}, {"card": -5}):
        with pytest.raises(ValueError):
            Settings(deadlines={"max_age_s": bad})


def outcome(uid: str, n_bytes: int, status: Status = Status.ACCEPTED) -> Outcome:
    art = Artifact("rectified", "jpg", "image/jpeg", b"x" * n_bytes, 10, 10)
    return Outcome(uid, status, (ReasonCode.BLURRY,) if status != Status.ACCEPTED else (),
                   {"confidence": 0.9}, (art,), inference_ms=12.5)


def key(i: int | bytes, task: str = "card", version: str = "1.0.0") -> CacheKey:
    data = bytes([i]) if isinstance(i, int) else i
    return CacheKey(task, version, hashlib.sha256(data).hexdigest())


def test_input_digest_hashes_the_bytes_digest_and_canonical_options() -> None:
    a = hashlib.sha256(b"image-a").hexdigest()
    d = input_digest(a, {"doc_type": "auto"})
    assert d == hashlib.sha256(f'{a}\n{{"doc_type":"auto"}}'.encode()).hexdigest()
    assert d != input_digest(hashlib.sha256(b"image-b").hexdigest(), {"doc_type": "auto"})
    assert d != input_digest(a, {"doc_type": "passport"})
    assert (input_digest(a, {"size": "one_inch", "background": "white"})
            == input_digest(a, {"background": "white", "size": "one_inch"}))


def test_hit_gives_the_outcome_as_the_new_upload_s() -> None:
    c = ResultCache(max_bytes=1 << 20, max_entries=10)
    k = key(b"img")
    assert c.get(k) is None
    c.put(k, outcome("first", 100))
    got = c.get(k)
    assert got is not None
    o = as_upload(got, "second")
    assert (o.upload_id, o.status, o.inference_ms) == ("second", Status.ACCEPTED, 0.0)
    assert o.artifacts[0].data == b"x" * 100 and o.payload == {"confidence": 0.9}
    assert c.bytes == 100 + ENTRY_OVERHEAD_BYTES
    assert c.get(key(b"img", version="1.1.0")) is None and c.get(key(b"img", "id_photo")) is None


def test_only_verdicts_are_kept() -> None:
    c = ResultCache(max_bytes=1 << 20, max_entries=10)
    assert cacheable(outcome("a", 1, Status.REJECTED))
    failed = Outcome("a", Status.FAILED, (ReasonCode.INTERNAL_ERROR,))
    assert not cacheable(failed)
    c.put(key(b"f"), failed)
    assert len(c) == 0 and c.bytes == 0


def test_bounded_in_bytes_and_entries_least_recently_used_first() -> None:
    size = 1000 + ENTRY_OVERHEAD_BYTES
    c = ResultCache(max_bytes=3 * size, max_entries=100)
    keys = [key(i) for i in range(5)]
    for k in keys[:3]:
        c.put(k, outcome("u", 1000))
    assert c.get(keys[0]) is not None  # now the most recently used
    c.put(keys[3], outcome("u", 1000))
    assert c.get(keys[1]) is None and c.get(keys[0]) is not None and len(c) == 3
    assert c.bytes == 3 * size
    c.put(keys[4], outcome("u", 10 * size))  # larger than the whole cache
    assert c.get(keys[4]) is None and c.bytes == 3 * size
    few = ResultCache(max_bytes=1 << 30, max_entries=2)
    for k in keys:
        few.put(k, outcome("u", 1))
    assert len(few) == 2 and few.get(keys[4]) is not None and few.get(keys[2]) is None


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def gate(lags: list[int], **kw: float) -> tuple[YieldGate, _Clock]:
    clock, seen = _Clock(), iter(lags)
    g = YieldGate(lambda: next(seen), BackfillSettings(**{"yield_lag": 4, "quiet_s": 1.0,
                                                          "check_s": 0.5, **kw}),
                  clock=clock, sleep=clock.sleep)
    return g, clock


def test_gate_passes_when_live_is_quiet_and_checks_at_most_every_check_s() -> None:
    g, clock = gate([0, 4])
    assert g.wait() == 0.0
    assert g.wait() == 0.0  # within check_s: not read again (the iterator has one value left)
    clock.t += 0.5
    assert g.wait() == 0.0  # lag 4 is within the bound
    assert (g.yields, g.yielded_s) == (0, 0.0)


def test_gate_yields_until_the_lag_stays_low_for_quiet_s() -> None:
    # busy, busy, low, busy again (quiet restarts), then low for 1 s (two checks)
    g, clock = gate([9, 12, 3, 7, 2, 1, 0])
    waited = g.wait()
    assert waited == pytest.approx(3.0)  # five checks of 0.5 s until 1 s of quiet, plus one
    assert (g.yields, g.yielded_s) == (1, pytest.approx(3.0))


def test_gate_stops_waiting_when_asked_and_counts_a_failed_read_as_busy() -> None:

    def broken() -> int:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    clock = _Clock()
    g = YieldGate(broken, BackfillSettings(yield_lag=0, quiet_s=1.0, check_s=0.5),
                  clock=clock, sleep=clock.sleep)
    calls = iter([False, False, True])
    assert g.wait(stop=lambda: next(calls)) == pytest.approx(1.0)
    assert g.yields == 1
