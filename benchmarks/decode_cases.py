"""Images of every format and mode the worker accepts, and hostile ones, made here (no files).

Used by ``python -m benchmarks.decode_memory`` (peak memory and time of a decode against the
budget's estimate, :func:`processors.decode.decoded_bytes`), by the poison kinds of
``benchmarks/faults/poison.py`` and by the decode tests.

:data:`CASES` maps a case name (``<format>_<mode>``) to a builder ``(width, height) -> bytes``.
Every builder draws the same picture: 4 x 4 random colour blocks scaled up (nearest), so files are
small (a 40 MP PNG is a few hundred KB) and decoding, not the entropy coder, is what is measured.

Hostile builders (not in :data:`CASES`):

* :func:`jpeg_many_scans`: a valid progressive greyscale JPEG with ``scans`` AC scans that each
  cover the whole image with end-of-band runs (a few bytes per scan, every one a pass over every
  block: ISO/IEC 10918-1 G.1.2.2, EOBRUN);
* :func:`tiff_big_tile`: a small TIFF whose one tile (TIFF 6.0 section 15, TileWidth /
  TileLength) is far larger than the image, deflate-compressed zeros;
* :func:`png_rgba` at 40 MP: the alpha-flattening peak of issue 43 (0.17 MB, 1,201 MB peak).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable

import cv2
import numpy as np
import pillow_heif
from PIL import Image

Builder = Callable[[int, int], bytes]


def blocks(width: int, height: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """``(height, width, channels) uint8``: 4 x 4 random colour blocks, nearest-scaled."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (4, 4, channels), dtype=np.uint8)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_NEAREST).reshape(
        height, width, channels)


def _pil(width: int, height: int, mode: str) -> Image.Image:
    rgba = Image.fromarray(blocks(width, height, 4), "RGBA")
    if mode in ("RGBA", "LA", "RGB", "L", "1", "CMYK"):
        return rgba.convert(mode)
    if mode == "P":
        return rgba.convert("RGB").quantize(16)
    if mode == "I;16":
        return Image.fromarray(blocks(width, height, 1)[..., 0].astype(np.uint16) * 257)
    if mode == "F":
        return Image.fromarray(blocks(width, height, 1)[..., 0].astype(np.float32) / 255.0)
    raise ValueError(mode)


def _save(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _cv(ext: str, img: np.ndarray, params: list[int] | None = None) -> bytes:
    ok, buf = cv2.imencode(ext, img, params or [])
    if not ok:
        raise ValueError(f"OpenCV could not encode {ext}")
    return buf.tobytes()


def _exif_orientation(value: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif


def jpeg(mode: str = "RGB", subsampling: int = 2, progressive: bool = False,
         orientation: int = 1) -> Builder:
    """A JPEG builder: ``mode`` L / RGB / CMYK, chroma ``subsampling`` (0 = 4:4:4, 2 = 4:2:0)."""
    def build(w: int, h: int) -> bytes:
        kw: dict[str, object] = {"quality": 90, "progressive": progressive}
        if mode == "RGB":
            kw["subsampling"] = subsampling
        if orientation != 1:
            kw["exif"] = _exif_orientation(orientation)
        return _save(_pil(w, h, mode), "JPEG", **kw)
    return build


def png(mode: str, orientation: int = 1) -> Builder:
    """A PNG builder for a Pillow ``mode`` (``P+tRNS``: palette with a transparent index)."""
    def build(w: int, h: int) -> bytes:
        kw: dict[str, object] = {"compress_level": 1}
        if orientation != 1:
            kw["exif"] = _exif_orientation(orientation)
        if mode == "P+tRNS":
            return _save(_pil(w, h, "P"), "PNG", transparency=0, **kw)
        return _save(_pil(w, h, mode), "PNG", **kw)
    return build


def png16(channels: int) -> Builder:
    """A 16-bit PNG with 3 (RGB) or 4 (RGBA) channels (OpenCV writes them; Pillow reads 8-bit)."""
    return lambda w, h: _cv(".png", blocks(w, h, channels).astype(np.uint16) * 257,
                            [cv2.IMWRITE_PNG_COMPRESSION, 1])


def png_rgba(w: int, h: int) -> bytes:
    """An RGBA PNG (the alpha-flattening case)."""
    return png("RGBA")(w, h)


def webp(mode: str, lossless: bool, frames: int = 1) -> Builder:
    """A WebP builder (``frames`` > 1: animated)."""
    def build(w: int, h: int) -> bytes:
        im = _pil(w, h, mode)
        if frames == 1:
            return _save(im, "WEBP", lossless=lossless, quality=80, method=0)
        return _save(im, "WEBP", lossless=lossless, quality=80, method=0, save_all=True,
                     append_images=[im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)] * (frames - 1))
    return build


def bmp(mode: str) -> Builder:
    """A BMP builder (``RGBA``: a 32-bit BMP with an alpha mask, written by OpenCV)."""
    if mode == "RGBA":
        return lambda w, h: _cv(".bmp", blocks(w, h, 4))
    return lambda w, h: _save(_pil(w, h, mode), "BMP")


def gif(transparent: bool) -> Builder:
    """A GIF builder (palette; ``transparent``: index 0 transparent)."""
    def build(w: int, h: int) -> bytes:
        kw = {"transparency": 0} if transparent else {}
        return _save(_pil(w, h, "P"), "GIF", **kw)
    return build


def tiff(mode: str, compression: str = "tiff_deflate", orientation: int = 1) -> Builder:
    """A TIFF builder for a Pillow ``mode`` and compression."""
    def build(w: int, h: int) -> bytes:
        kw: dict[str, object] = {"compression": compression}
        if orientation != 1:
            kw["tiffinfo"] = {0x0112: orientation}
        return _save(_pil(w, h, mode), "TIFF", **kw)
    return build


def tiff16(channels: int) -> Builder:
    """A 16-bit TIFF with 3 or 4 channels (OpenCV writes them)."""
    return lambda w, h: _cv(".tiff", blocks(w, h, channels).astype(np.uint16) * 257)


def tiff_tiled(w: int, h: int, tile: tuple[int, int] = (256, 256), spp: int = 3) -> bytes:
    """A tiled, deflate-compressed 8-bit TIFF (``spp`` samples per pixel, contiguous), written
    here (TIFF 6.0 section 15): every tile of ``tile = (TileWidth, TileLength)`` px, the last
    ones padded past the image edge as the standard says."""
    tw, th = tile
    img = blocks(w, h, spp)
    across, down = -(-w // tw), -(-h // th)
    tiles = []
    for ty in range(down):
        for tx in range(across):
            t = np.zeros((th, tw, spp), np.uint8)
            part = img[ty * th:(ty + 1) * th, tx * tw:(tx + 1) * tw]
            t[:part.shape[0], :part.shape[1]] = part
            tiles.append(zlib.compress(t.tobytes(), 1))
    return _tiff_file(w, h, tw, th, spp, tiles)


def tiff_big_tile(w: int = 64, h: int = 64, tile: int = 8192) -> bytes:
    """A ``w`` x ``h`` RGB TIFF with one ``tile`` x ``tile`` tile of zeros (deflate): the file is
    about ``tile**2 * 3 / 1000`` bytes, the tile ``tile**2 * 3`` bytes once inflated."""
    return _tiff_file(w, h, tile, tile, 3, [zlib.compress(bytes(tile * tile * 3), 9)])


def _tiff_file(w: int, h: int, tw: int, th: int, spp: int, tiles: list[bytes]) -> bytes:
    """Little-endian TIFF: header, tile data, then the IFD (tags in ascending order)."""
    out = bytearray(b"II*\x00\x00\x00\x00\x00")
    offsets = []
    for t in tiles:
        offsets.append(len(out))
        out += t
    extra = bytearray()  # out-of-line values, placed after the IFD

    entries: list[tuple[int, int, list[int]]] = [  # tag, type (3 SHORT, 4 LONG), values
        (256, 4, [w]), (257, 4, [h]), (258, 3, [8] * spp), (259, 3, [8]),
        (262, 3, [2 if spp >= 3 else 1]), (277, 3, [spp]), (284, 3, [1]),
        (322, 4, [tw]), (323, 4, [th]), (324, 4, offsets), (325, 4, [len(t) for t in tiles])]
    if spp == 4:
        entries.append((338, 3, [2]))  # ExtraSamples: unassociated alpha
    ifd_at = len(out)
    ifd_len = 2 + 12 * len(entries) + 4
    out[4:8] = struct.pack("<I", ifd_at)
    ifd = bytearray(struct.pack("<H", len(entries)))
    for tag, typ, vals in entries:
        fmt = "H" if typ == 3 else "I"
        data = struct.pack(f"<{len(vals)}{fmt}", *vals)
        if len(data) <= 4:
            ifd += struct.pack("<HHI", tag, typ, len(vals)) + data.ljust(4, b"\x00")
        else:
            ifd += struct.pack("<HHII", tag, typ, len(vals), ifd_at + ifd_len + len(extra))
            extra += data
    ifd += b"\x00\x00\x00\x00"
    return bytes(out + ifd + extra)


def heif(mode: str) -> Builder:
    """A HEIC builder (RGB or RGBA)."""
    def build(w: int, h: int) -> bytes:
        buf = io.BytesIO()
        pillow_heif.from_pillow(_pil(w, h, mode)).save(buf, quality=60)
        return buf.getvalue()
    return build


# --- a progressive JPEG with many scans, written bit by bit ------------------------------------

class _Bits:
    """MSB-first bit writer with JPEG byte stuffing (0xFF -> 0xFF 0x00), padded with 1 bits."""

    def __init__(self) -> None:
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value: int, length: int) -> None:
        self.acc, self.n = (self.acc << length) | value, self.n + length
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.n) - 1

    def done(self) -> bytes:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">HH", 0xFF00 | marker, len(payload) + 2) + payload


def jpeg_many_scans(width: int, height: int, scans: int) -> bytes:
    """A valid progressive (SOF2) greyscale JPEG of a flat mid-grey ``width`` x ``height`` image:
    one DC scan, then ``scans`` AC first scans (Ss 1, Se 63, Ah 0, Al 0) of all-zero
    coefficients, each coded as end-of-band runs (EOBn, at most 32 767 blocks per symbol). Every
    AC scan is legal after the previous (a first scan with Ah 0 may follow a finished band: no
    JWRN_BOGUS_PROGRESSION), so strict decoders take it, and each one costs a pass over every
    block. Size: about ``scans * (4 + blocks / 32767 * 2.3)`` bytes plus 200."""
    blocks_n = (-(-width // 8)) * (-(-height // 8))
    dqt = _segment(0xDB, b"\x00" + bytes([1] * 64))
    sof = _segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    # DC table 0: one symbol (category 0) coded "0"; AC table 0: EOB0..EOB14 (0x00, 0x10 ...
    # 0xE0), fifteen 4-bit codes 0000..1110 (the all-ones code is reserved)
    dht_dc = _segment(0xC4, b"\x00" + bytes([1] + [0] * 15) + b"\x00")
    ac_syms = bytes(r << 4 for r in range(15))
    dht_ac = _segment(0xC4, b"\x10" + bytes([0, 0, 0, 15] + [0] * 12) + ac_syms)
    dc = _Bits()
    for _ in range(blocks_n):
        dc.put(0, 1)
    sos_dc = _segment(0xDA, b"\x01\x01\x00\x00\x00\x00") + dc.done()
    ac = _Bits()
    left = blocks_n
    while left:
        r = min(left.bit_length() - 1, 14)
        run = min(left, (1 << (r + 1)) - 1)
        ac.put(r, 4)  # the code of EOBr is r (codes assigned in symbol order)
        if r:
            ac.put(run - (1 << r), r)
        left -= run
    sos_ac = _segment(0xDA, b"\x01\x01\x00\x01\x3f\x00") + ac.done()
    return b"\xff\xd8" + dqt + sof + dht_dc + dht_ac + sos_dc + sos_ac * scans + b"\xff\xd9"


#: every format and mode the worker accepts: name -> builder(width, height)
CASES: dict[str, Builder] = {
    "jpeg_L": jpeg("L"),
    "jpeg_RGB_420": jpeg("RGB", 2),
    "jpeg_RGB_444": jpeg("RGB", 0),
    "jpeg_RGB_420_orient6": jpeg("RGB", 2, orientation=6),
    "jpeg_CMYK": jpeg("CMYK"),
    "jpeg_progressive_L": jpeg("L", progressive=True),
    "jpeg_progressive_420": jpeg("RGB", 2, progressive=True),
    "jpeg_progressive_444": jpeg("RGB", 0, progressive=True),
    "jpeg_progressive_CMYK": jpeg("CMYK", progressive=True),
    "png_1": png("1"),
    "png_L": png("L"),
    "png_LA": png("LA"),
    "png_P": png("P"),
    "png_P_tRNS": png("P+tRNS"),
    "png_RGB": png("RGB"),
    "png_RGB_orient6": png("RGB", orientation=6),
    "png_RGBA": png("RGBA"),
    "png_I16": png("I;16"),
    "png_RGB16": png16(3),
    "png_RGBA16": png16(4),
    "webp_RGB_lossy": webp("RGB", lossless=False),
    "webp_RGBA_lossless": webp("RGBA", lossless=True),
    "webp_RGBA_animated": webp("RGBA", lossless=True, frames=2),
    "bmp_1": bmp("1"),
    "bmp_P": bmp("P"),
    "bmp_RGB": bmp("RGB"),
    "bmp_RGBA": bmp("RGBA"),
    "gif_P": gif(False),
    "gif_P_transparent": gif(True),
    "tiff_L": tiff("L"),
    "tiff_RGB": tiff("RGB"),
    "tiff_RGB_orient6": tiff("RGB", orientation=6),
    "tiff_RGBA": tiff("RGBA"),
    "tiff_CMYK": tiff("CMYK"),
    "tiff_I16": tiff("I;16"),
    "tiff_F": tiff("F"),
    "tiff_RGB_jpeg": tiff("RGB", "jpeg"),
    "tiff_RGB16": tiff16(3),
    "tiff_RGBA16": tiff16(4),
    "tiff_RGB_tiled": tiff_tiled,
    "tiff_RGBA_tiled": lambda w, h: tiff_tiled(w, h, spp=4),
    "heif_RGB": heif("RGB"),
    "heif_RGBA": heif("RGBA"),
}
