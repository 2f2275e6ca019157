"""Whether a broker answers (unit tier): :class:`streams.reach.BrokerReach`'s states, driven by
librdkafka's error codes and a probe double (the real librdkafka behaviour: the integration
test ``test_broker_outage.py``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.logs import configure_logging
from streams.reach import BrokerReach
from streams.settings import KafkaSettings


class Probe:
    """A metadata request that answers as ``up()`` says at the time of the call; records
    each call's time."""

    def __init__(self, up: Callable[[], bool]) -> None:
        self.up, self.calls = up, list[float]()

    def __call__(self, timeout_s: float) -> None:
        self.calls.append(time.monotonic())
        if not self.up():
            raise KafkaException(KafkaError(KafkaError._TRANSPORT,
                                            "Failed to get metadata: Local: Broker transport "
                                            "failure"))


def _until(cond: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def _events(err: str) -> list[dict]:
    return [json.loads(x) for x in err.splitlines() if x.startswith("{")]


def test_every_broker_down_fails_readiness_only_when_a_broker_does_not_answer_then_comes_back(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The trial: with the broker killed after the start, ``/ready`` stayed 200. librdkafka's
    ``_ALL_BROKERS_DOWN`` is a suspicion; a failed request makes the process unreachable (one
    ``broker_unreachable`` line), it asks again every ``every_s`` meanwhile, and the first
    request that answers makes it reachable again (``broker_back`` with the seconds down)."""
    configure_logging("INFO")
    broker_up = [True]
    probe = Probe(lambda: broker_up[0])
    k = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    reach = BrokerReach(k, every_s=0.05, probe=probe).start()
    try:
        assert _until(lambda: len(probe.calls) == 1)  # asked once at the start: it answers
        time.sleep(0.1)
        assert reach.reachable and len(probe.calls) == 1
        broker_up[0] = False
        reach.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
        assert _until(lambda: not reach.reachable)
        assert _until(lambda: len(probe.calls) >= 4)  # asked again while down
        gaps = [b - a for a, b in zip(probe.calls, probe.calls[1:], strict=False)]
        assert min(gaps) >= 0.04, gaps
        reach.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
        time.sleep(0.2)
        assert not reach.reachable
        broker_up[0] = True
        assert _until(lambda: reach.reachable)
        asked = len(probe.calls)
        time.sleep(0.2)
        assert len(probe.calls) <= asked + 1  # not asked again once back (one stale report)
    finally:
        reach.close()
    lines = [e for e in _events(capsys.readouterr().err) if e["event"].startswith("broker_")]
    assert [e["event"] for e in lines] == ["broker_unreachable", "broker_back"]
    assert lines[0]["bootstrap"] == "127.0.0.1:1"
    assert lines[0]["error"] == ("_TRANSPORT: Failed to get metadata: Local: Broker transport "
                                 "failure")
    assert 0.2 <= lines[1]["down_s"] < 5.0


def test_a_report_a_request_contradicts_or_one_connection_failing_changes_nothing() -> None:
    """No flap: ``_ALL_BROKERS_DOWN`` when a broker still answers (connections closed while
    idle) leaves the process reachable after one request, and ``_TRANSPORT`` (one connection
    failed: about 20 a second per client while the broker is down, and every restart of one
    broker of several) asks nothing."""
    probe = Probe(lambda: True)
    reach = BrokerReach(KafkaSettings(), every_s=0.05, probe=probe).start()
    seen: list[bool] = []
    try:
        assert _until(lambda: len(probe.calls) == 1)  # the start's request
        for _ in range(50):
            reach.error_cb(KafkaError(KafkaError._TRANSPORT, "Connect to ... failed"))
        time.sleep(0.1)
        assert len(probe.calls) == 1
        reach.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            seen.append(reach.reachable)
            time.sleep(0.005)
        assert len(probe.calls) == 2
    finally:
        reach.close()
    assert all(seen) and len(seen) > 20


def test_check_records_each_outcome_and_close_ends_the_thread() -> None:
    """:meth:`BrokerReach.check` makes one request and records it (``down_since`` kept across
    failures in a row); :meth:`close` ends the thread whether it waits or was never
    started."""
    outcomes = iter([False, False, True])
    reach = BrokerReach(KafkaSettings(), probe=Probe(lambda: next(outcomes)))
    assert reach.check() is False
    since = reach.down_since
    assert since is not None and not reach.reachable
    assert reach.check() is False and reach.down_since == since
    assert reach.check() is True and reach.down_since is None and reach.probes == 3
    reach.close()  # never started
    started = BrokerReach(KafkaSettings(), probe=Probe(lambda: True)).start()
    t0 = time.monotonic()
    started.close()
    assert not started._thread.is_alive() and time.monotonic() - t0 < 1.0


def test_started_with_no_broker_answering_it_is_unreachable_at_once() -> None:
    """Started with the broker down, the process was "reachable" until librdkafka's first
    report, about 12 s (the gateway's ``/ready`` said ``broker_reachable: true`` meanwhile: a
    fresh user's trial); the start's own request decides now."""
    probe = Probe(lambda: False)
    reach = BrokerReach(KafkaSettings(), every_s=0.05, probe=probe).start()
    try:
        assert _until(lambda: not reach.reachable, timeout_s=1.0)
        assert probe.calls
    finally:
        reach.close()
