"""The probe/decode split and the CPU pixel backend (``processors.pixels``): shapes, dtypes,
scales, sampling and warps checked against OpenCV on drawn images (no model)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from processors.base import Item
from processors.decode import DecodeSettings, EncodedImage, decode_image, decode_probed, probe_image
from processors.errors import DecodeError, ProviderError
from processors.pixels import (
    CpuPixels,
    Decoded,
    PixelBackend,
    antialias_factor,
    pixel_backend,
    shrink,
    working_size,
)
from processors.runtime import RuntimeSettings
from schemas.reasons import ReasonCode

DEFAULT = DecodeSettings()


def _photo(w: int = 1600, h: int = 1200, seed: int = 0) -> np.ndarray:
    """A ``(h, w, 3) uint8`` BGR photo-like image: smooth gradients, a light card, noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([80 + 60 * xx / w, 90 + 50 * yy / h, 120 - 40 * xx / w], axis=2)
    img[h // 4:3 * h // 4, w // 5:4 * w // 5] = (225, 215, 200)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _jpeg(img: np.ndarray, orientation: int | None = None, quality: int = 92) -> bytes:
    im = Image.fromarray(img[..., ::-1])
    buf = io.BytesIO()
    kw = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kw["exif"] = exif.tobytes()
    im.save(buf, "JPEG", quality=quality, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_probe_gives_the_displayed_size_without_decoding(orientation):
    data = _jpeg(_photo(640, 480), orientation)
    e = probe_image(data, DEFAULT)
    img = decode_image(data, DEFAULT)
    assert (e.format, e.orientation) == ("jpeg", orientation)
    assert (e.height, e.width) == img.shape[:2] == ((640, 480) if orientation >= 5 else (480, 640))


@pytest.mark.parametrize(("long_side", "shape", "scale"), [
    (None, (1200, 1600), 1.0), (2000, (1200, 1600), 1.0), (800, (600, 800), 0.5),
    (400, (300, 400), 0.25), (500, (450, 600), 0.375), (1, (150, 200), 0.125)])
def test_jpeg_dct_scaling_picks_the_smallest_scale_that_keeps_the_long_side(long_side, shape,
                                                                            scale):
    full = _photo()
    e = probe_image(_jpeg(full), DEFAULT)
    img, s = decode_probed(e, DEFAULT, long_side)
    assert img.shape == (*shape, 3) and img.dtype == np.uint8 and img.flags.c_contiguous
    assert s == scale
    # the scaled decode is the full image, area-averaged (JPEG noise aside)
    ref = cv2.resize(decode_image(e.data, DEFAULT), shape[::-1], interpolation=cv2.INTER_AREA)
    assert np.abs(img.astype(int) - ref.astype(int)).mean() < 3.0


def test_scaled_decode_applies_the_orientation():
    data = _jpeg(_photo(800, 600), orientation=6)  # stored landscape, displayed portrait
    img, s = decode_probed(probe_image(data, DEFAULT), DEFAULT, 400)
    assert img.shape[:2] == (400, 300) and s == 0.5


@pytest.mark.parametrize("long_side", [None, 400])
def test_truncated_jpeg_passes_the_probe_and_fails_the_decode(long_side):
    data = _jpeg(_photo(640, 480))
    cut = data[: len(data) // 2]
    e = probe_image(cut, DEFAULT)  # the header is whole
    with pytest.raises(DecodeError) as ei:
        decode_probed(e, DEFAULT, long_side)
    assert ei.value.reason == ReasonCode.CORRUPT_IMAGE


def test_from_array_is_lossless():
    img = _photo(97, 61, seed=3)
    e = EncodedImage.from_array(img)
    assert (e.format, e.width, e.height) == ("png", 97, 61)
    assert np.array_equal(decode_image(e.data, DEFAULT), img)
    assert Item.from_array("x", img, {"doc_type": "id_card"}).options == {"doc_type": "id_card"}
    with pytest.raises(DecodeError):
        EncodedImage.from_array(np.zeros((8, 8, 3), np.uint8))  # under min_side


def test_cpu_backend_decode_reports_errors_in_place():
    px = CpuPixels(DEFAULT, threads=1)
    good = probe_image(_jpeg(_photo(640, 480)), DEFAULT)
    bad = probe_image(good.data[: len(good.data) // 3], DEFAULT)
    out = px.decode([good, bad, good], 320)
    assert isinstance(out[0], Decoded) and isinstance(out[2], Decoded)
    assert (out[0].width, out[0].height, out[0].scale) == (320, 240, 0.5)
    assert isinstance(out[1], DecodeError) and out[1].reason == ReasonCode.CORRUPT_IMAGE
    assert isinstance(px, PixelBackend)


def test_model_input_shape_and_normalisation():
    px = CpuPixels(DEFAULT, threads=1)
    img = _photo(1600, 1200)
    (d,) = px.decode([EncodedImage.from_array(img)], None)
    x = px.model_input([d, d], 320)
    assert x.shape == (2, 3, 320, 320) and x.dtype == np.float32 and x.flags.c_contiguous
    # undo the ImageNet standardisation: RGB in [0, 1] with its maximum at 1
    rgb = x[0].transpose(1, 2, 0) * [0.229, 0.224, 0.225] + [0.485, 0.456, 0.406]
    assert abs(rgb.max() - 1.0) < 1e-4 and rgb.min() >= -1e-4
    ref = cv2.resize(img, (320, 320), interpolation=cv2.INTER_AREA)[..., ::-1].astype(np.float64)
    assert np.abs(rgb - ref / ref.max()).mean() * 255.0 < 2.0  # grey levels


@pytest.mark.parametrize(("w", "h", "max_side", "size"), [
    (1600, 1200, 1024, (1024, 768)), (640, 480, 1024, (640, 480)), (4032, 3024, 1024, (1024, 768)),
    (1200, 1600, 1024, (768, 1024)), (2016, 1512, None, (2016, 1512))])
def test_working_grey_size(w, h, max_side, size):
    assert working_size(w, h, max_side) == size
    px = CpuPixels(DEFAULT, threads=1)
    d = Decoded(_photo(w, h), w, h, 1.0)
    (g,) = px.working_grey([d], max_side)
    assert g.shape == size[::-1] and g.dtype == np.uint8
    ref = cv2.resize(cv2.cvtColor(d.pixels, cv2.COLOR_BGR2GRAY), size, interpolation=cv2.INTER_AREA)
    assert np.abs(g.astype(int) - ref.astype(int)).mean() < 2.0


def test_shrink_returns_the_image_itself_at_its_size():
    img = _photo(64, 48)
    assert shrink(img, (64, 48)) is img
    assert shrink(img, (16, 12)).shape == (12, 16, 3)


def test_sample_grey_matches_opencv_remap_of_the_grey_image():
    img = _photo(320, 240, seed=5)
    px = CpuPixels(DEFAULT)
    d = Decoded(img, 320, 240, 1.0)
    rng = np.random.default_rng(1)
    pts = rng.uniform([-5, -5], [325, 245], (7, 9, 2)).astype(np.float32)
    got = px.sample_grey(d, pts)
    grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY).astype(np.float32)
    ref = cv2.remap(grey, pts[..., 0], pts[..., 1], cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_REPLICATE)
    assert got.shape == (7, 9) and got.dtype == np.float32
    assert np.abs(got - ref).max() < 1.0  # cvtColor rounds to whole grey levels


def test_warp_takes_the_inverse_map_and_bakes_a_half_turn_in():
    img = _photo(400, 300, seed=2)
    px = CpuPixels(DEFAULT)
    d = Decoded(img, 400, 300, 1.0)
    shift = np.array([[1.0, 0, 50], [0, 1, 40], [0, 0, 1]])  # output (x, y) -> source (x+50, y+40)
    turn = np.array([[-1.0, 0, 199], [0, -1, 149], [0, 0, 1]])  # a half turn of a 200 x 150 output
    a, b = px.warp([d, d], np.stack([shift, shift @ turn]), [(200, 150), (200, 150)])
    assert a.shape == (150, 200, 3) and a.dtype == np.uint8
    assert np.array_equal(a, img[40:190, 50:250])
    assert np.array_equal(b, a[::-1, ::-1])
    jpg = px.encode_jpeg([a], 92)[0]
    back = cv2.imdecode(np.frombuffer(jpg, np.uint8), cv2.IMREAD_COLOR)
    assert back.shape == a.shape and np.abs(back.astype(int) - a.astype(int)).mean() < 5.0


def test_warp_area_averages_a_region_much_wider_than_its_output():
    h_map = np.diag([8.0, 8.0, 1.0])  # a 100 x 50 output of an 800 x 400 region
    assert antialias_factor(h_map, (100, 50)) == 4
    assert antialias_factor(np.eye(3), (100, 50)) == 1
    stripes = np.zeros((400, 800, 3), np.uint8)
    stripes[:, ::2] = 255  # 1-px stripes alias to all black or all white when point-sampled
    out = CpuPixels(DEFAULT).warp([Decoded(stripes, 800, 400, 1.0)], h_map[None], [(100, 50)])[0]
    assert abs(float(out[5:-5, 5:-5].mean()) - 127.5) < 3.0


def test_backend_choice(monkeypatch):
    assert isinstance(pixel_backend(RuntimeSettings(device="cpu"), DEFAULT), CpuPixels)
    # a build without the GPU backend module serves cuda with CPU pixels (the model decides)
    monkeypatch.setitem(__import__("processors.pixels").pixels.BACKENDS, "cuda",
                        "processors.no_such_backend:X")
    assert isinstance(pixel_backend(RuntimeSettings(device="cuda"), DEFAULT), CpuPixels)
    # a backend whose packages fail to load: a ProviderError for cuda, the CPU for auto
    monkeypatch.setitem(__import__("processors.pixels").pixels.BACKENDS, "cuda",
                        "processors.pixels:NoSuchClass")
    with pytest.raises(ProviderError):
        pixel_backend(RuntimeSettings(device="cuda"), DEFAULT)
