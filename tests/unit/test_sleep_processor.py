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


def test_the_id_photo_stand_in_stores_a_sheet_only_when_asked() -> None:
    """With ``print_sheet: true`` the stand-in carries a second artifact, ``sheet``, as the
    ID-photo processor does (other bytes than the photo's: 48 x 32 px), and the task's payload
    names it; without it, the photo alone."""
    from processors.registry import spec
    from schemas.models import ObjectRef

    img = np.random.default_rng(1).integers(0, 256, (60, 90, 3), dtype=np.uint8)
    p = stand_in("id_photo", call_ms=0.0, item_ms=0.0)
    asked, plain, no = p.process_batch([Item.from_array("a", img, {"print_sheet": True}),
                                        Item.from_array("b", img),
                                        Item.from_array("c", img, {"print_sheet": False})])
    assert [a.name for a in asked.artifacts] == ["photo", "sheet"]
    assert [a.name for a in plain.artifacts] == [a.name for a in no.artifacts] == ["photo"]
    photo, sheet = asked.artifacts
    shown = cv2.imdecode(np.frombuffer(sheet.data, np.uint8), cv2.IMREAD_COLOR)
    assert shown.shape == (32, 48, 3) and (sheet.width, sheet.height) == (48, 32)
    assert sheet.data != photo.data and photo.data == plain.artifacts[0].data
    refs = {a.name: ObjectRef(bucket="results", key=f"id_photo/sleep-1/a/x/{a.name}.png",
                              size_bytes=len(a.data), sha256="0" * 64,
                              content_type=a.content_type, width=a.width, height=a.height)
            for a in asked.artifacts}
    payload = spec("id_photo").payload(asked.payload, refs)
    assert payload is not None and payload.sheet == refs["sheet"]
    assert payload.photo == refs["photo"]
