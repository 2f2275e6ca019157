"""What an ID photo is delivered as: a JPEG with its DPI, optionally within a file size, and an
optional print sheet (6 x 4 in, as many copies as fit, with cut marks).

The DPI is the JFIF density (``X density = Y density = dpi``, units 1 = dots per inch), which is
what printers and the offices' upload portals read. A target size in KB is met by the highest
JPEG quality whose file fits (a binary search over quality, at most 7 encodings); a photo that
does not fit even at the lowest allowed quality is delivered at that quality and says so.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

#: Lowest JPEG quality a target file size may push the photo to: below it compression blocks
#: show on a face (offices reject "pixelated" photos).
MIN_TARGET_QUALITY = 40
#: The print sheet: 6 x 4 in (152 x 102 mm, the common photo-lab print), landscape.
SHEET_IN = (6.0, 4.0)
#: Gap between copies and from the sheet's edges (mm: 8 copies of 35 x 45 mm fit, as labs
#: print them), and the cut marks' length (mm, shorter than the gap: a mark never reaches the
#: next copy) and line width (px at the sheet's dpi).
SHEET_GAP_MM = 2.0
CUT_MARK_MM = 1.5
CUT_MARK_PX = 2


@dataclass(frozen=True, slots=True)
class Jpeg:
    """An encoded photo.

    Attributes:
        data: the JPEG bytes (JFIF density = ``dpi``).
        quality: the quality it was encoded at (1..95).
        fits: False when a target size was asked for and not met even at
            :data:`MIN_TARGET_QUALITY`.
    """

    data: bytes
    quality: int
    fits: bool = True


def encode(rgb: np.ndarray, quality: int, dpi: int) -> bytes:
    """JPEG bytes of ``(H, W, 3) uint8`` RGB at ``quality`` with JFIF density ``dpi`` x ``dpi``."""
    buf = io.BytesIO()
    Image.fromarray(rgb, mode="RGB").save(buf, "JPEG", quality=quality, dpi=(dpi, dpi))
    return buf.getvalue()


def encode_within(rgb: np.ndarray, quality: int, dpi: int, target_kb: float | None) -> Jpeg:
    """The photo at ``quality``, or at the highest quality whose file is at most ``target_kb``
    KB (1 KB = 1000 bytes, as the portals count).

    Args:
        rgb: ``(H, W, 3) uint8`` RGB.
        quality: the quality without a target (and the highest tried with one).
        dpi: JFIF density.
        target_kb: the largest file size, or None.
    """
    data = encode(rgb, quality, dpi)
    if target_kb is None or len(data) <= target_kb * 1000:
        return Jpeg(data, quality)
    lo, hi = MIN_TARGET_QUALITY, quality - 1
    best: Jpeg | None = None
    while lo <= hi:
        q = (lo + hi) // 2
        d = encode(rgb, q, dpi)
        if len(d) <= target_kb * 1000:
            best, lo = Jpeg(d, q), q + 1
        else:
            hi = q - 1
    if best is None:
        return Jpeg(encode(rgb, MIN_TARGET_QUALITY, dpi), MIN_TARGET_QUALITY, fits=False)
    return best


def jpeg_dpi(data: bytes) -> tuple[int, int] | None:
    """The JFIF density of JPEG ``data`` in dots per inch, or None when it carries none."""
    with Image.open(io.BytesIO(data)) as im:
        dpi = im.info.get("dpi")
    return None if dpi is None else (round(dpi[0]), round(dpi[1]))


def print_sheet(photo_rgb: np.ndarray, dpi: int) -> tuple[np.ndarray, int]:
    """A 6 x 4 in sheet at ``dpi`` with as many copies of the photo as fit, and cut marks.

    The copies are laid out in a grid centred on the sheet (landscape), :data:`SHEET_GAP_MM`
    apart and from the edges; each copy's four corners get short black marks outside the copy
    (:data:`CUT_MARK_MM`), where the cutter's blade goes. The rest is white.

    Args:
        photo_rgb: ``(h, w, 3) uint8`` the photo, at ``dpi`` (its px give its print size).
        dpi: the sheet's resolution (the photo's).

    Returns:
        ``(sheet (H, W, 3) uint8 RGB, copies)``; ``copies`` is 0 (and the sheet blank) when the
        photo is larger than the sheet.
    """
    sw, sh = round(SHEET_IN[0] * dpi), round(SHEET_IN[1] * dpi)
    sheet = np.full((sh, sw, 3), 255, np.uint8)
    px = dpi / 25.4
    ph, pw = photo_rgb.shape[:2]
    gap = SHEET_GAP_MM * px
    cols = int((sw - gap) // (pw + gap))
    rows = int((sh - gap) // (ph + gap))
    if cols < 1 or rows < 1:
        return sheet, 0
    x0 = (sw - cols * pw - (cols - 1) * gap) / 2.0
    y0 = (sh - rows * ph - (rows - 1) * gap) / 2.0
    mark = max(2, round(CUT_MARK_MM * px))
    for r in range(rows):
        for c in range(cols):
            x, y = round(x0 + c * (pw + gap)), round(y0 + r * (ph + gap))
            sheet[y:y + ph, x:x + pw] = photo_rgb
            for cx, cy, dx, dy in ((x, y, -1, -1), (x + pw - 1, y, 1, -1),
                                   (x, y + ph - 1, -1, 1), (x + pw - 1, y + ph - 1, 1, 1)):
                # a horizontal and a vertical tick pointing away from the copy
                cv2.line(sheet, (cx + dx * 2, cy), (cx + dx * (2 + mark), cy), (0, 0, 0),
                         CUT_MARK_PX)
                cv2.line(sheet, (cx, cy + dy * 2), (cx, cy + dy * (2 + mark)), (0, 0, 0),
                         CUT_MARK_PX)
    return sheet, rows * cols
