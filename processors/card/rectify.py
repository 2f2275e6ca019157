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
(:func:`paper_saturated`): glare covering up to nine tenths of that ground is still told from
the paper. Of the 107 synthetic photos with glare over the MRZ (seed 20261204), the median let
11 lose GLARE, the 25th percentile 5, the 10th 1; the real white specimen pages' paper is at
254-255 at each."""
PAPER_MIN_SHARE = 0.3
"""The smallest share of the document that light plain ground (darkest channel at least 128)
must cover to be its paper (:func:`paper_saturated`): a glare spot on a dark card is light
plain ground too, but of a few percent of it."""
PAPER_NEAR = 2
"""Grey levels under the saturation level within which the plain ground's median puts the
paper "at the level" (:func:`paper_saturated`): a fresh user's specimen pages at paper 250-255
have their median 1 level under the paper on the 512 px thumbnail."""
PAPER_BAND = 8
"""Most grey levels between the plain ground's 10th percentile and its median for one paper
(:func:`paper_saturated`): the specimen pages' fine security lines make 5; a synthetic light
card with a glare spot, 13 at least (14 photos, seed 20261204, whose median is at the level)."""
PAPER_SPREAD = 0.85
"""Share of the document's cells with saturated plain ground that makes its paper saturated
rather than lit by a glare spot (:func:`paper_saturated`): the specimen pages at 250-255 reach
0.90-0.95 of :data:`SPREAD_GRID`'s cells, the synthetic glare photos whose median is at the
level 0.35-0.80; a scanner's vignette, darker on one side, stays under it (a gap)."""
SPREAD_GRID = (8, 5)
"""Columns and rows of the grid :func:`_saturation_spread` counts cells on."""
PLAIN_RANGE = 8
"""Grey levels the darkest channel may span in a pixel's 3 x 3 neighbourhood (its morphological
gradient) for it to be plain ground (paper or a flat tint, not print or an edge; a scanner's or
a JPEG's noise stays within it)."""


def paper_saturated(image: np.ndarray, level: int, width: int) -> bool:
    """Whether the document's paper itself is saturated: its light plain ground covers at least
    :data:`PAPER_MIN_SHARE` of it and either that ground's :data:`PAPER_QUANTILE` percentile
    (darkest channel) is at least ``level``, or the ground is one narrow band of light at the
    level (its median within :data:`PAPER_NEAR` of ``level``, its 10th percentile within
    :data:`PAPER_BAND` of its median) that saturates all over the document
    (:func:`_saturation_spread` at least :data:`PAPER_SPREAD`).

    Glare is light brighter than the paper can send back (a specular spot over a card's colours
    or its lamination). A white page scanned on a flatbed or exported from a PDF (ICAO Doc 9303's
    specimen pages) has a paper of 250-255 all over, so its saturated share measures the paper,
    not glare (real specimen scans: 64-78 % "saturated" without a spot of glare); where the
    paper saturates, glare cannot be told from it and the glare measures read 0. A paper just at
    the level, with fine security lines or scanner noise a few levels below it (a fresh user's
    specimen pages at 250-255: their 10th percentile sits 5-6 levels under the paper), is told
    from glare by where it saturates (a glare spot one part of the document, a paper every part)
    and by how narrow its light is (a glare spot on a light card spreads the light ground over
    many levels, from the card's tint up to the spot: 13-110 between the 10th percentile and
    the median on the synthetic photos with glare).

    Args:
        image: ``(H, W, 3) uint8`` BGR (the rectified card).
        level: 8-bit level counted as saturated (the GLARE setting).
        width: width (px) it is resized to first.
    """
    s = _at_width(image, width)
    low = cv2.min(cv2.min(s[..., 0], s[..., 1]), s[..., 2])
    spread = cv2.morphologyEx(low, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    plain = (spread <= PLAIN_RANGE) & (low >= 128)
    paper = low[plain]
    if paper.size < PAPER_MIN_SHARE * low.size:
        return False
    p10, p50 = np.percentile(paper, [PAPER_QUANTILE, 50.0])
    if p10 >= level:
        return True
    return bool(p50 >= level - PAPER_NEAR and p50 - p10 <= PAPER_BAND
                and _saturation_spread(plain, plain & (low >= level)) >= PAPER_SPREAD)


def _saturation_spread(plain: np.ndarray, saturated: np.ndarray) -> float:
    """Share of the document's cells (a :data:`SPREAD_GRID` grid) whose plain ground is
    saturated: cells where plain ground covers at least a quarter and at least a fifth of it is
    saturated, over all cells. ``plain``, ``saturated``: ``(h, w) bool`` masks of one size."""
    cols, rows = SPREAD_GRID
    h, w = plain.shape
    ys = np.linspace(0, h, rows + 1).astype(int)
    xs = np.linspace(0, w, cols + 1).astype(int)
    cells = 0
    for r in range(rows):
        for c in range(cols):
            g = plain[ys[r]:ys[r + 1], xs[c]:xs[c + 1]]
            n = int(np.count_nonzero(g))
            sat = int(np.count_nonzero(saturated[ys[r]:ys[r + 1], xs[c]:xs[c + 1]]))
            cells += int(n >= 0.25 * g.size and sat >= 0.2 * n)
    return cells / (rows * cols)


def glare_fraction(image: np.ndarray, level: int, width: int) -> float:
    """The GLARE measure: :func:`saturated_fraction`, or 0 where the paper itself is saturated
    (:func:`paper_saturated`)."""
    if paper_saturated(image, level, width):
        return 0.0
    return saturated_fraction(image, level, width)
