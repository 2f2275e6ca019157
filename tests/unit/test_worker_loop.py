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
