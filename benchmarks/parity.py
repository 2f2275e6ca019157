"""Parity of two processor set-ups on the same uploads: the GPU path against the CPU path.

Bounds (issue 29): card quads within 1 px, rectified card mean absolute difference <= 2/255,
ID-photo alpha (the person matte) mean difference <= 1/255. Used by the unit tests (the graph
backend on the CPU provider against :class:`processors.pixels.CpuPixels`), by the GPU parity
test and by ``benchmarks/gpu.sh`` (``python -m benchmarks.gpu_sweep --parity``). Test and
benchmark code: it lives here, not in the ``processors`` package it measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from processors.base import Item, Outcome
from processors.pixels import Decoded

__all__ = ["ALPHA_MAD", "QUAD_PX", "RECT_MAD", "card_parity", "idphoto_parity",
           "synthetic_uploads"]

QUAD_PX = 1.0
"""Largest corner distance (upload px) between the two paths' quads."""
RECT_MAD = 2 / 255
"""Largest mean absolute difference of a rectified card (0..1 scale)."""
ALPHA_MAD = 1 / 255
"""Largest mean absolute difference of an ID photo's person matte (0..1 scale)."""


def synthetic_uploads(task: str, n: int, size: tuple[int, int] = (1600, 1200), seed: int = 29,
                      quality: int = 90) -> list[bytes]:
    """``n`` phone-like JPEG uploads of ``size`` = ``(w, h)`` px, made by the project's own code.

    ``card``: scenes of :func:`processors.card.training.synth.sample` (a card on a background,
    75 % ID-1, every tenth without a card). ``id_photo``: scikit-image's public-domain
    ``astronaut`` portrait (:func:`benchmarks.portraits.astronaut_bgr`) scaled to 55-75 % of the
    frame's height on a :func:`~processors.card.training.synth.background`, at a random place.
    Deterministic for a seed.

    Raises:
        ValueError: an unknown ``task``.
    """
    import cv2

    from benchmarks.portraits import astronaut_bgr
    from processors.card.training.synth import background, sample

    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        if task == "card":
            img = sample(rng, negative=k % 10 == 9, size=size).image
        elif task == "id_photo":
            w, h = size
            img = background(rng, w, h)
            side = int(h * rng.uniform(0.55, 0.75))
            face = cv2.resize(astronaut_bgr(), (side, side), interpolation=cv2.INTER_AREA)
            x0, y0 = int(rng.integers(0, w - side + 1)), h - side
            img[y0:, x0:x0 + side] = face
        else:
            raise ValueError(f"task must be card or id_photo, not {task!r}")
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        out.append(buf.tobytes())
    return out


def _jpeg_pixels(out: Outcome) -> np.ndarray | None:
    import cv2

    if not out.artifacts:
        return None
    return cv2.imdecode(np.frombuffer(out.artifacts[0].data, np.uint8), cv2.IMREAD_COLOR)


class _Jitter:
    """A host pixel backend whose model input moves by one level of 255 on 12 % of its values
    (what two decoders and two resize implementations differ by): probes how stable the
    reference path itself is on an upload."""

    def __init__(self, inner: Any, seed: int) -> None:
        self.inner = inner
        self.rng = np.random.default_rng(seed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def model_input(self, images: Sequence[Decoded], side: int) -> np.ndarray:
        x = np.asarray(self.inner.model_input(images, side))
        step = 1 / 255 / np.asarray([0.229, 0.224, 0.225], np.float32)[None, :, None, None]
        flip = (self.rng.random(x.shape) < 0.12) * self.rng.choice([-1.0, 1.0], x.shape)
        return (x + flip * step).astype(np.float32)


def _unstable(ref: Any, items: Sequence[Item], seeds: int = 3) -> list[bool]:
    """Per item: does the reference path's own quad move by more than :data:`QUAD_PX` when its
    model input moves by one level (:class:`_Jitter`, ``seeds`` draws)?"""
    decoded = ref.pixels.decode([it.image for it in items], None)
    base, _, _ = ref.locate(decoded)
    inner, moved = ref.pixels, [False] * len(items)
    try:
        for seed in range(seeds):
            ref.pixels = _Jitter(inner, seed)
            dets, _, _ = ref.locate(decoded)
            for k, (a, b) in enumerate(zip(base, dets, strict=True)):
                if a.quad is not None and b.quad is not None:
                    moved[k] |= float(np.hypot(*(a.quad - b.quad).T).max()) > QUAD_PX
    finally:
        ref.pixels = inner
    return moved


def card_parity(items: Sequence[Item], ref: Any, test: Any) -> dict[str, Any]:
    """Run two card processors on ``items`` and compare.

    An item whose quads differ by more than :data:`QUAD_PX` is checked for stability: when the
    reference path's own quad moves by more than that under a one-level change of its model
    input (:class:`_Jitter`), the item is ``unstable`` (the geometry, not the backend) and left
    out of the bounds, but listed.

    Args:
        items: uploads (encoded).
        ref: the reference :class:`processors.card.processor.CardProcessor` (CPU path, host
            pixels).
        test: the processor under test.

    Returns:
        ``n``, ``same_status`` (items with equal status and reasons), ``accepted`` (both),
        ``quad_max_px`` / ``rect_mad_max`` over the stable items (largest corner distance in
        upload px; largest mean absolute difference of the two ``rectified.jpg``, 0..1),
        ``quad_max_px_all`` / ``rect_mad_max_all`` over every item, ``quad_p50_px``,
        ``unstable`` (upload ids) and ``ok`` (statuses equal, stable items within the bounds).
    """
    a, b = ref.process_batch(items), test.process_batch(items)
    quad = np.zeros(len(items))
    mad = np.zeros(len(items))
    same = 0
    for k, (oa, ob) in enumerate(zip(a, b, strict=True)):
        same += (oa.status, oa.reasons) == (ob.status, ob.reasons)
        qa, qb = oa.payload.get("quad"), ob.payload.get("quad")
        if qa is not None and qb is not None:
            quad[k] = float(np.hypot(*(np.subtract(qa, qb)).T).max())
        pa, pb = _jpeg_pixels(oa), _jpeg_pixels(ob)
        if pa is not None and pb is not None and pa.shape == pb.shape:
            mad[k] = float(np.abs(pa.astype(np.int16) - pb.astype(np.int16)).mean()) / 255
    over = [k for k in range(len(items)) if quad[k] > QUAD_PX or mad[k] > RECT_MAD]
    shaky = dict(zip(over, _unstable(ref, [items[k] for k in over]), strict=True)) if over else {}
    stable = [k for k in range(len(items)) if not shaky.get(k, False)]
    q = float(quad[stable].max()) if stable else 0.0
    r = float(mad[stable].max()) if stable else 0.0
    return {"n": len(items), "same_status": same,
            "accepted": sum(o.status == "accepted" for o in a),
            "quad_max_px": round(q, 3), "rect_mad_max": round(r, 5),
            "quad_max_px_all": round(float(quad.max()), 3),
            "rect_mad_max_all": round(float(mad.max()), 5),
            "quad_p50_px": round(float(np.median(quad)), 3),
            "unstable": [items[k].upload_id for k, v in shaky.items() if v],
            "ok": same == len(items) and q <= QUAD_PX and r <= RECT_MAD}


def idphoto_parity(items: Sequence[Item], ref: Any, test: Any) -> dict[str, Any]:
    """Compare two ID-photo processors on ``items``: their person mattes (the processor's own
    ``person_mattes`` on each backend's full-resolution decode, as full-size masks) and their
    outcomes.

    Returns:
        ``n``, ``same_status``, ``alpha_mad_max`` (largest mean absolute matte difference, 0..1),
        ``photo_mad_max`` (largest mean absolute difference of the two ``photo.jpg``, 0..1) and
        ``ok`` (statuses equal, alpha within :data:`ALPHA_MAD`).
    """

    def mattes(proc: Any) -> list[np.ndarray]:
        decoded = proc.pixels.decode([it.image for it in items], None)
        if not all(isinstance(d, Decoded) for d in decoded):
            raise ValueError("parity inputs must decode")
        _, found = proc.person_mattes(items, decoded)
        return [m.full() for m in found]

    alpha = max(float(np.abs(ma.astype(np.int16) - mb.astype(np.int16)).mean()) / 255
                for ma, mb in zip(mattes(ref), mattes(test), strict=True))
    a, b = ref.process_batch(items), test.process_batch(items)
    same = sum((oa.status, oa.reasons) == (ob.status, ob.reasons)
               for oa, ob in zip(a, b, strict=True))
    photos = [float(np.abs(pa.astype(np.int16) - pb.astype(np.int16)).mean()) / 255
              for oa, ob in zip(a, b, strict=True)
              if (pa := _jpeg_pixels(oa)) is not None and (pb := _jpeg_pixels(ob)) is not None
              and pa.shape == pb.shape]
    return {"n": len(items), "same_status": same, "alpha_mad_max": round(alpha, 5),
            "photo_mad_max": round(max(photos), 5) if photos else 0.0,
            "ok": same == len(items) and alpha <= ALPHA_MAD}
