"""Card localisation metrics: polygon IoU (exact, convex clipping), SmartDoc-style summaries,
and the scoring of a labelled set (``cardstream eval card``).

The SmartDoc-2015 challenge (Burie et al., ICDAR 2015) scores a document localisation by the
Jaccard index (IoU) of the detected and ground-truth quadrilaterals; we report the mean IoU and
the share of images with IoU > 0.9.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from processors.errors import EvalSetError

if TYPE_CHECKING:
    from processors.base import Processor
    from processors.decode import DecodeSettings


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
    return {"n": int(v.size), "mean_iou": float(v.mean()),
            "share_above": float((v > threshold).mean())}


def scored_cases(set_dir: Path) -> list[dict[str, Any]]:
    """The cases of a labelled set that can be scored, in manifest order: those with an
    expected ``quad_approx`` (4 ``[x, y]`` points, TL, TR, BR, BL) or the expected reason
    ``NO_CARD``.

    Args:
        set_dir: a folder with images and ``manifest.json`` (``{"images": [{"file", "expect":
            {"quad_approx" | "reason", "kind"?}}]}``, the ``shared/cases`` format, as
            ``python -m processors.card.training.synth`` writes it).

    Raises:
        EvalSetError: no readable manifest, no case to score, or a ``quad_approx`` that is not
            4 points.
    """
    where = set_dir / "manifest.json"
    try:
        images = json.loads(where.read_text())["images"]
        cases = [c for c in images
                 if "quad_approx" in c["expect"] or c["expect"].get("reason") == "NO_CARD"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EvalSetError(
            f"{where} is missing or not a manifest ({type(e).__name__}): expected "
            '{"images": [{"file", "expect": {"quad_approx" | "reason"}}]}, as written by '
            "`python -m processors.card.training.synth`") from e
    if not cases:
        raise EvalSetError(f"{where} has no case to score (an expected quad_approx or reason "
                           "NO_CARD)")
    for c in cases:
        q = c["expect"].get("quad_approx")
        if q is not None and np.asarray(q, dtype=object).shape != (4, 2):
            raise EvalSetError(f"{c['file']}: quad_approx must be 4 [x, y] points "
                               "(TL, TR, BR, BL)")
    return cases


def score_set(proc: Processor, set_dir: Path, cases: Iterable[dict[str, Any]],
              decode: DecodeSettings, batch: int
              ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Run the card processor ``proc`` on a labelled set and score it, SmartDoc-2015 style.

    Cases with ``quad_approx`` are scored by :func:`quad_iou` (0 when no quad is returned),
    per ``kind`` (``unlabelled`` when the case names none); cases whose expected reason is
    ``NO_CARD`` (``negative``) count as correct when the result carries NO_CARD. The IoU does
    not look at the verdict: a card found but rejected (BLURRY, GLARE, PARTIAL_CARD...) keeps
    its IoU, and ``accepted_share`` shows how many were let through. Files that fail safe
    decoding are skipped.

    Args:
        proc: a card processor.
        set_dir: the set's folder.
        cases: its cases to score (:func:`scored_cases`).
        decode: the limits files are probed with.
        batch: items per ``process_batch`` call.

    Returns:
        ``(summary, rows)``: per kind and ``all`` ``{"n", "mean_iou", "share_above"}``
        (:func:`summarise`) with ``no_card`` (cards judged NO_CARD) and ``accepted_share``;
        ``negatives`` ``{"n", "no_card_share"}``; and per scored case ``{"file", "kind", "iou"
        (None for a negative), "status", "reasons", "confidence"}``.

    Raises:
        EvalSetError: a listed file cannot be read.
        ProcessorError: a broken model call.
    """
    from processors.base import Item, process_in_buckets
    from processors.decode import probe_image
    from processors.errors import DecodeError

    loaded = []
    for c in cases:
        try:
            img = probe_image((set_dir / c["file"]).read_bytes(), decode)
        except DecodeError:
            continue
        except OSError as e:
            raise EvalSetError(f"the manifest lists {c['file']}, which cannot be read "
                               f"({type(e).__name__})") from e
        loaded.append((c, Item(upload_id=Path(c["file"]).stem, image=img)))
    ious: dict[str, list[float]] = {}
    missed: dict[str, int] = {}
    accepted: dict[str, int] = {}
    neg_ok: list[bool] = []
    rows: list[dict[str, Any]] = []
    for (c, _), o in zip(loaded, process_in_buckets(proc, [it for _, it in loaded], batch),
                         strict=True):
        expect = c["expect"]
        reasons = [str(r) for r in o.reasons]
        v = None
        if "quad_approx" in expect:
            q = o.payload.get("quad")
            v = quad_iou(q, expect["quad_approx"]) if q else 0.0
            kind = expect.get("kind", "unlabelled")
            ious.setdefault(kind, []).append(v)
            missed[kind] = missed.get(kind, 0) + ("NO_CARD" in reasons)
            accepted[kind] = accepted.get(kind, 0) + (str(o.status) == "accepted")
        else:
            kind = "negative"
            neg_ok.append("NO_CARD" in reasons)
        rows.append({"file": c["file"], "kind": kind, "iou": v, "status": str(o.status),
                     "reasons": reasons, "confidence": o.payload.get("confidence")})
    summary: dict[str, dict[str, Any]] = {
        kind: {**summarise(v), "no_card": missed[kind], "accepted_share": accepted[kind] / len(v)}
        for kind, v in sorted(ious.items())}
    n_cards = sum(len(v) for v in ious.values())
    summary["all"] = {**summarise([x for v in ious.values() for x in v]),
                      "no_card": sum(missed.values()),
                      "accepted_share": (sum(accepted.values()) / n_cards if n_cards
                                         else float("nan"))}
    summary["negatives"] = {"n": len(neg_ok),
                            "no_card_share": sum(neg_ok) / len(neg_ok) if neg_ok else float("nan")}
    return summary, rows
