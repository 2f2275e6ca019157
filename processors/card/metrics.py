"""Card localisation metrics: polygon IoU (exact, convex clipping) and SmartDoc-style summaries.

The SmartDoc-2015 challenge (Burie et al., ICDAR 2015) scores a document localisation by the
Jaccard index (IoU) of the detected and ground-truth quadrilaterals; we report the mean IoU and
the share of images with IoU > 0.9.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def _area(poly: np.ndarray) -> float:
    if len(poly) < 3:
        return 0.0
    x, y = poly[:, 0], poly[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2.0)


def _ccw(poly: np.ndarray) -> np.ndarray:
    """Counter-clockwise (in math orientation, i.e. positive signed area) copy of ``poly``."""
    x, y = poly[:, 0], poly[:, 1]
    signed = np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))
    return poly if signed >= 0 else poly[::-1]


def _clip(subject: np.ndarray, clipper: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman: ``subject`` polygon clipped by the convex ``clipper`` (both CCW)."""
    out = [tuple(p) for p in subject]
    n = len(clipper)
    for i in range(n):
        a, b = clipper[i], clipper[(i + 1) % n]
        inp, out = out, []
        if not inp:
            break

        def side(p, a=a, b=b):
            return (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])

        for j in range(len(inp)):
            cur, prev = inp[j], inp[j - 1]
            sc, sp = side(cur), side(prev)
            if sc >= 0:
                if sp < 0:
                    t = sp / (sp - sc)
                    out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
                out.append(cur)
            elif sp >= 0:
                t = sp / (sp - sc)
                out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
    return np.array(out, dtype=np.float64).reshape(-1, 2)


def quad_iou(a: Iterable, b: Iterable) -> float:
    """Intersection over union of two convex polygons.

    Exact (Sutherland-Hodgman clipping, shoelace areas), no rasterisation. A non-convex quad is
    replaced by its convex hull (a detector's quads are convex; ground truth is).

    Args:
        a: ``(K, 2)`` vertices in px, any order around the polygon (CW or CCW), K >= 3.
        b: ``(M, 2)`` vertices in px.

    Returns:
        IoU in [0, 1]; 0.0 when either polygon is degenerate.
    """
    inter, aa, ab = intersection_areas(a, b)
    if aa <= 0 or ab <= 0:
        return 0.0
    union = aa + ab - inter
    return float(inter / union) if union > 0 else 0.0


def intersection_areas(a: Iterable, b: Iterable) -> tuple[float, float, float]:
    """``(intersection, area of a, area of b)`` in px² of two convex polygons (``(K, 2)`` px;
    a non-convex one is replaced by its convex hull), by the same exact clipping as
    :func:`quad_iou`."""
    import cv2

    pa = np.asarray(a, dtype=np.float64).reshape(-1, 2)
    pb = np.asarray(b, dtype=np.float64).reshape(-1, 2)
    pa = _ccw(cv2.convexHull(pa.astype(np.float32)).reshape(-1, 2).astype(np.float64))
    pb = _ccw(cv2.convexHull(pb.astype(np.float32)).reshape(-1, 2).astype(np.float64))
    aa, ab = _area(pa), _area(pb)
    if aa <= 0 or ab <= 0:
        return 0.0, float(aa), float(ab)
    return float(_area(_clip(pa, pb))), float(aa), float(ab)


def summarise(ious: Iterable[float], threshold: float = 0.9) -> dict[str, float]:
    """``{"n", "mean_iou", "share_above"}`` of a list of IoUs (share with IoU > ``threshold``)."""
    v = np.asarray(list(ious), dtype=np.float64)
    if v.size == 0:
        return {"n": 0, "mean_iou": float("nan"), "share_above": float("nan")}
    return {"n": int(v.size), "mean_iou": float(v.mean()), "share_above": float((v > threshold).mean())}
