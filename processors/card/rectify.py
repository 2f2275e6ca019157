"""Rectification: homography to the canonical ISO/IEC 7810 size, upright decision, quality measures.

Canonical sizes (ISO/IEC 7810): ID-1 85.60 x 53.98 mm (ID cards, driving licences), ID-3
125 x 88 mm (passport data pages, ICAO 9303 TD3). At ``dpi`` the output is
``floor(mm * dpi / 25.4)`` px per side: ID-1 1011 x 637 px and ID-3 1476 x 1039 px at 300 dpi.
The output is always landscape.

Upright decision: the card is warped with its long side horizontal (two candidates remain: 0 and
180 degrees; for a quad that is taller than wide, those are the image's 90 and 270 degree turns).
An OpenCV Haar frontal-face cascade (``haarcascade_frontalface_default.xml``, OpenCV 4.x
``cv2.data.haarcascades``; it finds upright faces only) runs on both candidates; the candidate
with a face wins, preferring a face in the left half (ID-1 cards and TD3 pages put the portrait
on the left). Without a face on either, the candidate whose top edge is the quad's upper edge in
the photo (TL = top-left corner) is kept: phone photos are mostly taken upright.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np

from processors.card import geometry as geo
from processors.cascades import cascade
from processors.pixels import warp_host

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
    if requested in ("id_card", "passport"):
        return requested  # type: ignore[return-value]
    return "id_card" if aspect >= split else "passport"


FACE_CASCADE = "haarcascade_frontalface_default.xml"
"""OpenCV's bundled frontal-face Haar cascade (Viola-Jones) used for the upright decision."""


FACE_PASSES = ((400, 0.12), (800, 0.06))
"""Orientation passes: (width px of the rectified card, smallest face as a share of its height).
The second pass runs only when the first finds no face in either candidate: a portrait whose
face is under ~30 px at 400 px wide (the cascade's window is 24 px) is found at 800 px."""


FACE_MIN_EVIDENCE = 8.0
"""Smallest face score (merged detections, x1.5 in the left half) that decides the orientation;
weaker detections (an upside-down face, texture) gather 2-7 on the checked cards, upright
portraits 10-90."""


def _face_score(gray: np.ndarray, min_frac: float = 0.12) -> float:
    """Evidence for an upright face in ``gray``: the largest number of merged Haar detections
    (``detectMultiScale2``'s neighbour count) of any face at least ``min_frac`` of the height,
    x1.5 when the face is centred in the left half; 0 when there is none. False positives
    gather few neighbours, true faces many."""
    h, w = gray.shape
    side = max(1, int(min_frac * h))
    faces, counts = cascade(FACE_CASCADE).detectMultiScale2(gray, scaleFactor=1.1, minNeighbors=5,
                                                         minSize=(side, side))
    best = 0.0
    for (x, _y, fw, _fh), n in zip(faces, np.ravel(counts) if len(faces) else [], strict=True):
        best = max(best, float(n) * (1.5 if x + fw / 2 < w / 2 else 1.0))
    return best


@dataclass(frozen=True)
class Rectified:
    """A rectified card.

    Attributes:
        image: ``(height, width, 3) uint8`` BGR, landscape, upright.
        doc_type: ``id_card`` or ``passport``.
        rotation: clockwise quarter turns (0-3) between the quad's TL-first reading and the
            output (0: the quad's TL corner is the card's top-left).
        by_face: True when a face decided the orientation.
    """

    image: np.ndarray
    doc_type: DocType
    rotation: int
    by_face: bool


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


def face_upright(card: np.ndarray) -> tuple[bool, bool]:
    """The Haar upright decision on a rectified landscape card (``(h, w, 3) uint8`` BGR):
    ``(turn, by_face)``: ``turn`` when the card reads upright after a half turn, ``by_face``
    when a face decided it (``FACE_PASSES``, ``FACE_MIN_EVIDENCE``)."""
    h, w = card.shape[:2]
    s0 = s180 = 0.0
    for small_w, min_frac in FACE_PASSES:
        small = cv2.resize(card, (small_w, int(round(small_w * h / w))),
                           interpolation=cv2.INTER_AREA)
        g = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
        s0 = _face_score(g, min_frac)
        # enough upright evidence decides alone: an upside-down face gathers 2-7, so the
        # turned reading cannot win (it never did on the tuning set and the real checks at
        # 4 rotations; this skips 31 % of the cascade calls, the card's costliest CPU step)
        s180 = (0.0 if s0 >= FACE_MIN_EVIDENCE
                else _face_score(g[::-1, ::-1].copy(), min_frac))
        if max(s0, s180) >= FACE_MIN_EVIDENCE:
            return s180 > s0, True
    return False, False


def rectify(image: np.ndarray, quad: np.ndarray, doc_type: DocType, dpi: int,
            orient_by_face: bool = True) -> Rectified:
    """Warp the card of a host image to its canonical landscape size and turn it upright (the
    processor's steps on one ``(H, W, 3) uint8`` BGR array, for tools and tests).

    Args:
        image: ``(H, W, 3) uint8`` BGR source.
        quad: ``(4, 2)`` card corners TL, TR, BR, BL in source px.
        doc_type: ``id_card`` or ``passport``.
        dpi: output resolution (dots per inch).
        orient_by_face: decide 0/180 degrees from a Haar face (else keep the quad's reading).

    Returns:
        A :class:`Rectified`.
    """
    q = np.asarray(quad, np.float64)
    k = reading(q)
    size = canonical_size(doc_type, dpi)
    out = warp_host(image, homography(np.roll(q, -k, axis=0), size), size)
    turn, by_face = face_upright(out) if orient_by_face else (False, False)
    if turn:
        out = out[::-1, ::-1].copy()
        k += 2
    return Rectified(image=out, doc_type=doc_type, rotation=k % 4, by_face=by_face)


def laplacian_variance(image: np.ndarray, width: int) -> float:
    """Variance of the Laplacian (3x3 aperture) of ``image`` in grey, resized to ``width`` px
    wide (area interpolation): a sharpness measure (Pech-Pacheco et al., 2000)."""
    return float(cv2.Laplacian(_grey_at_width(image, width), cv2.CV_64F).var())


def _grey_at_width(image: np.ndarray, width: int) -> np.ndarray:
    """``image`` (BGR, or already grey) in grey, resized to ``width`` px wide (area
    interpolation), uint8."""
    h, w = image.shape[:2]
    g = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    return cv2.resize(g, (width, max(1, round(h * width / w))), interpolation=cv2.INTER_AREA)


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
    v = [float(cv2.filter2D(g, cv2.CV_32F, k)[1:-1, 1:-1].var()) for k in _SECOND_DIFFS]
    return min(v) / max(v) if max(v) > 1e-9 else 1.0


def saturated_fraction(image: np.ndarray, level: int, width: int) -> float:
    """Share of pixels whose three channels are all >= ``level`` (``image`` resized to ``width``)."""
    h, w = image.shape[:2]
    s = cv2.resize(image, (width, max(1, round(h * width / w))), interpolation=cv2.INTER_AREA)
    return float(np.all(s >= level, axis=2).mean())
