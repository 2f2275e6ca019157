"""Card localisation: u2netp saliency mask (batched) -> quad in source px -> edge refinement.

The localisation model is rembg's pretrained U²-Net-p (``u2netp``, salient-object weights;
Qin et al., 2020), used as-is. Its input is prepared like rembg's ``normalize``: RGB, resized to
320 x 320, divided by its maximum, ImageNet mean/std, NCHW float32; its first output (sigmoid
saliency) is min-max normalised per image, as rembg does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import cv2
import numpy as np

from processors.card import geometry as geo
from processors.card.metrics import quad_iou
from processors.card.quality import tilt_degrees
from processors.card.settings import CardSettings

INPUT_SIZE = 320
"""u2netp input side (px), as in rembg's U2netpSession."""

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
"""ImageNet channel statistics (RGB), as used by rembg's sessions."""


def preprocess(image_bgr: np.ndarray, side: int = INPUT_SIZE) -> np.ndarray:
    """One image to u2netp input.

    Args:
        image_bgr: ``(H, W, 3) uint8`` BGR.
        side: input side (px); 320 at inference, smaller in training.

    Returns:
        ``(3, side, side) float32``: RGB, resized (area interpolation), scaled by 1/max,
        standardised with the ImageNet mean/std.
    """
    rgb = cv2.cvtColor(image_bgr, cv2.COLOR_BGR2RGB)
    small = cv2.resize(rgb, (side, side), interpolation=cv2.INTER_AREA)
    x = small.astype(np.float32)
    x /= max(float(x.max()), 1e-6)
    x = (x - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)


def normalise_mask(pred: np.ndarray) -> np.ndarray:
    """Min-max normalise one saliency map ``(320, 320) float32`` to [0, 1] (rembg's step)."""
    mi, ma = float(pred.min()), float(pred.max())
    return ((pred - mi) / max(ma - mi, 1e-6)).astype(np.float32)


@dataclass(frozen=True)
class Detection:
    """Where the card is in one image.

    Attributes:
        quad: ``(4, 2) float64`` TL, TR, BR, BL in source px, or None (no component at all).
        confidence: in [0, 1]; product of mask contrast, rectangularity, edge and aspect
            scores of the chosen hypothesis (see :func:`detect_from_mask`).
        rectangularity: mask component area / coarse quad area.
        mask_contrast: mean saliency inside the quad minus outside (both in [0, 1]).
        edge_support: edge score of the chosen hypothesis in [0, 1] (geometric mean over its
            sides of min(1, straight-edge strength / EDGE_REF)).
        area_frac: quad area / image area.
        aspect: long/short side ratio, perspective undone approximately.
        metric_aspect: long/short side ratio with the perspective undone by the focal length the
            quad implies (:func:`geometry.metric_aspect`); 0.0 without a quad.
        raw_max: the model's raw (sigmoid) maximum before min-max normalisation.
        second_quad: ``(4, 2)`` source px of a second card apart from ``quad`` (coarse: not
            refined), or None (see ``SECOND_CARD_AREA``).
        runner_up: ``(4, 2) float64`` source px (refined as ``quad`` is) of the most confident
            other hypothesis of the same card (:func:`_runner_up`), or None: the processor reads
            the zone on it where the winner's zone is found and does not read valid.
        pair: where no hypothesis reaches ``min_confidence``, two cards side by side whose
            saliency merged into one component (:func:`_merged_pair`): the two halves' quads
            in source px (coarse: not refined), else None. The processor says MULTIPLE_CARDS
            for them where it would say NO_CARD.
    """

    quad: np.ndarray | None
    confidence: float
    rectangularity: float = 0.0
    mask_contrast: float = 0.0
    edge_support: float = 0.0
    area_frac: float = 0.0
    aspect: float = 0.0
    metric_aspect: float = 0.0
    raw_max: float = 0.0
    second_quad: np.ndarray | None = None
    runner_up: np.ndarray | None = None
    pair: tuple[np.ndarray, np.ndarray] | None = None


SECOND_CARD_AREA = 0.4
"""A second card (MULTIPLE_CARDS) is a hypothesis apart from the chosen one (overlap at most
``SECOND_CARD_OVERLAP`` of the smaller quad), as confident as ``min_confidence`` and at least this
share of the chosen quad's area (working px): two cards in one photo are about the same size,
while a portrait or a chip inside the card overlaps it."""
SECOND_CARD_OVERLAP = 0.1


def _score(x: float, lo: float, hi: float) -> float:
    """Linear ramp: 0 at ``lo``, 1 at ``hi``."""
    return float(np.clip((x - lo) / max(hi - lo, 1e-9), 0.0, 1.0))


WIDE_GAIN = 0.6
"""The outward search takes the outermost straight edge scoring at least this share of the best
(and of the near edge's score)."""
MASK_SIDE = 512
"""Longest side (px) of the upsampled saliency map the components are fitted on."""
MASK_THRESHOLDS = (0.15, 0.3, 0.5, 0.7)
"""Saliency levels whose components are tried as card hypotheses (``mask_threshold`` is added)."""
SUB_QUAD_THRESHOLDS = (0.3, 0.5)
"""Levels at which quads of 4 straight outline runs (:func:`geometry.sub_quads`) are also tried."""
PRESCREEN = 0.8
"""A hypothesis is verified (its sides searched, :func:`geometry.side_search`) only when its score
bound before the search (contrast x rectangularity x aspect scores, edge score taken as 1) is at
least this share of the best score so far and of ``min_confidence`` (``geo7``): the others could
be neither the winner nor a second card. Hypotheses are taken in order of their bound."""
FRAME_SIDE_SCORE = 0.5
"""Edge score (share of EDGE_REF) given to a side lying on the image border: unknown, neither
verified nor refuted (PARTIAL_CARD reports it)."""
EDGE_REF = 8.0
"""Mean directional derivative (grey levels / px, after sigma-1 smoothing at the working size)
of a side that counts as a fully supported card edge."""


def _contrast(m: np.ndarray, quad: np.ndarray, w: int, h: int) -> float:
    """Mean saliency inside ``quad`` (source px) minus outside, on the 320 x 320 map ``m``."""
    sx, sy = INPUT_SIZE / w, INPUT_SIZE / h
    qm = np.zeros((INPUT_SIZE, INPUT_SIZE), np.uint8)
    cv2.fillPoly(qm, [np.round((quad + 0.5) * [sx, sy] - 0.5).astype(np.int32)], 1)
    n_in = cv2.countNonZero(qm)
    n_out = qm.size - n_in
    s_in = cv2.sumElems(cv2.bitwise_and(m, m, mask=qm))[0] if n_in else 0.0
    s_out = cv2.sumElems(m)[0] - s_in
    return float((s_in / n_in if n_in else 0.0) - (s_out / n_out if n_out else 0.0))


def _border_line(k: int, w: int, h: int) -> np.ndarray:
    """Line ``(a, b, c)`` of border ``k`` (0 left, 1 top, 2 right, 3 bottom) of a w x h frame."""
    return (np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]),
            np.array([1.0, 0.0, -(w - 1.0)]), np.array([0.0, 1.0, -(h - 1.0)]))[k]


def _frame_sides(q: np.ndarray, w: int, h: int, tol: float) -> list[int | None]:
    """Per side of ``q`` (top, right, bottom, left): the frame border (0 left, 1 top, 2 right,
    3 bottom) when both ends of the side are within ``tol`` px of (or beyond) it, else None
    (a card cut by the frame ends at the frame, not at an image edge)."""
    out: list[int | None] = []
    for i in range(4):
        a, b = q[i], q[(i + 1) % 4]
        hit = None
        for k, near in enumerate((lambda p: p[0] <= tol, lambda p: p[1] <= tol,
                                  lambda p: p[0] >= w - 1 - tol, lambda p: p[1] >= h - 1 - tol)):
            if near(a) and near(b):
                hit = k
        out.append(hit)
    return out


def _border_within(a: np.ndarray, b: np.ndarray, w: int, h: int, reach: float) -> int | None:
    """The frame border (0 left, 1 top, 2 right, 3 bottom of a w x h frame) that both ends of
    the side ``a``-``b`` (px) lie within ``reach`` px of, else None."""
    for k, (ia, ib) in enumerate(((a[0], b[0]), (a[1], b[1]),
                                  (w - 1 - a[0], w - 1 - b[0]), (h - 1 - a[1], h - 1 - b[1]))):
        if max(ia, ib) <= reach:
            return k
    return None


def _aspect_score(aspect: float) -> float:
    """1 inside [1.3, 1.9] (ID-1 1.586, ID-3 1.420, A4 1.414 with perspective slack), falling
    linearly to 0 at 1.0 and 2.6."""
    if aspect < 1.3:
        return _score(aspect, 1.0, 1.3)
    return 1.0 - _score(aspect, 1.9, 2.6)


def _hypothesis_score(contrast: float, rectangularity: float, edge: float,
                      aspect_score: float) -> float:
    """A hypothesis's score (:func:`detect_from_mask`, step 2): contrast score (0 at 0.3, 1 at
    0.7) x rectangularity score (0 at 0.75, 1 at 0.95) x edge score ^ 0.5 x aspect score."""
    return (_score(contrast, 0.3, 0.7) * _score(rectangularity, 0.75, 0.95) * edge ** 0.5
            * aspect_score)


METRIC_TILT_MAX = 45.0
"""Degrees of tilt beyond which a hypothesis's metric aspect ratio does not vouch for it: the
relaxed profile's TOO_OBLIQUE bound (``policy.PROFILES``), past which every profile rejects the
card. A held-out negative (seed 20261129, ``_0402``: a blurred outline the metric ratio reads as
1.32 at 51 degrees) came out PARTIAL_CARD instead of NO_CARD without it."""


def _card_aspect_score(quad: np.ndarray, size: tuple[int, int]) -> float:
    """The aspect score (:func:`_aspect_score`) of a hypothesis ``quad`` (``(4, 2)`` px of a
    ``size`` = ``(width, height)`` px photo): that of its sides' plain ratio
    (:func:`geometry.approx_aspect`), or 1 where its ratio with the perspective undone
    (:func:`geometry.metric_aspect`) is a document's. At 30-35 degrees of tilt the plain ratio
    of a passport page (ID-3, 1.420) falls to 1.11-1.15 and scored 0.4-0.5 (NO_CARD), where the
    metric one reads 1.38-1.55. The metric ratio is asked only when the plain one scores below
    1, and counts only where it is a document's (scores 1: a part of a scanned page read 1.24
    and was taken for the page) and the tilt it implies (:func:`quality.tilt_degrees`) is at
    most :data:`METRIC_TILT_MAX`."""
    plain = _aspect_score(geo.approx_aspect(quad))
    if plain >= 1.0:
        return plain
    metric = geo.metric_aspect(quad, size).value
    if _aspect_score(metric) < 1.0 or tilt_degrees(quad, (metric, 1.0), size) > METRIC_TILT_MAX:
        return plain
    return 1.0


STRIP_MIN = 0.25
"""A side within reach of the frame moves onto it (the card runs on past the frame) only over a
strip whose mean saliency is at least this (background next to a card is not salient). Until
``geo5`` it also gated the outward move to a farther edge (now ``OUTWARD_STRIP_MIN``). 0.15 until
run 3 of the card model, whose masks spill more onto a hand or the object behind the card; 0.25
was chosen on the tuning set (seed 8: 97.5 % above IoU 0.9 vs 97.2 % at 0.15; 0.35 gave the same
as 0.25)."""


OUTWARD_STRIP_MIN = 0.5
"""A side moves outwards to a farther straight edge (a dark header band or end stripe the mask
missed) only over a strip whose mean saliency is at least this (``geo5``; ``STRIP_MIN`` before).
On the three tuning sets (seeds 8, 9, 10; 1173 cards), of the 29 cards with a move over a strip
below 0.45, 22 lost IoU (up to 0.17: onto a hand, a saucer or a person next to the card), 5
changed by at most 0.005 and 2 gained (0.035, 0.010); the moves that recovered a band crossed
strips of 0.5-0.98. 0.4, 0.5 and 0.6 give the same counts there (MODEL.md, *geo5*)."""


def _strip_saliency(m: np.ndarray, q: np.ndarray, i: int, line: np.ndarray,
                    size: tuple[int, int]) -> float:
    """Mean of the 320 x 320 map ``m`` over the strip between side ``i`` of ``q`` (working px,
    frame ``size`` = (w, h)) and the parallel-ish ``line`` it would move to."""
    p, r = q[i], q[(i + 1) % 4]
    n = line[:2]
    pp = p - (p @ n + line[2]) * n  # projections onto the new line
    rp = r - (r @ n + line[2]) * n
    poly = np.array([p, r, rp, pp])
    sx, sy = INPUT_SIZE / size[0], INPUT_SIZE / size[1]
    pm = np.round((poly + 0.5) * [sx, sy] - 0.5).astype(np.int32)
    strip = np.zeros(m.shape, np.uint8)
    cv2.fillPoly(strip, [pm], 1)
    return float(cv2.mean(m, mask=strip)[0]) if cv2.countNonZero(strip) else 0.0


BAND_SIDES_MIN = 0.3
"""A side also moves outwards over a strip the saliency missed (below ``OUTWARD_STRIP_MIN``: a
header band or end stripe unlike the card's body) when both neighbouring sides run on straight
across that strip to the farther edge: each neighbour's extension scores at least this share of
the neighbour's own edge score, and half ``EDGE_REF`` (``geo6``; see MODEL.md)."""


def _neighbours_continue(gx: np.ndarray, gy: np.ndarray, q: np.ndarray, lines: list[np.ndarray],
                         sides: np.ndarray, frame: list[int | None], i: int,
                         line: np.ndarray) -> bool:
    """Whether both sides next to side ``i`` of ``q`` (working px; their lines ``lines``, edge
    scores ``sides``) continue as straight edges from their corner with side ``i`` out to
    ``line``, the farther edge side ``i`` would move to (:data:`BAND_SIDES_MIN`). False when a
    neighbour lies on the frame or does not meet ``line``."""
    for j, corner in ((i - 1) % 4, q[i]), ((i + 1) % 4, q[(i + 1) % 4]):
        far = geo.intersect(lines[j], line)
        if frame[j] is not None or far is None:
            return False
        ext = geo.segment_edge_score(gx, gy, corner, far)
        if ext < BAND_SIDES_MIN * float(sides[j]) or ext < 0.5 * EDGE_REF:
            return False
    return True


_Hypothesis = tuple[float, np.ndarray, geo.MaskQuad, float, float, np.ndarray, list[np.ndarray],
                    list[int | None]]
"""A quad hypothesis of :func:`detect_from_mask`: ``(confidence, quad, mask quad, contrast,
edge score, side scores, side lines, frame sides)``."""


def detect_from_mask(grey: np.ndarray, raw: np.ndarray, settings: CardSettings,
                     size: tuple[int, int] | None = None,
                     sample: Callable[[np.ndarray], np.ndarray] | None = None) -> Detection:
    """Turn one raw saliency map into a refined quad (hypothesise and verify).

    1. Hypotheses: the 2 largest components of the mask thresholded at 0.15, 0.3, 0.5, 0.7 and
       ``mask_threshold``, each fitted with a 4-gon (:func:`geometry.quads_from_mask`); at 0.3
       and 0.5 also quads of 4 straight outline runs (:func:`geometry.sub_quads`), for a card
       merged with another salient object (rectangularity = share of the quad the mask covers).
    2. Each hypothesis's sides snap to the best straight edge within 1.5 model px
       (:func:`geometry.side_search` on the working-size gradient) and is scored:
       ``contrast score (0 at 0.3, 1 at 0.7) x rectangularity score (0 at 0.75, 1 at 0.95) x
       edge score (geometric mean over sides of min(1, side score / EDGE_REF)) ^ 0.5 x aspect
       score`` (of the sides' plain ratio). The best one wins; its confidence is its score
       with the aspect score of :func:`_card_aspect_score` (the perspective undone too, for a
       page at a steep tilt), and the prescreen bound uses that score as well.
    3. The winner's sides search outwards (``refine_band_frac`` of the shorter side, e.g. a
       dark header band the saliency missed; only over a strip of mean saliency
       ``OUTWARD_STRIP_MIN``, or one both neighbouring sides run straight across,
       ``BAND_SIDES_MIN``), then :func:`geometry.refine_quad` fits sub-pixel
       lines at full resolution.
    4. Where no hypothesis reaches ``min_confidence``, two cards side by side whose saliency
       merged are looked for (:func:`_merged_pair`, :attr:`Detection.pair`).

    Args:
        grey: ``(h, w) uint8`` (or float32) grey working copy of the photo, long side at most
            ``settings.work_max_side`` (:meth:`processors.pixels.PixelBackend.working_grey`).
        raw: ``(320, 320) float32`` u2netp output 0 for this image (sigmoid, not normalised).
        settings: card settings (threshold, working size, refinement band).
        size: ``(width, height)`` px of the full-resolution image the quad is returned in
            (None: ``grey``'s own size).
        sample: bilinear grey sampler of that image for the sub-pixel fit
            (:func:`geometry.refine_quad`); None samples ``grey`` (then ``size`` must be None).

    Returns:
        A :class:`Detection` in ``size`` px (quad None when no component exists at any
        threshold).
    """
    wh, ww = grey.shape[:2]
    w, h = size if size is not None else (ww, wh)
    if sample is None:
        if (w, h) != (ww, wh):
            raise ValueError("detect_from_mask: a sampler is needed when size differs from grey's")
        sample = partial(_sample_plane, grey.astype(np.float32))
    m = normalise_mask(raw)
    scale = max(ww, wh) / max(w, h)  # working px per full px
    # components are found on a mask of at most MASK_SIDE px (the map is 320 px anyway)
    ms = min(1.0, MASK_SIDE / max(ww, wh))
    mw = cv2.resize(m, (max(1, round(ww * ms)), max(1, round(wh * ms))),
                    interpolation=cv2.INTER_LINEAR)
    gx, gy = geo.gradients(grey.astype(np.float32), 1.0)
    mask_px = max(ww, wh) / INPUT_SIZE  # working px per model px
    min_area = 0.002 * ww * wh
    cands: list[tuple[float, int, np.ndarray, geo.MaskQuad]] = []
    for thr in sorted(set(MASK_THRESHOLDS) | {settings.mask_threshold}):
        binary = (mw > thr).astype(np.uint8)
        contours = geo.outer_contours(binary)
        found: list[tuple[np.ndarray, geo.MaskQuad | None]] = [
            (mq.quad, mq) for mq in geo.quads_from_mask(binary, 2, min_area * ms * ms, contours)]
        if found and thr in SUB_QUAD_THRESHOLDS:  # the card may be merged with something else
            found += [(sq, None) for sq in geo.sub_quads(binary, 6, min_area * ms * ms,
                                                         contours)]
        for quad0, mq in found:
            if mq is None:  # a sub-quad: rectangularity = share of it the mask covers
                covered, share = _covered(binary, quad0)
                mq = geo.MaskQuad(quad=quad0, component_area=covered, rectangularity=share,
                                  touches_border=0.0)
            q0 = (mq.quad + 0.5) / ms - 0.5  # mask px -> working px
            # the score with a perfect edge score, before the sides snap: a bound on what the
            # hypothesis can reach (the snap moves its sides by 1.5 model px at most)
            bound = (_score(_contrast(m, (q0 + 0.5) / scale - 0.5, w, h), 0.3, 0.7)
                     * _score(mq.rectangularity, 0.75, 0.95) * _card_aspect_score(q0, (ww, wh)))
            cands.append((bound, len(cands), q0, mq))
    hyps: list[_Hypothesis] = []
    for bound, _, q0, mq in sorted(cands, key=lambda c: (-c[0], c[1])):
        if bound < PRESCREEN * max([settings.min_confidence] + [h_[0] for h_ in hyps]):
            break  # neither the winner nor a second card (both need min_confidence)
        q, sides, lines = geo.side_search(gx, gy, q0, 1.5 * mask_px, 1.5 * mask_px)
        qs = (q + 0.5) / scale - 0.5  # working px -> source px
        contrast = _contrast(m, qs, w, h)
        # a side cut by the frame has no image edge: neutral score, PARTIAL_CARD reports it
        frame = _frame_sides(q, ww, wh, 2.0 * mask_px)
        sides = np.where([f is not None for f in frame], FRAME_SIDE_SCORE * EDGE_REF, sides)
        edge = float(np.prod(np.clip(sides / EDGE_REF, 1e-3, 1.0)) ** 0.25)
        conf = _hypothesis_score(contrast, mq.rectangularity, edge,
                                 _aspect_score(geo.approx_aspect(q)))
        hyps.append((conf, q, mq, contrast, edge, sides, lines, frame))
    best = max(hyps, key=lambda h_: h_[0]) if hyps else None

    def pair() -> tuple[np.ndarray, np.ndarray] | None:
        halves = _merged_pair(m, gx, gy, [(q0, mq) for _, _, q0, mq in cands], (ww, wh), scale,
                              (w, h), mask_px, settings.min_confidence)
        return None if halves is None else (
            (halves[0] + 0.5) / scale - 0.5, (halves[1] + 0.5) / scale - 0.5)

    if best is None:
        return Detection(quad=None, confidence=0.0, raw_max=float(raw.max()), pair=pair())
    _, q, mq, contrast, edge, sides, lines, frame = best
    # hypotheses are ranked by the plain aspect ratio (a ranking by the metric one let a wrong
    # part of a hand-held card win); the winner's confidence counts the metric one too
    conf = _hypothesis_score(contrast, mq.rectangularity, edge, _card_aspect_score(q, (ww, wh)))
    second = _second_card(hyps, q, settings.min_confidence)

    def finish(q: np.ndarray, sides: np.ndarray, lines: list[np.ndarray],
               frame: list[int | None]) -> np.ndarray:
        """Step 3 on a hypothesis (working px): its quad in source px."""
        if settings.refine:
            short = float(min(geo.side_lengths(q)))
            reach = max(settings.refine_band_frac * short, 2.0 * mask_px)
            step = max(1.0, reach / 30.0)
            _, wide, wlines = geo.side_search(gx, gy, q, 1.5 * mask_px, reach, step,
                                              outermost=WIDE_GAIN)
            # a side moves out only to a straight edge about as strong as the near one
            keep = [wl if (ws >= WIDE_GAIN * ns and ws >= 0.5 * EDGE_REF
                           and (_strip_saliency(m, q, i, wl, (ww, wh)) >= OUTWARD_STRIP_MIN
                                or _neighbours_continue(gx, gy, q, lines, sides, frame, i, wl)))
                    else nl
                    for i, (wl, ws, nl, ns) in enumerate(zip(wlines, wide, lines, sides,
                                                             strict=True))]
            # the card may run on past the frame: a side within reach of a border, with
            # salient image all the way to it, moves onto that border (PARTIAL_CARD then
            # reports it), even when it found an edge (an end stripe or a fold is not the
            # card's end)
            snapped = {i: f for i, f in enumerate(frame) if f is not None}  # cut sides stay cut
            for i in range(4):
                if frame[i] is None:
                    k = _border_within(q[i], q[(i + 1) % 4], ww, wh, reach)
                    if k is not None and _strip_saliency(m, q, i, _border_line(k, ww, wh),
                                                         (ww, wh)) >= STRIP_MIN:
                        keep[i], snapped[i] = _border_line(k, ww, wh), k
            q2 = geo.quad_from_lines(keep)
            if q2 is not None and geo.is_convex(q2) and any(
                    k is w_ for k, w_ in zip(keep, wlines, strict=True)):
                q, _, _ = geo.side_search(gx, gy, q2, 2 * step, 2 * step, 1.0, prior=0.1)
            elif q2 is not None and geo.is_convex(q2) and any(
                    k is not l_ for k, l_ in zip(keep, lines, strict=True)):
                q = q2
            frame = [snapped.get(i, f)
                     for i, f in enumerate(_frame_sides(q, ww, wh, 2.0 * mask_px))]
        quad = (q + 0.5) / scale - 0.5
        if settings.refine:
            quad, _ = geo.refine_quad(sample, (w, h), quad, max(2.0 / scale, 3.0))
        if any(f is not None for f in frame):  # sides cut by the frame lie on the frame
            cut = [_border_line(k, w, h) if k is not None
                   else geo.line_through(quad[i], quad[(i + 1) % 4]) for i, k in enumerate(frame)]
            on_frame = geo.quad_from_lines(cut)
            if on_frame is not None and geo.is_convex(on_frame):
                quad = on_frame
        return geo.order_corners(quad)

    quad = finish(q, sides, lines, frame)
    runner = _runner_up(hyps, q, settings.min_confidence)
    return Detection(
        quad=quad,
        confidence=float(np.clip(conf, 0.0, 1.0)),
        rectangularity=mq.rectangularity,
        mask_contrast=contrast,
        edge_support=edge,
        area_frac=geo.polygon_area(quad) / float(h * w),
        aspect=geo.approx_aspect(quad),
        metric_aspect=geo.metric_aspect(quad, (w, h)).value,
        raw_max=float(raw.max()),
        second_quad=None if second is None else (second + 0.5) / scale - 0.5,
        runner_up=None if runner is None else finish(*runner),
        pair=pair() if conf < settings.min_confidence else None,
    )


def _sample_plane(plane: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Bilinear samples of a ``(H, W) float32`` plane at ``(..., 2)`` points (border replicated)."""
    pts = np.asarray(points, np.float32)
    flat = pts.reshape(-1, 1, 2)
    out = cv2.remap(plane, flat[..., 0], flat[..., 1], cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_REPLICATE)
    return out.reshape(pts.shape[:-1])


PAIR_ASPECTS = (2.8, 5.0)
"""Long/short side ratio of a mask component :func:`_merged_pair` splits: two ID-1 cards side by
side, long sides touching (2 x 1.586 = 3.17 with no gap, 3.18-3.53 measured with gaps of 30-160
px), or two ID-3 pages (2.84); a single card's 1.42-1.59 and a stack of two ID-1 cards (1.26, too
near one card's or a square object's shape to tell) are left alone, as is a card held in a hand
whose fingers merged with it (2.04-2.85 on the kinds set's hand-held photos)."""
PAIR_EDGE_MIN = 0.9
"""Edge score (:func:`detect_from_mask`'s, over the 4 sides) each half of a pair must reach: two
cards' halves scored 0.96-1.0, the halves of a card merged with the hand holding it 0.37-0.86
(a finger has no straight edge across the cut). The cut side itself must reach ``EDGE_REF``: a
drawn keyboard's halves (3.4 long, key rows for edges) scored 0.52-0.96 there, two cards 1.0
and more, except two touching on white paper (0.87-0.95), which stay NO_CARD."""
PAIR_CUT_REACH = 0.3
"""How far (a share of a half's side across the cut) the cut side of each half searches for the
card's own edge: the gap between the two cards (30-300 px at 1600 px in the session 66 check)
is part of both halves' saliency."""


def _merged_pair(m: np.ndarray, gx: np.ndarray, gy: np.ndarray,
                 found: list[tuple[np.ndarray, geo.MaskQuad]], work: tuple[int, int],
                 scale: float, size: tuple[int, int], mask_px: float, min_confidence: float
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """Two cards side by side whose saliency merged: the two halves (working px) of the
    largest mask quad of :data:`PAIR_ASPECTS`'s shape, cut across its long sides, each of
    which, its sides snapped to the image's edges (the cut side within
    :data:`PAIR_CUT_REACH`), scores ``min_confidence`` as a card of its own with an edge score
    of :data:`PAIR_EDGE_MIN` and its cut side an edge in full (``EDGE_REF``); else None. Two
    ID-1 cards 30-160 px apart on a table at 1600 x 1200 px, or on an A4 scan, were NO_CARD:
    the merged component has no card's shape, and no part of it was a hypothesis.

    Args:
        m: ``(320, 320) float32`` normalised saliency.
        gx, gy: working-size gradients.
        found: ``(quad, mask quad)`` hypotheses in working px (largest components first at each
            threshold).
        work: ``(width, height)`` of the working copy; ``size`` of the source image.
        scale: working px per source px; ``mask_px``: working px per model px.
        min_confidence: the score each half must reach.
    """
    ww, wh = work
    salient = (m > 0.5).astype(np.uint8)
    to_model = INPUT_SIZE / np.array([ww, wh], np.float64)  # model px per working px
    for q0, mq in sorted(found, key=lambda f: -f[1].component_area)[:4]:
        if mq.rectangularity < 0.75 or not geo.is_convex(q0):
            continue
        sides = geo.side_lengths(q0)
        long_first = sides[0] + sides[2] >= sides[1] + sides[3]
        aspect = geo.approx_aspect(q0)
        if not PAIR_ASPECTS[0] <= aspect <= PAIR_ASPECTS[1]:
            continue
        q = q0 if long_first else np.roll(q0, -1, axis=0)  # q[0]-q[1] and q[3]-q[2] long
        top, bottom = (q[0] + q[1]) / 2.0, (q[3] + q[2]) / 2.0
        halves = (np.array([q[0], top, bottom, q[3]]), np.array([top, q[1], q[2], bottom]))
        across = float(np.linalg.norm(top - q[0]))
        scored = []
        for half, cut in zip(halves, (1, 3), strict=True):  # the cut side of each half
            snapped, edges, _ = geo.side_search(gx, gy, half, PAIR_CUT_REACH * across,
                                                1.5 * mask_px, max(1.0, across / 100.0))
            contrast = _contrast(m, (snapped + 0.5) / scale - 0.5, *size)
            _, cover = _covered(salient, (snapped + 0.5) * to_model - 0.5)
            edge = float(np.prod(np.clip(edges / EDGE_REF, 1e-3, 1.0)) ** 0.25)
            edge = edge if edges[cut] >= EDGE_REF else 0.0  # the seam is an edge in full
            scored.append((_hypothesis_score(contrast, cover, edge,
                                             _card_aspect_score(snapped, (ww, wh))), snapped,
                           edge))
        if all(c >= min_confidence and e >= PAIR_EDGE_MIN for c, _, e in scored):
            return scored[0][1], scored[1][1]
    return None


def _covered(binary: np.ndarray, quad: np.ndarray) -> tuple[float, float]:
    """The px of ``quad`` (``(4, 2)``, in ``binary``'s px) that the ``(H, W) uint8`` mask
    ``binary`` covers, and their share of the quad (0.0 for an empty quad)."""
    inside = np.zeros_like(binary)
    cv2.fillPoly(inside, [np.round(quad).astype(np.int32)], 1)
    n = cv2.countNonZero(inside)
    covered = float(cv2.countNonZero(cv2.bitwise_and(binary, inside)))
    return covered, covered / n if n else 0.0


RUNNER_UP_IOU = (0.5, 0.95)
"""A runner-up (:func:`_runner_up`) overlaps the winner by an IoU within this range: the same
card (a second card overlaps it by at most ``SECOND_CARD_OVERLAP``), with a corner or a side
elsewhere (at 0.95 and above the two read alike). On the MRZ evaluation set (seed 20261204) a
winner whose zone did not read had IoU 0.863 with the document, its runner-up 0.992."""


def _runner_up(hyps: list[_Hypothesis], q: np.ndarray, min_confidence: float
               ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[int | None]] | None:
    """The most confident hypothesis other than the winner ``q`` (working px) whose quad
    overlaps it by an IoU within :data:`RUNNER_UP_IOU` and that is as confident as
    ``min_confidence``: ``(quad, side scores, side lines, frame sides)``, or None."""
    for h_ in sorted(hyps, key=lambda h_: -h_[0]):
        if h_[0] < min_confidence:
            break
        if RUNNER_UP_IOU[0] <= quad_iou(h_[1], q) < RUNNER_UP_IOU[1]:
            return h_[1], h_[5], h_[6], h_[7]
    return None


def _second_card(hyps: list[_Hypothesis], q: np.ndarray,
                 min_confidence: float) -> np.ndarray | None:
    """The most confident hypothesis quad (working px) that is a second card beside ``q``
    (``SECOND_CARD_AREA``, ``SECOND_CARD_OVERLAP``), or None."""
    area = geo.polygon_area(q)
    qh = cv2.convexHull(np.asarray(q, np.float32))
    for h_ in sorted(hyps, key=lambda h_: -h_[0]):
        if h_[0] < min_confidence:
            break
        a2 = geo.polygon_area(h_[1])
        if a2 < SECOND_CARD_AREA * area:
            continue
        # convex clipping in C (cv2.intersectConvexConvex, float32); both quads are convex
        inter, _ = cv2.intersectConvexConvex(cv2.convexHull(np.asarray(h_[1], np.float32)), qh)
        if inter <= SECOND_CARD_OVERLAP * min(a2, area):
            return np.asarray(h_[1], np.float64)
    return None
