"""Rectification: homography to the canonical ISO/IEC 7810 size, upright decision, quality measures.

Canonical sizes (ISO/IEC 7810): ID-1 85.60 x 53.98 mm (ID cards, driving licences), ID-3
125 x 88 mm (passport data pages, ICAO 9303 TD3). At ``dpi`` the output is
``floor(mm * dpi / 25.4)`` px per side: ID-1 1011 x 637 px and ID-3 1476 x 1039 px at 300 dpi.
The output is always landscape.

Upright decision: the card is warped with its long side horizontal (:func:`reading`; two
candidates remain: 0 and 180 degrees; for a quad that is taller than wide, those are the image's
90 and 270 degree turns); the orientation classifier (:mod:`processors.card.orient`) chooses
between them, and a half turn is a roll of the quad by two corners in :func:`homography`.
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np

from processors.card import geometry as geo

DocType = Literal["id_card", "passport"]

DOC_MM: dict[str, tuple[float, float]] = {"id_card": (85.60, 53.98), "passport": (125.0, 88.0)}
"""Width x height (mm) per document type, ISO/IEC 7810 ID-1 and ID-3."""

MM_PER_INCH = 25.4


def canonical_size(doc_type: str, dpi: int) -> tuple[int, int]:
    """Output ``(width, height)`` px of ``doc_type`` (``id_card``/``passport``) at ``dpi``.

    ``floor(mm * dpi / 25.4)``: ID-1 at 300 dpi is ``(1011, 637)``, ID-3 ``(1476, 1039)``.
    """
    w_mm, h_mm = DOC_MM[doc_type]
    return int(w_mm * dpi / MM_PER_INCH), int(h_mm * dpi / MM_PER_INCH)


def choose_doc_type(requested: str, aspect: float, split: float) -> DocType:
    """``requested`` when it is ``id_card``/``passport``; for ``auto`` (or anything else) ID-1
    when the measured long/short ``aspect`` is >= ``split``, else ID-3."""
    if requested == "id_card":
        return "id_card"
    if requested == "passport":
        return "passport"
    return "id_card" if aspect >= split else "passport"


def homography(quad: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The ``(3, 3) float64`` homography mapping output px of a ``size`` = ``(w, h)`` image to the
    quad (TL, TR, BR, BL, px): output corner ``(0, 0)`` goes to TL, ``(w - 1, 0)`` to TR and so
    on (the inverse map :meth:`processors.pixels.PixelBackend.warp` takes)."""
    w, h = size
    dst = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float32)
    return cv2.getPerspectiveTransform(dst, np.asarray(quad, np.float32)).astype(np.float64)


def reading(quad: np.ndarray) -> int:
    """Quarter turns (0 or 1) from the quad's TL-first reading to its landscape reading: 1 when
    the quad is taller than wide (read from its TR corner, so the output is landscape)."""
    s = geo.side_lengths(np.asarray(quad, np.float64))
    return 1 if (s[1] + s[3]) > (s[0] + s[2]) else 0


def laplacian_variance(image: np.ndarray, width: int) -> float:
    """Variance of the Laplacian (3x3 aperture) of ``image`` in grey, resized to ``width`` px
    wide (area interpolation): a sharpness measure (Pech-Pacheco et al., 2000)."""
    return _variance(cv2.Laplacian(_grey_at_width(image, width), cv2.CV_32F))


def _variance(x: np.ndarray) -> float:
    """Population variance of all elements of a single-channel array (double accumulation)."""
    return float(cv2.meanStdDev(x)[1][0, 0] ** 2)


def _grey_at_width(image: np.ndarray, width: int) -> np.ndarray:
    """``image`` (BGR, or already grey) in grey, resized to ``width`` px wide (area
    interpolation), uint8."""
    return _at_width(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image, width)


def median_grey(image: np.ndarray, width: int) -> float:
    """Median grey level (0-255) of ``image`` (BGR, or already grey, uint8) at ``width`` px
    wide: on a page whose print covers less than half of it, its paper's level."""
    return float(np.median(_grey_at_width(image, width)))


_SECOND_DIFFS = (
    np.array([[0, 0, 0], [1, -2, 1], [0, 0, 0]], np.float32),
    np.array([[0, 1, 0], [0, -2, 0], [0, 1, 0]], np.float32),
    np.array([[1, 0, 0], [0, -2, 0], [0, 0, 1]], np.float32) / 2.0,
    np.array([[0, 0, 1], [0, -2, 0], [1, 0, 0]], np.float32) / 2.0,
)
"""Second differences along 0°, 90°, 45° and 135° (the diagonal ones per px of distance^2/2)."""


def direction_detail_ratio(image: np.ndarray, width: int) -> float:
    """How evenly fine detail survives in every direction: motion blur removes it along one.

    The variance of the second difference of the grey image (resized to ``width`` px wide, area
    interpolation) is taken along 0°, 90°, 45° and 135°; the result is the smallest over the
    largest. A sharp or evenly (out-of-focus) blurred card gives 0.25-0.6 (synthetic tuning
    cards: >= 0.246; real card photos in the checks: 0.35-0.55); a linear motion blur of 9-31 px
    gives 0.02-0.08.

    Args:
        image: ``(H, W, 3) uint8`` BGR (the rectified card).
        width: width (px) it is resized to first.

    Returns:
        Ratio in [0, 1]; 1.0 for an image with no detail at all (nothing to compare).
    """
    g = _grey_at_width(image, width).astype(np.float32)
    v = [_variance(cv2.filter2D(g, cv2.CV_32F, k)[1:-1, 1:-1]) for k in _SECOND_DIFFS]
    return min(v) / max(v) if max(v) > 1e-9 else 1.0


def saturated_fraction(image: np.ndarray, level: int, width: int) -> float:
    """Share of pixels whose three channels are all >= ``level`` (``image`` resized to ``width``
    by area averaging, unless it has that width)."""
    s = _at_width(image, width)
    bright = cv2.countNonZero(cv2.inRange(s, (level,) * 3, (255,) * 3))
    return bright / float(s.shape[0] * s.shape[1])


def _at_width(image: np.ndarray, width: int) -> np.ndarray:
    """``image`` (any channels) resized to ``width`` px wide by area averaging, unless it has
    that width."""
    h, w = image.shape[:2]
    return image if w == width else cv2.resize(image, (width, max(1, round(h * width / w))),
                                               interpolation=cv2.INTER_AREA)


PAPER_QUANTILE = 10.0
"""Percentile of the light plain ground's darkest channel taken for the document's paper level
(:func:`glare_threshold`): glare covering up to nine tenths of that ground is still told from
the paper. Of the 107 synthetic photos with glare over the MRZ (seed 20261204), the median let
11 lose GLARE, the 25th percentile 5, the 10th 1; the real white specimen pages' paper is at
254-255 at each."""
PAPER_MIN_SHARE = 0.3
"""The smallest share of the document that light plain ground (darkest channel at least 128)
must cover to be its paper (:func:`glare_threshold`): a glare spot on a dark card is light
plain ground too, but of a few percent of it."""
PAPER_BAND = 8
"""Most grey levels between the light plain ground's 10th percentile and its median for it to
be one paper (:func:`glare_threshold`): a fresh user's specimen pages with fine security lines
make 5; the synthetic light cards with a glare spot whose median is at the level, 13 at least
(14 photos, seed 20261204): their light ground is a tint and a spot."""
GLARE_ABOVE_PAPER = 4
"""Grey levels above a paper's median from which light counts as glare on a paper near the
saturation level (:func:`glare_threshold`): a specular spot saturates to 255, while the noise
of a plain paper in a JPEG or a scan stays within a few levels of it (:data:`PLAIN_RANGE`)."""
PLAIN_RANGE = 8
"""Grey levels the darkest channel may span in a pixel's 3 x 3 neighbourhood (its morphological
gradient) for it to be plain ground (paper or a flat tint, not print or an edge; a scanner's or
a JPEG's noise stays within it)."""


def glare_threshold(image: np.ndarray, level: int, width: int) -> int | None:
    """The 8-bit level from which light counts as glare on this document (every channel at
    least that), or None where its paper itself is saturated and no glare can be told from it.

    Glare is light brighter than the paper can send back (a specular spot over a card's colours
    or its lamination). Mostly that is ``level`` (the GLARE setting). Where the document's light
    plain ground (darkest channel at least 128, 3 x 3 spread at most :data:`PLAIN_RANGE`)
    covers at least :data:`PAPER_MIN_SHARE` of it:

    - its :data:`PAPER_QUANTILE` percentile at ``level`` or above: the paper is saturated (a
      white page scanned or exported to 250-255: ICAO Doc 9303's specimen pages were 64-78 %
      "saturated" without a spot of glare): None;
    - one narrow band of light (median within :data:`PAPER_BAND` of that percentile) whose
      median plus :data:`GLARE_ABOVE_PAPER` passes ``level``: that paper, just under or at the
      level (a fresh user's white pages at 248-251 with fine lines: their noise put 13-40 % of
      the paper at 250 and read as glare), counts glare from its median plus
      :data:`GLARE_ABOVE_PAPER`, or None where that is past 255 (a paper from 252 up: a spot
      on it cannot be told from it);
    - else ``level``: a light ground spread over many levels is a tint and a glare spot (the
      synthetic photos with glare: 13-110 levels between the 10th percentile and the median).

    Args:
        image: ``(H, W, 3) uint8`` BGR (the rectified card).
        level: 8-bit level counted as saturated (the GLARE setting).
        width: width (px) it is resized to first.
    """
    s = _at_width(image, width)
    low = cv2.min(cv2.min(s[..., 0], s[..., 1]), s[..., 2])
    spread = cv2.morphologyEx(low, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    paper = low[(spread <= PLAIN_RANGE) & (low >= 128)]
    if paper.size < PAPER_MIN_SHARE * low.size:
        return level
    p10, p50 = np.percentile(paper, [PAPER_QUANTILE, 50.0])
    if p10 >= level:
        return None
    above = int(np.ceil(p50)) + GLARE_ABOVE_PAPER
    if p50 - p10 > PAPER_BAND or above <= level:
        return level
    return above if above <= 255 else None


def glare_fraction(image: np.ndarray, level: int, width: int) -> float:
    """The GLARE measure: :func:`saturated_fraction` from the document's
    :func:`glare_threshold`, or 0 where the paper itself is saturated."""
    threshold = glare_threshold(image, level, width)
    return 0.0 if threshold is None else saturated_fraction(image, threshold, width)
