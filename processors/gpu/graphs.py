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

__all__ = ["OPSET", "prep_graph", "resample_graph", "warp_graph"]

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


def _round_u8(b: _Builder, x: str) -> str:
    """Round half to even and clip to 0..255 (still float): what a uint8 result holds."""
    return b.op("Clip", b.op("Round", x), b.const(0.0), b.const(255.0))


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
    x = b.op("Div", b.op("Sub", x, b.const(np.reshape(mean, shape))), b.const(np.reshape(std, shape)))
    out = helper.make_tensor_value_info("input", _F, ["N", 3, side, side])
    return b.model("cardstream_prep", _resize_inputs(3), x, out)


def resample_graph(channels: int = 3, round_between: bool = False) -> onnx.ModelProto:
    """Separable resize of uint8 pixels.

    Graph inputs: ``image`` ``(N, H, W, channels) uint8``, ``ry`` ``(h, H) float32``, ``rxt``
    ``(W, w) float32``. Graph output: ``resized`` ``(N, h, w, channels) uint8`` (rounded half to
    even, clipped).

    Args:
        channels: channel count (3 for colour, 1 for a matte).
        round_between: round after the horizontal pass too (Pillow's two-pass 8-bit resize).
    """
    b = _Builder()
    x = b.op("Transpose", b.op("Cast", "image", to=_F), perm=[0, 3, 1, 2])
    x = _round_u8(b, _resize(b, x, round_between))
    x = b.op("Transpose", b.op("Cast", x, to=_U8), perm=[0, 2, 3, 1])
    out = helper.make_tensor_value_info("resized", _U8, ["N", "h", "w", channels])
    return b.model("cardstream_resample", _resize_inputs(channels), x, out)


def warp_graph(channels: int = 3, mode: str = "bilinear", padding: str = "border") -> onnx.ModelProto:
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
