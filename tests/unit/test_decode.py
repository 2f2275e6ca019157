"""Safe decoding: the external cases of ``../shared/cases`` plus fixtures made here with Pillow."""

from __future__ import annotations

import io
import json
import struct
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from processors.decode import DecodeSettings, decode_image, sniff_format
from processors.errors import DecodeError, ProcessorError
from schemas.errors import CardstreamError
from schemas.reasons import ReasonCode

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "cases"
DEFAULT = DecodeSettings()
DECODE_KEYS = {"decoded_hw", "channels", "dtype", "pixel_bgr_at_100_150_approx"}
DECODE_REASONS = {"UNSUPPORTED_FORMAT", "IMAGE_TOO_LARGE", "CORRUPT_IMAGE"}


# ----------------------------------------------------------------------------- helpers


def _manifest_decode_cases() -> list[dict]:
    manifest = CASES / "manifest.json"
    if not manifest.is_file():
        return []
    cases = []
    for case in json.loads(manifest.read_text())["images"]:
        expect = case["expect"]
        if (
            DECODE_KEYS & expect.keys()
            or expect.get("transparent_pixels_not_green")
            or expect.get("reason") in DECODE_REASONS
            or case["file"].endswith("one_pixel.png")
        ):
            cases.append(case)
    return cases


def _assert_bgr(img: np.ndarray) -> None:
    assert isinstance(img, np.ndarray)
    assert img.ndim == 3 and img.shape[2] == 3
    assert img.dtype == np.uint8
    assert img.flags.c_contiguous


def _reason(data: bytes, settings: DecodeSettings = DEFAULT) -> str:
    with pytest.raises(DecodeError) as info:
        decode_image(data, settings)
    return info.value.reason


def _corrupt(data: bytes) -> str:
    """The message of the CORRUPT_IMAGE that decoding ``data`` raises."""
    with pytest.raises(DecodeError) as info:
        decode_image(data, DEFAULT)
    assert info.value.reason == ReasonCode.CORRUPT_IMAGE
    return str(info.value)


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _quadrants(h: int = 64, w: int = 96) -> np.ndarray:
    """``(h, w, 3) uint8`` RGB with four distinct flat quadrants: all 8 EXIF transforms differ."""
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[: h // 2, : w // 2] = (230, 30, 30)  # TL red
    rgb[: h // 2, w // 2 :] = (30, 200, 30)  # TR green
    rgb[h // 2 :, : w // 2] = (30, 30, 230)  # BL blue
    rgb[h // 2 :, w // 2 :] = (240, 240, 40)  # BR yellow
    return rgb


def _texture(h: int = 96, w: int = 128, seed: int = 0, noise: int = 20) -> np.ndarray:
    """``(h, w, 3) uint8`` RGB gradient + uniform noise in ``[-noise, noise)``.

    With noise, encoded files are large and their data spread out (for truncation); without,
    lossy codecs reproduce it closely (for round trips).
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 2, yy * 2, xx + yy], -1)
    if noise:
        base = base + rng.integers(-noise, noise, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def _rgb_to_bgr(rgb: np.ndarray) -> np.ndarray:
    return rgb[..., ::-1]


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))
        + kind
        + payload
        + struct.pack(">I", zlib.crc32(kind + payload))
    )


# Displayed image → stored image, the inverse of EXIF 2.32 Orientation's "how to display" transform,
# written with numpy independently of Pillow/OpenCV.
STORE_FOR_ORIENTATION: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],  # mirror left-right (self-inverse)
    3: lambda a: a[::-1, ::-1],  # rotate 180
    4: lambda a: a[::-1],  # mirror top-bottom
    5: lambda a: a.transpose(1, 0, 2),  # transpose (self-inverse)
    6: lambda a: np.rot90(
        a, 1
    ),  # displayed = stored turned 90 CW, so stored = displayed turned CCW
    7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # anti-transpose (self-inverse)
    8: lambda a: np.rot90(a, -1),  # displayed = stored turned 90 CCW
}


# ----------------------------------------------------------------------------- settings


def test_settings_defaults_and_frozen() -> None:
    s = DecodeSettings()
    assert s.max_bytes == 25 * 1024 * 1024
    assert s.max_pixels == 40_000_000
    assert s.min_side == 32
    assert s.flatten_bgr == (255, 255, 255)
    with pytest.raises(pydantic.ValidationError):
        s.max_pixels = 1  # type: ignore[misc]  # frozen: the assignment must raise


def test_decode_error_is_a_cardstream_error() -> None:
    err = DecodeError(ReasonCode.CORRUPT_IMAGE, "x")
    assert isinstance(err, ProcessorError) and isinstance(err, CardstreamError)


# ----------------------------------------------------------------------------- external cases


@pytest.mark.parametrize("case", _manifest_decode_cases(), ids=lambda c: c["file"])
def test_manifest_case(case: dict) -> None:
    data = (CASES / case["file"]).read_bytes()
    expect = case["expect"]
    if case["file"].endswith("one_pixel.png"):
        assert _reason(data) == ReasonCode.IMAGE_TOO_SMALL
        return
    if expect.get("reason") in DECODE_REASONS:
        assert _reason(data) == expect["reason"]
        return
    img = decode_image(data, DEFAULT)
    _assert_bgr(img)
    if "decoded_hw" in expect:
        assert list(img.shape[:2]) == expect["decoded_hw"]
    if "channels" in expect:
        assert img.shape[2] == expect["channels"]
    if "dtype" in expect:
        assert img.dtype == np.dtype(expect["dtype"])
    if "pixel_bgr_at_100_150_approx" in expect:
        want = np.array(expect["pixel_bgr_at_100_150_approx"])
        got = img[100, 150].astype(int)
        assert np.abs(got - want).max() <= expect.get("tolerance", 0), (got, want)
    if expect.get("transparent_pixels_not_green"):
        alpha = np.asarray(Image.open(io.BytesIO(data)).getchannel("A"))
        hidden = alpha == 0
        assert hidden.any()
        assert (img[hidden] == DEFAULT.flatten_bgr).all()
        black = decode_image(data, DecodeSettings(flatten_bgr=(0, 0, 0)))
        assert (black[hidden] == 0).all()
        assert (black[alpha == 255] == img[alpha == 255]).all()


def test_manifest_present_or_skip() -> None:
    if not CASES.is_dir():
        pytest.skip(f"{CASES} is absent: the external decode cases were not checked")
    assert len(_manifest_decode_cases()) >= 9


# ----------------------------------------------------------------------------- sniffing


@pytest.mark.parametrize(
    ("fmt", "pil_format", "kw"),
    [
        ("jpeg", "JPEG", {}),
        ("png", "PNG", {}),
        ("webp", "WEBP", {}),
        ("bmp", "BMP", {}),
        ("gif", "GIF", {}),
        ("tiff", "TIFF", {}),
        ("heif", "HEIF", {}),
    ],
)
def test_sniff_real_encodings(fmt: str, pil_format: str, kw: dict) -> None:
    data = _encode(Image.fromarray(_texture(40, 40)), pil_format, **kw)
    assert sniff_format(data) == fmt


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello, this is text and not an image\n",
        b"BMW is a car brand, not a bitmap..........",
        b"%PDF-1.7\n",
        b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf",  # AVIF: not decoded here
        b"RIFF\x00\x00\x00\x00WAVEfmt ",
        b"\xff\xd8",  # too short to be a JPEG SOI + marker
    ],
)
def test_sniff_rejects(data: bytes) -> None:
    assert sniff_format(data) is None
    if data:
        assert _reason(data) == ReasonCode.UNSUPPORTED_FORMAT


def test_empty_bytes_unsupported() -> None:
    assert _reason(b"") == ReasonCode.UNSUPPORTED_FORMAT
    with pytest.raises(DecodeError, match=r"^empty input \(0 bytes\)"):
        decode_image(b"", DEFAULT)


def test_bigtiff() -> None:
    assert sniff_format(b"MM\x00+\x00\x08\x00\x00") == "tiff"
    data = _encode(Image.new("RGB", (40, 40), (1, 2, 3)), "TIFF", big_tiff=True)
    assert data[:4] == b"II+\x00"
    assert (decode_image(data, DEFAULT) == (3, 2, 1)).all()


def test_sniff_heif_brands() -> None:
    assert sniff_format(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic") == "heif"
    assert sniff_format(b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00mif1heic") == "heif"
    assert sniff_format(b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00mif1avif") is None
    assert sniff_format(b"\x00\x00\x00\x18ftypisom\x00\x00\x00\x00isomavc1") is None  # MP4


# ----------------------------------------------------------------------------- limits


def test_bomb_png_header_refused_before_decoding() -> None:
    # 60000 x 60000 RGB = 10.8 GB once decoded; the IDAT is a tiny valid zlib stream of zeros.
    ihdr = struct.pack(">IIBBBBB", 60_000, 60_000, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (1 + 3 * 60_000) * 8, 9)
    data = (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )
    assert len(data) < 10_000
    start = time.perf_counter()
    assert _reason(data) == ReasonCode.IMAGE_TOO_LARGE
    assert time.perf_counter() - start < 0.5
    # said with the limit users set, not Pillow's own
    with pytest.raises(DecodeError, match=r"^png header declares 3600000000 px > max_pixels "
                                          r"40000000$"):
        decode_image(data, DEFAULT)


def test_a_header_over_pillows_warning_limit_is_refused_without_a_raw_warning() -> None:
    """A PNG header declaring 12000 x 9000 (108 MP: over Pillow's 89 MP warning limit, under
    its 179 MP error) is IMAGE_TOO_LARGE by ``max_pixels``, and Pillow's
    DecompressionBombWarning, a raw text line on stderr among the JSON logs (a fresh user's
    trial), is not written. In a child process: Python's own warning filters, not pytest's."""
    import subprocess
    import sys

    code = (
        "import struct, zlib\n"
        "from processors.decode import DecodeError, DecodeSettings, probe_image\n"
        "def chunk(t, b):\n"
        "    return struct.pack('>I', len(b)) + t + b + struct.pack('>I', zlib.crc32(t + b))\n"
        "ihdr = struct.pack('>IIBBBBB', 12000, 9000, 8, 2, 0, 0, 0)\n"
        "data = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', ihdr)\n"
        "        + chunk(b'IDAT', zlib.compress(b'\\x00' * 64)) + chunk(b'IEND', b''))\n"
        "try:\n"
        "    probe_image(data, DecodeSettings())\n"
        "except DecodeError as e:\n"
        "    print(e.reason.value)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "IMAGE_TOO_LARGE"
    assert "DecompressionBomb" not in out.stderr, out.stderr


@pytest.mark.parametrize(("frame_w", "frame_h"), [(60_000, 60_000), (8000, 5001)])
def test_gif_frame_larger_than_screen_refused(frame_w: int, frame_h: int) -> None:
    # 64x64 logical screen, first frame descriptor claims frame_w x frame_h: Pillow grows the canvas
    # to the frame, which is what the limit must see (40 000 008 px > 40 MP; 3.6e9 px > Pillow's).
    data = (
        b"GIF89a"
        + struct.pack("<HHBBB", 64, 64, 0, 0, 0)
        + b","
        + struct.pack("<HHHHB", 0, 0, frame_w, frame_h, 0)
        + b"\x02\x02\x4c\x01\x00;"
    )
    assert _reason(data) == ReasonCode.IMAGE_TOO_LARGE


@pytest.mark.parametrize("pil_format", ["JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF"])
def test_max_pixels_boundary(pil_format: str) -> None:
    data = _encode(Image.fromarray(_texture(50, 80)), pil_format)
    assert decode_image(data, DecodeSettings(max_pixels=4000)).shape == (50, 80, 3)
    assert _reason(data, DecodeSettings(max_pixels=3999)) == ReasonCode.IMAGE_TOO_LARGE


def test_max_bytes_boundary() -> None:
    data = _encode(Image.fromarray(_texture(40, 40)), "PNG")
    assert decode_image(data, DecodeSettings(max_bytes=len(data))).shape == (40, 40, 3)
    assert _reason(data, DecodeSettings(max_bytes=len(data) - 1)) == ReasonCode.IMAGE_TOO_LARGE


@pytest.mark.parametrize("pil_format", ["JPEG", "PNG"])
def test_min_side_boundary(pil_format: str) -> None:
    ok = _encode(Image.fromarray(_texture(32, 200)), pil_format)
    small = _encode(Image.fromarray(_texture(200, 31)), pil_format)
    assert decode_image(ok, DEFAULT).shape == (32, 200, 3)
    assert _reason(small) == ReasonCode.IMAGE_TOO_SMALL
    assert decode_image(small, DecodeSettings(min_side=31)).shape == (200, 31, 3)


# ----------------------------------------------------------------------------- orientation


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("pil_format", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_exif_orientation_applied_once(orientation: int, pil_format: str) -> None:
    displayed = _quadrants()
    stored = np.ascontiguousarray(STORE_FOR_ORIENTATION[orientation](displayed))
    exif = Image.Exif()
    exif[0x0112] = orientation
    kw = {"quality": 95, "subsampling": 0} if pil_format == "JPEG" else {}
    if pil_format == "WEBP":
        kw = {"lossless": True}
    data = _encode(Image.fromarray(stored), pil_format, exif=exif.tobytes(), **kw)
    img = decode_image(data, DEFAULT)
    _assert_bgr(img)
    assert img.shape[:2] == displayed.shape[:2]
    diff = np.abs(img.astype(int) - _rgb_to_bgr(displayed).astype(int))
    assert diff.mean() < 2.0, (orientation, diff.mean())


def test_exif_orientation_out_of_range_ignored() -> None:
    displayed = _quadrants()
    exif = Image.Exif()
    exif[0x0112] = 9
    data = _encode(Image.fromarray(displayed), "PNG", exif=exif.tobytes())
    assert (decode_image(data, DEFAULT) == _rgb_to_bgr(displayed)).all()


# ----------------------------------------------------------------------------- modes / colour


def test_grayscale_to_three_equal_channels() -> None:
    gray = _texture(48, 64)[..., 0]
    img = decode_image(_encode(Image.fromarray(gray, "L"), "PNG"), DEFAULT)
    _assert_bgr(img)
    for c in range(3):
        assert (img[..., c] == gray).all()


def test_grayscale_jpeg() -> None:
    gray = np.tile(np.linspace(0, 255, 64).astype(np.uint8), (48, 1))
    img = decode_image(_encode(Image.fromarray(gray, "L"), "JPEG", quality=95), DEFAULT)
    _assert_bgr(img)
    assert (img[..., 0] == img[..., 1]).all() and (img[..., 1] == img[..., 2]).all()
    assert np.abs(img[..., 0].astype(int) - gray).mean() < 2


def test_sixteen_bit_grayscale_scaled_not_clipped() -> None:
    values = np.array([0, 257, 32896, 65535, 1000, 60000], np.uint16)
    gray16 = np.tile(values, (40, 8))  # (40, 48)
    data = _encode(Image.fromarray(gray16), "PNG")
    assert Image.open(io.BytesIO(data)).mode.startswith("I")
    img = decode_image(data, DEFAULT)
    _assert_bgr(img)
    want = np.round(gray16.astype(float) * 255 / 65535).astype(int)
    assert (img[..., 1].astype(int) == want).all()
    assert img[0, 3].tolist() == [255, 255, 255]  # a plain clip to 8 bits would also give 255 ...
    assert img[0, 1].tolist() == [1, 1, 1]  # ... but 257 would clip to 255, not 1


@pytest.mark.parametrize("ext", [".png", ".tiff"])
def test_sixteen_bit_rgb(ext: str) -> None:
    bgr16 = np.random.default_rng(2).integers(0, 65536, (40, 48, 3), dtype=np.uint16)
    ok, buf = cv2.imencode(ext, bgr16)
    assert ok
    img = decode_image(buf.tobytes(), DEFAULT)
    _assert_bgr(img)
    assert np.abs(img.astype(float) - bgr16 / 257.0).max() <= 1.0


def test_float_tiff_taken_as_unit_range() -> None:
    values = np.tile(np.array([0.0, 0.5, 1.0, 2.0, -1.0, np.nan], np.float32), (40, 8))
    ok, buf = cv2.imencode(".tiff", values)
    assert ok
    img = decode_image(buf.tobytes(), DEFAULT)
    assert img[0, :6, 0].tolist() == [0, 128, 255, 255, 0, 0]


@pytest.mark.parametrize("pil_format", ["JPEG", "TIFF"])
def test_cmyk_not_inverted(pil_format: str) -> None:
    cmyk = np.zeros((40, 60, 4), np.uint8)
    cmyk[..., 1] = 255  # magenta
    cmyk[..., 2] = 255  # yellow → red
    data = _encode(Image.fromarray(cmyk, "CMYK"), pil_format)
    img = decode_image(data, DEFAULT)
    _assert_bgr(img)
    assert np.abs(img[20, 30].astype(int) - [0, 0, 255]).max() <= 10, img[20, 30]


@pytest.mark.parametrize("flatten_bgr", [(255, 255, 255), (0, 0, 0), (10, 200, 30)])
def test_rgba_flattened_never_hidden_colour(flatten_bgr: tuple[int, int, int]) -> None:
    rgba = np.zeros((40, 60, 4), np.uint8)
    rgba[..., :3] = (0, 255, 0)  # hidden green everywhere
    rgba[:, 30:, :3] = (200, 100, 50)
    rgba[:, 30:, 3] = 255
    rgba[:, 20:30, 3] = 128
    img = decode_image(
        _encode(Image.fromarray(rgba, "RGBA"), "PNG"), DecodeSettings(flatten_bgr=flatten_bgr)
    )
    _assert_bgr(img)
    assert (img[:, :20] == flatten_bgr).all()
    assert (img[:, 30:] == (50, 100, 200)).all()
    bg = np.array(flatten_bgr, float)
    half = np.array((0, 255, 0), float)[::-1] * 128 / 255 + bg * 127 / 255
    assert np.abs(img[:, 20:30].astype(float) - half).max() <= 1.0


def test_la_flattened() -> None:
    la = np.zeros((40, 40, 2), np.uint8)
    la[..., 0] = 90
    la[:, 20:, 1] = 255
    img = decode_image(
        _encode(Image.fromarray(la, "LA"), "PNG"), DecodeSettings(flatten_bgr=(0, 0, 0))
    )
    assert (img[:, :20] == 0).all() and (img[:, 20:] == 90).all()


@pytest.mark.parametrize("pil_format", ["PNG", "GIF"])
def test_palette_transparency_flattened(pil_format: str) -> None:
    index = np.zeros((40, 60), np.uint8)
    index[:, 30:] = 1
    im = Image.fromarray(index, "P")
    im.putpalette([0, 255, 0, 220, 20, 20] + [0] * (254 * 3))  # index 0 is green, made transparent
    data = _encode(im, pil_format, transparency=0)
    img = decode_image(data, DecodeSettings(flatten_bgr=(1, 2, 3)))
    _assert_bgr(img)
    assert (img[:, :30] == (1, 2, 3)).all()
    assert (img[:, 30:] == (20, 20, 220)).all()


def test_one_bit_bmp() -> None:
    bits = np.zeros((40, 64), bool)
    bits[:, 32:] = True
    img = decode_image(_encode(Image.fromarray(bits), "BMP"), DEFAULT)
    assert (img[:, :32] == 0).all() and (img[:, 32:] == 255).all()


@pytest.mark.parametrize("pil_format", ["GIF", "WEBP", "PNG"])
def test_animation_first_frame(pil_format: str) -> None:
    first = Image.new("RGB", (48, 40), (220, 20, 20))
    second = Image.new("RGB", (48, 40), (20, 20, 220))
    kw = {"lossless": True} if pil_format == "WEBP" else {}
    data = _encode(first, pil_format, save_all=True, append_images=[second], duration=100, **kw)
    assert getattr(Image.open(io.BytesIO(data)), "n_frames", 1) == 2
    img = decode_image(data, DEFAULT)
    assert np.abs(img.astype(int) - (20, 20, 220)).max() <= 3


@pytest.mark.parametrize(
    ("pil_format", "kw", "tol"),
    [
        ("PNG", {}, 0.0),
        ("BMP", {}, 0.0),
        ("TIFF", {}, 0.0),
        ("TIFF", {"compression": "tiff_lzw"}, 0.0),
        ("WEBP", {"lossless": True}, 0.0),
        ("JPEG", {"quality": 95}, 1.5),
        ("JPEG", {"quality": 90, "progressive": True}, 1.5),
        ("WEBP", {"quality": 90}, 2.0),
        ("HEIF", {"quality": 95}, 1.5),
    ],
)
def test_roundtrip_matches_source(pil_format: str, kw: dict, tol: float) -> None:
    rgb = _texture(noise=0 if tol else 20)
    img = decode_image(_encode(Image.fromarray(rgb), pil_format, **kw), DEFAULT)
    _assert_bgr(img)
    assert img.shape == rgb.shape
    assert np.abs(img.astype(int) - _rgb_to_bgr(rgb).astype(int)).mean() <= tol


# ----------------------------------------------------------------------------- corrupt data


FORMATS_FOR_TRUNCATION = [
    ("JPEG", {"quality": 90}),
    ("JPEG", {"progressive": True}),
    ("PNG", {}),
    ("WEBP", {"quality": 80}),
    ("GIF", {}),
    ("BMP", {}),
    ("TIFF", {}),
    ("HEIF", {"quality": 80}),
]


@pytest.mark.parametrize(
    "kw",
    [{"quality": 90}, {"quality": 75, "progressive": True}, {"quality": 90, "subsampling": 0}],
)
@pytest.mark.parametrize(("mode", "tol"), [("RGB", 0), ("L", 0), ("CMYK", 2)])
def test_jpeg_pixels_equal_pillow_decode(kw: dict, mode: str, tol: int) -> None:
    im = Image.fromarray(_texture(seed=3)).convert(mode)
    data = _encode(im, "JPEG", **kw)
    reference = _rgb_to_bgr(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    assert np.abs(decode_image(data, DEFAULT).astype(int) - reference).max() <= tol


def test_mpo_first_picture() -> None:
    first = Image.new("RGB", (64, 48), (220, 20, 20))
    second = Image.new("RGB", (64, 48), (20, 20, 220))
    data = _encode(first, "MPO", save_all=True, append_images=[second])
    assert sniff_format(data) == "jpeg"
    assert np.abs(decode_image(data, DEFAULT).astype(int) - (20, 20, 220)).max() <= 3


@pytest.mark.parametrize(("pil_format", "kw"), FORMATS_FOR_TRUNCATION)
@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.6, 0.9, 0.99])
def test_truncated_is_corrupt(pil_format: str, kw: dict, fraction: float) -> None:
    data = _encode(Image.fromarray(_texture()), pil_format, **kw)
    assert decode_image(data, DEFAULT).shape == (96, 128, 3)
    assert _reason(data[: int(len(data) * fraction)]) == ReasonCode.CORRUPT_IMAGE


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.95])
def test_jpeg_cut_then_end_marker_is_corrupt(fraction: float) -> None:
    # libjpeg warns "premature end of data segment" and fills grey; that must be a failure.
    data = _encode(Image.fromarray(_texture(256, 256)), "JPEG", quality=90)
    cut = data[: int(len(data) * fraction)] + b"\xff\xd9"
    assert _reason(cut) == ReasonCode.CORRUPT_IMAGE


@pytest.mark.parametrize(
    "trailer",
    [
        b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8,  # motion photo: video after EOI
        b"\xff\xd8\xff\xe0 a second picture",
        b"SEFH" + b"\x00" * 64,
    ],
)
def test_jpeg_bytes_after_end_marker_ignored(trailer: bytes) -> None:
    data = _encode(Image.fromarray(_texture()), "JPEG", quality=90)
    assert np.array_equal(decode_image(data + trailer, DEFAULT), decode_image(data, DEFAULT))


def test_jpeg_junk_before_end_marker_tolerated() -> None:
    # libjpeg: "Corrupt JPEG data: N extraneous bytes before marker 0xd9" after complete scans.
    data = _encode(Image.fromarray(_texture()), "JPEG", quality=90)
    junk = data[:-2] + b"\x00\x11\x22" + data[-2:]
    assert np.array_equal(decode_image(junk, DEFAULT), decode_image(data, DEFAULT))
    # ... but not after a cut scan, nor before SOS (a scan's start: later warnings would be hidden)
    assert _reason(data[: len(data) // 2] + b"\x00\x11\x22\xff\xd9") == ReasonCode.CORRUPT_IMAGE
    sos = data.index(b"\xff\xda")
    assert _reason(data[:sos] + b"\x00\x11" + data[sos:]) == ReasonCode.CORRUPT_IMAGE


def test_jpeg_missing_end_marker_is_corrupt() -> None:
    data = _encode(Image.fromarray(_texture()), "JPEG", quality=90)
    assert data.endswith(b"\xff\xd9")
    assert _reason(data[:-2]) == ReasonCode.CORRUPT_IMAGE


@pytest.mark.parametrize("fraction", [0.3, 0.7])
def test_png_cut_then_iend_is_corrupt(fraction: float) -> None:
    data = _encode(Image.fromarray(_texture()), "PNG")
    cut = data[: int(len(data) * fraction)] + _png_chunk(b"IEND", b"")
    assert _reason(cut) == ReasonCode.CORRUPT_IMAGE


@pytest.mark.parametrize(
    "magic",
    [b"\xff\xd8\xff\xe0", b"\x89PNG\r\n\x1a\n", b"II*\x00", b"MM\x00*"],
)
def test_magic_then_garbage_is_corrupt(magic: bytes) -> None:
    garbage = np.random.default_rng(1).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    assert _reason(magic + garbage) == ReasonCode.CORRUPT_IMAGE


@pytest.mark.parametrize(("cut", "detail"),
                         [(3, "an unknown marker or chunk"), (100, "Truncated File Read")])
def test_a_header_cut_short_says_how_many_bytes_there_were(cut: int, detail: str) -> None:
    data = _encode(Image.fromarray(_texture()), "JPEG", quality=90)
    with pytest.raises(DecodeError) as err:
        decode_image(data[:cut], DEFAULT)
    assert err.value.reason == ReasonCode.CORRUPT_IMAGE
    assert (str(err.value)
            == f"jpeg header unreadable in {cut} bytes: truncated or damaged ({detail})")


@pytest.mark.parametrize(("width", "height"), [(0, 0), (0, 64), (64, 0)])
def test_a_jpeg_frame_with_a_zero_side_says_so(width: int, height: int) -> None:
    data = bytearray(_encode(Image.fromarray(_texture()), "JPEG", quality=90))
    sof = data.find(b"\xff\xc0")  # baseline frame header: length, P, Y, X (B.2.2)
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    assert _corrupt(bytes(data)) == (f"jpeg frame header declares {width}x{height} px: "
                                     "a frame with a zero side cannot be decoded")


def test_a_png_header_pillow_cannot_parse_names_the_format() -> None:
    data = bytearray(_encode(Image.fromarray(_texture()), "PNG"))
    data[16:24] = struct.pack(">II", 0, 0)  # IHDR width and height 0
    assert _corrupt(bytes(data)) == (f"png header unreadable in {len(data)} bytes: truncated "
                                     "or damaged (not a png header Pillow can parse)")


def test_pixel_data_cut_short_says_so_without_an_exception_class() -> None:
    """A fresh user's trial (session 66): a PNG cut to half its length said "png data
    undecodable: OSError: image file is truncated"; the class name is no help to a sender."""
    data = _encode(Image.fromarray(_texture()), "PNG")
    assert _corrupt(data[: len(data) // 2]) == "png data undecodable: image file is truncated"


# ----------------------------------------------------------------------------- fuzzing


def _decode_or_typed_error(data: bytes) -> None:
    try:
        img = decode_image(data, DecodeSettings(max_pixels=4_000_000, min_side=1))
    except DecodeError as err:
        assert err.reason in {
            ReasonCode.UNSUPPORTED_FORMAT,
            ReasonCode.IMAGE_TOO_LARGE,
            ReasonCode.IMAGE_TOO_SMALL,
            ReasonCode.CORRUPT_IMAGE,
        }
    else:
        _assert_bgr(img)


MAGICS = [
    b"",
    b"\xff\xd8\xff",
    b"\x89PNG\r\n\x1a\n",
    b"RIFF\x00\x10\x00\x00WEBPVP8 ",
    b"BM\x00\x10\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00",
    b"GIF89a",
    b"II*\x00",
    b"MM\x00*",
    b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(MAGICS), tail=st.binary(max_size=600))
def test_fuzz_random_bytes_only_decode_errors(prefix: bytes, tail: bytes) -> None:
    _decode_or_typed_error(prefix + tail)


_SEEDS = {
    name: _encode(Image.fromarray(_texture(40, 48)), fmt, **kw)
    for name, fmt, kw in [
        ("jpeg", "JPEG", {"quality": 80}),
        ("png", "PNG", {}),
        ("gif", "GIF", {}),
        ("webp", "WEBP", {"quality": 80}),
        ("bmp", "BMP", {}),
        ("tiff", "TIFF", {"compression": "tiff_lzw"}),
    ]
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(_SEEDS)),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.floats(0.05, 1.0),
)
def test_fuzz_mutated_images_only_decode_errors(
    name: str, edits: list[tuple[float, int]], cut: float
) -> None:
    data = bytearray(_SEEDS[name])
    for where, value in edits:
        data[min(int(where * len(data)), len(data) - 1)] = value
    _decode_or_typed_error(bytes(data[: max(1, int(len(data) * cut))]))


# ----------------------------------------------------------------------------- threads


def test_thread_pool_gives_same_results() -> None:
    blobs = [
        _encode(Image.fromarray(_texture(seed=i)), fmt)
        for i, fmt in enumerate(["JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "HEIF", "JPEG"])
    ]
    serial = [decode_image(b, DEFAULT) for b in blobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(lambda b: decode_image(b, DEFAULT), blobs * 4))
    for i, img in enumerate(parallel):
        assert np.array_equal(img, serial[i % len(blobs)])
