"""The sleep processor on probed uploads: decodes, thumbnails, rejects what fails to decode."""

from __future__ import annotations

import cv2
import numpy as np

from processors.base import Item
from processors.decode import DecodeSettings, probe_image
from processors.registry import stand_in
from schemas.reasons import ReasonCode, Status


def test_sleep_processor_decodes_probed_uploads() -> None:
    img = np.full((60, 90, 3), 200, np.uint8)
    noisy = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    jpeg = cv2.imencode(".jpg", noisy)[1].tobytes()  # scan data >> header
    cut = probe_image(jpeg[: len(jpeg) * 6 // 10], DecodeSettings())  # the header survives
    p = stand_in("card", call_ms=0.0, item_ms=0.0, bucket=4)
    good, bad = p.process_batch([Item.from_array("a", img), Item("b", cut)])
    assert good.status == Status.ACCEPTED
    assert good.payload["quad"] == [[0.0, 0.0], [90.0, 0.0], [90.0, 60.0], [0.0, 60.0]]
    (art,) = good.artifacts
    thumb = cv2.imdecode(np.frombuffer(art.data, np.uint8), cv2.IMREAD_COLOR)
    assert thumb.shape == (32, 32, 3) and abs(int(thumb.mean()) - 200) <= 1
    assert bad.status == Status.REJECTED and bad.reasons == (ReasonCode.CORRUPT_IMAGE,)
    assert p.stats.calls == 1 and p.stats.images == 2
