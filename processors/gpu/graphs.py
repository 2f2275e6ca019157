"""Pixel steps as small ONNX graphs, so the same step runs on ONNX Runtime's CPU and CUDA
execution providers (and is tested on the CPU where no GPU is at hand).

Three graphs, built with ``onnx.helper`` at opset :data:`OPSET` (ONNX 1.16+; ONNX Runtime 1.30-1.32
run them on both providers):

- :func:`prep_graph` — model input from uint8 pixels: ``(N, H, W, 3) uint8`` → separable resize
  (two MatMuls with the weight matrices of :mod:`processors.gpu.resample`) → round to 0..255 as
  the uint8 resize of the CPU path does → ``/ max`` per image → ImageNet mean/std → ``(N, 3, s, s)
  float32``: rembg's ``normalize`` and the card detector's ``preprocess``.
- :func:`resample_graph` — the same separable resize, uint8 in and out, any channel count
  (``INTER_AREA`` shrink before a warp, a matte scaled to its photo).
- :func:`warp_graph` — perspective warp by homographies: for each output pixel ``(u, v)`` the
  source point ``H @ (u, v, 1)`` is sampled with ``GridSample`` (``align_corners=1``: pixel
  centres at integer coordinates, as OpenCV's ``warpPerspective``/``warpAffine``; bilinear or
  bicubic with OpenCV's a = -0.75; ``border`` padding = ``BORDER_REPLICATE``, ``zeros`` =
  ``BORDER_CONSTANT`` 0).

Operators used and their ONNX Runtime CUDA kernels (checked in ONNX Runtime's sources,
``onnxruntime/core/providers/cuda``: ``GridSample`` is registered for the ONNX domain at opset
16-19 and 20, float only): Cast, Transpose, Gather, MatMul, Round, Clip, ReduceMax, Max, Div,
Sub, Mul, Add, Range, Unsqueeze, Expand, Concat, Reshape, Shape, Slice, GridSample. All inputs
are 4-D with a batch axis; a single image is bound as ``(1, H, W, C)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["OPSET", "copy_graph", "orient_graph", "prep_graph", "resample_graph", "sample_graph",
           "shrink_graph", "stack_graph", "warp_graph"]

OPSET = 17
"""ONNX opset of the graphs: GridSample-16, ReduceMax-13 with an ``axes`` attribute."""

_F, _U8, _I64 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT64


class _Builder:
    """Collects nodes and initialisers; names every intermediate uniquely."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, value: np.ndarray | float | int | Sequence[int], dtype=np.float32) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        self._n += 1
        out = f"t{self._n}_{op_type.lower()}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], out: str,
              output: onnx.ValueInfoProto) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Identity", [out], [output.name]))
        graph = helper.make_graph(self.nodes, name, inputs, [output], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="cardstream")
        model.ir_version = 8  # readable by ONNX Runtime >= 1.14
        onnx.checker.check_model(model)
        return model


def _round_u8(b: _Builder, x: str, half_up: bool = False) -> str:
    """Round (half to even, or half up as OpenCV's fixed-point paths) and clip to 0..255 (still
    float): what a uint8 result holds."""
    r = b.op("Floor", b.op("Add", x, b.const(0.5))) if half_up else b.op("Round", x)
    return b.op("Clip", r, b.const(0.0), b.const(255.0))


def _resize(b: _Builder, x: str, round_between: bool) -> str:
    """``(N, C, H, W)`` float → ``(N, C, h, w)`` float: horizontal pass ``x @ rxt`` first (as
    Pillow), then ``ry @ x``; with ``round_between`` the horizontal result is rounded to uint8
    values in between (Pillow's 8-bit path), else only the caller rounds (OpenCV's)."""
    x = b.op("MatMul", x, "rxt")
    if round_between:
        x = _round_u8(b, x)
    return b.op("MatMul", "ry", x)


def _resize_inputs(channels: int | str) -> list[onnx.ValueInfoProto]:
    return [
        helper.make_tensor_value_info("image", _U8, ["N", "H", "W", channels]),
        helper.make_tensor_value_info("ry", _F, ["h", "H"]),
        helper.make_tensor_value_info("rxt", _F, ["W", "w"]),
    ]


def prep_graph(side: int = 320, mean: Sequence[float] = (0.485, 0.456, 0.406),
               std: Sequence[float] = (0.229, 0.224, 0.225), swap_rb: bool = False,
               round_between: bool = False) -> onnx.ModelProto:
    """Model input from uint8 pixels (rembg's ``normalize``; the card detector's ``preprocess``).

    Graph inputs: ``image`` ``(N, H, W, 3) uint8``; ``ry`` ``(side, H) float32`` and ``rxt``
    ``(W, side) float32``, the row and (transposed) column weights of
    :func:`processors.gpu.resample.area_weights` or ``lanczos_weights``.
    Graph output: ``input`` ``(N, 3, side, side) float32``: the resized image rounded to 0..255,
    divided by its own maximum (at least 1e-6), minus ``mean``, over ``std``.

    Args:
        side: output side (px); u2netp's 320.
        mean, std: per-channel constants in the output channel order (ImageNet's RGB ones, the
            values rembg passes).
        swap_rb: reverse the channel order (BGR pixels in, RGB planes out).
        round_between: round after the horizontal pass too (Pillow's two-pass 8-bit resize).
    """
    b = _Builder()
    x = b.op("Transpose", b.op("Cast", "image", to=_F), perm=[0, 3, 1, 2])
    if swap_rb:
        x = b.op("Gather", x, b.const([2, 1, 0], np.int64), axis=1)
    x = _round_u8(b, _resize(b, x, round_between))
    peak = b.op("Max", b.op("ReduceMax", x, axes=[1, 2, 3], keepdims=1), b.const(1e-6))
    x = b.op("Div", x, peak)
    shape = (1, 3, 1, 1)
    x = b.op("Div", b.op("Sub", x, b.const(np.reshape(mean, shape))),
             b.const(np.reshape(std, shape)))
    out = helper.make_tensor_value_info("input", _F, ["N", 3, side, side])
    return b.model("cardstream_prep", _resize_inputs(3), x, out)


def shrink_graph(halvings: int, final: bool, grey: Sequence[float] | None = None,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 swap_rb: bool = False) -> onnx.ModelProto:
    """:func:`processors.pixels.shrink` stage by stage, rounded like OpenCV after each stage.

    Graph inputs: ``image`` ``(N, H, W, 3) uint8``; with ``halvings`` > 0, ``crops``
    ``(halvings, 2) int64``: the rows and columns each halving reads (``2 * round(side / 2)``
    capped at the side: OpenCV's ``fx = 0.5`` drops an odd last line when the half rounds down
    and averages it alone when it rounds up); with ``final``, ``ry`` ``(h, H') float32`` and
    ``rxt`` ``(W', w) float32``: the closing ``INTER_LINEAR`` (:func:`resample.linear_weights`).
    Each halving is a 2 x 2 ``AveragePool`` (``ceil_mode``, padding not counted) rounded half
    up as OpenCV's ``(a + b + c + d + 2) >> 2``; the bilinear stage is rounded half up too.

    Output: with ``mean``/``std``, ``input`` ``(N, 3, h, w) float32`` (``/ max`` then ImageNet
    normalisation, channels reversed with ``swap_rb``: the U²-Net input); with ``grey`` (applied
    first, rounded half up as ``COLOR_BGR2GRAY``), ``resized`` ``(N, h, w, 1) uint8``; else
    ``resized`` ``(N, h, w, 3) uint8``.
    """
    b = _Builder()
    x = b.op("Cast", "image", to=_F)
    channels: int | str = 3
    if grey is not None:
        x = _round_u8(b, b.op("MatMul", x, b.const(np.reshape(grey, (3, 1)))), half_up=True)
        channels = 1
    x = b.op("Transpose", x, perm=[0, 3, 1, 2])
    if swap_rb:
        x = b.op("Gather", x, b.const([2, 1, 0], np.int64), axis=1)
    inputs = [helper.make_tensor_value_info("image", _U8, ["N", "H", "W", 3])]
    if halvings:
        inputs.append(helper.make_tensor_value_info("crops", _I64, [halvings, 2]))
    for k in range(halvings):
        ends = b.op("Gather", "crops", b.const(k, np.int64), axis=0)
        x = b.op("Slice", x, b.const([0, 0], np.int64), ends, b.const([2, 3], np.int64))
        x = b.op("AveragePool", x, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                 count_include_pad=0)
        x = _round_u8(b, x, half_up=True)
    if final:
        x = _round_u8(b, b.op("MatMul", "ry", b.op("MatMul", x, "rxt")), half_up=True)
        inputs += [helper.make_tensor_value_info("ry", _F, ["h", "H2"]),
                   helper.make_tensor_value_info("rxt", _F, ["W2", "w"])]
    if mean is not None and std is not None:
        peak = b.op("Max", b.op("ReduceMax", x, axes=[1, 2, 3], keepdims=1), b.const(1e-6))
        shape = (1, 3, 1, 1)
        x = b.op("Div", b.op("Sub", b.op("Div", x, peak), b.const(np.reshape(mean, shape))),
                 b.const(np.reshape(std, shape)))
        out = helper.make_tensor_value_info("input", _F, ["N", 3, "h", "w"])
    else:
        x = b.op("Transpose", b.op("Cast", x, to=_U8), perm=[0, 2, 3, 1])
        out = helper.make_tensor_value_info("resized", _U8, ["N", "h", "w", channels])
    return b.model(f"cardstream_shrink{halvings}", inputs, x, out)


def resample_graph(channels: int = 3, round_between: bool = False,
                   grey: Sequence[float] | None = None) -> onnx.ModelProto:
    """Separable resize of uint8 pixels.

    Graph inputs: ``image`` ``(N, H, W, channels) uint8``, ``ry`` ``(h, H) float32``, ``rxt``
    ``(W, w) float32``. Graph output: ``resized`` ``(N, h, w, channels) uint8`` (rounded half to
    even, clipped), or ``(N, h, w, 1)`` with ``grey``.

    Args:
        channels: channel count (3 for colour, 1 for a matte).
        round_between: round after the horizontal pass too (Pillow's two-pass 8-bit resize).
        grey: per-channel weights (e.g. BT.601 in B, G, R order): the image is first turned grey
            and rounded to 0..255, as ``cv2.cvtColor(..., COLOR_BGR2GRAY)``, then resized.
    """
    b = _Builder()
    x = b.op("Cast", "image", to=_F)
    if grey is not None:
        x = _round_u8(b, b.op("MatMul", x, b.const(np.reshape(grey, (channels, 1)))))
    x = b.op("Transpose", x, perm=[0, 3, 1, 2])
    x = _round_u8(b, _resize(b, x, round_between))
    x = b.op("Transpose", b.op("Cast", x, to=_U8), perm=[0, 2, 3, 1])
    out = helper.make_tensor_value_info("resized", _U8,
                                        ["N", "h", "w", channels if grey is None else 1])
    return b.model("cardstream_resample", _resize_inputs(channels), x, out)


def sample_graph(weights: Sequence[float]) -> onnx.ModelProto:
    """Bilinear samples of a weighted channel sum (a grey level) at given points.

    Graph inputs: ``image`` ``(1, H, W, C) uint8``; ``points`` ``(P, 2) float32`` (x, y px,
    pixel centres at integers). Graph output: ``samples`` ``(P,) float32``: the image
    interpolated bilinearly at each point, coordinates clamped to the image (``border``),
    then ``sum_c weights[c] * value_c``, not rounded (:func:`processors.pixels.bilinear_grey`).

    Args:
        weights: ``C`` channel weights (:data:`processors.pixels.GREY_BGR`).
    """
    b = _Builder()
    shape = b.op("Cast", b.op("Shape", "image"), to=_F)  # 1, H, W, C
    size = b.op("Slice", shape, b.const([1], np.int64), b.const([3], np.int64))  # H, W
    wh = b.op("Gather", size, b.const([1, 0], np.int64), axis=0)  # W, H
    span = b.op("Max", b.op("Sub", wh, b.const(1.0)), b.const(1.0))
    grid = b.op("Sub", b.op("Div", b.op("Mul", "points", b.const(2.0)), span), b.const(1.0))
    grid = b.op("Reshape", grid, b.const([1, 1, -1, 2], np.int64))
    x = b.op("Transpose", b.op("Cast", "image", to=_F), perm=[0, 3, 1, 2])
    x = b.op("GridSample", x, grid, mode="bilinear", padding_mode="border", align_corners=1)
    x = b.op("Reshape", x, b.const([len(weights), -1], np.int64))  # (C, P)
    x = b.op("Reshape", b.op("MatMul", b.const(np.reshape(weights, (1, -1))), x),
             b.const([-1], np.int64))
    inputs = [helper.make_tensor_value_info("image", _U8, [1, "H", "W", len(weights)]),
              helper.make_tensor_value_info("points", _F, ["P", 2])]
    out = helper.make_tensor_value_info("samples", _F, ["P"])
    return b.model("cardstream_sample", inputs, x, out)


ORIENTATIONS = {1: (False, False, False), 2: (False, False, True), 3: (False, True, True),
                4: (False, True, False), 5: (True, False, False), 6: (True, False, True),
                7: (True, True, True), 8: (True, True, False)}
"""EXIF 2.32 Orientation -> (transpose, flip rows, flip columns), applied in that order: the
displayed image from the stored one, as ``PIL.ImageOps.exif_transpose``."""


def orient_graph(orientation: int, channels: int = 3) -> onnx.ModelProto:
    """The stored pixels of an upload turned to their displayed form (EXIF Orientation 1..8).

    Graph input: ``image`` ``(N, H, W, channels) uint8``; output: ``oriented`` ``(N, H', W',
    channels) uint8`` (``H'`` and ``W'`` swapped for 5..8).

    Raises:
        ValueError: an orientation outside 1..8.
    """
    if orientation not in ORIENTATIONS:
        raise ValueError(f"EXIF orientation must be 1..8, not {orientation!r}")
    transpose, flip_rows, flip_cols = ORIENTATIONS[orientation]
    b = _Builder()
    x = "image"
    if transpose:
        x = b.op("Transpose", x, perm=[0, 2, 1, 3])
    for axis, flip in ((1, flip_rows), (2, flip_cols)):
        if flip:  # Slice with step -1 from the end to before the start
            x = b.op("Slice", x, b.const([-1], np.int64), b.const([-(2**62)], np.int64),
                     b.const([axis], np.int64), b.const([-1], np.int64))
    x = b.op("Identity", x)
    inputs = [helper.make_tensor_value_info("image", _U8, ["N", "H", "W", channels])]
    out = helper.make_tensor_value_info("oriented", _U8, ["N", "h", "w", channels])
    return b.model("cardstream_orient", inputs, x, out)


def copy_graph(dtype: int = _U8) -> onnx.ModelProto:
    """``Identity``: with its output bound to the host, the device-to-host copy of any bound
    buffer. Graph input ``x``, output ``y``: 4-D of ``dtype`` (an ONNX element type)."""
    b = _Builder()
    dims = ["a", "b", "c", "d"]
    inputs = [helper.make_tensor_value_info("x", dtype, dims)]
    return b.model("cardstream_copy", inputs, b.op("Identity", "x"),
                   helper.make_tensor_value_info("y", dtype, dims))


def stack_graph(n: int, channels: int = 3) -> onnx.ModelProto:
    """``n`` images of one size in one batch buffer (``Concat`` on the batch axis), so that every
    later graph runs once for the batch instead of once per image.

    Graph inputs: ``x0`` .. ``x{n-1}``, each ``(1, H, W, channels) uint8``; output ``stacked``
    ``(n, H, W, channels) uint8``.

    Raises:
        ValueError: ``n`` below 1.
    """
    if n < 1:
        raise ValueError(f"a stack needs at least one image, not {n}")
    b = _Builder()
    dims: list[str | int | None] = [1, "H", "W", channels]
    inputs = [helper.make_tensor_value_info(f"x{k}", _U8, dims) for k in range(n)]
    x = b.op("Concat", *(i.name for i in inputs), axis=0)
    out = helper.make_tensor_value_info("stacked", _U8, [n, *dims[1:]])
    return b.model(f"cardstream_stack{n}", inputs, x, out)


def warp_graph(channels: int = 3, mode: str = "bilinear",
               padding: str = "border") -> onnx.ModelProto:
    """Perspective warp of uint8 pixels by per-image homographies.

    Graph inputs: ``image`` ``(N, H, W, channels) uint8``; ``homography`` ``(N, 3, 3) float32``
    mapping an output pixel ``(u, v, 1)`` to the source point ``(x w, y w, w)`` in source px
    (the inverse of OpenCV's ``warpPerspective`` matrix); ``out_hw`` ``(2,) int64``, the output
    height and width (px). Graph output: ``warped`` ``(N, h, w, channels) uint8``.

    Args:
        channels: channel count.
        mode: ``bilinear`` (OpenCV ``INTER_LINEAR``) or ``bicubic`` (``INTER_CUBIC``).
        padding: ``border`` (``BORDER_REPLICATE``) or ``zeros`` (``BORDER_CONSTANT`` 0).

    Raises:
        ValueError: an unknown ``mode`` or ``padding``.
    """
    if mode not in ("bilinear", "bicubic"):
        raise ValueError(f"mode must be bilinear or bicubic, not {mode!r}")
    if padding not in ("border", "zeros"):
        raise ValueError(f"padding must be border or zeros, not {padding!r}")
    b = _Builder()
    i0, i1 = b.const(0, np.int64), b.const(1, np.int64)
    h = b.op("Gather", "out_hw", i0, axis=0)
    w = b.op("Gather", "out_hw", i1, axis=0)
    ys = b.op("Cast", b.op("Range", i0, h, i1), to=_F)  # (h,)
    xs = b.op("Cast", b.op("Range", i0, w, i1), to=_F)  # (w,)
    hw = b.op("Concat", b.op("Unsqueeze", h, b.const([0], np.int64)),
              b.op("Unsqueeze", w, b.const([0], np.int64)), axis=0)
    gx = b.op("Expand", b.op("Unsqueeze", xs, b.const([0], np.int64)), hw)  # (h, w)
    gy = b.op("Expand", b.op("Unsqueeze", ys, b.const([1], np.int64)), hw)
    one = b.op("Add", b.op("Mul", gx, b.const(0.0)), b.const(1.0))
    last = b.const([-1], np.int64)
    pts = b.op("Concat", *(b.op("Unsqueeze", t, last) for t in (gx, gy, one)), axis=-1)  # (h,w,3)
    pts = b.op("Reshape", pts, b.const([1, -1, 3], np.int64))  # (1, h*w, 3)
    src = b.op("MatMul", pts, b.op("Transpose", "homography", perm=[0, 2, 1]))  # (N, h*w, 3)

    def col(k: int) -> str:
        return b.op("Slice", src, b.const([k], np.int64), b.const([k + 1], np.int64),
                    b.const([2], np.int64))

    z = col(2)
    shape = b.op("Cast", b.op("Shape", "image"), to=_F)  # N, H, W, C
    size_h = b.op("Gather", shape, i1, axis=0)
    size_w = b.op("Gather", shape, b.const(2, np.int64), axis=0)

    def norm(t: str, size: str) -> str:  # source px -> [-1, 1] with align_corners=1
        span = b.op("Max", b.op("Sub", size, b.const(1.0)), b.const(1.0))
        return b.op("Sub", b.op("Div", b.op("Mul", b.op("Div", t, z), b.const(2.0)), span),
                    b.const(1.0))

    grid = b.op("Concat", norm(col(0), size_w), norm(col(1), size_h), axis=-1)  # (N, h*w, 2)
    n = b.op("Gather", b.op("Shape", "image"), i0, axis=0)
    grid_shape = b.op("Concat", b.op("Unsqueeze", n, b.const([0], np.int64)), hw,
                      b.const([2], np.int64), axis=0)
    grid = b.op("Reshape", grid, grid_shape)  # (N, h, w, 2)
    x = b.op("Transpose", b.op("Cast", "image", to=_F), perm=[0, 3, 1, 2])
    x = b.op("GridSample", x, grid, mode=mode, padding_mode=padding, align_corners=1)
    x = b.op("Transpose", b.op("Cast", _round_u8(b, x), to=_U8), perm=[0, 2, 3, 1])
    inputs = [
        helper.make_tensor_value_info("image", _U8, ["N", "H", "W", channels]),
        helper.make_tensor_value_info("homography", _F, ["N", 3, 3]),
        helper.make_tensor_value_info("out_hw", _I64, [2]),
    ]
    out = helper.make_tensor_value_info("warped", _U8, ["N", "h", "w", channels])
    return b.model("cardstream_warp", inputs, x, out)
