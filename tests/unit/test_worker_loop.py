"""The worker's loop (unit tier): waiting for the object store."""

from __future__ import annotations

import json

import pytest

from streams.logs import configure_logging
from streams.settings import load_settings
from streams.worker import Worker
from tests.doubles import FakeConsumer, StoreDouble


def test_the_worker_says_when_the_store_answers_again(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO")
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    w = Worker(load_settings(), {}, storage=StoreDouble([False, True, True]))
    w.intake.open(FakeConsumer())
    w.wait_for_storage()  # one 0.5 s wait, polling all the while
    back = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"storage_back"' in x]
    assert len(back) == 1 and 0.5 <= back[0]["waited_s"] < 2.0
    w.wait_for_storage()  # already up: no line
    assert '"storage_back"' not in capsys.readouterr().err


def test_live_fails_once_a_batch_computes_past_the_deadline_while_the_loop_ticks() -> None:
    import time

    from streams.health import Health

    h = Health(stall_s=0.2)
    h.compute_since = time.monotonic()
    h.tick()
    assert h.live() and h.overdue_s() == 0.0
    time.sleep(0.3)
    h.tick()  # the loop keeps polling while the batch thread hangs
    assert not h.live() and 0.05 < h.overdue_s() < 1.0
    h.computed(h.compute_since - 1.0)  # an earlier batch's end: this one is still late
    assert not h.live()
    h.computed(h.compute_since)
    assert h.live() and h.overdue_s() == 0.0
