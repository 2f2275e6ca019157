"""The scan path: an upload that is already the document (a flatbed scan, a phone app's crop).

The localisation model finds a card *in a scene*; a scan or a pre-cropped page has no scene
around it, only a thin plain margin (a scanner lid, white on white) or none at all, so its mask
covers the frame and the card path judges it NO_CARD or PARTIAL_CARD. This module judges the
frame itself, geometrically, for the uploads the card path did not accept:

1. **Near-border quad** (:func:`frame_quad`): each side of the frame searches inwards, within
   ``scan_band_frac`` of the frame's shorter side, for the outermost straight edge
   (:func:`geometry.side_search`) whose strip out to the frame is plain (at most
   ``scan_busy_max`` of it with strong gradients: a lid, a margin; a line of print is not). A side
   with no such edge lies on the frame (the document runs to it).
2. **The shape** (:func:`judge`): the quad's aspect ratio (perspective undone approximately) lies
   within ``scan_aspect_tol`` of a document format's (ID-1 85.60 x 53.98 mm: 1.586; ID-3
   125 x 88 mm and ID-2 105 x 74 mm: 1.420 and 1.419; ISO/IEC 7810), its corners within
   ``scan_max_corner_dev_deg`` of square (a scanner and a crop app leave them square), and it
   covers at least ``scan_min_area_frac`` of the frame.
3. **Print** (:func:`print_glyphs`): a document carries lines of print (names, numbers, the
   MRZ); the rectified quad must show at least ``scan_min_print_glyphs`` glyphs standing in a
   row with a neighbour of their size, on a plain ground (at least ``scan_min_ground`` of it,
   :func:`ground_share`), made of strokes as letters and digits are, not of solid shapes
   (:data:`SOLID_MAX_SHARE`). With fewer than 3 margined edges only the print tells a document that
   fills the frame from a photo of the same shape; with 3 or 4 it tells a document on a lid
   from anything else of a document's shape there (a grey or blank card, noise, a photo print,
   a checkerboard, tiles or dots in rows, a page whose only print, a card's, is too small for a
   document of the page's size; MODEL.md, *Scans, round 6*).

A quad that passes is verified like a photographed card (BLURRY, GLARE, the orientation, the
verification of :mod:`processors.card.verify` where present); PARTIAL_CARD does not apply to its
sides on the frame (the frame *is* the document's edge there), and those sides are squared to
the found ones (:func:`complete_sides`: a scan has no perspective, and a page turned 1-2° and
cut by the frame would otherwise warp with its print slanted). A card the card path found is
checked against this path when it is suspect (:func:`inner_suspect`, :func:`replaces`).
Synthetic classes and figures: ``processors/card/training/synth.py`` (``scan_sample``,
``frame_negative``) and MODEL.md, *Scans*.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import cv2
import numpy as np

from processors.card import geometry as geo
from processors.card.detect import Detection
from processors.card.metrics import quad_iou
from processors.card.settings import CardSettings

DOC_ASPECTS = (85.60 / 53.98, 125.0 / 88.0)
"""Long/short side ratios of the document formats a scan may be (ISO/IEC 7810 ID-1 and ID-3;
ID-2's 105 x 74 mm, 1.419, falls within ID-3's tolerance)."""

PRINT_WIDTH = 768
"""Width (px) of the rectified grey copy the print is counted on (:func:`print_glyphs`)."""

BUSY_GRADIENT = 16.0
"""Gradient magnitude (grey levels / px, working copy after sigma-1 smoothing) above which a
pixel of a margin strip counts as busy (print, a scene's detail; a lid's noise stays below)."""
EDGE_CONTINUITY = 0.7
"""Share of a margin edge's length (64 probes) whose derivative has the edge's polarity and at
least half its mean strength: a page's edge runs on unbroken, the baseline of a line of print
(the MRZ's last line above plain paper) is broken by the gaps between characters."""
INNER_CARD_CONFIDENCE = 0.85
"""A card the card path finds on less than :data:`INNER_CARD_AREA` of the frame with a
confidence below this may be a part of a scanned document: the portrait or a block of print
(:func:`inner_suspect`, :func:`replaces`). On the scan tuning set (seed 4401) such inner quads
had confidence 0.53-0.80; the real cards in ``shared/cases`` 0.98-1.0, hand-held synthetic
cards found above IoU 0.9 a median of 0.89."""
INNER_CARD_AREA = 0.5
"""See :data:`INNER_CARD_CONFIDENCE`; a card-path quad this small that is not shaped like a
document (:data:`INNER_CARD_ASPECT_TOL`) or stands upright (taller than wide) is suspect at any
confidence (on the MRZ scans the card path took the portrait, upright, with a confidence of
0.92-1.0), and gives way to a document around it when it covers less than
:data:`PORTRAIT_SHARE` of it and carries no print (:data:`PORTRAIT_MAX_GLYPHS`)."""
PORTRAIT_SHARE = 0.2
"""The largest share of the scan path's document a confident card-path quad may cover and be
taken for the document's portrait (:func:`replaces`): ICAO Doc 9303's portrait, 32-45 mm
tall, covers 0.13-0.15 of an ID-1 card or an ID-3 page."""
PORTRAIT_MAX_GLYPHS = 10
"""Print glyphs (:func:`print_glyphs`, on the quad rectified to :data:`PRINT_WIDTH`) below which
a confident card-path quad is a portrait, not a card: the portraits the card path took on the
MRZ scans had 0, synthetic cards with print 66-472 (blank ones 0: they stay unless a page
encloses them at under :data:`PORTRAIT_SHARE`)."""
INNER_CARD_ASPECT_TOL = 0.06
"""Relative distance of a card-path quad's aspect ratio from every document format's (ID-1
1.586, ID-3 1.420) beyond which a small quad is suspect (:data:`INNER_CARD_AREA`); a portrait's
1.29 lies 9 % from ID-3's, a card photographed at a slant mostly within 5 %."""
MARGINED_CARD_CONFIDENCE = 0.9
"""A card the card path finds with a confidence below this, at any size, gives way to a
document the scan path finds by at least 3 margined edges (a scan on a lid or a crop with a
thin margin) that encloses it or is the same document (:func:`replaces`): on the MRZ scans
(seed 20261206) the card path took a coloured panel (confidence 0.85-0.885) or the document
with a corner astray (0.69-0.76). Fewer margined edges are not enough evidence against a
confident card: a photo of a card on a table, its frame cut to a document's shape by one found
edge (the table's border), also passes :func:`judge` on the card's print."""
PART_MAX_SHARE = 0.35
"""The largest share of the scan path's document a small card-path quad may cover and be taken
for a part of it (:func:`replaces`): a portrait covers 0.13-0.15 of its page, a block of print
less. One of two documents side by side covers about half of their outline and stays: an open
passport booklet's data page (the booklet, 125 x 176 mm, has ID-3's shape), or one of two ID-1
cards scanned one above the other, whose outline has ID-3's shape within ``scan_aspect_tol``
for gaps of 9-18 mm (each card then covers 0.43-0.46 of it; an outline where a card covers
0.35 would be 1.8 times as tall as wide, no document's shape)."""
PANEL_MIN_SHARE = 0.6
"""The smallest share of the scan path's document (found by 3-4 margined edges) a card-path quad
inside it must cover to be taken for a panel of it (:func:`replaces`): the coloured panels the
card path took on the MRZ scans covered 0.66-0.80 of their page; one of two documents side by
side about half (:data:`PART_MAX_SHARE`)."""
INNER_CARD_SHARE = 0.92
"""The largest share of the scan path's document a card-path quad inside it may cover and still
be taken for a part of it (:func:`replaces`); above it the two are the same document and the
card path's quad stands unless the document's margined edges say otherwise (:func:`replaces`)."""
ENCLOSE_TOL = 0.02
"""How far (share of the document's longer side) a card-path quad's corner may lie outside the
scan path's document and still count as inside it (:func:`encloses`)."""
ASPECT_STEP = 0.01
"""Aspect-ratio errors (relative) closer than this count as equal when choosing a quad. A px of
edge localisation per side at the working size moves a page's aspect by about 0.3 %; at 0.005
a bare frame whose shape happened to be a format's beat a page whose two margins were found
(MODEL.md, *Scans, round 5*)."""
CLOSE_ASPECT = 0.02
"""Aspect-ratio error (relative) within which a combination of sides counts as the format's
shape whatever its margins (:func:`frame_quad`): among those, the one with most margined edges
wins before the nearest aspect. A page turned 1° and cut by the frame on one side has its
found margins 1-2 % off the format, and a bare frame can match a format by chance; the
margins are the evidence (MODEL.md, *Scans, round 5*)."""
LID_SPREAD = 25.0
"""Grey levels the median levels of a quad's margins may differ by: they are one scanner lid (or
one background of a crop); a line of print with paper below it down to the frame is not a
margin, and its strip has the paper's level, not the lid's."""
EDGE_CLEAR = 6.0
"""Working px next to a side left out of its margin strip (the edge's blur and a lid's shadow
along the page's edge)."""

MARGIN_EDGE_MIN = 4.0
"""Mean directional derivative (grey levels / px, on the working copy after sigma-1 smoothing)
a side's edge needs to count as the document's edge against a margin: half the card path's
``detect.EDGE_REF`` (a white page on a white lid still casts a 1-2 px edge of 10+ levels)."""


@dataclass(frozen=True)
class FrameQuad:
    """The document the frame shows, in working px.

    Attributes:
        quad: ``(4, 2) float64`` TL, TR, BR, BL in the working copy's px.
        edges: per side (top, right, bottom, left): True when an edge with a plain strip out to
            the frame was found, False when the side lies on the frame.
        scores: per side, the edge's mean directional derivative (grey levels / px; 0 on the
            frame).
        aspect: long/short side ratio, perspective undone approximately.
        area_frac: quad area / frame area (inside a thin border cut off, :func:`thin_border`).
    """

    quad: np.ndarray
    edges: tuple[bool, bool, bool, bool]
    scores: tuple[float, float, float, float]
    aspect: float
    area_frac: float


def edge_continuity(gx: np.ndarray, gy: np.ndarray, quad: np.ndarray, i: int) -> float:
    """:data:`EDGE_CONTINUITY`'s measure for side ``i`` of ``quad`` (working px; ``gx``, ``gy``
    from :func:`processors.card.geometry.gradients`): the share of 64 probes along it whose
    derivative across it has the side's mean polarity and at least half its mean strength."""
    d = geo.segment_derivatives(gx, gy, quad[i], quad[(i + 1) % 4], 64)
    mean = float(d.mean())
    if abs(mean) < 1e-9:
        return 0.0
    return float(np.mean(d * np.sign(mean) >= 0.5 * abs(mean)))


def _strip(mag: np.ndarray, grey: np.ndarray, quad: np.ndarray, i: int,
           frame: np.ndarray) -> tuple[float, float]:
    """``(busy, level)`` of the strip between side ``i`` of ``quad`` and side ``i`` of
    ``frame``: the share of it whose gradient magnitude ``mag`` (grey levels / px) exceeds
    :data:`BUSY_GRADIENT` (print, a scene or a texture makes a strip busy, a lid or a margin of
    paper does not) and its median grey level. The :data:`EDGE_CLEAR` px next to the side (the
    edge's own blur, a lid's shadow along it) are left out; ``(0, nan)`` for a strip narrower
    than that."""
    p, r = quad[i], quad[(i + 1) % 4]
    fp, fr = frame[i], frame[(i + 1) % 4]
    out = (p + r) / 2 - quad.mean(axis=0)
    out /= max(float(np.linalg.norm(out)), 1e-9)
    poly = np.array([p + EDGE_CLEAR * out, r + EDGE_CLEAR * out, fr, fp])
    mask = np.zeros(mag.shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, np.round(poly).astype(np.int32), 1)
    n = cv2.countNonZero(mask)
    if n < 8:
        return 0.0, float("nan")
    busy = cv2.countNonZero(cv2.bitwise_and((mag > BUSY_GRADIENT).astype(np.uint8), mask)) / n
    return busy, float(np.median(grey[mask > 0]))


OUTERMOST_SHARES = (0.15, 0.6, 1.0)
"""The side search is run at these ``outermost`` shares (:func:`geometry.side_search`): the
outermost local maximum at 15 % and 60 % of the side's best edge, and the best edge itself, so a
faint page edge on a lid is tried before a strong line of print further in."""


def _nearest_aspect(aspect: float) -> float:
    """The one of :data:`DOC_ASPECTS` nearest to ``aspect`` (relative distance)."""
    return min(DOC_ASPECTS, key=lambda a: abs(aspect / a - 1.0))


def _aspect_error(aspect: float) -> float:
    """Relative distance of ``aspect`` from the nearest of :data:`DOC_ASPECTS`."""
    return abs(aspect / _nearest_aspect(aspect) - 1.0)


def frame_quad(grey: np.ndarray, settings: CardSettings, min_edges: int = 0) -> FrameQuad:
    """The document quad of a frame that shows a document and at most a thin margin.

    Each side's options are the frame border and every edge found by the searches of
    :data:`OUTERMOST_SHARES` that is strong enough (:data:`MARGIN_EDGE_MIN`) and has a plain
    strip out to the frame (``scan_busy_max``). Of the combinations of one option per side,
    the ones whose aspect ratio lies within ``scan_aspect_tol`` of a document format's, and whose
    margins have one level (:data:`LID_SPREAD`), are preferred; among them those within
    :data:`CLOSE_ASPECT` of the format's, with most edges first (a margin found is the
    document's own side); then the one nearest to the format's aspect ratio (in steps of
    :data:`ASPECT_STEP`: a scan has no perspective), then the one with most edges. Without such a
    combination, the one with the nearest aspect ratio is returned (and :func:`judge` refuses
    it). An end stripe or a plain header band of the
    document is an edge with a plain strip too, but leaving it out breaks the aspect ratio.

    Args:
        grey: ``(h, w) uint8`` grey working copy (long side at most ``work_max_side``).
        settings: ``scan_band_frac`` (how far in from the frame a side looks for the document's
            edge, share of the shorter side), ``scan_busy_max`` and ``scan_aspect_tol``.
        min_edges: combinations with fewer margined edges are not considered (the document
            inside a card path's quad, :func:`inner_document`: the quad's own frame, a scan's
            lid of ID-3's shape around an ID-1 card, is no answer there).

    Returns:
        A :class:`FrameQuad` (the whole frame when no side finds a margined edge).
    """
    h, w = grey.shape[:2]
    frame = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)
    band = settings.scan_band_frac * min(w, h)
    half = band / 2.0
    start = frame + np.array([[half, half], [-half, half], [-half, -half], [half, -half]])
    gx, gy = geo.gradients(grey.astype(np.float32), 1.0)
    step = max(1.0, band / 60.0)
    mag = cv2.magnitude(gx, gy)
    border = [geo.line_through(frame[i], frame[(i + 1) % 4]) for i in range(4)]
    options: list[list[tuple[np.ndarray, float, float]]] = [[(border[i], 0.0, float("nan"))]
                                                             for i in range(4)]
    for share in OUTERMOST_SHARES:
        _, scores, lines = geo.side_search(gx, gy, start, half, half - 1.0, step, outermost=share)
        for i in range(4):
            if scores[i] < MARGIN_EDGE_MIN or any(
                    np.allclose(lines[i], o[0], atol=1e-3) for o in options[i]):
                continue
            cand = geo.quad_from_lines([lines[k] if k == i else border[k] for k in range(4)])
            if cand is None or edge_continuity(gx, gy, cand, i) < EDGE_CONTINUITY:
                continue
            busy, level = _strip(mag, grey, cand, i, frame)
            if busy <= settings.scan_busy_max:
                options[i].append((lines[i], float(scores[i]), level))
    best: tuple | None = None
    for pick in np.ndindex(*(len(o) for o in options)):
        quad = geo.quad_from_lines([options[i][k][0] for i, k in enumerate(pick)])
        if quad is None or not geo.is_convex(quad):
            continue
        err = _aspect_error(geo.approx_aspect(quad))
        levels = [options[i][k][2] for i, k in enumerate(pick) if k > 0]
        one_lid = len(levels) < 2 or np.nanmax(levels) - np.nanmin(levels) <= LID_SPREAD
        found = sum(k > 0 for k in pick)
        if found < min_edges:
            continue
        key = (err <= settings.scan_aspect_tol and bool(one_lid), err <= CLOSE_ASPECT,
               found if err <= CLOSE_ASPECT else 0, -round(err / ASPECT_STEP), found, -err)
        if best is None or key > best[0]:
            best = (key, quad, pick)
    if best is None:
        quad, pick = frame, (0, 0, 0, 0)
    else:
        _, quad, pick = best
    return FrameQuad(quad=quad, edges=tuple(k > 0 for k in pick),  # type: ignore[arg-type]
                     scores=tuple(options[i][k][1] for i, k in enumerate(pick)),
                     aspect=geo.approx_aspect(quad),
                     area_frac=geo.polygon_area(quad) / float(w * h))


def rectified_grey(grey: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """The document ``quad`` (TL, TR, BR, BL px) of ``grey`` warped to :data:`PRINT_WIDTH` px
    wide, landscape, at its own aspect ratio: ``(h, PRINT_WIDTH) uint8``."""
    s = geo.side_lengths(np.asarray(quad, np.float64))
    turn = 1 if (s[1] + s[3]) > (s[0] + s[2]) else 0
    q = np.roll(np.asarray(quad, np.float64), -turn, axis=0)
    s = geo.side_lengths(q)
    aspect = max((s[0] + s[2]) / max(s[1] + s[3], 1e-9), 1.0)
    W, H = PRINT_WIDTH, max(16, int(round(PRINT_WIDTH / aspect)))
    dst = np.array([[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]], np.float32)
    m = cv2.getPerspectiveTransform(q.astype(np.float32), dst)
    return cv2.warpPerspective(grey, m, (W, H), flags=cv2.INTER_AREA)


def print_glyphs(doc: np.ndarray) -> int:
    """Glyphs of print on a rectified document (:func:`glyph_fills`, counted)."""
    return int(glyph_fills(doc).size)


SOLID_FILL = 0.65
"""Share of its bounding box a glyph's region covers above which it is a solid shape (a square,
a dot, a bar, a tile: 0.75-1.0, less when blurred), not a letter or digit, whose strokes cover
0.2-0.6 of it ("extent", one of the usual geometric filters of MSER text detection)."""
SOLID_MAX_SHARE = 0.6
"""Share of a document's glyphs that may be solid (:data:`SOLID_FILL`); above it the "print" is
a pattern of shapes in rows (checkerboards, dot grids, tiles, bricks, stacked barcodes, QR-like
blocks: 0.745-1.0 in two fresh users' trials), not print (the documents of the eval sets: at
most 0.45; the trials' own OCR-B cards and rows of small letters less; MODEL.md, *Scans, round
6*)."""


def solid_share(fills: np.ndarray) -> float:
    """:data:`SOLID_MAX_SHARE`'s measure on ``fills`` (:func:`glyph_fills`); 0 for none."""
    return float(np.mean(fills > SOLID_FILL)) if fills.size else 0.0


def glyph_fills(doc: np.ndarray) -> np.ndarray:
    """Glyphs of print on a rectified document: letters and digits that stand in a row with a
    neighbour of their own size; the share of its box each one's region covers (``(n,)
    float64`` in (0, 1]).

    Its contrast is stretched first (1st to 99th percentile onto 0-255, by at most 2.55 times:
    pale print on pale paper). Maximally stable extremal regions (MSER, Matas et al., BMVC
    2002; OpenCV's, delta 5) of 2.5-9 % of the document's height and at most 1.5 times as wide
    as tall are glyph candidates (the usual first step of scene-text detection, Neumann and
    Matas, ACCV 2010); a candidate counts when another one of its height (within 25 %) starts
    at most 0.8 of that height to its right on the same line (centres within 20 % of the
    height). At 768 px an ID-1 card's 2 mm capitals are about 18 px tall.

    Args:
        doc: ``(h, w) uint8`` rectified document (:func:`rectified_grey`).

    Returns:
        The fills of the glyphs with a neighbour; their number: synthetic ID cards and
        passport pages mostly 100-500, grass and gravel of the same shape up to 270 (MODEL.md,
        *Scans*).
    """
    H, W = doc.shape[:2]
    lo, hi = np.percentile(doc, (1, 99))
    gain = 255.0 / max(float(hi - lo), 100.0)
    doc = cv2.convertScaleAbs(doc, alpha=gain, beta=-float(lo) * gain)
    mser = cv2.MSER.create(5, int(0.0001 * H * W) + 4, int(0.004 * H * W), 0.25)
    regions, boxes = mser.detectRegions(doc)
    if len(boxes) == 0:
        return np.zeros(0)
    x, y, bw, bh = np.asarray(boxes, np.float64).reshape(-1, 4).T
    g = (bh >= 0.025 * H) & (bh <= 0.09 * H) & (bw <= 1.5 * bh) & (bw >= 0.1 * bh)
    if not g.any():
        return np.zeros(0)
    # nested MSERs of one glyph give near-equal boxes: keep one per 2 px cell
    key = np.round(np.stack([x[g], y[g], bw[g], bh[g]], 1) / 2.0).astype(np.int64)
    _, idx = np.unique(key, axis=0, return_index=True)
    px = np.array([len(regions[k]) for k in np.flatnonzero(g)[idx]], np.float64)
    x, y, bw, bh = x[g][idx], y[g][idx], bw[g][idx], bh[g][idx]
    cy = y + bh / 2
    dx = x[None, :] - (x + bw)[:, None]  # gap from glyph i's right side to glyph j's left
    near = ((dx >= -0.2 * bh[:, None]) & (dx <= 0.8 * bh[:, None])
            & (np.abs(cy[None, :] - cy[:, None]) <= 0.2 * bh[:, None])
            & (np.abs(bh[None, :] - bh[:, None]) <= 0.25 * bh[:, None]))
    np.fill_diagonal(near, False)
    k = near.any(axis=1)
    return px[k] / (bw[k] * bh[k])


GROUND_GRADIENT = 2.0
"""Gradient magnitude (grey levels / px, sigma-1 smoothing) below which a pixel of the
rectified document is plain ground (paper, a card's print-free background)."""


def ground_share(doc: np.ndarray) -> float:
    """Share of a rectified document's pixels that are plain ground (:data:`GROUND_GRADIENT`):
    a document's print stands on a plain ground (synthetic ID cards and passport pages: at least
    0.41), grass, gravel or a crowd of leaves are busy everywhere (0.09-0.18)."""
    g = cv2.GaussianBlur(doc.astype(np.float32), (0, 0), 1.0)
    mag = cv2.magnitude(cv2.Sobel(g, cv2.CV_32F, 1, 0, ksize=3),
                        cv2.Sobel(g, cv2.CV_32F, 0, 1, ksize=3)) / 8.0
    return float(cv2.countNonZero((mag < GROUND_GRADIENT).astype(np.uint8))) / float(mag.size)


@dataclass(frozen=True)
class ScanVerdict:
    """Whether the frame shows a document (:func:`judge`), and why.

    Attributes:
        frame: the near-border quad (working px).
        document: True when it is taken for the document.
        glyphs: print glyphs counted on it (:func:`print_glyphs`; -1 when not measured: the
            shape already failed).
        confidence: in [0, 1]: 1 with 3-4 margined edges, else the glyphs' share of
            ``2 x scan_min_print_glyphs`` (capped at 1); 0 when not a document.
        needs_zone: it is a document only with a machine-readable zone read on it with every
            check digit valid (the processor's rule): found by :func:`outline` (a document drawn
            inside a closed line), or a frame of busy print (:func:`busy_page`).
    """

    frame: FrameQuad
    document: bool
    glyphs: int
    confidence: float
    needs_zone: bool = False


BORDER_MAX_PX = 4
"""The widest frame border (working px; about 0.4 % of a 1,024 px working copy) that
:func:`thin_border` cuts off. A wider band of one level is a lid or a margin, whose inner edge
is the document's (:func:`frame_quad`)."""
BORDER_LEVEL_TOL = 16.0
"""Grey levels a border line's pixels may differ from its median (JPEG ringing, a scanner's
noise)."""
BORDER_STEP = 6.0
"""Grey levels a line's median may differ from the outermost line's and still be the same
border: a white border on pale paper differs from the paper by 8-10 levels (the line the shrink
blended with it by less)."""
BORDER_UNIFORM = 0.95
"""Share of a line's pixels within :data:`BORDER_LEVEL_TOL` of its median for it to count as
a line of border."""


def _border_run(lines: np.ndarray) -> int:
    """How many of ``lines`` (``(k, n) uint8``, the frame's outermost line first) are one
    uniform level (:data:`BORDER_UNIFORM`) before the first that is not."""
    ref = float(np.median(lines[0]))
    for k, line in enumerate(lines):
        med = float(np.median(line))
        if (abs(med - ref) > BORDER_STEP
                or np.mean(np.abs(line.astype(np.float32) - med) <= BORDER_LEVEL_TOL)
                < BORDER_UNIFORM):
            return k
    return len(lines)


def thin_border(grey: np.ndarray) -> tuple[int, int, int, int]:
    """Working px to cut off each side (top, right, bottom, left) of a frame with a thin border.

    A scan or a crop exported with a 1-3 px line of white, black or any one level around it
    (an image editor's canvas, a PDF's page box, a scanner's edge) has that line's inner edge as
    the outermost straight edge with a plain strip out to the frame on every side, so
    :func:`frame_quad` would take the border for the document's margins and never reach the
    document's own (slanted) edges (MODEL.md, *Scans*, known gap 14). A side's border is its
    outermost lines of one uniform level (:data:`BORDER_UNIFORM`, :data:`BORDER_STEP`) when
    there are 1 to :data:`BORDER_MAX_PX` of them before a line that is not; it is cut with one
    line more (the line the shrink to the working size blended with the border). More lines of
    one level are a lid or the document's own margin, and stay.

    Args:
        grey: ``(h, w) uint8`` working copy.

    Returns:
        ``(top, right, bottom, left)`` px to cut (0 where the side has no thin border).
    """
    h, w = grey.shape[:2]
    k = BORDER_MAX_PX + 1
    if min(h, w) <= 8 * k:
        return (0, 0, 0, 0)
    sides = (grey[:k, k:w - k], grey[:, w - k:][k:h - k].T[::-1],
             grey[h - k:][::-1, k:w - k], grey[k:h - k, :k].T)
    runs = [_border_run(s) for s in sides]
    return tuple(r + 1 if 1 <= r <= BORDER_MAX_PX else 0 for r in runs)  # type: ignore[return-value]


def judge(grey: np.ndarray, settings: CardSettings, outlined: bool = False,
          busy: bool = False) -> ScanVerdict:
    """Decide whether the frame of ``grey`` (the working copy, ``(h, w) uint8``) is a document
    (the module's steps 1-3, thresholds in :class:`CardSettings` ``scan_*``), minding a thin
    frame border (:func:`thin_border`, MODEL.md known gap 14):

    - when the whole frame is no document, or every margined edge found (at least 2) lies in
      the border (its inner edge taken for the document's margins), the frame inside the border
      is judged, and its verdict stands if it is a document;
    - otherwise a margined edge found in a side's border counts as a side on the frame (it is the
      border's, not the document's: the side is squared to the others by
      :func:`complete_sides`, and no margin counts toward the confidence).

    With ``outlined``, a frame that is no document is searched for a document's outline
    (:func:`outline`), and else taken as a page of busy print (:func:`busy_page`); with
    ``busy``, only the latter. The processor asks the first for an upload the card path found
    no card in, the second for a suspect card and a card whose zone does not read, and keeps
    what either finds only where a machine-readable zone with valid check digits is read on it.
    """
    verdict = _judge_border(grey, settings)
    if verdict.document:
        return verdict
    if outlined:
        drawn = outline(grey, settings)
        if drawn is not None and drawn.document:
            return drawn
    if outlined or busy:
        page = busy_page(grey, verdict, settings)
        if page is not None:
            return page
    return verdict


BUSY_GROUND = 0.2
"""The least plain ground (:func:`ground_share`) of a frame :func:`busy_page` takes: real
passport data pages cut or scanned edge to edge, whose guilloche and tint cover them
(PassportEye's Czech and French specimens, 0.255 and 0.257), over the scenes' 0.09-0.18."""


def busy_page(grey: np.ndarray, verdict: ScanVerdict, settings: CardSettings
              ) -> ScanVerdict | None:
    """The frame of ``verdict`` (no document: :func:`judge`) as a document that only a valid
    machine-readable zone can vouch for (``needs_zone``), where it failed on its ground alone:
    a document's shape and print (:func:`_verdict`), and plain ground under
    ``scan_min_ground`` but at least :data:`BUSY_GROUND`. A real data page exported or scanned
    edge to edge is printed all over with security print, so its ground is as busy as some
    scenes'; a scene reads no zone whose every check digit is valid (ICAO Doc 9303 part 3).
    None otherwise."""
    if verdict.glyphs < 0:  # the frame's shape failed
        return None
    busy = _verdict(grey, verdict.frame, settings, min_ground=BUSY_GROUND)
    return replace(busy, needs_zone=True) if busy.document else None


def _judge_border(grey: np.ndarray, settings: CardSettings) -> ScanVerdict:
    """:func:`judge` without the outline: the frame, minding a thin border."""
    verdict = _judge_frame(grey, settings, (0, 0, 0, 0))
    cut = thin_border(grey)
    if not any(cut):
        return verdict
    near = _edges_near_frame(verdict.frame, grey.shape)
    found = sum(verdict.frame.edges)
    if not verdict.document or (found >= 2 and sum(near) == found):
        inner = _judge_frame(grey, settings, cut)
        if inner.document:
            return inner
    hug = tuple(n and c > 0 for n, c in zip(near, cut, strict=True))
    if not verdict.document or not any(hug):
        return verdict
    fq = verdict.frame
    keep = [e and not h for e, h in zip(fq.edges, hug, strict=True)]
    sc = [s if k else 0.0 for s, k in zip(fq.scores, keep, strict=True)]
    frame = replace(fq, edges=(keep[0], keep[1], keep[2], keep[3]),
                    scores=(sc[0], sc[1], sc[2], sc[3]))
    return ScanVerdict(frame, True, verdict.glyphs, _confidence(keep, verdict.glyphs, settings))


def _edges_near_frame(fq: FrameQuad, shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Per side of ``fq`` (top, right, bottom, left): a margined edge that could be a thin
    border's inner edge, both its ends within :data:`BORDER_MAX_PX` + 1 px of the frame of
    ``shape`` (``(h, w)``, working px). A side with a border (:func:`thin_border`) may show none
    where the line the shrink blended with the border varies along it (a dark border beside a
    page and a background wedge)."""
    h, w = shape[:2]
    out = []
    for i in range(4):
        ends = fq.quad[[i, (i + 1) % 4]]
        off = (ends[:, 1], w - 1 - ends[:, 0], h - 1 - ends[:, 1], ends[:, 0])[i]
        out.append(bool(fq.edges[i] and np.all(np.abs(off) <= BORDER_MAX_PX + 1)))
    return tuple(out)


def _judge_frame(grey: np.ndarray, settings: CardSettings,
                 cut: tuple[int, int, int, int]) -> ScanVerdict:
    """:func:`judge` on the frame of ``grey`` less ``cut`` px (top, right, bottom, left); the
    quad in ``grey``'s px."""
    t, r, b, left = cut
    fq = frame_quad(grey[t:grey.shape[0] - b, left:grey.shape[1] - r], settings)
    if any(cut):
        fq = replace(fq, quad=fq.quad + np.array([left, t], np.float64))
    return _verdict(grey, fq, settings)


def _verdict(grey: np.ndarray, fq: FrameQuad, settings: CardSettings,
             min_area: float | None = None, min_ground: float | None = None) -> ScanVerdict:
    """Whether the quad ``fq`` of ``grey`` is a document: its shape (the module's step 2; its
    area at least ``min_area`` of the frame, default ``scan_min_area_frac``), then its print
    (step 3; plain ground at least ``min_ground``, default ``scan_min_ground``)."""
    area = settings.scan_min_area_frac if min_area is None else min_area
    ground = settings.scan_min_ground if min_ground is None else min_ground
    shape_ok = (_aspect_error(fq.aspect) <= settings.scan_aspect_tol
                and fq.area_frac >= area
                and geo.corner_angle_deviation(fq.quad) <= settings.scan_max_corner_dev_deg)
    if not shape_ok:
        return ScanVerdict(fq, False, -1, 0.0)
    doc = rectified_grey(grey, fq.quad)
    fills = glyph_fills(doc)
    glyphs = int(fills.size)
    ok = (glyphs >= settings.scan_min_print_glyphs and solid_share(fills) <= SOLID_MAX_SHARE
          and ground_share(doc) >= ground)
    if not ok:
        return ScanVerdict(fq, False, glyphs, 0.0)
    return ScanVerdict(fq, True, glyphs, _confidence(fq.edges, glyphs, settings))


def inner_document(grey: np.ndarray, settings: CardSettings, min_edges: int) -> ScanVerdict:
    """Whether ``grey`` (``(h, w) uint8``: a card path's quad warped upright,
    :meth:`processors.card.processor.CardProcessor._inner_page`) holds a document inside a
    margin: :func:`frame_quad` among the combinations with at least ``min_edges`` margined
    edges, then its shape and print (:func:`_verdict`). A frame without such a combination is
    no document."""
    fq = frame_quad(grey, settings, min_edges)
    if sum(fq.edges) < min_edges:
        return ScanVerdict(fq, False, -1, 0.0)
    return _verdict(grey, fq, settings)


def _confidence(edges: Sequence[bool], glyphs: int, settings: CardSettings) -> float:
    """A document's confidence (:class:`ScanVerdict`): 1 with 3-4 margined ``edges``, else the
    ``glyphs``' share of ``2 x scan_min_print_glyphs``, capped at 1."""
    if sum(edges) >= 3:
        return 1.0
    return min(1.0, glyphs / (2.0 * settings.scan_min_print_glyphs))


OUTLINE_MIN_AREA = 0.3
"""The smallest share of the frame a document's outline (:func:`outline`) must enclose: a
figure of an ID-1 card on a page with its captions fills 0.5-0.6 of a crop of it (the frame's
own document, ``scan_min_area_frac``, at least 0.6). On the synthetic negatives of the
held-out and tuning sets (140 scenes) no outline of at least 0.25 of the frame is a document."""
OUTLINE_CANDIDATES = 8
"""The largest closed outlines (by convex hull area) :func:`outline` looks at."""
CANNY_THRESHOLDS = (40, 120)
"""Canny's hysteresis thresholds (grey levels, after sigma-1 smoothing) for :func:`outline`: a
drawn line or a card's edge on a page is far above them, paper grain and JPEG noise below."""


RECT_FILL = 0.97
"""Share of its smallest enclosing rectangle a convex hull must fill to be taken for that
rectangle with rounded corners (:func:`_four_corners`): a rounded ID-1 outline (corner radius
3.18 mm, ISO/IEC 7810) fills 0.996 of it, a quad seen at a slant less."""


def _four_corners(hull: np.ndarray) -> np.ndarray | None:
    """The 4 corners of a convex hull (OpenCV points ``(n, 1, 2)``) that is a quadrilateral
    with rounded or cut corners: the corners of its smallest enclosing rectangle where it fills
    :data:`RECT_FILL` of it (a page or a figure: no perspective; the rounded corners' extended
    sides meet there), else those of :func:`geometry.approx_four` (the card path's own
    tolerance search); None when neither gives a quadrilateral."""
    box = cv2.boxPoints(cv2.minAreaRect(hull)).astype(np.float64)
    if cv2.contourArea(hull) >= RECT_FILL * geo.polygon_area(box):
        return box
    return geo.approx_four(hull)


def outline(grey: np.ndarray, settings: CardSettings) -> ScanVerdict | None:
    """A document whose outline is a closed line inside the frame: a figure of a document on a
    page (ICAO Doc 9303's specimens, drawn with a thin rounded outline and captions above and
    below it), or a white card on white paper whose edge only a line shows, where neither the
    card model's mask nor the frame's margins (the captions make them busy) find it.

    The outlines are the contours of the Canny edges (:data:`CANNY_THRESHOLDS`, closed by a
    3 x 3 dilation); the largest convex hulls (:data:`OUTLINE_CANDIDATES`) covering at least
    :data:`OUTLINE_MIN_AREA` of the frame are tried in turn: each that is a quadrilateral
    (:func:`_four_corners`) is judged like the frame (:func:`_verdict`: the shape, then the
    print), and the first document stands (the hull of a caption joined to the outline, or of
    the whole page, is no document's shape). Its 4 sides count as found edges:
    :func:`detection` fits them at full resolution.

    Args:
        grey: ``(h, w) uint8`` working copy.
        settings: the ``scan_*`` thresholds.

    Returns:
        The document's verdict, or None where no outline is one.
    """
    h, w = grey.shape[:2]
    edges = cv2.Canny(cv2.GaussianBlur(grey, (0, 0), 1.0), *CANNY_THRESHOLDS)
    edges = cv2.dilate(edges, np.ones((3, 3), np.uint8))
    contours, _ = cv2.findContours(edges, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    hulls = sorted((cv2.convexHull(c) for c in contours), key=cv2.contourArea, reverse=True)
    for hull in hulls[:OUTLINE_CANDIDATES]:
        if cv2.contourArea(hull) < OUTLINE_MIN_AREA * w * h:
            break
        corners = _four_corners(hull)
        if corners is None:
            continue
        quad = geo.order_corners(corners)
        fq = FrameQuad(quad=quad, edges=(True, True, True, True), scores=(0.0, 0.0, 0.0, 0.0),
                       aspect=geo.approx_aspect(quad),
                       area_frac=geo.polygon_area(quad) / float(w * h))
        verdict = _verdict(grey, fq, settings, OUTLINE_MIN_AREA)
        if verdict.document:
            return replace(verdict, needs_zone=True)
    return None


def _small_part(det: Detection) -> bool:
    """A card-path detection that may be a part of a document: small, and unsure, not shaped
    like a document or upright (:data:`INNER_CARD_CONFIDENCE`, :data:`INNER_CARD_AREA`)."""
    if det.area_frac >= INNER_CARD_AREA:
        return False
    if det.confidence < INNER_CARD_CONFIDENCE or det.quad is None:
        return True
    s = geo.side_lengths(det.quad)
    upright = s[1] + s[3] > s[0] + s[2]
    return upright or _aspect_error(det.aspect) > INNER_CARD_ASPECT_TOL


def inner_suspect(det: Detection) -> bool:
    """True when the card path's detection ``det`` (upload px) may be a part of a scanned
    document rather than a card, so that the processor asks the scan path (whose document
    replaces the card only where :func:`replaces` says so): a small part
    (:data:`INNER_CARD_CONFIDENCE`, :data:`INNER_CARD_AREA`), or any card found with a
    confidence below :data:`MARGINED_CARD_CONFIDENCE`."""
    return det.confidence < MARGINED_CARD_CONFIDENCE or _small_part(det)


def encloses(doc: np.ndarray, card: np.ndarray) -> bool:
    """True when the card path's quad ``card`` lies inside the scan path's document ``doc``
    (both ``(4, 2)`` px, TL, TR, BR, BL): every corner of ``card`` inside ``doc`` or within
    :data:`ENCLOSE_TOL` of its longer side outside it."""
    d = np.asarray(doc, np.float32).reshape(-1, 1, 2)
    tol = ENCLOSE_TOL * float(geo.side_lengths(np.asarray(doc, np.float64)).max())
    return all(cv2.pointPolygonTest(d, (float(x), float(y)), True) >= -tol for x, y in card)


SAME_DOCUMENT_IOU = 0.8
"""IoU above which a suspect card-path quad and the scan path's document are taken for one
document (:func:`replaces`)."""


def replaces(doc: Detection, card: Detection, card_glyphs: Callable[[], int]) -> bool:
    """True when the scan path's document ``doc`` replaces the suspect card-path detection
    ``card`` (:func:`inner_suspect`; both in upload px):

    - ``doc`` :func:`encloses` the card, the card is small (:data:`INNER_CARD_AREA` of the
      frame, under :data:`PART_MAX_SHARE` of ``doc``), and unsure
      (:data:`INNER_CARD_CONFIDENCE`: a block of print) or, at any confidence, under
      :data:`PORTRAIT_SHARE` of ``doc`` without print (``card_glyphs()`` below
      :data:`PORTRAIT_MAX_GLYPHS`: the portrait); or
    - ``doc`` was found by at least 3 margined edges (its shape is the evidence, its sides
      fitted at full resolution), the card's confidence is below
      :data:`MARGINED_CARD_CONFIDENCE`, and ``doc`` encloses the card on
      :data:`PANEL_MIN_SHARE` to :data:`INNER_CARD_SHARE` of it (a panel) or overlaps it by
      :data:`SAME_DOCUMENT_IOU` (the same document with a corner astray: a scan's corners are
      square, a mask's need not be).

    A card covering :data:`PART_MAX_SHARE` to :data:`PANEL_MIN_SHARE` of ``doc`` may be one of
    two documents side by side, and stays (unless the two overlap as one document).

    Args:
        doc: the scan path's document (:func:`detection`, ``edge_support`` its share of
            margined sides).
        card: the card path's detection.
        card_glyphs: the print glyphs on the card's quad (:func:`print_glyphs`), called only
            where the portrait rule needs them (a rectification and MSER, a few ms).
    """
    if doc.quad is None or card.quad is None:
        return False
    doc_area = geo.polygon_area(doc.quad)
    if not doc_area > 0.0:  # degenerate or not finite
        return False
    share = geo.polygon_area(card.quad) / doc_area
    inside = share <= INNER_CARD_SHARE and encloses(doc.quad, card.quad)
    if inside and card.area_frac < INNER_CARD_AREA and share < PART_MAX_SHARE:
        if card.confidence < INNER_CARD_CONFIDENCE:
            return True
        if share < PORTRAIT_SHARE and card_glyphs() < PORTRAIT_MAX_GLYPHS:
            return True
    return (doc.edge_support >= 0.75 and card.confidence < MARGINED_CARD_CONFIDENCE
            and ((inside and share >= PANEL_MIN_SHARE)
                 or quad_iou(doc.quad, card.quad) >= SAME_DOCUMENT_IOU))


def quad_glyphs(grey: np.ndarray, quad: np.ndarray) -> int:
    """:func:`print_glyphs` on ``quad`` (``(4, 2)`` px of the working copy ``grey``, ``(h, w)
    uint8``) rectified to :data:`PRINT_WIDTH` px; 0 for a quad that is not finite."""
    q = np.asarray(quad, np.float64)
    if not np.isfinite(q).all():
        return 0
    return print_glyphs(rectified_grey(grey, q))


CUT_SIDE_REACH = 0.05
"""How far (share of the frame's size across the side) a side the frame cuts may be put from
the frame by :func:`complete_sides`: a crop that cut more of the document than this leaves the
side on the frame."""


def _warp_points(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """``pts`` ``(n, 2)`` px mapped by the ``(3, 3)`` homography ``m``: ``(n, 2) float64``."""
    p = np.asarray(pts, np.float64).reshape(-1, 1, 2)
    return cv2.perspectiveTransform(p, np.asarray(m, np.float64)).reshape(-1, 2)


def complete_sides(lines: list[np.ndarray], edges: Sequence[bool],
                   size: tuple[int, int]) -> list[np.ndarray]:
    """The document's sides where the frame cuts it: each side on the frame (``edges[i]``
    False) is turned square to the sides that were found, and put where the document's format
    puts it when it can tell.

    A crop app or a scanner that cuts a few px off a slightly turned page leaves a side on the
    frame; its corners are then off by the turn (6-30 px on a 1,000 px page turned 1-2°), and
    the warp of that quad is no longer a similarity: the page's lines of print slant and their
    pitch drifts along the line, enough to lose an MRZ character. A scan has no perspective,
    so the page is a rectangle turned by the found sides' angle (their mean, each side's
    length-weighted, the upright ones turned a quarter). A side on the frame gets that angle;
    it passes through the middle of its stretch of frame, except where its opposite side and
    both its neighbours were found: then it lies at the distance the document's format gives
    (the found side's length times or divided by the nearest of :data:`DOC_ASPECTS`, ISO/IEC
    7810), as long as its corners stay within :data:`CUT_SIDE_REACH` of the frame (else the
    crop cut more than a thin strip, or the format is not the one guessed).

    Args:
        lines: the four sides ``(a, b, c)`` (top, right, bottom, left), px; a side on the
            frame is the frame's line.
        edges: per side, True when it was found as the document's edge.
        size: ``(width, height)`` of the frame, px.

    Returns:
        The four sides, those on the frame replaced (all four unchanged when no side or every
        side was found, or when the sides meet in no quad).
    """
    quad = geo.quad_from_lines(lines)
    if quad is None or all(edges) or not any(edges):
        return lines
    # the page's turn: a found side's direction, upright sides turned back a quarter
    vec = np.zeros(2)
    for i in range(4):
        if edges[i]:
            d = quad[(i + 1) % 4] - quad[i]
            d = d if i % 2 == 0 else np.array([d[1], -d[0]])  # right/left: down -> along top
            d = d if i < 2 else -d  # bottom runs right to left, left bottom to top
            vec += d
    ux = vec / max(float(np.linalg.norm(vec)), 1e-9)  # along the top, left to right
    normals = (np.array([ux[1], -ux[0]]), np.array([ux[0], ux[1]]),
               np.array([-ux[1], ux[0]]), np.array([-ux[0], -ux[1]]))  # outward per side
    aspect = _nearest_aspect(geo.approx_aspect(quad))
    out = list(lines)
    for i in range(4):
        if edges[i]:
            continue
        n = normals[i]
        p, q = quad[i], quad[(i + 1) % 4]
        place = (p + q) / 2.0  # the middle of its stretch of frame
        j = (i + 2) % 4
        if edges[j] and edges[(i + 1) % 4] and edges[(i + 3) % 4]:
            along = float(np.linalg.norm(quad[(j + 1) % 4] - quad[j]))
            across = float(np.linalg.norm(quad[(i + 1) % 4] - quad[j]))
            dist = along / aspect if along >= across else along * aspect
            mid = (quad[j] + quad[(j + 1) % 4]) / 2.0
            far = mid + dist * n
            reach = CUT_SIDE_REACH * (size[1] if i % 2 == 0 else size[0])
            if abs(float(np.dot(far - place, n))) <= reach:
                place = far
        out[i] = np.array([n[0], n[1], -float(np.dot(n, place))])
    return out


def detection(verdict: ScanVerdict, grey_shape: tuple[int, ...], size: tuple[int, int],
              sample: Callable[[np.ndarray], np.ndarray],
              inside: tuple[np.ndarray, tuple[int, ...]] | None = None) -> Detection:
    """The document of ``verdict`` as a card :class:`~processors.card.detect.Detection` in the
    decoded image's px: the working quad scaled up, its margined sides fitted at full
    resolution (:func:`geometry.refine_quad`), its other sides on the frame squared to them
    (:func:`complete_sides`).

    Args:
        verdict: a document (:func:`judge`).
        grey_shape: ``(h, w)`` of the whole working copy.
        size: ``(width, height)`` px of the decoded image.
        sample: bilinear grey sampler of the decoded image
            (:meth:`processors.pixels.PixelBackend.sample_grey`).
        inside: where the verdict was judged on a part of the working copy warped upright
            (a card path's quad, :meth:`processors.card.processor.CardProcessor._inner_page`):
            ``(back, shape)``, the ``(3, 3)`` homography from that image's px to the working
            copy's and its ``(h, w)``; its sides are the frame's here. None: the whole copy.

    Returns:
        ``Detection`` with ``confidence`` the verdict's, ``rectangularity`` 1 and
        ``edge_support`` the share of margined sides.
    """
    fq = verdict.frame
    w, h = size
    scale = max(grey_shape[:2]) / max(w, h)  # working px per decoded px
    if inside is None:
        quad = (fq.quad + 0.5) / scale - 0.5
        frame = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)
    else:
        back, (jh, jw) = inside[0], inside[1][:2]
        corners = np.array([[0, 0], [jw - 1, 0], [jw - 1, jh - 1], [0, jh - 1]], np.float64)
        quad, frame = ((_warp_points(back, q) + 0.5) / scale - 0.5 for q in (fq.quad, corners))
    if any(fq.edges):
        quad, _ = geo.refine_quad(sample, (w, h), quad, max(2.0 / scale, 3.0))
    lines = [geo.line_through(quad[i], quad[(i + 1) % 4]) if fq.edges[i]
             else geo.line_through(frame[i], frame[(i + 1) % 4]) for i in range(4)]
    span = frame.max(axis=0) - frame.min(axis=0) + 1.0
    snapped = geo.quad_from_lines(complete_sides(lines, fq.edges,
                                                 (int(round(span[0])), int(round(span[1])))))
    if snapped is not None and geo.is_convex(snapped):
        quad = snapped
    return Detection(quad=geo.order_corners(quad), confidence=verdict.confidence,
                     rectangularity=1.0, mask_contrast=0.0,
                     edge_support=sum(fq.edges) / 4.0,
                     area_frac=geo.polygon_area(quad) / float(w * h),
                     aspect=geo.approx_aspect(quad))
