"""Where the machine-readable zone is on a rectified document, and its lines cut for the recogniser.

ICAO Doc 9303 (parts 4-6) prints the MRZ at the bottom of the document, in a clear zone, as 2
or 3 lines that span nearly the whole width (TD3 44 x 2.54 mm = 111.8 mm of 125 mm; TD1 76.2 of
85.6 mm; TD2 91.4 of 105 mm). The rectified card is upright (or, when the orientation decision
failed, upside down), so two bands are searched: the bottom of the card as it is, and the top
turned by a half turn. Each band is warped at :data:`BAND_PX_PER_MM` (about 254 dpi) straight
from the photo.

Lines are found without a model (the classic MRZ localiser): the morphological black-hat brings
out dark print on the lighter zone, a horizontal closing joins each line's characters, and the
components that are as wide as an MRZ line and as tall as OCR-B characters are kept; the
lowest run of 2 or 3 such lines with the same extent and an even spacing is the zone.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

BAND_PX_PER_MM = 10.0
"""Resolution of the searched bands (px per mm of the document as rectified)."""
BAND_SHARE: dict[str, float] = {"id_card": 0.42, "passport": 0.32}
"""Share of the rectified card's height searched, from its bottom edge (TD1's three lines reach
17.5 mm of ID-1's 53.98; TD3's two lines 14.5 mm of 88, TD2's 14 of 74)."""
DOC_MM: dict[str, tuple[float, float]] = {"id_card": (85.60, 53.98), "passport": (125.0, 88.0)}
"""Rectified document size per ``doc_type`` (ISO/IEC 7810 ID-1 and ID-3)."""
LINE_INPUT_H = 32
"""Height (px) of a line crop as the recogniser reads it."""
CROP_SCALE = 1.7
"""A crop is this many times the line's measured height (the characters fill about 60 %)."""
MIN_INK = 12.0
"""Otsu level of the black-hat (grey levels) below which a band holds no print."""
INK_SHARE = 0.4
"""Print is black-hat above this share of its Otsu level: at Otsu's own level the thin filler
``<`` of a low-contrast capture drops out and a line falls apart at its filler runs."""
JOIN_MM = 3.2
"""Horizontal gaps up to this (mm, rectified) are closed to join a line's characters: two thin
glyphs side by side (``11``, ``I1``) leave almost a pitch of background between their strokes,
2.54 mm, and a TD2 zone rectified at ID-3's size reads 1.19 times larger (3.0 mm)."""
MIN_WIDTH_SHARE = 0.5
"""A line candidate spans at least this share of the band's width."""
DENOISE_SIGMA = 1.0
"""Gaussian blur (band px, 0.1 mm) of the second, denoised search (:func:`find_lines`): thinner
than an OCR-B stroke (about 0.35 mm), so the print stays and a dim capture's pixel noise
goes."""
DENOISED_INK_SHARE = 0.6
"""The ink level of the denoised search, as a share of its Otsu level."""
CHAR_H_MM = (1.6, 4.2)
"""Height range (mm, rectified) of a line candidate (OCR-B size 1 is about 2.4 mm; TD2 on an
ID-3-sized rectification reads 1.19 times larger)."""


LINE_GAP = (1.2, 2.6)
"""Range of the spacing of a zone's lines, centre to centre, in line heights (the taller of
the two): OCR-B size 1 is about 2.4 mm tall on a pitch of 3.5-4.2 mm (1.45-1.75), and a blurred
capture's measured heights run up to 20 % taller (a real Swiss TD1 card: 1.29)."""


@dataclass(frozen=True, slots=True)
class Line:
    """One located text line in band px.

    Attributes:
        x0, x1: left and right ends of its print.
        y0, y1: centre height at ``x0`` and at ``x1`` (a residual slope of the rectification).
        height: height of its print, slope removed.
    """

    x0: float
    x1: float
    y0: float
    y1: float
    height: float

    @property
    def yc(self) -> float:
        """Centre height at the middle of the line."""
        return 0.5 * (self.y0 + self.y1)


def band_maps(doc_type: str,
              card_size: tuple[int, int]) -> list[tuple[np.ndarray, tuple[int, int]]]:
    """The two bands searched on a rectified card of ``card_size`` = ``(w, h)`` px.

    Returns:
        ``[(A, (bw, bh)), ...]`` for the bottom band as it is, then the top band turned by a
        half turn: ``A`` is the ``(3, 3) float64`` map from band px to rectified-card px (compose
        it with the card's own homography to warp a band straight from the photo).
    """
    w, h = card_size
    mm_w, mm_h = DOC_MM.get(doc_type, DOC_MM["passport"])
    share = BAND_SHARE.get(doc_type, BAND_SHARE["passport"])
    bw = int(round(mm_w * BAND_PX_PER_MM))
    bh = int(round(mm_h * share * BAND_PX_PER_MM))
    sx, sy = (w - 1) / max(bw - 1, 1), (h * share) / bh
    top = h - h * share
    bottom = np.array([[sx, 0, 0], [0, sy, top], [0, 0, 1]], np.float64)
    # turned: band (u, v) -> card (w - 1 - u * sx, h * share - v * sy)
    turned = np.array([[-sx, 0, w - 1], [0, -sy, h * share], [0, 0, 1]], np.float64)
    return [(bottom, (bw, bh)), (turned, (bw, bh))]


def _components(grey: np.ndarray, ink_share: float = INK_SHARE) -> list[Line]:
    """Line candidates of one band (``(h, w) uint8``), print above ``ink_share`` of the
    black-hat's Otsu level."""
    h, w = grey.shape
    px = BAND_PX_PER_MM
    k = int(round(1.2 * px)) | 1  # wider than an OCR-B stroke (about 0.35 mm)
    bh = cv2.morphologyEx(grey, cv2.MORPH_BLACKHAT, cv2.getStructuringElement(cv2.MORPH_RECT,
                                                                              (k, k)))
    otsu, _ = cv2.threshold(bh, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
    if otsu < MIN_INK:  # no print darker than its surround: nothing to read
        return []
    # Otsu splits the boldest print from the rest; the thin filler '<' needs a lower level
    _, ink = cv2.threshold(bh, ink_share * otsu, 255, cv2.THRESH_BINARY)
    joined = cv2.morphologyEx(ink, cv2.MORPH_CLOSE,
                              cv2.getStructuringElement(cv2.MORPH_RECT, (int(JOIN_MM * px), 1)))
    joined = cv2.morphologyEx(joined, cv2.MORPH_OPEN,
                              cv2.getStructuringElement(cv2.MORPH_RECT, (int(1.5 * px), 3)))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(joined, connectivity=8)
    out = []
    lo, hi = CHAR_H_MM[0] * px, CHAR_H_MM[1] * px
    for i in range(1, n):
        x, y, cw, ch, area = (int(v) for v in stats[i])
        if cw < MIN_WIDTH_SHARE * w or ch < lo:
            continue
        sub = labels[y:y + ch, x:x + cw] == i
        cols = np.nonzero(sub.any(axis=0))[0]
        third = max(1, cw // 3)
        yl, yr = _row_centre(sub[:, :third]), _row_centre(sub[:, cw - third:])
        xl, xr = x + third / 2.0, x + cw - third / 2.0
        slope = (yr - yl) / max(xr - xl, 1.0)
        height = ch - abs(slope) * cw
        if not lo <= height <= hi or area < 0.3 * cw * height:
            continue
        x0, x1 = float(x + cols[0]), float(x + cols[-1] + 1)
        out.append(Line(x0, x1, y + yl + slope * (x0 - xl), y + yl + slope * (x1 - xl), height))
    return sorted(out, key=lambda ln: ln.yc)


def _row_centre(mask: np.ndarray) -> float:
    """Mean row (px) of the set pixels of ``mask`` ``(h, w) bool`` (its middle when none)."""
    n = int(mask.sum())
    if not n:
        return mask.shape[0] / 2.0
    return float((np.arange(mask.shape[0], dtype=np.float64) @ mask.sum(axis=1)) / n)


def find_run(grey: np.ndarray, denoise: bool = False) -> list[Line]:
    """The MRZ's lines in a band, top to bottom, each with its own extent: the lowest run of
    up to 3 candidates whose left ends or right ends agree within 4 % of the band's width with
    those of a line already in the run (the zone's lines have one length and start at one
    margin; one end may be lost under glare or a finger, or run on into the card's edge) and
    whose spacing is even (:data:`LINE_GAP` line heights). A lowest candidate that starts no
    such run does not hide one above it: a document's edge or the scanner's shadow along it,
    joined into one band-wide line under the zone (a real scanned UK specimen page, its data
    page cut from the open booklet), is passed over. Where no candidate starts a run, the
    lowest one is returned alone (the reader decides what it is); none: no zone.

    Args:
        grey: ``(h, w) uint8`` band at :data:`BAND_PX_PER_MM`.
        denoise: search the band blurred by :data:`DENOISE_SIGMA` at
            :data:`DENOISED_INK_SHARE` of the ink level (the second search of a band where the
            first found no zone: in a dim capture the noise above 0.4 of the ink level joins
            the lines into each other and to the band's ends).
    """
    cands = (_components(cv2.GaussianBlur(grey, (0, 0), DENOISE_SIGMA), DENOISED_INK_SHARE)
             if denoise else _components(grey))
    if not cands:
        return []
    w = grey.shape[1]
    for start in range(len(cands) - 1, -1, -1):
        run = [cands[start]]
        for ln in reversed(cands[:start]):
            ref = run[-1]
            gap = ref.yc - ln.yc
            hh = max(ref.height, ln.height)
            if (len(run) < 3 and LINE_GAP[0] * hh <= gap <= LINE_GAP[1] * hh
                    and any(abs(ln.x0 - r.x0) <= 0.04 * w or abs(ln.x1 - r.x1) <= 0.04 * w
                            for r in run)):
                run.append(ln)
            else:
                break
        if len(run) >= 2:
            return run[::-1]
    return [cands[-1]]


def spanned_lines(run: list[Line], widest: bool = True) -> list[Line]:
    """The lines of a zone's run (:func:`find_run`, top to bottom, each with its own extent)
    all given the run's widest extent (``widest``: an end lost under glare or a finger is the
    others') or its narrowest (an end joined to a thumb or a mark is the others'), and the
    run's median height (an MRZ's lines have one length, fillers printed, and one character
    size)."""
    if not run:
        return []
    x0s, x1s = [ln.x0 for ln in run], [ln.x1 for ln in run]
    x0, x1 = (min(x0s), max(x1s)) if widest else (max(x0s), min(x1s))
    height = float(np.median([ln.height for ln in run]))
    return [_extend(ln, x0, x1, height) for ln in run]


def find_lines(grey: np.ndarray, denoise: bool = False) -> list[Line]:
    """The MRZ's lines in a band (:func:`find_run`), all with the run's widest extent
    (:func:`spanned_lines`)."""
    return spanned_lines(find_run(grey, denoise))


def _extend(ln: Line, x0: float, x1: float, height: float) -> Line:
    """``ln`` with its ends moved to ``x0``, ``x1`` along its slope, and ``height``."""
    slope = (ln.y1 - ln.y0) / max(ln.x1 - ln.x0, 1.0)
    return Line(x0, x1, ln.y0 + slope * (x0 - ln.x0), ln.y0 + slope * (x1 - ln.x0), height)


def line_crops(grey: np.ndarray, lines: list[Line]) -> list[np.ndarray]:
    """Each line cut out, its slope undone, scaled to :data:`LINE_INPUT_H` px high.

    Returns:
        ``(LINE_INPUT_H, w_k) uint8`` per line; ``w_k`` keeps the line's aspect ratio with a
        margin of half its height at each end.
    """
    out = []
    for ln in lines:
        s = ln.height * CROP_SCALE / LINE_INPUT_H  # band px per crop px
        pad = 0.5 * ln.height
        length = float(np.hypot(ln.x1 - ln.x0, ln.y1 - ln.y0))
        ux, uy = (ln.x1 - ln.x0) / length, (ln.y1 - ln.y0) / length
        wout = max(8, int(round((length + 2 * pad) / s)))
        # crop (u, v) -> band: start + u * s * dir + (v - H/2) * s * normal
        sx, sy = ln.x0 - pad * ux, ln.y0 - pad * uy
        a = np.array([[s * ux, -s * uy, sx + (LINE_INPUT_H / 2) * s * uy],
                      [s * uy, s * ux, sy - (LINE_INPUT_H / 2) * s * ux]], np.float64)
        out.append(cv2.warpAffine(grey, a, (wout, LINE_INPUT_H),
                                  flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                  borderMode=cv2.BORDER_REPLICATE))
    return out
