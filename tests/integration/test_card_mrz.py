"""A passport upload through the real worker: its MRZ read, the values only when asked and
allowed, never in the worker's logs (issue 44)."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from processors.card.mrz.icao import Format
from processors.card.training.documents import document
from streams.produce import UploadProducer
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import Worker, build_processors

from .helpers import results

pytestmark = pytest.mark.integration

PASSPORT_SEED = 44
"""A seeded TD3 passport photo (:func:`processors.card.training.documents.document`)."""


def _passport() -> tuple[bytes, dict]:
    img, truth = document(np.random.default_rng(PASSPORT_SEED), Format.TD3, invalid_share=0.0,
                          expired_share=0.0, size=(1600, 1200), glare_share=0.0, grey_share=0.0)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 92])
    assert ok
    return buf.tobytes(), truth.fields


def test_passport_mrz_values_off_and_on(settings: Settings, capfd: pytest.CaptureFixture[str]
                                        ) -> None:
    data, fields = _passport()
    card = settings.card.model_copy(update={"verify": settings.card.verify.model_copy(
        update={"mrz_values_allowed": True})})
    s = settings.model_copy(update={"card": card})
    prod = UploadProducer(s)
    prod.send(prod.event_for("pp-off", "card", data, "passport.jpg", None))
    prod.send(prod.event_for("pp-on", "card", data, "passport.jpg", {"mrz_values": True}))
    prod.send(prod.event_for("pp-strict", "card", data, "passport.jpg",
                             {"mrz_values": True, "profile": "strict"}))
    assert prod.flush() == []
    w = Worker(s, build_processors(s, ("card",)), Storage(s.s3))
    w.warm_up()
    th = threading.Thread(target=w.run, kwargs={"idle_exit_s": 120.0}, daemon=True)
    th.start()
    rs = {r.upload_id: r for r in results(s, 3, timeout_s=300)}
    w.stop()
    th.join(60)

    off, on = rs["pp-off"].card, rs["pp-on"].card
    assert str(rs["pp-off"].status) == "accepted"
    assert off.mrz is not None and off.mrz.found and off.mrz.format == "TD3"
    assert off.mrz.valid and off.mrz.checks.composite and off.mrz.expired is False
    assert off.mrz.values is None
    assert off.mrz.values_withheld is None and on.mrz.values_withheld is None
    assert on.mrz.values is not None
    assert on.mrz.values.document_number == fields["document_number"]
    assert on.mrz.values.primary_name == fields["primary_name"]
    assert on.quality is not None and on.quality.profile == "normal" and on.quality.portrait
    assert rs["pp-strict"].card.quality.profile == "strict"
    # personal data never in the logs
    logs = capfd.readouterr()
    for v in (fields["document_number"], fields["primary_name"]):
        assert v not in logs.out and v not in logs.err


def test_values_need_the_setting(settings: Settings) -> None:
    """Without the setting an upload's ``mrz_values: true`` gives no values."""
    data, _ = _passport()
    prod = UploadProducer(settings)
    prod.send(prod.event_for("pp-asked", "card", data, "passport.jpg", {"mrz_values": True}))
    assert prod.flush() == []
    w = Worker(settings, build_processors(settings, ("card",)), Storage(settings.s3))
    th = threading.Thread(target=w.run, kwargs={"idle_exit_s": 120.0}, daemon=True)
    th.start()
    (r,) = results(settings, 1, timeout_s=300)
    w.stop()
    th.join(60)
    assert r.card.mrz is not None and r.card.mrz.found
    assert r.card.mrz.values is None
    assert r.card.mrz.values_withheld is True  # the platform can tell why
