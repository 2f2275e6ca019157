"""Resampling as matrices: OpenCV's ``INTER_AREA`` and Pillow's ``LANCZOS`` written as the
``(n_out, n_in)`` weight matrix of each axis, so a resize is two matrix products
(``R_y @ X @ R_x.T``) that an ONNX graph runs on any execution provider.

Both filters are separable: resizing an ``(H, W)`` image to ``(h, w)`` is ``R_y (h, H)``
applied to the columns and ``R_x (w, W)`` to the rows. The matrices reproduce the libraries'
coefficients (float64 here; the graphs use float32):

- :func:`area_weights`: OpenCV 4.x ``cv::resize(..., INTER_AREA)`` (``imgproc/src/resize.cpp``,
  ``computeResizeAreaTab`` when the image shrinks on both axes; otherwise OpenCV interpolates
  linearly with the ``INTER_AREA`` coefficients ``fx = (dx + 1) - (sx + 1) / scale``, taken
  modulo 1). OpenCV accumulates in float and rounds once (``saturate_cast<uchar>``), so the
  graph rounds once after both products.
- :func:`linear_weights`: OpenCV ``INTER_LINEAR`` (half-pixel centres, edge samples clamped).
- :func:`shrink_plan`: the inputs of :func:`processors.gpu.graphs.shrink_graph`, which runs
  :func:`processors.pixels.shrink` (the CPU backend's model-input and working-copy resize) stage
  by stage: ``k`` 2 x 2 area halvings, then ``INTER_LINEAR`` (:func:`linear_weights`) to the
  target, rounded after each stage. OpenCV's bilinear uint8 path (fixed-point coefficients, and
  Intel IPP in the opencv-python wheels) rounds differently from float: about 12 % of pixels
  differ by one level.
- :func:`lanczos_weights`: Pillow's ``Image.resize(..., Resampling.LANCZOS)``
  (``libImaging/Resample.c``, ``precompute_coeffs``: support 3 scaled by the reduction factor,
  ``sinc(x) * sinc(x / 3)``, each row normalised to sum 1). Pillow rounds to uint8 after the
  horizontal pass and again after the vertical one; its coefficients are fixed point (22
  fractional bits), ours float, so a pixel can differ by one level. Pillow 13 runs the vertical
  pass first for some sizes (e.g. 450 x 380 -> 320 x 320; its rule was not established); the
  graphs always run the horizontal one first, and there the two roundings differ: 0.2 levels on
  average, 3 at most (measured on blurred noise).

Checked against OpenCV 4.14 and Pillow 13 in ``tests/unit/test_gpu_graphs.py``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["area_shrinks", "area_weights", "lanczos_weights", "linear_weights", "resize_weights",
           "shrink_halvings", "shrink_plan"]


def _check_lengths(n_in: int, n_out: int) -> None:
    if n_in < 1 or n_out < 1:
        raise ValueError(f"lengths must be >= 1, got {n_in} -> {n_out}")


def area_shrinks(src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> bool:
    """True when OpenCV's ``INTER_AREA`` takes its area-averaging path: the image shrinks (or
    keeps its size) on both axes. Otherwise both axes are interpolated linearly."""
    return src_hw[0] >= dst_hw[0] and src_hw[1] >= dst_hw[1]


@lru_cache(maxsize=256)
def _area_weights(n_in: int, n_out: int, shrink: bool, scale: float) -> np.ndarray:
    w = np.zeros((n_out, n_in), np.float64)
    if shrink:
        for dx in range(n_out):
            fsx1 = dx * scale
            fsx2 = fsx1 + scale
            cell = min(scale, n_in - fsx1)
            sx1, sx2 = math.ceil(fsx1), math.floor(fsx2)
            sx2 = min(sx2, n_in - 1)
            sx1 = min(sx1, sx2)
            if sx1 - fsx1 > 1e-3:
                w[dx, sx1 - 1] = np.float32((sx1 - fsx1) / cell)
            w[dx, sx1:sx2] = np.float32(1.0 / cell)
            if fsx2 - sx2 > 1e-3:
                w[dx, sx2] = np.float32(min(min(fsx2 - sx2, 1.0), cell) / cell)
    else:
        inv = 1.0 / scale
        taps = []
        for dx in range(n_out):
            sx = math.floor(dx * scale)
            fx = (dx + 1) - (sx + 1) * inv
            taps.append((sx, 0.0 if fx <= 0 else fx - math.floor(fx)))
        _two_taps(w, taps)
    w.setflags(write=False)
    return w


def _two_taps(w: np.ndarray, taps: list[tuple[int, float]]) -> None:
    """Fill row ``dx`` of ``w`` ``(n_out, n_in)`` with ``1 - fx`` at ``sx`` and ``fx`` at
    ``sx + 1``, clamped as OpenCV clamps its linear taps (a tap off either edge becomes the edge
    pixel with weight 1)."""
    n_in = w.shape[1]
    for dx, (sx, fx) in enumerate(taps):
        if sx < 0:
            sx, fx = 0, 0.0
        if sx >= n_in - 1:
            sx, fx = n_in - 1, 0.0
        w[dx, sx] += 1.0 - fx
        if fx:
            w[dx, sx + 1] += fx


def area_weights(n_in: int, n_out: int, shrink: bool | None = None,
                 scale: float | None = None) -> np.ndarray:
    """OpenCV ``INTER_AREA`` weights of one axis.

    Args:
        n_in: source length (px), >= 1.
        n_out: destination length (px), >= 1.
        shrink: which of OpenCV's two paths (see the module doc): None means ``n_in >= n_out``,
            which is right when both axes shrink or both grow; pass :func:`area_shrinks` of the
            whole image when one axis shrinks and the other grows.
        scale: source px per destination px; None means ``n_in / n_out``. OpenCV uses the
            factor it is given (``cv2.resize(img, None, fx=0.5, fy=0.5)`` has scale 2 even for an
            odd length, whose last output pixel then averages one source column).

    Returns:
        ``(n_out, n_in) float64`` read-only matrix; each row sums to 1 (cached per arguments).

    Raises:
        ValueError: a length below 1.
    """
    _check_lengths(n_in, n_out)
    return _area_weights(n_in, n_out, n_in >= n_out if shrink is None else shrink,
                         n_in / n_out if scale is None else float(scale))


@lru_cache(maxsize=256)
def linear_weights(n_in: int, n_out: int) -> np.ndarray:
    """OpenCV ``INTER_LINEAR`` weights of one axis: output ``x`` samples source
    ``(x + 0.5) * n_in / n_out - 0.5``, the two neighbours weighted linearly, clamped at the
    edges. Returns ``(n_out, n_in) float64`` read-only; rows sum to 1.

    Raises:
        ValueError: a length below 1.
    """
    _check_lengths(n_in, n_out)
    w = np.zeros((n_out, n_in), np.float64)
    scale = n_in / n_out
    centres = [(dx + 0.5) * scale - 0.5 for dx in range(n_out)]
    _two_taps(w, [(math.floor(c), c - math.floor(c)) for c in centres])
    w.setflags(write=False)
    return w


def shrink_halvings(src_wh: tuple[int, int], dst_wh: tuple[int, int]) -> list[tuple[int, int]]:
    """The sizes ``(w, h)`` :func:`processors.pixels.shrink` passes through: it halves (2 x 2
    area, OpenCV's ``fx = fy = 0.5``, each side ``round(side / 2)``) while both sides stay at or
    above twice the target. Returns the sizes after each halving (empty when none)."""
    (w, h), out = src_wh, []
    while w >= 2 * dst_wh[0] and h >= 2 * dst_wh[1] and (w, h) != tuple(dst_wh):
        w, h = round(w * 0.5), round(h * 0.5)  # OpenCV's cvRound: half to even, as Python's
        out.append((w, h))
    return out


def shrink_plan(src_wh: tuple[int, int], dst_wh: tuple[int, int]
                ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """The inputs of :func:`processors.gpu.graphs.shrink_graph` for a ``src_wh`` -> ``dst_wh``
    (``(w, h)`` px) :func:`processors.pixels.shrink`.

    Returns:
        ``(crops, final)``: ``crops`` ``(k, 2) int64``, the rows and columns each of the ``k``
        halvings reads (``min(side, 2 * half)``); ``final`` the ``(ry (h, H'), rxt (W', w))``
        float32 ``INTER_LINEAR`` weights from the halved size, or None when the halvings land
        on ``dst_wh``.
    """
    sizes = shrink_halvings(src_wh, dst_wh)
    crops, (w, h) = [], src_wh
    for hw, hh in sizes:
        crops.append((min(h, 2 * hh), min(w, 2 * hw)))
        w, h = hw, hh
    c = np.asarray(crops, np.int64).reshape(-1, 2)
    if (w, h) == tuple(dst_wh):
        return c, None
    ry = np.ascontiguousarray(linear_weights(h, dst_wh[1]), np.float32)
    rxt = np.ascontiguousarray(linear_weights(w, dst_wh[0]).T, np.float32)
    return c, (ry, rxt)


def _lanczos(x: np.ndarray) -> np.ndarray:
    """Pillow's ``lanczos_filter``: ``sinc(x) * sinc(x / 3)`` on ``|x| < 3``, else 0."""
    return np.where(np.abs(x) < 3.0, np.sinc(x) * np.sinc(x / 3.0), 0.0)


@lru_cache(maxsize=256)
def lanczos_weights(n_in: int, n_out: int) -> np.ndarray:
    """Pillow ``LANCZOS`` weights of one axis (``precompute_coeffs`` of Pillow's Resample.c):
    ``(n_out, n_in) float64`` read-only, rows summing to 1, for lengths (px) >= 1.

    Raises:
        ValueError: a length below 1.
    """
    _check_lengths(n_in, n_out)
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    support = 3.0 * filterscale
    w = np.zeros((n_out, n_in), np.float64)
    for xx in range(n_out):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), n_in)
        x = np.arange(xmin, xmax, dtype=np.float64)
        k = _lanczos((x - center + 0.5) / filterscale)
        total = k.sum()
        w[xx, xmin:xmax] = k / total if total != 0.0 else k
    w.setflags(write=False)
    return w


def resize_weights(kind: str, src_hw: tuple[int, int], dst_hw: tuple[int, int],
                   scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The two inputs ``ry`` and ``rxt`` of the resize graphs (:mod:`processors.gpu.graphs`).

    Args:
        kind: ``area`` (OpenCV ``INTER_AREA``) or ``lanczos`` (Pillow ``LANCZOS``).
        src_hw: source ``(height, width)`` px.
        dst_hw: destination ``(height, width)`` px.
        scale: ``area`` only: OpenCV's factor when it was given one (``fx = 1 / scale``).

    Returns:
        ``(ry (h, H) float32, rxt (W, w) float32)``, C-contiguous.

    Raises:
        ValueError: an unknown ``kind`` or a length below 1.
    """
    (H, W), (h, w) = src_hw, dst_hw
    if kind == "area":
        shrink = area_shrinks(src_hw, dst_hw)
        ry, rx = area_weights(H, h, shrink, scale), area_weights(W, w, shrink, scale)
    elif kind == "lanczos":
        ry, rx = lanczos_weights(H, h), lanczos_weights(W, w)
    else:
        raise ValueError(f"kind must be area or lanczos, not {kind!r}")
    return np.ascontiguousarray(ry, np.float32), np.ascontiguousarray(rx.T, np.float32)
