"""Safe decoding of untrusted upload bytes into ``(H, W, 3) uint8`` BGR arrays.

Rules (in order, each refusal is a :class:`~processors.errors.DecodeError` with a
:class:`~schemas.reasons.ReasonCode`):

1. ``len(data) > max_bytes`` → ``IMAGE_TOO_LARGE``; empty bytes → ``UNSUPPORTED_FORMAT``.
2. The format is sniffed from magic bytes only (:func:`sniff_format`), never from a file name or a
   declared content type; unknown → ``UNSUPPORTED_FORMAT``. Pillow is then restricted to that one
   plugin, so no other decoder ever sees the bytes.
3. The header is parsed lazily (``Image.open`` reads no pixel data) and the declared
   ``width * height`` is compared with ``max_pixels`` → ``IMAGE_TOO_LARGE`` before any pixel is
   decoded. ``min(width, height) < min_side`` → ``IMAGE_TOO_SMALL``. Work the pixel count does
   not announce is refused as ``IMAGE_TOO_COMPLEX``, also before decoding: a JPEG with more than
   ``max_jpeg_scans`` scans (each progressive scan is a pass over every coefficient:
   :func:`jpeg_layout`), a TIFF tile far larger than its image (libtiff inflates whole tiles).
   The probe also estimates the decode's peak memory from the header (:func:`decoded_bytes`,
   per format and mode, measured by ``python -m benchmarks.decode_memory``).
4. JPEG pixels are decoded by libjpeg-turbo through ``simplejpeg`` in strict mode: every libjpeg
   warning ("Premature end of JPEG file", "Corrupt JPEG data: premature end of data segment",
   bad Huffman code...) is ``CORRUPT_IMAGE``, never a grey-filled partial image (Pillow ignores
   those warnings, so it is not used for JPEG pixels). Other formats are decoded by Pillow with
   ``ImageFile.LOAD_TRUNCATED_IMAGES = False`` ("image file is truncated" → ``CORRUPT_IMAGE``);
   any decoder failure (``OSError``, ``SyntaxError``, ``ValueError``, ``EOFError``,
   libtiff/libwebp/libheif errors...) is ``CORRUPT_IMAGE`` too.
5. The EXIF Orientation (tag 274, values 1..8, read as ``ImageOps.exif_transpose`` reads it, XMP
   ``tiff:Orientation`` included; other values count as 1) is applied exactly once, to the decoded
   array. TIFF: Pillow applies it while loading and clears the tag, so it is read after loading.
   HEIF: pillow-heif applies the container's ``irot``/``imir`` and clears the EXIF orientation.
6. Colour: CMYK/YCCK JPEGs are taken with Adobe's inverted-CMYK convention (as Pillow does) and
   converted by simplejpeg; other CMYK, YCbCr, LAB, HSV → RGB by Pillow; 1-bit, palette and
   grayscale → 3 equal channels; 16-bit grayscale (``I;16*``; ``I`` clipped to 0..65535) → 8-bit
   by ``round(v * 255 / 65535)``; 16-bit RGB(A) → 8-bit by Pillow (high byte); float (``F``) is
   taken as 0..1. Alpha (RGBA, LA, PA, or palette/grayscale/RGB with a ``tRNS`` transparent
   colour) is flattened against ``flatten_bgr``: ``out = (c * a + bg * (255 - a) + 127) // 255``,
   so the RGB hidden under ``alpha = 0`` never shows. Animated GIF/WebP/APNG, multi-page TIFF and
   MPO: first frame. No ICC colour management (pixel values are taken as sRGB).

Pixel limits: ``DecodeSettings.max_pixels`` is checked on the header's size. Pillow's own
decompression-bomb check (``Image.MAX_IMAGE_PIXELS``, left at Pillow's default of 89 478 485 px,
error above twice that) stays on as a second line for sizes Pillow meets after the header (a GIF
frame larger than its screen, WebP canvases, TIFF tiles); its ``DecompressionBombError`` is caught
and reported as ``IMAGE_TOO_LARGE``, never raised untyped. A ``max_pixels`` above ~179 MP is thus
capped by Pillow.

Probe, then decode (issue 29): :func:`probe_image` applies rules 1-3 (and reads the EXIF
orientation of a JPEG) without decoding a pixel, so the worker can hand processors an
:class:`EncodedImage` (the bytes plus the validated header) and each processor decodes at the
size its work needs with :func:`decode_probed` (JPEG: libjpeg-turbo's DCT scaling by M/8);
rules 4-6 apply there. :func:`decode_image` is the two in a row at full resolution.

Thread safety: :func:`decode_image` keeps no state between calls; the only process-wide Pillow
settings (``ImageFile.LOAD_TRUNCATED_IMAGES = False``, the HEIF opener) are set once at import of
this module.
"""

from __future__ import annotations

import io
import math
import re
import struct
import warnings
from dataclasses import dataclass

import cv2
import numpy as np
import pillow_heif
import simplejpeg
from PIL import Image, ImageFile
from pydantic import BaseModel, ConfigDict, Field

from processors.errors import DecodeError
from schemas.reasons import ReasonCode

__all__ = ["DecodeSettings", "EncodedImage", "decode_image", "decode_probed", "probe_image",
           "sniff_format"]

_EXIF_ORIENTATION = 0x0112  # EXIF 2.32 / TIFF 6.0 tag 274
# libjpeg's JWRN_EXTRANEOUS_DATA met at the EOI marker (0xFFD9), see _decode_jpeg.
_JUNK_BEFORE_EOI = re.compile(r"extraneous bytes before marker 0xd9\b")

# Process-wide Pillow settings, set once (see the module docstring). Image.MAX_IMAGE_PIXELS keeps
# Pillow's default (89 478 485 px, error above twice that) as a second line behind max_pixels.
ImageFile.LOAD_TRUNCATED_IMAGES = False
pillow_heif.register_heif_opener()
# Between Pillow's limit and twice it (89-179 MP) Image.open warns (DecompressionBombWarning) as
# a raw text line on stderr among the JSON log lines; max_pixels refuses such a header right
# after (IMAGE_TOO_LARGE), so the warning says nothing the result does not. Once, process-wide
# (warnings.catch_warnings is not thread-safe, and headers are probed in a thread pool).
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class DecodeSettings(BaseModel):
    """Input limits for safe decoding (``CARDSTREAM_DECODE__*``).

    Attributes:
        max_bytes: largest accepted upload in bytes (default 25 MiB); larger → ``IMAGE_TOO_LARGE``.
        max_pixels: largest accepted ``width * height`` declared by the header, in pixels
            (default 40 000 000 = 40 MP, the limit of issue 8; phones' default 12-24 MP photos pass,
            a full-resolution 48 MP or 50 MP photo does not); larger → ``IMAGE_TOO_LARGE``, decided
            before decoding. A decoded 40 MP BGR image is 120 MB.
        min_side: smallest accepted ``min(height, width)`` in px (default 32); smaller →
            ``IMAGE_TOO_SMALL``.
        flatten_bgr: colour (B, G, R), 0..255, that transparent pixels are composited over
            (default white).
        max_jpeg_scans: most scans (SOS segments) a JPEG may have (default 100, the bound
            libtiff puts on JPEG-in-TIFF, ``tif_jpeg.c`` ``max_allowed_scan_number``); every
            progressive scan is a pass over the whole image's coefficients, so more →
            ``IMAGE_TOO_COMPLEX`` before decoding. libjpeg's progressive script has 10 scans
            (``jpeg_simple_progression``), 6 for greyscale.
    """

    model_config = ConfigDict(frozen=True)

    max_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    max_pixels: int = Field(default=40_000_000, gt=0)
    min_side: int = Field(default=32, ge=1)
    flatten_bgr: tuple[int, int, int] = (255, 255, 255)
    max_jpeg_scans: int = Field(default=100, ge=1)


# Sniffed format → the one Pillow plugin allowed to read it.
_PIL_FORMATS: dict[str, tuple[str, ...]] = {
    "jpeg": ("JPEG", "MPO"),
    "png": ("PNG",),
    "webp": ("WEBP",),
    "bmp": ("BMP",),
    "gif": ("GIF",),
    "tiff": ("TIFF",),
    "heif": ("HEIF",),
}
# BITMAPINFOHEADER family sizes (Microsoft "Bitmap Header Types"): core 12, OS/2 v2 16/64, info 40,
# v2 52, v3 56, v4 108, v5 124.
_BMP_DIB_SIZES = frozenset({12, 16, 40, 52, 56, 64, 108, 124})
# ISO/IEC 23008-12 (HEIF) brands of HEVC-coded images and sequences; "mif1"/"msf1" are the generic
# HEIF brands, accepted unless the file says it is AVIF (not decoded here).
_HEIF_HEVC_BRANDS = frozenset(
    {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs"}
)
_HEIF_GENERIC_BRANDS = frozenset({b"mif1", b"msf1"})
_AVIF_BRANDS = frozenset({b"avif", b"avis"})


def _heif_brands(data: bytes) -> set[bytes]:
    """Major + compatible brands of an ISO-BMFF ``ftyp`` box at offset 0 (empty if none)."""
    if len(data) < 16 or data[4:8] != b"ftyp":
        return set()
    (box_size,) = struct.unpack(">I", data[:4])
    end = min(box_size, len(data), 4096) if box_size >= 16 else 16
    brands = {data[8:12]}
    brands.update(data[i : i + 4] for i in range(16, end - 3, 4))
    return brands


def sniff_format(data: bytes) -> str | None:
    """Identify an image format from its magic bytes.

    Args:
        data: the first bytes of the file (the whole file is fine; at most 4 KiB are read).

    Returns:
        ``"jpeg"`` (SOI ``FF D8 FF``), ``"png"`` (8-byte PNG signature), ``"webp"``
        (``RIFF....WEBP``), ``"bmp"`` (``BM`` + a known DIB header size at offset 14), ``"gif"``
        (``GIF87a``/``GIF89a``), ``"tiff"`` (``II*\\0``/``MM\\0*``; BigTIFF ``II+\\0``/``MM\\0+``),
        ``"heif"`` (ISO-BMFF ``ftyp`` with a HEIF brand, not AVIF), or ``None`` for anything else
        (text, AVIF, PDF...).
    """
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # TIFF 6.0, BigTIFF
        return "tiff"
    if data[:2] == b"BM" and len(data) >= 18:
        (dib_size,) = struct.unpack("<I", data[14:18])
        if dib_size in _BMP_DIB_SIZES:
            return "bmp"
        return None
    brands = _heif_brands(data)
    if brands & _HEIF_HEVC_BRANDS or (brands & _HEIF_GENERIC_BRANDS and not brands & _AVIF_BRANDS):
        return "heif"
    return None


def _unreadable_header(data: bytes, fmt: str, exc: Exception) -> str:
    """The CORRUPT_IMAGE message for a header Pillow could not parse. Pillow's own text is often
    no help (a ``KeyError`` of one byte for an unknown JPEG marker, "cannot identify image file"
    for a frame of zero width): say what the file declares where we can read it, and how much
    there was."""
    if fmt == "jpeg":
        size = jpeg_layout(data).size
        if size is not None and 0 in size:  # X = 0 is forbidden, Y = 0 (DNL) unsupported: B.2.2
            return (f"jpeg frame header declares {size[0]}x{size[1]} px: "
                    "a frame with a zero side cannot be decoded")
    if type(exc) in (OSError, SyntaxError) and str(exc):
        detail = str(exc)
    elif isinstance(exc, KeyError):
        detail = "an unknown marker or chunk"
    else:
        detail = f"not a {fmt} header Pillow can parse"
    return f"{fmt} header unreadable in {len(data)} bytes: truncated or damaged ({detail})"


def _open_checked(data: bytes, fmt: str, settings: DecodeSettings) -> Image.Image:
    """Open lazily with the sniffed plugin and enforce the header limits; pixels not yet decoded."""
    try:
        im = Image.open(io.BytesIO(data), formats=_PIL_FORMATS[fmt])
    except Image.DecompressionBombError as exc:  # Pillow's second-line limit (module docstring)
        # say it as the check below does, with our limit (the one a user can set), not Pillow's
        n = re.search(r"Image size \((\d+) pixels\)", str(exc))
        declares = f"declares {n.group(1)} px" if n else f"too large for Pillow ({exc})"
        raise DecodeError(ReasonCode.IMAGE_TOO_LARGE,
                          f"{fmt} header {declares} > max_pixels {settings.max_pixels}") from None
    except Exception as exc:  # noqa: BLE001 - any header parser failure is a corrupt file
        raise DecodeError(ReasonCode.CORRUPT_IMAGE, _unreadable_header(data, fmt, exc)) from None
    width, height = im.size
    if width * height > settings.max_pixels:
        im.close()
        raise DecodeError(
            ReasonCode.IMAGE_TOO_LARGE,
            f"{fmt} header declares {width}x{height} = {width * height} px "
            f"> max_pixels {settings.max_pixels}",
        )
    if min(width, height) < settings.min_side:
        im.close()
        raise DecodeError(
            ReasonCode.IMAGE_TOO_SMALL,
            f"{fmt} image is {width}x{height} px, smaller side < min_side {settings.min_side}",
        )
    return im


def _has_alpha(im: Image.Image) -> bool:
    return im.mode in ("RGBA", "RGBa", "LA", "La", "PA") or (
        "transparency" in im.info and im.mode in ("P", "L", "RGB", "1")
    )


def _flatten(rgba: np.ndarray, bg_rgb: tuple[int, int, int]) -> np.ndarray:
    """``(H, W, 4) uint8`` RGBA → ``(H, W, 3) uint8`` RGB composited over ``bg_rgb`` (rounded)."""
    alpha = rgba[..., 3:4].astype(np.uint16)
    colour = rgba[..., :3].astype(np.uint16)
    bg = np.asarray(bg_rgb, dtype=np.uint16)
    # max 255 * 255 + 127 = 65152 fits in uint16
    out = (colour * alpha + bg * (255 - alpha) + 127) // 255
    return out.astype(np.uint8)


def _to_rgb_array(im: Image.Image, bg_rgb: tuple[int, int, int]) -> np.ndarray:
    """Decoded Pillow image of any mode → ``(H, W, 3)`` (or ``(H, W)`` gray) ``uint8`` RGB array."""
    mode = im.mode
    if mode.startswith("I;16") or mode == "I":
        values = np.asarray(im)
        if mode == "I":
            values = np.clip(values, 0, 65535)
        wide = values.astype(np.uint32)
        return ((wide * 255 + 32767) // 65535).astype(np.uint8)
    if _has_alpha(im):
        return _flatten(np.asarray(im.convert("RGBA")), bg_rgb)
    if mode == "L":
        return np.asarray(im)
    if mode == "F":  # floating-point samples, taken as 0..1 intensity (NaN → 0)
        values = np.nan_to_num(np.asarray(im), nan=0.0, posinf=1.0, neginf=0.0)
        return np.round(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)
    if mode == "1":
        return np.asarray(im.convert("L"))
    if mode != "RGB":  # P without transparency, CMYK (TIFF), YCbCr, LAB, HSV, RGBX
        im = im.convert("RGB")
    return np.asarray(im)


def _orientation(im: Image.Image) -> int:
    """EXIF Orientation (tag 274; Pillow also reads XMP ``tiff:Orientation``) from the header, 1..8.

    An unreadable EXIF block or a value outside 1..8 counts as 1 (as ``ImageOps.exif_transpose``).
    """
    try:
        value = im.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not refuse the picture
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _apply_orientation(bgr: np.ndarray, orientation: int) -> np.ndarray:
    """Turn a stored ``(H, W, 3)`` array into its displayed form, per EXIF 2.32 Orientation.

    1 as is, 2 mirror left-right, 3 rotate 180°, 4 mirror top-bottom, 5 transpose, 6 rotate 90°
    clockwise, 7 transverse (anti-transpose), 8 rotate 90° counter-clockwise; the same mapping as
    ``PIL.ImageOps.exif_transpose``. Returns a C-contiguous array.
    """
    if orientation == 2:
        return cv2.flip(bgr, 1)
    if orientation == 3:
        return cv2.rotate(bgr, cv2.ROTATE_180)
    if orientation == 4:
        return cv2.flip(bgr, 0)
    if orientation == 5:
        return cv2.transpose(bgr)
    if orientation == 6:
        return cv2.rotate(bgr, cv2.ROTATE_90_CLOCKWISE)
    if orientation == 7:
        return cv2.flip(cv2.transpose(bgr), -1)
    if orientation == 8:
        return cv2.rotate(bgr, cv2.ROTATE_90_COUNTERCLOCKWISE)
    return bgr


def _decode_jpeg(data: bytes, size: tuple[int, int], long_side: int | None = None
                 ) -> tuple[np.ndarray, float]:
    """JPEG pixels with libjpeg-turbo (simplejpeg) in strict mode → (``(h, w, 3) uint8`` BGR,
    scale).

    Strict mode (libjpeg-turbo's ``TJFLAG_STOPONWARNING``) turns libjpeg's recoverable warnings
    ("Premature end of JPEG file", "Corrupt JPEG data: premature end of data segment", bad
    Huffman codes...) into errors: Pillow ignores them and returns a grey-filled partial image.
    One warning is benign and tolerated: junk bytes just before the EOI marker ("N extraneous bytes
    before marker 0xd9"), which libjpeg only meets after every scan is complete, so no later
    warning can be hidden by it. Bytes after EOI (MPO pictures, motion-photo videos) are never
    read. Grayscale, YCbCr, CMYK and YCCK (Adobe's inverted CMYK convention) become BGR.

    ``size`` is the stored ``(width, height)`` from the header. With ``long_side``, libjpeg-turbo
    scales in the DCT domain by the smallest factor M/8 (M = 1..8) that keeps the stored long side
    at least ``long_side`` px; every coefficient is still entropy-decoded, so corrupt data is
    found as at full size. The scale returned is M/8 (1.0 at full size); the array is
    ``ceil(size * M / 8)`` px per side, as libjpeg rounds.
    """
    w, h = size
    kw: dict[str, int] = {}
    if long_side is not None and max(w, h) > long_side:
        kw = {"min_width": long_side} if w >= h else {"min_height": long_side}
    try:
        try:
            bgr = simplejpeg.decode_jpeg(data, colorspace="BGR", strict=True, **kw)
        except ValueError as exc:
            if not _JUNK_BEFORE_EOI.search(str(exc)):
                raise
            bgr = simplejpeg.decode_jpeg(data, colorspace="BGR", strict=False, **kw)
    except ValueError as exc:
        raise DecodeError(ReasonCode.CORRUPT_IMAGE, f"jpeg data undecodable: {exc}") from None
    dh, dw = bgr.shape[:2]
    for m in range(8, 0, -1) if kw else (8,):
        if (math.ceil(w * m / 8), math.ceil(h * m / 8)) == (dw, dh):
            return bgr, m / 8.0
    raise DecodeError(ReasonCode.CORRUPT_IMAGE, f"jpeg decoded {dw}x{dh} != header {w}x{h}")


STRIP_PX = 1 << 16
"""Pixels per conversion strip of a Pillow decode (:func:`_decode_pillow`): each strip's
temporaries (mode conversion, alpha flattening in ``uint16``) take about 30 bytes per pixel,
so about 8 MB, whatever the image's size."""


def _place(out: np.ndarray, strip: np.ndarray, y0: int, orientation: int) -> None:
    """Write ``strip`` (stored rows ``y0 ..`` of an image of ``out``'s stored height, BGR) into
    ``out`` (the displayed image) where EXIF ``orientation`` puts them: the same mapping as
    :func:`_apply_orientation`, one strip at a time (so no second full-size array is made)."""
    k = strip.shape[0]
    stored_h = out.shape[1] if orientation >= 5 else out.shape[0]
    y1, top = y0 + k, stored_h - y0 - k  # top: where a flipped strip starts
    if orientation == 1:
        out[y0:y1] = strip
    elif orientation == 2:
        out[y0:y1] = strip[:, ::-1]
    elif orientation == 3:
        out[top:top + k] = strip[::-1, ::-1]
    elif orientation == 4:
        out[top:top + k] = strip[::-1]
    elif orientation == 5:
        out[:, y0:y1] = strip.transpose(1, 0, 2)
    elif orientation == 6:
        out[:, top:top + k] = strip.transpose(1, 0, 2)[:, ::-1]
    elif orientation == 7:
        out[:, top:top + k] = strip.transpose(1, 0, 2)[::-1, ::-1]
    else:  # 8
        out[:, y0:y1] = strip.transpose(1, 0, 2)[::-1]


def _decode_pillow(
    im: Image.Image, fmt: str, bg_rgb: tuple[int, int, int]
) -> np.ndarray:
    """Pillow decode of the first frame → ``(H, W, 3) uint8`` BGR, upright (EXIF orientation
    applied).

    The decoded Pillow image (``PILLOW_BYTES_PER_PX`` of its mode) is converted strip by strip
    (:data:`STRIP_PX`) straight into the upright BGR array, so the peak is the Pillow image plus
    the result (3 B/px) plus one strip's temporaries, never a full-size conversion copy (issue
    43: a 40 MP RGBA PNG peaked at 1,201 MB when converted and flattened whole).

    The orientation is read after ``load()``: Pillow's TIFF plugin applies it while loading and
    then clears the tag, so reading it before would turn the picture twice.
    """
    try:
        im.load()
        orientation = _orientation(im)
        w, h = im.size
        out = np.empty((w, h, 3) if orientation >= 5 else (h, w, 3), np.uint8)
        rows = max(1, STRIP_PX // w)
        for y0 in range(0, h, rows):
            rgb = _to_rgb_array(im.crop((0, y0, w, min(h, y0 + rows))), bg_rgb)
            code = cv2.COLOR_GRAY2BGR if rgb.ndim == 2 else cv2.COLOR_RGB2BGR
            _place(out, cv2.cvtColor(rgb, code), y0, orientation)
    except Image.DecompressionBombError as exc:
        raise DecodeError(ReasonCode.IMAGE_TOO_LARGE, f"{fmt} data: {exc}") from None
    except MemoryError:
        raise  # the process's memory, not the image: never a CORRUPT_IMAGE verdict (issue 43)
    except Exception as exc:  # noqa: BLE001 - Pillow/libtiff/libwebp/libheif raise many types
        # Pillow's OSError and ValueError texts say what broke ("image file is truncated");
        # another type's text is a code or a key, no help to a sender
        detail = (str(exc) if isinstance(exc, (OSError, ValueError, SyntaxError)) and str(exc)
                  else "truncated or damaged")
        raise DecodeError(ReasonCode.CORRUPT_IMAGE, f"{fmt} data undecodable: {detail}") from None
    return out


@dataclass(frozen=True, slots=True)
class EncodedImage:
    """An upload's bytes with their validated header: what the worker hands a processor.

    Made by :func:`probe_image` (rules 1-3 of the module docstring passed, no pixel decoded).

    Attributes:
        data: the encoded file, as uploaded.
        format: the sniffed format (:func:`sniff_format`): ``jpeg``, ``png``, ``webp``, ``bmp``,
            ``gif``, ``tiff`` or ``heif``.
        width: displayed width (px): after the EXIF orientation for JPEG (read from the header),
            the header's width for the other formats (Pillow and pillow-heif apply their
            orientation while decoding, so a turned TIFF or PNG may decode with width and height
            swapped; :func:`decode_probed` returns the truth).
        height: displayed height (px), as ``width``.
        orientation: EXIF Orientation (1..8) that :func:`decode_probed` applies to JPEG pixels;
            1 for the other formats.
        mode: the header's pixel mode as Pillow names it (``L``, ``RGB``, ``RGBA``, ``P``,
            ``CMYK``, ``I;16`` ...).
        peak_bytes: memory (bytes) a full-resolution :func:`decode_probed` of this image takes
            at its peak, estimated from the header (:func:`decoded_bytes`).
    """

    data: bytes
    format: str
    width: int
    height: int
    orientation: int = 1
    mode: str = "RGB"
    peak_bytes: int = 0

    @classmethod
    def from_array(cls, image: np.ndarray, settings: DecodeSettings | None = None) -> EncodedImage:
        """A lossless PNG of ``image`` (``(H, W, 3) uint8`` BGR), probed: for tests, benchmarks and
        tools that hold pixels rather than an upload. Decoding gives ``image`` back exactly.

        Raises:
            DecodeError: ``image`` breaks ``settings``' limits (default :class:`DecodeSettings`).
            ValueError: ``image`` is not ``(H, W, 3) uint8``.
        """
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected (H, W, 3) uint8, got {image.shape} {image.dtype}")
        ok, buf = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        if not ok:
            raise ValueError("PNG encoding failed")
        return probe_image(buf.tobytes(), settings or DecodeSettings())


def probe_image(data: bytes, settings: DecodeSettings) -> EncodedImage:
    """Validate an upload's header without decoding pixels (rules 1-3; about 0.05 ms).

    Args:
        data: the uploaded file's bytes.
        settings: limits (:class:`DecodeSettings`).

    Returns:
        The :class:`EncodedImage` (bytes, format, displayed size, JPEG orientation).

    Raises:
        DecodeError: ``UNSUPPORTED_FORMAT`` (empty or unknown magic bytes), ``IMAGE_TOO_LARGE``
            (more than ``max_bytes`` bytes or ``max_pixels`` px declared), ``IMAGE_TOO_SMALL``
            (``min(H, W) < min_side``) or ``CORRUPT_IMAGE`` (header unreadable). Corrupt pixel
            data is only found by :func:`decode_probed`.
    """
    if len(data) > settings.max_bytes:
        raise DecodeError(
            ReasonCode.IMAGE_TOO_LARGE,
            f"{len(data)} bytes > max_bytes {settings.max_bytes}",
        )
    fmt = sniff_format(data)
    if fmt is None:
        raise DecodeError(
            ReasonCode.UNSUPPORTED_FORMAT,
            (f"unknown magic bytes ({len(data)} bytes)" if data else "empty input (0 bytes)")
            + "; expected JPEG, PNG, WebP, BMP, GIF, TIFF or HEIF",
        )
    with _open_checked(data, fmt, settings) as im:
        w, h = im.size
        orientation = _orientation(im) if fmt == "jpeg" else 1
        peak = _peak_bytes(im, fmt, data, settings)
        mode = im.mode
    if orientation >= 5:  # 5-8 swap width and height (EXIF 2.32)
        w, h = h, w
    return EncodedImage(data=data, format=fmt, width=w, height=h, orientation=orientation,
                        mode=mode, peak_bytes=peak)


def decode_probed(image: EncodedImage, settings: DecodeSettings,
                  long_side: int | None = None) -> tuple[np.ndarray, float]:
    """Decode a probed upload into an upright 8-bit BGR array, scaled down when that is cheap.

    Args:
        image: from :func:`probe_image` (or :meth:`EncodedImage.from_array`).
        settings: limits and the flatten colour (:class:`DecodeSettings`).
        long_side: the long side (px) the caller needs at least; None for full resolution.
            JPEG is decoded at the smallest DCT scale M/8 that keeps it (libjpeg-turbo); other
            formats always decode at full resolution (scale 1.0).

    Returns:
        ``(pixels, scale)``: ``(h, w, 3) uint8`` C-contiguous BGR, EXIF orientation applied, alpha
        flattened against ``settings.flatten_bgr``; ``scale`` is decoded px per displayed px (M/8
        for a scaled JPEG, else 1.0), so a point ``p`` of the array is ``(p + 0.5) / scale - 0.5``
        in the upload's px.

    Raises:
        DecodeError: ``CORRUPT_IMAGE`` (truncated or undecodable data), ``IMAGE_TOO_LARGE``
            (Pillow's second-line limit, module docstring).
    """
    with _open_checked(image.data, image.format, settings) as im:
        if image.format == "jpeg":
            stored = im.size
            bgr, scale = _decode_jpeg(image.data, stored, long_side)
            orientation = image.orientation
            return np.ascontiguousarray(_apply_orientation(bgr, orientation)), scale
        return _decode_pillow(im, image.format, settings.flatten_bgr[::-1]), 1.0


DECODE_OVERHEAD_BYTES = {"jpeg": 8 * 1024 * 1024, "other": 16 * 1024 * 1024}
"""Memory of a decode beyond its image buffers (bytes), measured (``python -m
benchmarks.decode_memory`` at 3 and 12 MP: up to 11 MB for Pillow's formats, under 7 MB for
JPEG): the decoders' own state (row buffers, Huffman and zlib tables), Pillow's 16 MB block
rounding and one conversion strip's temporaries (:data:`STRIP_PX` x about 30 B)."""

PILLOW_BYTES_PER_PX: dict[str, int] = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2,
                                       "I;16B": 2, "I;16N": 2}
"""Bytes per pixel of a decoded Pillow image by mode (Pillow's ``Imaging`` storage); every other
mode (``LA``, ``PA``, ``RGB``, ``RGBA``, ``CMYK``, ``YCbCr``, ``I``, ``F`` ...) is 4."""

TIFF_TILE_SLACK = 4
"""A TIFF tile may cover at most this many times the image's own pixels (or 1 MP, whichever is
more; TIFF 6.0 section 15 pads edge tiles to whole tiles, and writers use 256-1024 px tiles on
small images): a larger tile is ``IMAGE_TOO_COMPLEX``, since libtiff allocates and inflates whole
tiles whatever the image's size."""

_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")  # a marker, not stuffing, RSTn or fill
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOF0-15 less DHT, JPG, DAC
_JPEG_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})


@dataclass(frozen=True, slots=True)
class JpegLayout:
    """What a JPEG's markers say about the work of decoding it (ISO/IEC 10918-1 B.2).

    Attributes:
        progressive: the frame is progressive (SOF2, 6, 10, 14): libjpeg holds every
            coefficient of the image until the last scan.
        sampling: ``(h, v)`` sampling factors per component of the frame header.
        scans: start-of-scan segments before the first EOI (bytes after it, e.g. an MPO's other
            pictures, are never decoded).
        size: ``(width, height)`` in px that the first frame header declares, or ``None`` where
            the walk met none.
    """

    progressive: bool
    sampling: tuple[tuple[int, int], ...]
    scans: int
    size: tuple[int, int] | None = None

    def coefficient_bytes(self, width: int, height: int) -> int:
        """Bytes of libjpeg's whole-image coefficient arrays (``jdcoefct.c``: one 64 x 2-byte
        block per 8 x 8 samples of each component, rows and columns rounded up to the
        component's sampling factor); 0 unless progressive."""
        if not self.progressive or not self.sampling:
            return 0
        hmax = max(max(h for h, _ in self.sampling), 1)
        vmax = max(max(v for _, v in self.sampling), 1)
        total = 0
        for h, v in self.sampling:
            bw = math.ceil(math.ceil(width * h / hmax) / 8)
            bh = math.ceil(math.ceil(height * v / vmax) / 8)
            total += ((math.ceil(bw / max(h, 1)) * max(h, 1))
                      * (math.ceil(bh / max(v, 1)) * max(v, 1)))
        return total * 128


def jpeg_layout(data: bytes) -> JpegLayout:
    """Walk a JPEG's markers (segments by their length, entropy-coded data by searching for the
    next marker) up to the first EOI: the frame type, sampling factors and number of scans, in
    about 1 ms per MB. A damaged stream ends the walk early; the decoder judges it."""
    pos, n, scans = 2, len(data), 0
    progressive = False
    sampling: tuple[tuple[int, int], ...] = ()
    size: tuple[int, int] | None = None
    while pos < n:
        m = _JPEG_MARKER.search(data, pos)
        if m is None:
            break
        marker, pos = data[m.start() + 1], m.end()
        if marker == 0xD9:  # EOI
            break
        if marker == 0x01:  # TEM: no length
            continue
        if pos + 2 > n:
            break
        (length,) = struct.unpack_from(">H", data, pos)
        if marker in _JPEG_SOF and not sampling:
            seg = data[pos + 2:pos + length]
            count = seg[5] if len(seg) > 5 else 0
            sampling = tuple((seg[7 + 3 * i] >> 4, seg[7 + 3 * i] & 15) for i in range(count)
                             if 7 + 3 * i < len(seg))
            progressive = marker in _JPEG_PROGRESSIVE
            if len(seg) >= 5:  # P, Y (lines), X (samples per line): B.2.2
                size = (struct.unpack_from(">H", seg, 3)[0], struct.unpack_from(">H", seg, 1)[0])
        elif marker == 0xDA:  # SOS
            scans += 1
        pos += max(length, 2)
    return JpegLayout(progressive, sampling, scans, size)


def _tiff_buffer_px(im: Image.Image, fmt: str) -> int:
    """Pixels of libtiff's decode buffer for a TIFF (one tile, or one strip of RowsPerStrip rows
    clamped to the image, as ``TIFFTileSize`` / ``TIFFStripSize``); refuses a tile far larger
    than the image (:data:`TIFF_TILE_SLACK`)."""
    w, h = im.size
    tags = getattr(im, "tag_v2", {})
    tile_w, tile_h = tags.get(322), tags.get(323)
    if tile_w and tile_h:
        if tile_w * tile_h > max(TIFF_TILE_SLACK * w * h, 1 << 20):
            raise DecodeError(ReasonCode.IMAGE_TOO_COMPLEX,
                              f"{fmt} tile {tile_w}x{tile_h} px is far larger than the "
                              f"{w}x{h} px image it holds")
        return int(tile_w) * int(tile_h)
    rows = tags.get(278) or h
    return w * min(int(rows), h)


def _peak_bytes(im: Image.Image, fmt: str, data: bytes, settings: DecodeSettings) -> int:
    """The peak memory (bytes) of :func:`decode_probed` at full resolution, from the header
    (``im``, opened lazily): what ``python -m benchmarks.decode_memory`` measures per format
    and mode.

    * JPEG: the BGR result (3 B/px); while decoding, a progressive frame's coefficient arrays
      (:meth:`JpegLayout.coefficient_bytes`) and for 4 components the CMYK buffer converted
      from (4 B/px); afterwards the rotated copy when the EXIF orientation turns it (3 B/px).
    * The others: Pillow's decoded image (:data:`PILLOW_BYTES_PER_PX`, twice for a TIFF that
      Pillow turns while loading) + the BGR result (3 B/px) + the decoder's own frames:
      WebP's (libwebp's animation decoder: its canvas, the previous canvas and the frame handed
      to Pillow, 10 B/px measured 9-10), HEIF's (libheif's planes and interleaved frame, 4 B/px
      measured 2-3.5), TIFF's strip or tile buffer (4 B, or the samples' bytes if more, per
      buffer px).
    * Plus :data:`DECODE_OVERHEAD_BYTES`.

    Raises:
        DecodeError: ``IMAGE_TOO_COMPLEX``: a JPEG with more than ``settings.max_jpeg_scans``
            scans, a TIFF tile far larger than its image.
    """
    w, h = im.size
    px = w * h
    if fmt == "jpeg":
        layout = jpeg_layout(data)
        if layout.scans > settings.max_jpeg_scans:
            raise DecodeError(ReasonCode.IMAGE_TOO_COMPLEX,
                              f"jpeg has {layout.scans} scans > max_jpeg_scans "
                              f"{settings.max_jpeg_scans}")
        during = layout.coefficient_bytes(w, h) + (4 * px if len(layout.sampling) == 4 else 0)
        after = 3 * px if _orientation(im) != 1 else 0
        return 3 * px + max(during, after) + DECODE_OVERHEAD_BYTES["jpeg"]
    pillow = PILLOW_BYTES_PER_PX.get(im.mode, 4) * px
    extra = 0
    if fmt == "webp":
        extra = 10 * px
    elif fmt == "heif":
        extra = 4 * px
    elif fmt == "tiff":
        tags = getattr(im, "tag_v2", {})  # a TiffImageFile's (Image.Image does not declare it)
        bits = tags.get(258, (8,))
        sample_bytes = math.ceil(sum(bits if isinstance(bits, tuple) else (bits,)) / 8)
        extra = max(4, sample_bytes) * _tiff_buffer_px(im, fmt)
        if tags.get(0x0112, 1) not in (1, None):
            pillow *= 2  # Pillow turns the loaded image into a second one
    return pillow + 3 * px + extra + DECODE_OVERHEAD_BYTES["other"]


def decoded_bytes(image: EncodedImage) -> int:
    """Memory (bytes) a full-resolution :func:`decode_probed` of ``image`` needs at its peak,
    estimated from its probed header when it was probed (:func:`_peak_bytes`, measured per
    format and mode by ``python -m benchmarks.decode_memory``); an upper bound for a JPEG
    decoded at a DCT scale below 1."""
    return image.peak_bytes or image.width * image.height * 7 + DECODE_OVERHEAD_BYTES["other"]


def decode_image(data: bytes, settings: DecodeSettings) -> np.ndarray:
    """Decode untrusted image bytes into an upright 8-bit BGR array at full resolution.

    :func:`probe_image` then :func:`decode_probed`.

    Args:
        data: the uploaded file's bytes (JPEG, PNG, WebP, BMP, GIF, TIFF or HEIC/HEIF).
        settings: limits and the flatten colour (:class:`DecodeSettings`).

    Returns:
        ``(H, W, 3) uint8`` C-contiguous array in BGR order (OpenCV's), EXIF orientation applied
        (so ``H, W`` are the displayed height and width in px), alpha flattened against
        ``settings.flatten_bgr``.

    Raises:
        DecodeError: ``reason`` is ``UNSUPPORTED_FORMAT`` (empty or unknown magic bytes),
            ``IMAGE_TOO_LARGE`` (more than ``max_bytes`` bytes, or a header declaring more than
            ``max_pixels`` pixels; decided before decoding), ``IMAGE_TOO_SMALL``
            (``min(H, W) < min_side``) or ``CORRUPT_IMAGE`` (truncated or undecodable data).
    """
    return decode_probed(probe_image(data, settings), settings)[0]
