"""Quad geometry: mask -> 4-gon, corner order, side line fits, full-resolution edge refinement.

All quads are ``(4, 2) float64`` arrays of ``(x, y)`` pixel coordinates ordered TL, TR, BR, BL
(clockwise on screen, image y pointing down). Lines are ``(a, b, c)`` with ``a*x + b*y + c = 0``
and ``a**2 + b**2 = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

_NEXT = np.array([1, 2, 3, 0])
_PREV = np.array([3, 0, 1, 2])
"""Index of the next / previous corner of a quad (``np.roll`` by -1 / 1, without its cost)."""


def order_corners(pts: np.ndarray) -> np.ndarray:
    """Order 4 points TL, TR, BR, BL.

    The points are sorted clockwise around their centroid (angle in image coordinates), then
    rotated so the first is the one with the smallest ``x + y`` (top-left).

    Args:
        pts: ``(4, 2)`` points in px.

    Returns:
        ``(4, 2) float64`` in TL, TR, BR, BL order.
    """
    p = np.asarray(pts, dtype=np.float64).reshape(4, 2)
    c = p.mean(axis=0)
    ang = np.arctan2(p[:, 1] - c[1], p[:, 0] - c[0])  # clockwise on screen (y down)
    p = p[np.argsort(ang)]
    start = int(np.argmin(p.sum(axis=1)))
    return p[(np.arange(4) + start) % 4]


def polygon_area(pts: np.ndarray) -> float:
    """Absolute area (px^2) of a simple polygon ``(K, 2)`` (shoelace formula)."""
    p = np.asarray(pts, dtype=np.float64)
    x, y = p[:, 0], p[:, 1]
    xn, yn = np.concatenate((x[1:], x[:1])), np.concatenate((y[1:], y[:1]))
    return float(abs(np.dot(x, yn) - np.dot(y, xn)) / 2.0)


def line_through(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Normalised line ``(a, b, c)`` through points ``p`` and ``q`` (px)."""
    px, py = float(p[0]), float(p[1])
    dx, dy = float(q[0]) - px, float(q[1]) - py
    r = max(math.hypot(dx, dy), 1e-12)
    a, b = -dy / r, dx / r
    return np.array([a, b, -(a * px + b * py)])


def fit_line(points: np.ndarray) -> np.ndarray:
    """Robust (Huber) line fit ``(a, b, c)`` to ``(K, 2)`` points, K >= 2 (``cv2.fitLine``)."""
    vx, vy, x0, y0 = cv2.fitLine(points.astype(np.float32), cv2.DIST_HUBER, 0, 0.01, 0.01).ravel()
    return line_through(np.array([x0, y0]), np.array([x0 + vx, y0 + vy]))


def intersect(l1: np.ndarray, l2: np.ndarray) -> np.ndarray | None:
    """Intersection point ``(2,)`` of two lines, or None when (nearly) parallel (the cross
    product of the homogeneous lines, written out: this runs thousands of times per photo)."""
    a1, b1, c1 = float(l1[0]), float(l1[1]), float(l1[2])
    a2, b2, c2 = float(l2[0]), float(l2[1]), float(l2[2])
    z = a1 * b2 - b1 * a2
    if abs(z) < 1e-9:
        return None
    return np.array([(b1 * c2 - c1 * b2) / z, (c1 * a2 - a1 * c2) / z])


def quad_from_lines(lines: list[np.ndarray]) -> np.ndarray | None:
    """Corners of the quad whose sides lie on ``lines`` (top, right, bottom, left order).

    Returns ``(4, 2)`` TL, TR, BR, BL, or None if two adjacent sides are parallel.
    """
    top, right, bottom, left = lines
    pts = [intersect(left, top), intersect(top, right), intersect(right, bottom),
           intersect(bottom, left)]
    if any(p is None for p in pts):
        return None
    return np.array(pts, dtype=np.float64)


def is_convex(quad: np.ndarray) -> bool:
    """True when the ordered quad ``(4, 2)`` is strictly convex (all turns the same sign)."""
    q = np.asarray(quad, np.float64)
    d = q[_NEXT] - q
    dn = d[_NEXT]
    cross = d[:, 0] * dn[:, 1] - d[:, 1] * dn[:, 0]
    return bool(np.all(cross > 0) or np.all(cross < 0))


def side_lengths(quad: np.ndarray) -> np.ndarray:
    """Lengths (px) of the sides top, right, bottom, left of an ordered quad ``(4, 2)``."""
    q = np.asarray(quad, np.float64)
    d = q[_NEXT] - q
    return np.hypot(d[:, 0], d[:, 1])


def corner_angle_deviation(quad: np.ndarray) -> float:
    """Largest deviation (degrees) of the quad's four interior angles from 90°.

    Args:
        quad: ``(4, 2)`` corners in order (TL, TR, BR, BL), px.

    Returns:
        ``max_i |angle_i - 90|`` in [0, 90]; 0 for a rectangle.
    """
    q = np.asarray(quad, np.float64)
    prev, nxt = q[_PREV] - q, q[_NEXT] - q
    cos = (prev * nxt).sum(axis=1) / np.maximum(
        np.linalg.norm(prev, axis=1) * np.linalg.norm(nxt, axis=1), 1e-12)
    return float(np.abs(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))) - 90.0).max())


def approx_aspect(quad: np.ndarray) -> float:
    """Long/short side ratio of the quad, perspective undone approximately.

    Uses the mean of opposite sides (exact for a fronto-parallel card; within a few percent
    for the moderate tilts of hand-held photos).
    """
    s = side_lengths(quad)
    w = (s[0] + s[2]) / 2.0
    h = (s[1] + s[3]) / 2.0
    lo, hi = sorted((w, h))
    return float(hi / max(lo, 1e-9))


ASPECT_FOCAL = (0.55, 1.0)
"""Focal lengths (share of the photo's diagonal) :func:`metric_aspect` allows: a phone's main
camera (26-28 mm equivalent: 0.60-0.65) to a webcam's or a mild tele's narrower view. The
synthetic scenes draw 0.55-0.95."""
ASPECT_DEFAULT_FOCAL = 0.75
"""Focal length (share of the diagonal) assumed when the quad cannot tell it (a frontal view, a
perspective too weak, or corners that imply an impossible one)."""


@dataclass(frozen=True, slots=True)
class MetricAspect:
    """A quad's rectangle aspect ratio (long / short side) with the perspective undone.

    Attributes:
        value: at the focal length the quad implies (clipped to :data:`ASPECT_FOCAL`).
        low, high: the smallest and largest over the focal lengths of :data:`ASPECT_FOCAL`
            (equal for a frontal view: its aspect does not depend on the focal length).
    """

    value: float
    low: float
    high: float

    def straddles(self, split: float) -> bool:
        """The allowed focal lengths put the aspect on both sides of ``split``."""
        return self.low < split <= self.high


def _aspect_at(n2: np.ndarray, n3: np.ndarray, f: float) -> float:
    a2 = n2[0] ** 2 + n2[1] ** 2 + (f * n2[2]) ** 2
    a3 = n3[0] ** 2 + n3[1] ** 2 + (f * n3[2]) ** 2
    r = math.sqrt(a2 / max(a3, 1e-24))
    return max(r, 1.0 / max(r, 1e-12))


def metric_aspect(quad: np.ndarray, size: tuple[int, int]) -> MetricAspect:
    """Aspect ratio of the rectangle a quad images, by a pinhole camera whose principal point is
    the photo's centre and whose focal length is estimated from the quad itself (Zhang and He,
    "Whiteboard scanning and image enhancement", Digital Signal Processing 17(2), 2007: the
    vanishing geometry of the rectangle's sides gives ``f`` from their orthogonality, then its
    width / height). Unlike :func:`approx_aspect` it stays right at 30-35 degrees of tilt,
    where the sides' mean lengths are 10-20 % off and ID-1 (1.586) and ID-3 (1.420) swap.

    Args:
        quad: ``(4, 2)`` corners in px, in order around the quad (any start, either sense).
        size: ``(width, height)`` of the photo (px).

    Returns:
        The aspect (long / short, >= 1) at the estimated focal length and its range over
        :data:`ASPECT_FOCAL` (:class:`MetricAspect`).
    """
    w, h = size
    diag = math.hypot(w, h)
    q = np.asarray(quad, np.float64) - [w / 2.0, h / 2.0]
    m1, m2, m4, m3 = (np.array([x, y, 1.0]) for x, y in q)  # TL, TR, BR, BL
    d2, d3 = float(np.cross(m2, m4) @ m3), float(np.cross(m3, m4) @ m2)
    if abs(d2) < 1e-12 or abs(d3) < 1e-12:  # degenerate (three corners on a line)
        a = approx_aspect(quad)
        return MetricAspect(a, a, a)
    n2 = float(np.cross(m1, m4) @ m3) / d2 * m2 - m1
    n3 = float(np.cross(m1, m4) @ m2) / d3 * m3 - m1
    lo_f, hi_f = ASPECT_FOCAL[0] * diag, ASPECT_FOCAL[1] * diag
    f = ASPECT_DEFAULT_FOCAL * diag
    den = n2[2] * n3[2]
    if abs(den) > 1e-12:
        f2 = -(n2[0] * n3[0] + n2[1] * n3[1]) / den
        if f2 > 0:
            f = min(max(math.sqrt(f2), lo_f), hi_f)
    ends = (_aspect_at(n2, n3, lo_f), _aspect_at(n2, n3, hi_f))
    return MetricAspect(_aspect_at(n2, n3, f), min(ends), max(ends))


def approx_four(hull: np.ndarray) -> np.ndarray | None:
    """approxPolyDP on the hull with a tolerance search until exactly 4 vertices remain:
    ``(4, 2) float64``, or None when no tolerance up to 20 % of the perimeter gives 4."""
    peri = cv2.arcLength(hull, True)
    lo, hi = 0.0, 0.2 * peri
    best = None
    for _ in range(30):
        eps = (lo + hi) / 2.0
        ap = cv2.approxPolyDP(hull, eps, True)
        if len(ap) == 4:
            best = ap.reshape(4, 2)
            hi = eps  # prefer the tightest tolerance giving 4 points
        elif len(ap) > 4:
            lo = eps
        else:
            hi = eps
    return None if best is None else best.astype(np.float64)


def _side_fit(contour: np.ndarray, quad: np.ndarray, band: float) -> np.ndarray | None:
    """Refit the 4 sides of ``quad`` to the contour points near each side (middle 70 %).

    Contour points within ``band`` px of a side, and whose projection falls within the middle
    70 % of that side (away from rounded corners), are fitted with a Huber line.
    """
    side = quad[_NEXT] - quad  # (4, 2)
    coarse = [line_through(quad[i], quad[(i + 1) % 4]) for i in range(4)]
    abc = np.array(coarse)  # (4, 3)
    d = np.abs(contour @ abc[:, :2].T + abc[:, 2])  # (K, 4) distances to each side's line
    t = ((contour[:, None, :] - quad[None]) * side[None]).sum(axis=2) / np.maximum(
        (side * side).sum(axis=1), 1e-9)  # (K, 4) position along each side
    near = (d < band) & (t > 0.15) & (t < 0.85)
    lines = []
    for i in range(4):
        sel = contour[near[:, i]]
        lines.append(fit_line(sel) if len(sel) >= 5 else coarse[i])
    out = quad_from_lines(lines)
    if out is None or not is_convex(out):
        return None
    return out


@dataclass(frozen=True)
class MaskQuad:
    """A quad fitted to a mask.

    Attributes:
        quad: ``(4, 2) float64`` TL, TR, BR, BL in the mask's px.
        component_area: area (px^2) of the filled largest component.
        rectangularity: component area / quad area (1.0 for a perfect quadrilateral mask).
        touches_border: share of the component's contour points on the mask's 1-px border.
    """

    quad: np.ndarray
    component_area: float
    rectangularity: float
    touches_border: float


def outer_contours(mask: np.ndarray) -> list[np.ndarray]:
    """Outer contours (``(K, 1, 2) int32``, 8-connected, holes ignored) of a binary mask
    (``(H, W) uint8``, non-zero = set), largest enclosed area first."""
    contours, _ = cv2.findContours(mask if mask.dtype == np.uint8 else (mask > 0).astype(np.uint8),
                                   cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    return sorted(contours, key=cv2.contourArea, reverse=True)


def quads_from_mask(mask: np.ndarray, max_components: int = 2, min_area: float = 16.0,
                    contours: list[np.ndarray] | None = None) -> list[MaskQuad]:
    """Fit a 4-gon to each of the largest connected components of a binary mask.

    Per component: outer contour (holes filled) -> convex hull -> approxPolyDP with a
    tolerance search to 4 vertices (``minAreaRect`` when none gives 4) -> each side refitted
    (Huber line) to the contour points near its middle, so rounded card corners do not pull the
    corners in. Components are taken by the area their outer contour encloses (one
    ``findContours`` pass over the mask; a component inside another's hole is not one of them).

    Args:
        mask: ``(H, W) uint8``, non-zero = card.
        max_components: how many components, largest first.
        min_area: smallest component area (px^2) considered.
        contours: :func:`outer_contours` of ``mask`` when the caller already has them.

    Returns:
        :class:`MaskQuad` list (mask px), largest component first; empty when none qualifies.
    """
    out: list[MaskQuad] = []
    h, w = mask.shape
    for cnt in (outer_contours(mask) if contours is None else contours)[:max_components]:
        area = float(cv2.contourArea(cnt))
        if area < min_area:
            break
        hull = cv2.convexHull(cnt)
        q = approx_four(hull)
        if q is None:
            q = cv2.boxPoints(cv2.minAreaRect(cnt)).astype(np.float64)
        q = order_corners(q)
        pts = cnt.reshape(-1, 2).astype(np.float64)
        band = max(2.0, 0.03 * float(min(side_lengths(q))))
        refit = _side_fit(pts, q, band)
        if refit is not None:
            q = order_corners(refit)
        qa = polygon_area(q)
        on_border = ((pts[:, 0] <= 0) | (pts[:, 1] <= 0) | (pts[:, 0] >= w - 1)
                     | (pts[:, 1] >= h - 1))
        out.append(MaskQuad(quad=q, component_area=area,
                            rectangularity=float(min(area, qa) / max(area, qa, 1e-9)),
                            touches_border=float(on_border.mean())))
    return out


def quad_from_mask(mask: np.ndarray) -> MaskQuad | None:
    """The 4-gon of the largest component of ``mask`` (see :func:`quads_from_mask`), or None."""
    qs = quads_from_mask(mask, max_components=1)
    return qs[0] if qs else None


def refine_quad(sample: Callable[[np.ndarray], np.ndarray], size: tuple[int, int],
                quad: np.ndarray, band: float, samples: int = 48) -> tuple[np.ndarray, float]:
    """Refine a coarse quad against the card's edges at full resolution.

    For each side, ``samples`` points between 10 % and 90 % of the side are probed along the
    side's normal over ``[-band, +band]`` px (bilinear grey samples, averaged over 3
    parallel offsets; all sides in one ``sample`` call); the position of the largest absolute
    derivative (with sub-pixel parabola fit) is an edge point. Edge points whose strength is
    below half the median are dropped; the rest are fitted with a Huber line. A side keeps its
    coarse line when fewer than 40 % of its probes give edge points or when the new line turns
    more than 6 degrees.

    Args:
        sample: bilinear grey sampler of the full-resolution image: ``(..., 2) float32`` points
            (x, y px, clamped to the image) -> ``(...) float32`` grey levels
            (:meth:`processors.pixels.PixelBackend.sample_grey`).
        size: ``(width, height)`` px of that image.
        quad: ``(4, 2)`` coarse TL, TR, BR, BL in the same px.
        band: search half-width (px).
        samples: probes per side.

    Returns:
        ``(quad, support)``: refined ``(4, 2) float64`` quad and the share of probes (over all
        sides) that found a consistent edge, in [0, 1].
    """
    quad = np.asarray(quad, np.float64)
    band = max(float(band), 3.0)
    offs = np.arange(-band, band + 1.0, 1.0)
    t = np.linspace(0.1, 0.9, samples)
    w, h = size
    d = quad[_NEXT] - quad  # (4, 2) side vectors
    u = d / np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-9)[:, None]
    n = np.stack([-u[:, 1], u[:, 0]], axis=1)
    base = quad[:, None, :] + t[None, :, None] * d[:, None, :]  # (4, S, 2)
    tang = np.array([-1.5, 0.0, 1.5])
    pts = (base[:, None, :, None, :] + offs[None, None, None, :, None] * n[:, None, None, None, :]
           + tang[None, :, None, None, None] * u[:, None, None, None, :])  # (4, 3, S, O, 2)
    prof_all = sample(pts.astype(np.float32)).sum(axis=1)  # (4, S, O)
    ders = np.abs(np.diff(prof_all, axis=2))  # (4, S, O-1)
    medians = np.median(ders.max(axis=2), axis=1)  # median edge strength per side
    lines, support = [], 0
    for i in range(4):
        p, q = quad[i], quad[(i + 1) % 4]
        der = ders[i]  # (S, O-1), position j+0.5
        j = np.argmax(der, axis=1)
        strength = der[np.arange(samples), j]
        jj = np.clip(j, 1, der.shape[1] - 2)
        y0 = der[np.arange(samples), jj - 1]
        y1 = der[np.arange(samples), jj]
        y2 = der[np.arange(samples), jj + 1]
        denom = y0 - 2 * y1 + y2
        sub = np.where(np.abs(denom) > 1e-6, 0.5 * (y0 - y2) / np.where(denom == 0, 1, denom), 0.0)
        sub = np.clip(sub, -0.5, 0.5)
        pos = offs[0] + jj + 0.5 + sub
        edge = base[i] + pos[:, None] * n[i]
        inside = ((edge[:, 0] >= 0) & (edge[:, 0] <= w - 1)
                  & (edge[:, 1] >= 0) & (edge[:, 1] <= h - 1))
        good = inside & (strength >= 0.5 * medians[i]) & (strength > 2.0)
        coarse = line_through(p, q)
        if good.sum() < 0.4 * samples:
            lines.append(coarse)
            continue
        ln = fit_line(edge[good])
        # keep the orientation of the coarse normal
        if ln[:2] @ coarse[:2] < 0:
            ln = -ln
        resid = np.abs(edge[good] @ ln[:2] + ln[2])
        inl = resid < 1.5
        if inl.sum() >= 0.4 * samples:
            ln = fit_line(edge[good][inl])
            if ln[:2] @ coarse[:2] < 0:
                ln = -ln
        angle = np.degrees(np.arccos(np.clip(abs(ln[:2] @ coarse[:2]), -1, 1)))
        if angle > 6.0 or inl.sum() < 0.4 * samples:
            lines.append(coarse)
            continue
        support += int(inl.sum())
        lines.append(ln)
    out = quad_from_lines(lines)
    if out is None or not is_convex(out):
        return quad, 0.0
    # a refined corner should not jump far from the coarse one
    if np.max(np.hypot(*(out - quad).T)) > 3.0 * band:
        return quad, 0.0
    return out, support / (4.0 * samples)


def gradients(gray: np.ndarray, sigma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Smoothed derivatives ``(gx, gy)``, each ``(H, W) float32`` in grey levels per px.

    Gaussian smoothing (``sigma`` px) then 3x3 Sobel divided by 8 (its gain).
    """
    g = gray if gray.dtype == np.float32 else gray.astype(np.float32)
    if sigma > 0:
        g = cv2.GaussianBlur(g, (0, 0), sigma)
    gx = cv2.Sobel(g, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)
    gy = cv2.Sobel(g, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)
    return gx, gy


def _normal_derivative(gx: np.ndarray, gy: np.ndarray, pts: np.ndarray,
                       n: np.ndarray) -> np.ndarray:
    """Directional derivative ``gx*n[0] + gy*n[1]`` bilinearly sampled at ``pts`` (``(..., 2)``
    px; 0 outside the image), shape ``pts.shape[:-1]``, grey levels per px. float64: the float32
    samples times ``n``'s float64 components (NumPy 2 promotion), which is why
    :func:`side_search` compares its peaks in float32."""
    mx, my = pts[..., 0].astype(np.float32), pts[..., 1].astype(np.float32)
    return (cv2.remap(gx, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT) * n[0]
            + cv2.remap(gy, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT) * n[1])


def segment_edge_score(gx: np.ndarray, gy: np.ndarray, a: np.ndarray, b: np.ndarray,
                       samples: int = 16) -> float:
    """How well the segment ``a`` -> ``b`` (px) lies on a straight edge: the absolute mean, over
    ``samples`` points between 10 % and 90 % of it, of the derivative along its normal (grey
    levels per px, as the side scores of :func:`side_search`). 0 for a degenerate segment.

    Args:
        gx, gy: ``(H, W) float32`` derivatives (see :func:`gradients`).
        a, b: ``(2,)`` end points (px, same frame as ``gx``).
        samples: probe points.
    """
    return float(abs(segment_derivatives(gx, gy, a, b, samples).mean()))


def segment_derivatives(gx: np.ndarray, gy: np.ndarray, a: np.ndarray, b: np.ndarray,
                        samples: int = 16) -> np.ndarray:
    """The derivatives along the normal of the segment ``a`` -> ``b`` (px) at ``samples`` points
    between 10 % and 90 % of it: ``(samples,) float64`` grey levels per px (all 0 for a
    degenerate segment). ``gx``, ``gy``: ``(H, W) float32`` (:func:`gradients`)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = b - a
    length = float(np.hypot(*d))
    if length < 1e-9:
        return np.zeros(samples)
    n = np.array([-d[1], d[0]]) / length
    t = np.linspace(0.1, 0.9, samples)
    return _normal_derivative(gx, gy, a[None, :] + t[:, None] * d[None, :], n)


@lru_cache(maxsize=32)
def _line_samples(n_offs: int, samples: int) -> np.ndarray:
    """For :func:`side_search`: ``(S, A, B) int64`` index into a side's ``(S * O)`` flattened
    derivative samples (sample ``s`` at offset ``o`` is ``s * O + o``) of the candidate line
    from offset ``a`` at ``p`` to offset ``b`` at ``r``, at sample ``s`` (the nearest offset at
    ``t_s``); ``O = A = B = n_offs``, ``S = samples``. Read-only (cached)."""
    t = np.linspace(0.1, 0.9, samples)
    ia = np.arange(n_offs)
    idx = np.rint(ia[None, :, None] * (1 - t)[:, None, None]
                  + ia[None, None, :] * t[:, None, None]).astype(np.int64)  # (S, A, B)
    idx += (np.arange(samples) * n_offs)[:, None, None]
    idx.flags.writeable = False
    return idx


def _candidate_scores(dn: np.ndarray, samples: int, n_offs: int) -> np.ndarray:
    """``(4, A, B) float64`` scores of :func:`side_search`'s candidate lines: the absolute mean
    over the ``samples`` points of each line of ``dn`` ``(4, S, O) float64`` (derivatives along
    the side's normal at sample ``s`` and offset ``o``).

    The samples are gathered and added one ``s`` at a time, ``(A, B, 4)`` each, in order ``s =
    0 .. S - 1``, then divided by ``S``: the very additions (and so the very bits) of NumPy's
    ``mean`` over the ``S`` axis of the ``(4, A, B, S)`` gather it replaces (that gather is laid
    out ``(A, B, S, 4)`` in memory, so ``mean`` adds its ``S`` slices one after another),
    without materialising the ``4 A B S`` samples (issue 40: 7.6 -> 1.5 ms of CPU per 2 MP card
    image).
    """
    idx = _line_samples(n_offs, samples)
    flat = np.ascontiguousarray(dn.reshape(4, -1).T)  # (S * O, 4)
    acc = np.take(flat, idx[0], axis=0)  # (A, B, 4)
    tmp = np.empty_like(acc)
    for s in range(1, samples):
        np.take(flat, idx[s], axis=0, out=tmp)
        acc += tmp
    acc /= samples
    return np.abs(np.ascontiguousarray(acc.transpose(2, 0, 1)))


def side_search(gx: np.ndarray, gy: np.ndarray, quad: np.ndarray, reach_in: float,
                reach_out: float, step: float = 1.0, samples: int = 40,
                prior: float = 0.25, outermost: float | None = None,
                ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Move each side of ``quad`` to the straight edge that best explains the image gradient.

    For each side (endpoints ``p``, ``q``, outward normal ``n``) candidate lines are the
    segments ``p + dp*n`` -> ``q + dq*n`` with ``dp, dq`` in ``[-reach_in, reach_out]`` (px,
    ``step`` apart). A candidate's score is the absolute mean, over ``samples`` points between
    10 % and 90 % of the side, of the directional derivative along ``n``: a card edge has one
    polarity along its whole length, texture does not. Scores are multiplied by
    ``1 - prior * max(|dp|, |dq|) / reach`` so that, between equal edges, the nearer wins.

    Args:
        gx, gy: ``(H, W) float32`` derivatives (see :func:`gradients`).
        quad: ``(4, 2)`` TL, TR, BR, BL (px, same frame as ``gx``).
        reach_in / reach_out: search extent inwards / outwards (px).
        step: candidate spacing (px).
        samples: probe points per side.
        prior: strength of the preference for small moves, in [0, 1).
        outermost: when set (a share in (0, 1]), pick instead the most outward candidate whose
            score is a local maximum and at least this share of the best one (saliency tends to
            miss a card's dark or coloured border bands, not to add background).

    Returns:
        ``(quad, scores, lines)``: the new ``(4, 2)`` quad (the input when adjacent sides end
        up parallel or the result is not convex), ``(4,)`` side scores in grey levels per px
        and the 4 side lines (top, right, bottom, left).
    """
    q = np.asarray(quad, np.float64)
    centre = q.mean(axis=0)
    t = np.linspace(0.1, 0.9, samples)
    offs = np.arange(-reach_in, reach_out + step, step)
    d = q[_NEXT] - q  # (4, 2) sides
    n = (np.stack([-d[:, 1], d[:, 0]], axis=1)
         / np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-9)[:, None])
    n = n * np.where((((q + q[_NEXT]) / 2 - centre) * n).sum(axis=1) < 0, -1.0, 1.0)[:, None]
    base = q[:, None, :] + t[None, :, None] * d[:, None, :]  # (4, S, 2)
    pts = base[:, :, None, :] + offs[None, None, :, None] * n[:, None, None, :]  # (4, S, O, 2)
    mx, my = pts[..., 0].astype(np.float32), pts[..., 1].astype(np.float32)
    flat = (mx.reshape(4 * samples, -1), my.reshape(4 * samples, -1))
    dn = (cv2.remap(gx, *flat, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT).reshape(mx.shape)
          * n[:, 0, None, None]
          + cv2.remap(gy, *flat, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT).reshape(mx.shape)
          * n[:, 1, None, None])  # (4, S, O), float64 as in _normal_derivative
    sc_all = _candidate_scores(dn, samples, len(offs))  # (4, A, B)
    reach = max(reach_in, reach_out, 1e-9)
    pen = 1 - prior * np.maximum(np.abs(offs)[:, None], np.abs(offs)[None, :]) / reach
    reach_of = (offs[:, None] + offs[None, :]) / 2.0
    lines, scores = [], np.zeros(4)
    for i in range(4):
        sc = sc_all[i]
        if outermost is None:
            a, b = np.unravel_index(int(np.argmax(sc * pen)), sc.shape)
        else:
            # local maxima only (not the flanks of one edge), then the most outward strong one
            # compared in float32, the dilation's type: a float64 maximum above its float32
            # rounding would not count as a peak
            sc32 = sc.astype(np.float32)
            peak = sc32 >= cv2.dilate(sc32, np.ones((5, 5), np.uint8))
            ok = peak & (sc >= outermost * sc.max())
            a, b = np.unravel_index(int(np.argmax(np.where(ok, reach_of, -np.inf))), sc.shape)
        scores[i] = sc[a, b]
        lines.append(line_through(q[i] + offs[a] * n[i], q[(i + 1) % 4] + offs[b] * n[i]))
    out = quad_from_lines(lines)
    if out is None or not is_convex(out):
        return q, scores, lines
    return out, scores, lines


def sub_quads(mask: np.ndarray, max_edges: int = 7, min_area: float = 16.0,
              contours: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Quads formed by 4 long straight runs of a mask's outline (a card merged with another
    salient object keeps most of its 4 straight sides on the outline).

    The largest component's outer contour is simplified (``approxPolyDP``, 1 % of the
    perimeter); of its ``max_edges`` longest edges every 4 taken in contour order are extended to
    lines and intersected. Kept: convex quads of area >= ``min_area`` whose 4 runs each cover at
    least 30 % of the side they lie on.

    Args:
        mask: ``(H, W) uint8``, non-zero = salient.
        max_edges: longest edges considered (C(7, 4) = 35 quads at most).
        min_area: smallest quad area (px^2).
        contours: :func:`outer_contours` of ``mask`` when the caller already has them.

    Returns:
        ``(4, 2) float64`` quads TL, TR, BR, BL in mask px.
    """
    from itertools import combinations

    if contours is None:
        contours = outer_contours(mask)
    if not contours:
        return []
    cnt = contours[0]
    poly = cv2.approxPolyDP(cnt, 0.01 * cv2.arcLength(cnt, True), True).reshape(-1, 2)
    n = len(poly)
    if n < 5 or n > 40:  # 4 vertices: the component quad already covers it
        return []
    poly = poly.astype(np.float64)
    lengths = np.hypot(*(np.roll(poly, -1, axis=0) - poly).T)
    top = sorted(np.argsort(-lengths)[:max_edges].tolist())
    out = []
    for combo in combinations(top, 4):
        lines = [line_through(poly[i], poly[(i + 1) % n]) for i in combo]
        corners = [intersect(lines[k - 1], lines[k]) for k in range(4)]
        if any(c is None for c in corners):
            continue
        q = np.array(corners)
        if not is_convex(q) or polygon_area(q) < min_area:
            continue
        sides = side_lengths(q)  # side k runs from corner k to corner k+1 on line k
        if np.any(lengths[list(combo)] < 0.3 * sides):
            continue
        out.append(order_corners(q))
    return out
