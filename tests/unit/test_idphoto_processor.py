"""IdPhotoProcessor verdicts, sizes, head rule, backgrounds, DPI; sizes and option parsing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from skimage import data

from processors.base import Item, Processor
from processors.idphoto.faces import FaceBox
from processors.idphoto.processor import IdPhotoProcessor, parse_options
from processors.idphoto.settings import IdPhotoSettings
from processors.idphoto.sizes import InvalidOptionError, mm_to_px, parse_background
from processors.idphoto.specs import get_spec, specs
from processors.models import model_home
from processors.runtime import RuntimeSettings
from schemas.reasons import ReasonCode, Status

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "cases"


def _bgr(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rgb[..., ::-1])


ASTRO = _bgr(data.astronaut())


@pytest.fixture(scope="module")
def proc() -> IdPhotoProcessor:
    if not (model_home() / "u2netp.onnx").is_file():
        pytest.skip(f"u2netp.onnx not in {model_home()} (run `make models`)")
    return IdPhotoProcessor(IdPhotoSettings(),
                            RuntimeSettings(device="cpu", buckets=(1, 16), cpu_max_bucket=16))


def _on_canvas(img: np.ndarray, size: tuple[int, int], grey: int = 128) -> np.ndarray:
    """``img`` pasted at the bottom centre of a plain ``grey`` ``(W, H)`` frame (a person far
    away)."""
    w, h = size
    out = np.full((h, w, 3), grey, np.uint8)
    ih, iw = img.shape[:2]
    x0 = (w - iw) // 2
    out[h - ih :, x0 : x0 + iw] = img
    return out


@pytest.fixture(scope="module")
def outcomes(proc):
    brick = cv2.cvtColor(data.brick(), cv2.COLOR_GRAY2BGR)
    items = [
        Item.from_array("astro", ASTRO, {"size": "one_inch", "background": "white"}),
        Item.from_array("two", np.concatenate([ASTRO, ASTRO], axis=1)),
        Item.from_array("brick", brick),
        Item.from_array("top", np.ascontiguousarray(ASTRO[60:])),  # hair cut by the top edge
        Item.from_array("tiny", cv2.resize(ASTRO, (200, 200), interpolation=cv2.INTER_AREA)),
        Item.from_array("blue", ASTRO,
                        {"size": "schengen", "background": "blue", "alpha_matting": False}),
        # far from the camera: a 55 px face in a 1200x900 frame (28 px where faces are searched)
        Item.from_array("far_tiny",
                        _on_canvas(cv2.resize(ASTRO, (300, 300), interpolation=cv2.INTER_AREA),
                                    (1200, 900))),
        # a small share of a big frame but enough px: a 95 px face in a 2400x1800 frame
        Item.from_array("far_big", _on_canvas(ASTRO, (2400, 1800))),
        # a 92 px face on a bright wall: the global histogram equalisation hid it
        Item.from_array("wall", _on_canvas(ASTRO, (1200, 900), 220)),
        # stored sideways / upside down without EXIF orientation
        *(Item.from_array(f"turned{k}",
                          np.ascontiguousarray(np.rot90(ASTRO, k))) for k in (1, 2, 3)),
    ]
    calls0, images0 = proc.matting.model.stats.calls, proc.matting.model.stats.images
    outs = proc.process_batch(items)
    stats = proc.matting.model.stats
    # one batched matting call for the 12 items, one more for the 3 people small in their frame
    assert (stats.calls - calls0, stats.images - images0) == (2, 12 + 3)
    return {o.upload_id: o for o in outs}


def _photo(outcome) -> np.ndarray:
    (art,) = outcome.artifacts
    im = Image.open(io.BytesIO(art.data))
    assert im.format == "JPEG"
    assert tuple(round(v) for v in im.info["dpi"]) == (300, 300)
    assert (im.width, im.height) == (art.width, art.height)
    return np.asarray(im.convert("RGB"))


def _haar_box(rgb: np.ndarray) -> FaceBox:
    haar = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_alt2.xml")
    gray = cv2.equalizeHist(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
    found = haar.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=5, minSize=(40, 40))
    assert len(found) == 1, found
    return FaceBox(*(float(v) for v in found[0]))


def _haar_chin_below_box() -> float:
    """How far below the Haar box's bottom the astronaut's hand-measured chin lies, in box
    heights (``processors/idphoto/eval_truth.json``; 0.168 with OpenCV 4.x)."""
    from processors.idphoto.evaluation import TRUTH_FILE

    chin = json.loads(TRUTH_FILE.read_text(encoding="utf-8"))["astronaut"]["chin"][1]
    b = _haar_box(data.astronaut())
    return (chin - (b.y + b.h)) / b.h


def _measure_head(photo_rgb: np.ndarray, bg_rgb: tuple[int, int, int]) -> tuple[float, float]:
    """Re-measure (head height, crown margin) in px on the output photo, independently of the
    processor's own detectors: face box from OpenCV's Haar alt2 cascade, chin below it as far
    as the hand-measured chin lies below it on the portrait (:func:`_haar_chin_below_box`;
    since issue 39 the framing takes the chin from Face Mesh, and the Haar rule of
    ``CHIN_BELOW_BOX``, 0.2, put it 3 px low), crown = first non-background row above the face
    in its middle columns."""
    b = _haar_box(photo_rgb)
    cols = photo_rgb[: int(b.y), int(b.x + b.w // 4) : int(b.x + 3 * b.w // 4)].astype(np.int16)
    differs = np.abs(cols - np.asarray(bg_rgb, np.int16)).max(axis=2) > 40
    rows = np.flatnonzero(differs.mean(axis=1) > 0.2)
    crown = float(rows[0])
    chin = b.y + b.h * (1 + _haar_chin_below_box())
    return chin - crown, crown


def test_protocol_and_model_info(proc) -> None:
    assert isinstance(proc, Processor)
    assert proc.task == "id_photo"
    assert proc.model.provider == "CPUExecutionProvider"
    assert proc.model.version.startswith("u2netp.")


def test_astronaut_becomes_one_inch_with_head_inside_rule(outcomes) -> None:
    o = outcomes["astro"]
    assert o.status == Status.ACCEPTED and o.reasons == ()
    assert (o.payload["width"], o.payload["height"]) == (295, 413)
    assert o.payload["size"] == "one_inch" and o.payload["background"] == "white"
    x, y, w, _ = o.payload["face_box"]
    assert 150 < x < 210 and 40 < y < 100 and 70 < w < 120  # her face in the 512x512 source
    photo = _photo(o)
    assert photo.shape == (413, 295, 3)
    head, crown = _measure_head(photo, (255, 255, 255))
    lo, hi = get_spec("one_inch").head_range_px
    assert lo <= head <= hi, (head, lo, hi)
    clo, chi = get_spec("one_inch").crown_range_px
    assert clo - 5 <= crown <= chi + 5, (crown, clo, chi)
    assert photo[:10, :10].min() >= 245  # white background in the corner
    assert o.inference_ms > 0


def test_two_people_rejected_multiple_faces(outcomes) -> None:
    o = outcomes["two"]
    assert o.status == Status.REJECTED
    assert o.reasons == (ReasonCode.MULTIPLE_FACES,)
    assert o.artifacts == ()
    # rejected results still carry the contract's required id_photo fields
    assert {k: o.payload[k] for k in ("size", "background", "face_box", "width", "height")} == {
        "size": "one_inch", "background": "white", "face_box": None, "width": 295, "height": 413}


def test_background_only_rejected_no_face(outcomes) -> None:
    o = outcomes["brick"]
    assert o.status == Status.REJECTED and o.reasons == (ReasonCode.NO_FACE,)


def test_head_cut_by_top_edge_rejected(outcomes) -> None:
    assert outcomes["top"].reasons == (ReasonCode.HEAD_CROPPED,)


def test_small_face_rejected(outcomes) -> None:
    o = outcomes["tiny"]
    assert o.reasons == (ReasonCode.FACE_TOO_SMALL,)
    assert o.payload["face_box"][3] < IdPhotoSettings().min_face_px


def test_face_far_from_camera_is_too_small_not_missing(outcomes) -> None:
    """A face far from the camera is told apart from no face: the person is small in the frame,
    so matting and the face search read the crop around her, where her face has the px."""
    o = outcomes["far_tiny"]
    assert o.reasons == (ReasonCode.FACE_TOO_SMALL,)
    x, y, w, h = o.payload["face_box"]
    assert 30 < h < IdPhotoSettings().min_face_px
    assert 450 + 40 < x < 450 + 140 and 600 + 10 < y < 600 + 90  # her face, in the frame's px


def test_small_share_of_a_big_frame_is_framed(outcomes) -> None:
    o = outcomes["far_big"]
    assert o.status == Status.ACCEPTED, o.reasons
    x, y, w, h = o.payload["face_box"]
    assert h >= IdPhotoSettings().min_face_px
    assert 944 + 150 < x < 944 + 210 and 1288 + 40 < y < 1288 + 100  # as in the 512 px source
    assert _photo(o).shape == (413, 295, 3)


def test_face_on_a_bright_wall_is_found(outcomes) -> None:
    o = outcomes["wall"]
    assert o.status == Status.ACCEPTED, o.reasons
    x, y, w, h = o.payload["face_box"]
    assert 344 + 150 < x < 344 + 210 and 388 + 40 < y < 388 + 100


@pytest.mark.parametrize("k", [1, 2, 3])
def test_turned_selfie_is_framed_upright(outcomes, k: int) -> None:
    """A selfie turned by k quarters (no EXIF to undo it) is found by turning it back; the photo
    is upright and ``face_box`` is in the upload's own px."""
    o = outcomes[f"turned{k}"]
    assert o.status == Status.ACCEPTED, o.reasons
    x, y, w, h = o.payload["face_box"]
    marker = np.zeros((512, 512), np.uint8)  # her face centre in the upright portrait ...
    marker[69 + 46, 178 + 46] = 1
    cy, cx = np.argwhere(np.rot90(marker, k))[0]  # ... where the turn put it in the upload
    assert abs(x + w / 2 - cx) < 12 and abs(y + h / 2 - cy) < 12, (o.payload["face_box"], cx, cy)
    head, _ = _measure_head(_photo(o), (255, 255, 255))  # the Haar cascade finds it upright
    lo, hi = get_spec("one_inch").head_range_px
    assert lo <= head <= hi


def test_schengen_on_blue(outcomes) -> None:
    """Framed for schengen on blue, and checked: the ICAO rules refuse the astronaut's smile
    and a blue background (issue 39); the photo is stored all the same."""
    o = outcomes["blue"]
    assert o.status == Status.REJECTED
    assert o.reasons == (ReasonCode.MOUTH_OPEN, ReasonCode.BACKGROUND_COLOUR,
                         ReasonCode.BACKGROUND_REPLACED)
    assert o.payload["compliance"]["compliant"] is False
    photo = _photo(o)
    assert photo.shape == (531, 413, 3)
    corner = photo[:15, :15].reshape(-1, 3).mean(axis=0)
    assert np.abs(corner - np.array([67, 142, 219])).max() < 6
    head, _ = _measure_head(photo, (67, 142, 219))
    lo, hi = get_spec("schengen").head_range_px
    assert lo <= head <= hi, (head, lo, hi)


def test_alpha_matting_changes_edges_not_size(proc, outcomes) -> None:
    (o,) = proc.process_batch(
        [Item.from_array("am", ASTRO,
                         {"size": "schengen", "background": "blue", "alpha_matting": True})]
    )
    assert o.status == Status.REJECTED and o.artifacts  # the smile and the blue (issue 39)
    with_am, without = _photo(o), _photo(outcomes["blue"])
    assert with_am.shape == without.shape
    diff = np.abs(with_am.astype(np.int16) - without.astype(np.int16)).max(axis=2)
    assert 0.001 < (diff > 20).mean() < 0.3  # edges changed, the picture did not


def test_sizes_at_300_dpi() -> None:
    got = {k: (v.width_px, v.height_px) for k, v in specs().items()}
    assert got == {"one_inch": (295, 413), "two_inch": (413, 579), "cn_passport": (390, 567),
                   "cn_visa": (390, 567), "us_passport": (600, 600), "us_visa": (600, 600),
                   "schengen": (413, 531), "uk_passport": (413, 531),
                   "canada_passport": (591, 827), "canada_visa": (413, 531),
                   "india_passport": (413, 531), "japan_passport": (413, 531)}
    lo, hi = get_spec("us_passport").head_range_px
    assert (round(lo / 600, 2), round(hi / 600, 3)) == (0.5, 0.688)
    assert mm_to_px(25.4) == 300


def test_backgrounds_and_options() -> None:
    assert parse_background("blue") == (67, 142, 219)
    assert parse_background("RED") == (215, 69, 50)
    assert parse_background("#0a0B0c") == (10, 11, 12)
    for bad in ("green", "#12345", "0a0b0c", "#gggggg"):
        with pytest.raises(InvalidOptionError):
            parse_background(bad)
    s = IdPhotoSettings()
    assert parse_options({}, s).alpha_matting is False  # one_inch default off
    assert parse_options({"size": "cn_passport"}, s).alpha_matting is True
    assert parse_options({"size": "two_inch", "alpha_matting": False}, s).alpha_matting is False
    assert parse_options({"alpha_matting": True}, s).alpha_matting is True
    with pytest.raises(InvalidOptionError):
        parse_options({"size": "three_inch"}, s)
    with pytest.raises(InvalidOptionError):
        parse_options({"alpha_matting": "yes"}, s)


def test_bad_option_is_an_outcome_not_an_exception(proc) -> None:
    (o,) = proc.process_batch([Item.from_array("bad", ASTRO, {"background": "chartreuse"})])
    assert o.status == Status.FAILED and o.reasons == (ReasonCode.INTERNAL_ERROR,)


@pytest.mark.parametrize("step", ["_plan", "_finish"])
def test_a_failing_item_is_failed_and_its_batch_goes_on(proc, monkeypatch, step) -> None:
    """The rule every processor follows (``processors.base.outcomes_per_item``): one item
    whose post-processing raises (in either per-item step: the verdict and frame, or the
    photo) is ``failed`` / INTERNAL_ERROR, its batch is not (this processor used to raise for
    the whole batch)."""
    one = getattr(IdPhotoProcessor, step)

    def poisoned(self, it, *a, **kw):
        if it.upload_id == "poison":
            raise ZeroDivisionError("a bug on one image")
        return one(self, it, *a, **kw)

    monkeypatch.setattr(IdPhotoProcessor, step, poisoned)
    calls = proc.stats.calls
    out = proc.process_batch([Item.from_array("ok", ASTRO), Item.from_array("poison", ASTRO)])
    assert [(o.upload_id, str(o.status)) for o in out] == [("ok", "accepted"), ("poison", "failed")]
    assert out[1].reasons == (ReasonCode.INTERNAL_ERROR,) and out[1].inference_ms > 0
    assert proc.stats.calls - calls in (1, 2)  # one matting call (+ one zoomed call at most)


@pytest.mark.parametrize("name", ["portrait.jpg", "portrait.heic"])
def test_shared_portrait_case(proc, name) -> None:
    path = CASES / "images" / name
    if not path.is_file():
        pytest.skip(f"{path} absent: the shared cases folder (../shared/cases) is not here")
    from processors.decode import DecodeSettings, probe_image
    from processors.errors import DecodeError

    try:
        img = probe_image(path.read_bytes(), DecodeSettings())
    except DecodeError as e:
        assert name.endswith(".heic") and e.reason == "UNSUPPORTED_FORMAT"
        return
    (o,) = proc.process_batch([Item(name, img)])
    assert o.status == Status.ACCEPTED, o.reasons
    head, _ = _measure_head(_photo(o), (255, 255, 255))
    lo, hi = get_spec("one_inch").head_range_px
    assert lo <= head <= hi


def test_corrupt_pixel_data_is_rejected_with_a_payload_the_contract_accepts(proc):
    """A JPEG whose header is whole but whose scan data is cut passes the worker's probe; the
    processor rejects it (CORRUPT_IMAGE) with the size's px like any other rejection, so the
    worker can build the contract's ``IdPhotoPayload`` (a payload without ``width`` / ``height``
    broke the contract, and the stream turned the rejection into ``failed INTERNAL_ERROR``)."""
    from processors import registry
    from processors.decode import DecodeSettings, probe_image

    ok, buf = cv2.imencode(".jpg", ASTRO, [cv2.IMWRITE_JPEG_QUALITY, 92])
    data = buf.tobytes()
    item = Item("cut", probe_image(data[: len(data) // 2], DecodeSettings()),
                {"size": "two_inch", "background": "blue"})
    out = proc.process_batch([item])[0]
    assert (out.status, out.reasons) == (Status.REJECTED, (ReasonCode.CORRUPT_IMAGE,))
    payload = registry.spec("id_photo").payload(out.payload, {})
    two_inch = get_spec("two_inch")
    assert (payload.size, payload.background, payload.width, payload.height, payload.photo) == (
        "two_inch", "blue", two_inch.width_px, two_inch.height_px, None)


def test_the_default_size_and_background_settings_take_effect(proc, monkeypatch) -> None:
    """An upload without ``size`` and ``background`` gets CARDSTREAM_IDPHOTO__DEFAULT_SIZE and
    __DEFAULT_BACKGROUND, on the path the worker takes (the task's item options, then the
    processor built from the settings section). The task's spec filled in ``one_inch`` and
    ``white`` before the processor saw the item, so these settings changed nothing."""
    from processors import registry
    from schemas.models import UploadEvent
    from streams.settings import load_settings

    monkeypatch.setenv("CARDSTREAM_IDPHOTO__DEFAULT_SIZE", "two_inch")
    monkeypatch.setenv("CARDSTREAM_IDPHOTO__DEFAULT_BACKGROUND", "#0000ff")
    s = load_settings()
    task = registry.spec("id_photo")
    ev = UploadEvent.model_validate({"upload_id": "u", "task": "id_photo",
                                     "image": {"inline_b64": "AAAA"}})
    rt = RuntimeSettings(device="cpu", buckets=(1, 16), cpu_max_bucket=16)  # proc's sessions
    worker_proc = registry.build_processor("id_photo", s.idphoto, rt)
    (o,) = worker_proc.process_batch([Item.from_array("u", ASTRO, task.item_options(ev.options))])
    assert o.status == Status.ACCEPTED, o.reasons
    assert (o.payload["size"], o.payload["background"]) == ("two_inch", "#0000ff")
    photo = _photo(o)
    assert photo.shape == (579, 413, 3)
    r, _, b = photo[3, 3]
    assert b > 200 and r < 60  # blue, not white


def test_warm_up_runs_alpha_matting_once(proc, monkeypatch):
    """pymatting compiles its kernels on first use (about a minute on a fresh virtualenv): the
    warm-up pays it, with the settings' trimap, on a crop that keeps a definite foreground after
    the erosion, so no upload does (a fresh user's first two-inch photo took 57.7 s)."""
    import processors.idphoto.processor as mod
    from processors.idphoto.framing import alpha_matting_rgba

    seen = []

    def spy(rgb, mask, fg, bg, erode):  # noqa: ANN001, ANN202
        seen.append((rgb.shape, int(mask.max()), fg, bg, erode))
        return alpha_matting_rgba(rgb, mask, fg, bg, erode)

    monkeypatch.setattr(mod, "alpha_matting_rgba", spy)
    proc.warm_up()
    s = proc.settings
    assert seen == [((96, 96, 3), 255, s.alpha_matting_foreground_threshold,
                     s.alpha_matting_background_threshold, s.alpha_matting_erode_size)]
    rgb = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    matte = np.zeros((96, 96), np.uint8)
    matte[19:-19, 19:-19] = 255
    _, alpha = alpha_matting_rgba(rgb, matte, s.alpha_matting_foreground_threshold,
                                  s.alpha_matting_background_threshold, s.alpha_matting_erode_size)
    # pymatting solved it: a soft band between the trimap's parts (its ValueError fallback would
    # return the binary matte)
    assert alpha[48, 48] == 255 and alpha[2, 2] == 0 and np.any((alpha > 0) & (alpha < 255))
