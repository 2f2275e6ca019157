"""Issue 43, item 4: decode work and memory that a header does not announce.

The probe (:func:`processors.decode.probe_image`) refuses what would cost more than its pixels
(``IMAGE_TOO_COMPLEX``: too many JPEG scans, a TIFF tile far larger than its image) and
estimates the decode's peak memory per format and mode (:func:`processors.decode.decoded_bytes`);
the Pillow path converts in strips straight into the upright result. The measured peaks per
format and mode are the benchmark's (``python -m benchmarks.decode_memory``), not a test's.
"""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

import processors.decode as D
from benchmarks import decode_cases as dc
from processors.decode import (
    DECODE_OVERHEAD_BYTES,
    DecodeSettings,
    decode_image,
    decode_probed,
    decoded_bytes,
    jpeg_layout,
    probe_image,
)
from processors.errors import DecodeError
from schemas.reasons import ReasonCode

DEFAULT = DecodeSettings()
MIB = 1024 * 1024


def _refused(data: bytes, settings: DecodeSettings = DEFAULT) -> DecodeError:
    with pytest.raises(DecodeError) as e:
        probe_image(data, settings)
    return e.value


# --- JPEG scans -------------------------------------------------------------------------------

def test_jpeg_layout_counts_the_scans_of_pillows_encodings() -> None:
    """Pillow's baseline JPEG is one interleaved scan; its progressive ones follow libjpeg's
    ``jpeg_simple_progression`` (10 scans for YCbCr, 6 for greyscale)."""
    base = jpeg_layout(dc.jpeg("RGB", 2)(64, 48))
    prog = jpeg_layout(dc.jpeg("RGB", 2, progressive=True)(64, 48))
    grey = jpeg_layout(dc.jpeg("L", progressive=True)(64, 48))
    assert (base.progressive, base.sampling, base.scans) == (False, ((2, 2), (1, 1), (1, 1)), 1)
    assert (prog.progressive, prog.scans) == (True, 10)
    assert (grey.progressive, grey.sampling, grey.scans) == (True, ((1, 1),), 6)


def test_a_jpeg_at_the_scan_limit_decodes_and_one_above_is_too_complex() -> None:
    """The hand-written many-scan JPEG is valid (strict libjpeg-turbo decodes it to flat
    mid-grey); one scan more than ``max_jpeg_scans`` is refused at the probe, before any pixel
    is decoded, and says how many scans it has."""
    limit = DecodeSettings(max_jpeg_scans=20)
    ok = dc.jpeg_many_scans(80, 48, scans=19)  # 1 DC + 19 AC scans = 20
    assert jpeg_layout(ok).scans == 20
    img = decode_image(ok, limit)
    assert img.shape == (48, 80, 3) and int(img.min()) == int(img.max()) == 128
    bad = dc.jpeg_many_scans(80, 48, scans=20)
    e = _refused(bad, limit)
    assert (e.reason, str(e).split(":")[-1].strip()) == (
        ReasonCode.IMAGE_TOO_COMPLEX, "jpeg has 21 scans > max_jpeg_scans 20")


def test_the_issues_scan_bomb_is_refused_with_the_default_limit() -> None:
    """6,694 scans (issue 43: 21.9 s of decoding) against the default limit of 100."""
    data = dc.jpeg_many_scans(4000, 3000, 6694)
    assert len(data) < 600_000
    assert _refused(data).reason == ReasonCode.IMAGE_TOO_COMPLEX
    assert DEFAULT.max_jpeg_scans == 100


def test_bytes_after_eoi_are_not_counted() -> None:
    """An MPO's second picture (after the first EOI) is never decoded, so its scans do not count."""
    one = dc.jpeg("RGB", 2, progressive=True)(64, 48)
    assert jpeg_layout(one + one).scans == 10


# --- TIFF tiles --------------------------------------------------------------------------------

def test_a_tiff_tile_far_larger_than_its_image_is_too_complex() -> None:
    """A 64 x 64 image in one 8192 x 8192 tile (201 MB once inflated, 0.2 MB stored)."""
    e = _refused(dc.tiff_big_tile(64, 64, 8192))
    assert e.reason == ReasonCode.IMAGE_TOO_COMPLEX
    assert "tile 8192x8192 px is far larger than the 64x64 px image" in str(e)


@pytest.mark.parametrize(("size", "tile"), [((300, 200), (256, 256)), ((64, 64), (1024, 1024)),
                                            ((100, 60), (16, 16))])
def test_ordinary_tiled_tiffs_decode_exactly(size: tuple[int, int], tile: tuple[int, int]) -> None:
    """Tiles padded past the image edge (TIFF 6.0 section 15), up to 1 MP on a small image."""
    w, h = size
    img = decode_image(dc.tiff_tiled(w, h, tile), DEFAULT)
    assert np.array_equal(img, cv2.cvtColor(dc.blocks(w, h), cv2.COLOR_RGB2BGR))


# --- the estimate --------------------------------------------------------------------------------

@pytest.mark.parametrize(("build", "per_px", "overhead"), [
    (dc.jpeg("RGB", 2), 3, "jpeg"),                           # the BGR result
    (dc.jpeg("RGB", 2, orientation=6), 6, "jpeg"),            # + its rotated copy
    (dc.jpeg("CMYK"), 7, "jpeg"),                             # + the CMYK buffer
    (dc.png("RGBA"), 7, "other"),                             # Pillow's RGBA + the result
    (dc.png("P+tRNS"), 4, "other"),                           # Pillow's palette + the result
    (dc.png("I;16"), 5, "other"),
    (dc.webp("RGBA", lossless=True), 17, "other"),            # + libwebp's frames
    (dc.heif("RGB"), 11, "other"),                            # + libheif's planes
])
def test_the_estimate_per_format_and_mode(build, per_px: int, overhead: str) -> None:
    w, h = 640, 480
    assert decoded_bytes(probe_image(build(w, h), DEFAULT)) == (
        per_px * w * h + DECODE_OVERHEAD_BYTES[overhead])


def test_a_progressive_jpeg_counts_its_coefficients() -> None:
    """4:4:4 progressive: 3 components x 2 bytes per sample of coefficients while decoding, over
    the 3 B/px result; 4:2:0 half of that."""
    w, h = 640, 480
    p444 = decoded_bytes(probe_image(dc.jpeg("RGB", 0, progressive=True)(w, h), DEFAULT))
    p420 = decoded_bytes(probe_image(dc.jpeg("RGB", 2, progressive=True)(w, h), DEFAULT))
    assert p444 - DECODE_OVERHEAD_BYTES["jpeg"] == (3 + 6) * w * h
    assert p420 - DECODE_OVERHEAD_BYTES["jpeg"] == (3 + 3) * w * h


def test_the_issues_alpha_png_is_estimated_at_its_strip_peak() -> None:
    """The 40 MP RGBA PNG of issue 43 (1,201 MB measured against 240 MB estimated): Pillow's
    RGBA image plus the result, 7 B/px (280 MB), with the flattening done in strips."""
    img = probe_image(dc.png_rgba(7690, 5200), DEFAULT)
    assert img.mode == "RGBA"
    assert decoded_bytes(img) == 7 * 7690 * 5200 + 16 * MIB


# --- strips into the upright result -------------------------------------------------------------

@pytest.mark.parametrize("orientation", range(1, 9))
def test_strips_are_placed_as_the_whole_image_would_be_turned(
        orientation: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PNG with an EXIF orientation, converted in strips of 7 rows (strips that do not divide
    the height): the same array as converting it whole and turning it after."""
    monkeypatch.setattr(D, "STRIP_PX", 7 * 53)  # the blocks' alpha varies: a real flattening
    data = dc.png("RGBA", orientation=orientation)(53, 40)
    got, scale = decode_probed(probe_image(data, DEFAULT), DEFAULT)
    whole = np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))
    bgr = cv2.cvtColor(D._flatten(whole, (255, 255, 255)), cv2.COLOR_RGB2BGR)
    assert scale == 1.0
    assert np.array_equal(got, D._apply_orientation(bgr, orientation))


def test_running_out_of_memory_is_not_a_corrupt_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a MemoryError inside the flattening of a valid 40 MP RGBA PNG under a 1 GiB pod
    limit became a ``CORRUPT_IMAGE`` rejection, a wrong verdict; it is the process's, so it is
    raised."""
    def no_memory(*a, **k):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(D, "_to_rgb_array", no_memory)
    with pytest.raises(MemoryError):
        decode_image(dc.png("RGBA")(64, 48), DEFAULT)
