"""Capture-quality measures of a found card, each with the bound it is judged against.

Measured on what the card processor already has (the quad in the upload's px, the upload's
size, the rectified ``quality_width`` thumbnail), so together they cost about a millisecond per
card whatever the photo's size (``benchmarks``: ``python -m processors.card.eval quality``):

- ``dpi``: effective resolution, sqrt(quad area in px^2 / document area in in^2), the document
  being ISO/IEC 7810 ID-1 (85.60 x 53.98 mm), ID-3 (125 x 88 mm), or ID-2 (105 x 74 mm) when its
  MRZ reads as TD2 (ICAO Doc 9303 part 6);
- ``tilt_deg``: angle between the document's normal and the camera's axis, from the homography
  document plane (mm) -> photo (px) with the principal point at the photo's centre and the focal
  length estimated from the homography itself (the two constraints of an orthonormal rotation,
  Zhang 2000) and clipped to a phone camera's range, or :data:`DEFAULT_FOCAL` x the photo's
  diagonal when they cannot tell it (a nearly frontal view, where the tilt is small whatever
  the focal length);
- ``margin``: the corners' smallest distance to the frame, as a share of its shorter side;
- ``brightness``, ``contrast``: mean and standard deviation of the grey thumbnail (0-255);
- ``focus``: variance of its Laplacian (the BLURRY measure);
- ``glare``: share of saturated pixels (the GLARE measure); ``glare_mrz`` and ``glare_portrait``:
  the same over the MRZ band and the portrait zone; counted from a few levels above a white
  paper near the saturation level, and all three 0 where the paper itself is saturated (a
  white page scanned or exported: :func:`~processors.card.rectify.glare_threshold`);
- ``colourfulness``: the card's chroma in Hasler and Süsstrunk's opponent axes (2003), read on
  a 64 px copy (:func:`colourfulness`), or its portrait zone's where a face is found there and
  the zone is more colourful (:meth:`Quality.with_portrait`: a white data page printed in black
  around a colour portrait is no black-and-white copy; the ICAO Doc 9303 specimen pages measure
  0-1 over the page and 4-13 over the portrait); a black-and-white photocopy measures near 0;
- ``portrait``: a face found in the portrait zone (the ID-photo task's batched MTCNN,
  :mod:`processors.mtcnn`; filled in by the processor for the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import cv2
import numpy as np

from processors.card.rectify import glare_threshold, laplacian_variance, saturated_fraction

MM_PER_INCH = 25.4
DEFAULT_FOCAL = 0.75
"""Focal length assumed when the homography cannot tell it, as a share of the photo's
diagonal (a phone's main camera: 26-28 mm equivalent, 0.60-0.65 of the diagonal; a
longer one for close-ups)."""
FOCAL_RANGE = (0.45, 1.5)
"""Estimated focal lengths are clipped to this range (share of the diagonal): phone cameras
from ultra-wide-ish to 2x tele."""
MRZ_BAND: dict[str, float] = {"id_card": 0.34, "passport": 0.2}
"""Share of the rectified card's height, from the bottom, where the MRZ lies (TD1's three lines
on ID-1; TD3's two on ID-3 and TD2's on ID-2)."""
PORTRAIT_ZONE = (0.02, 0.12, 0.38, 0.88)
"""Where the portrait sits on an ID-1 card front or an ID-3 data page (ICAO Doc 9303 parts 4
and 5 place it on the left), as ``x0, y0, x1, y1`` shares of the rectified card."""

PORTRAIT_ZONE_RIGHT = (1.0 - PORTRAIT_ZONE[2], PORTRAIT_ZONE[1], 1.0 - PORTRAIT_ZONE[0],
                       PORTRAIT_ZONE[3])
""":data:`PORTRAIT_ZONE` mirrored: where ID-1 cards outside ICAO Doc 9303's layout put the
portrait (cards without a machine-readable zone, e.g. Hong Kong's identity card and many
driving licences and staff cards carry it on the right)."""


def effective_dpi(quad: np.ndarray, doc_mm: tuple[float, float]) -> float:
    """sqrt(quad area px^2 / document area in^2): the dots per inch the document was captured
    at (exact for a frontal view, the geometric mean of the scales under perspective).

    Args:
        quad: ``(4, 2)`` corners (px), any order around the quad.
        doc_mm: the document's width and height (mm).
    """
    q = np.asarray(quad, np.float64)
    x, y = q[:, 0], q[:, 1]
    area = 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))
    return float(np.sqrt(area / (doc_mm[0] * doc_mm[1] / MM_PER_INCH ** 2)))


def tilt_degrees(quad: np.ndarray, doc_mm: tuple[float, float], size: tuple[int, int]) -> float:
    """Angle (degrees) between the document's normal and the camera's optical axis.

    Args:
        quad: ``(4, 2)`` corners TL, TR, BR, BL of the document (px of a ``size`` photo), its
            first side (TL to TR) the document's width: a quad read from another corner is
            fitted to a rectangle of the wrong shape, and the angle comes out wrong (a
            fresh user's trial: 29 degrees read 49 with the photo turned a quarter).
        doc_mm: the document's width and height (mm); under a half turn (TL and BR swapped)
            the angle is the same.
        size: ``(width, height)`` of the photo (px); the principal point is its centre.

    Returns:
        Degrees in [0, 90).
    """
    w, h = size
    diag = float(np.hypot(w, h))
    q = np.asarray(quad, np.float64) - [w / 2.0, h / 2.0]
    dw, dh = doc_mm
    src = np.array([[-dw / 2, -dh / 2], [dw / 2, -dh / 2], [dw / 2, dh / 2], [-dw / 2, dh / 2]],
                   np.float32)
    hm = cv2.getPerspectiveTransform(src, q.astype(np.float32)).astype(np.float64)
    (h11, h12, _), (h21, h22, _), (h31, h32, _) = hm
    a1, b1 = h11 * h12 + h21 * h22, h31 * h32
    a2, b2 = h11 * h11 + h21 * h21 - h12 * h12 - h22 * h22, h31 * h31 - h32 * h32
    denom = a1 * a1 + a2 * a2
    inv_f2 = -(a1 * b1 + a2 * b2) / denom if denom > 0 else 0.0
    f = DEFAULT_FOCAL * diag
    if inv_f2 > 0:  # an estimate, kept within a camera's range (noise in the corners moves it)
        f = float(np.clip(1.0 / np.sqrt(inv_f2), FOCAL_RANGE[0] * diag, FOCAL_RANGE[1] * diag))
    k_inv = np.diag([1.0 / f, 1.0 / f, 1.0])
    r1, r2 = k_inv @ hm[:, 0], k_inv @ hm[:, 1]
    n = np.cross(r1 / np.linalg.norm(r1), r2 / np.linalg.norm(r2))
    return float(np.degrees(np.arccos(min(1.0, abs(n[2]) / max(np.linalg.norm(n), 1e-12)))))


def frame_margin(quad: np.ndarray, size: tuple[int, int]) -> float:
    """Smallest distance (px) of a corner to the frame's border, as a share of the frame's
    shorter side (negative when a corner lies outside)."""
    w, h = size
    q = np.asarray(quad, np.float64)
    d = min(float(q[:, 0].min()), float(q[:, 1].min()), float(w - 1 - q[:, 0].max()),
            float(h - 1 - q[:, 1].max()))
    return d / float(min(w, h))


COLOUR_WIDTH = 64
"""Width (px) the card is averaged down to before its chroma is read: per-pixel sensor and JPEG
chroma noise averages out (at 256 px it made grey copies measure up to 19, as colourful as
printed cards)."""
COLOUR_PERCENTILE = 60
"""The share of the card (percentile of its pixels) whose chroma is read: a hand or a sticker
over part of a grey copy stays below it."""


def colourfulness(image: np.ndarray,
                  zone: tuple[float, float, float, float] | None = None) -> float:
    """How colourful a card is: the 60th percentile of its pixels' chroma, their distance from
    grey in the opponent axes of Hasler and Süsstrunk (2003), ``R - G`` and
    ``(R + G) / 2 - B``, after averaging the card down to :data:`COLOUR_WIDTH` px; with
    ``zone``, the larger of that and the same percentile over the zone's pixels of the same
    copy (the same averaging, so the same noise). Figures in :mod:`processors.card.policy`
    (``min_colourfulness``). A card of one pale tint (a light blue ID card) is colourful by this
    measure; a grey copy photographed under strongly tinted light would be too (not in the
    synthetic set: its light is neutral).

    Args:
        image: ``(h, w, 3) uint8`` BGR, the rectified card.
        zone: ``x0, y0, x1, y1`` shares of the card (e.g. :data:`PORTRAIT_ZONE`), or None.
    """
    card, in_zone = _colourfulness_pair(image, zone or (0.0, 0.0, 1.0, 1.0))
    return card if zone is None else max(card, in_zone)


def _colourfulness_pair(image: np.ndarray,
                        zone: tuple[float, float, float, float]) -> tuple[float, float]:
    """:func:`colourfulness` of the whole card and of ``zone`` alone, from one chroma map."""
    h, w = image.shape[:2]
    small = cv2.resize(image, (COLOUR_WIDTH, max(1, round(h * COLOUR_WIDTH / w))),
                       interpolation=cv2.INTER_AREA).astype(np.float32)
    b, g, r = small[..., 0], small[..., 1], small[..., 2]
    rg = r - g
    yb = 0.5 * (r + g) - b
    chroma = np.sqrt(rg * rg + yb * yb)
    return (float(np.percentile(chroma, COLOUR_PERCENTILE)),
            float(np.percentile(_zone(chroma, *zone), COLOUR_PERCENTILE)))


def _zone(image: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    h, w = image.shape[:2]
    return image[int(y0 * h):max(int(y0 * h) + 1, int(y1 * h)),
                 int(x0 * w):max(int(x0 * w) + 1, int(x1 * w))]


@dataclass(frozen=True, slots=True)
class Quality:
    """The measures of one card (units in the module doc)."""

    dpi: float
    tilt_deg: float
    margin: float
    brightness: float
    contrast: float
    focus: float
    glare: float
    glare_mrz: float
    glare_portrait: float
    colourfulness: float
    portrait: bool | None = None
    portrait_colourfulness: float = 0.0

    def with_portrait(self, found: bool) -> Quality:
        """These measures with ``portrait`` set; where a face was found in the portrait zone,
        ``colourfulness`` becomes the larger of the card's and the zone's
        (``portrait_colourfulness``): a colour face is no black-and-white copy, whatever the
        page around it (a white data page printed in black). Only a face found counts: a thumb
        or a sticker over the zone of a grey copy is colour too."""
        colour = max(self.colourfulness, self.portrait_colourfulness) if found else \
            self.colourfulness
        return replace(self, portrait=found, colourfulness=colour)

    def as_dict(self) -> dict[str, Any]:
        """Rounded values for the result."""
        return {"dpi": round(self.dpi, 1), "tilt_deg": round(self.tilt_deg, 2),
                "margin": round(self.margin, 4), "brightness": round(self.brightness, 1),
                "contrast": round(self.contrast, 1), "focus": round(self.focus, 1),
                "glare": round(self.glare, 4), "glare_mrz": round(self.glare_mrz, 4),
                "glare_portrait": round(self.glare_portrait, 4),
                "colourfulness": round(self.colourfulness, 2), "portrait": self.portrait}


def measure(quad: np.ndarray, size: tuple[int, int], doc_mm: tuple[float, float],
            doc_type: str, thumb: np.ndarray, glare_level: int,
            portrait_zone: tuple[float, float, float, float] = PORTRAIT_ZONE) -> Quality:
    """Every measure but ``portrait`` (see the module doc; :meth:`Quality.with_portrait` sets
    it, and with it the portrait zone's part in ``colourfulness``).

    Args:
        quad: ``(4, 2)`` corners TL, TR, BR, BL in the upload's px, as the rectified card
            reads them (its first side the document's width, ``doc_mm[0]``; the tilt depends
            on it, the other measures do not).
        size: the upload's ``(width, height)`` px.
        doc_mm: the document's size (mm).
        doc_type: ``id_card`` / ``passport`` (where the MRZ band lies).
        thumb: the rectified, upright card, ``(h, w, 3) uint8`` BGR (the ``quality_width``
            thumbnail).
        glare_level: 8-bit level counted as saturated (the GLARE setting).
        portrait_zone: where the portrait lies (``glare_portrait``, the zone's part in
            ``colourfulness``): :data:`PORTRAIT_ZONE`, or :data:`PORTRAIT_ZONE_RIGHT` on a card
            whose face was found there.
    """
    grey = cv2.cvtColor(thumb, cv2.COLOR_BGR2GRAY)
    mean, std = cv2.meanStdDev(grey)
    width = thumb.shape[1]
    band = MRZ_BAND.get(doc_type, MRZ_BAND["passport"])
    # where the paper itself is saturated (None) no glare can be told from it
    thr = glare_threshold(thumb, glare_level, width)
    card_colour, zone_colour = _colourfulness_pair(thumb, portrait_zone)
    return Quality(
        dpi=effective_dpi(quad, doc_mm), tilt_deg=tilt_degrees(quad, doc_mm, size),
        margin=frame_margin(quad, size), brightness=float(mean[0, 0]),
        contrast=float(std[0, 0]), focus=laplacian_variance(grey, width),
        glare=0.0 if thr is None else saturated_fraction(thumb, thr, width),
        glare_mrz=0.0 if thr is None else _saturated(_zone(thumb, 0.0, 1.0 - band, 1.0, 1.0),
                                                     thr),
        glare_portrait=0.0 if thr is None else _saturated(_zone(thumb, *portrait_zone), thr),
        colourfulness=card_colour, portrait_colourfulness=max(card_colour, zone_colour))


def _saturated(image: np.ndarray, level: int) -> float:
    return saturated_fraction(image, level, image.shape[1])


def portrait_crop(thumb: np.ndarray,
                  zone: tuple[float, float, float, float] = PORTRAIT_ZONE) -> np.ndarray:
    """The portrait zone of a rectified card (:data:`PORTRAIT_ZONE`, or ``zone``), BGR."""
    return _zone(thumb, *zone)
