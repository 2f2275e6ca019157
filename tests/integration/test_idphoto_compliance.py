"""ID photos through the real worker (issue 39): the compliance report in the result, the
validate and retouch modes, the DPI in the JPEG, a target size, the print sheet as a second
object, and bad input (no face, two faces, a grey-scale photo) each with its reason code."""

from __future__ import annotations

import io
import threading

import cv2
import numpy as np
import pytest
from PIL import Image
from skimage import data

from schemas.models import IdPhotoPayload
from schemas.reasons import ReasonCode, Status
from streams.produce import UploadProducer
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import Worker, build_processors

from .helpers import results

pytestmark = pytest.mark.integration


def _jpeg(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, 92])
    assert ok
    return buf.tobytes()


def test_compliance_report_modes_sheet_and_bad_input(settings: Settings) -> None:
    astro = data.astronaut()
    grey = np.repeat(cv2.cvtColor(astro, cv2.COLOR_RGB2GRAY)[..., None], 3, axis=2)
    uploads = {
        "retouch-one-inch": (astro, {"size": "one_inch", "print_sheet": True}),
        "validate-us": (astro, {"size": "us_passport", "mode": "validate", "target_kb": 90,
                                "dpi": 600}),
        "grey-uk": (grey, {"size": "uk_passport"}),
        "two": (np.hstack([astro, astro]), {"size": "schengen"}),
        "none": (data.coffee(), {"size": "schengen"}),
    }
    prod = UploadProducer(settings)
    for uid, (img, opts) in uploads.items():
        prod.send(prod.event_for(uid, "id_photo", _jpeg(img), f"{uid}.jpg", opts))
    assert prod.flush() == []
    w = Worker(settings, build_processors(settings, ("id_photo",)), Storage(settings.s3))
    w.warm_up()
    th = threading.Thread(target=w.run, kwargs={"idle_exit_s": 300.0}, daemon=True)
    th.start()
    rs = {r.upload_id: r for r in results(settings, len(uploads), timeout_s=300)}
    w.stop()
    th.join(60)
    st = Storage(settings.s3)

    one = rs["retouch-one-inch"]
    p: IdPhotoPayload = one.id_photo
    assert one.status == Status.ACCEPTED and not one.reasons
    assert p.mode == "retouch" and p.dpi == 300 and p.compliance.compliant
    checks = {c.name: c for c in p.compliance.checks}
    assert checks["head_height"].passed and checks["roll"].passed
    assert p.sheet is not None and p.sheet.key.endswith("/sheet.jpg")
    sheet = Image.open(io.BytesIO(st.get(p.sheet.bucket, p.sheet.key)))
    assert sheet.size == (1800, 1200) and tuple(round(v) for v in sheet.info["dpi"]) == (300, 300)
    photo = Image.open(io.BytesIO(st.get(p.photo.bucket, p.photo.key)))
    assert photo.size == (295, 413)

    us = rs["validate-us"]
    p = us.id_photo
    assert us.status == Status.REJECTED  # her smile, and her studio backdrop is not plain
    assert ReasonCode.MOUTH_OPEN in us.reasons and p.mode == "validate"
    assert ReasonCode.BACKGROUND_REPLACED not in us.reasons
    data600 = st.get(p.photo.bucket, p.photo.key)
    im = Image.open(io.BytesIO(data600))
    assert im.size == (1200, 1200) and tuple(round(v) for v in im.info["dpi"]) == (600, 600)
    assert p.photo.size_bytes <= 90_000 and p.target_kb_met
    assert p.sheet is None

    g = rs["grey-uk"]
    assert ReasonCode.GREYSCALE in g.reasons and g.status == Status.REJECTED
    assert [str(x) for x in rs["two"].reasons] == ["MULTIPLE_FACES"]
    assert [str(x) for x in rs["none"].reasons] == ["NO_FACE"]
    assert rs["none"].id_photo.compliance is None
