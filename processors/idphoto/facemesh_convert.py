"""Convert MediaPipe's Face Mesh landmark model (``face_landmark.tflite``) to ONNX.

Rerun it with ``python -m processors.idphoto.facemesh_convert --out FILE`` (needs the ``tflite``
flatbuffer reader: ``pip install 'tflite==2.18.0'``; nothing else beyond the project's own
``onnx`` and ``numpy``). It downloads the pinned MediaPipe wheel without dependencies (never
installed), checks the ``.tflite`` member against its SHA-256, writes the ONNX graph and prints
its SHA-256, which must equal the pin of ``facemesh`` in ``processors/models.json`` (the
conversion is deterministic: the same input gives the same bytes).

The model: MediaPipe Face Mesh v1 (Kartynnik et al. 2019, "Real-time Facial Surface Geometry
from Monocular Video on Mobile GPUs"), Apache-2.0, shipped in the wheel of
``mediapipe==0.10.21`` as ``mediapipe/modules/face_landmark/face_landmark.tflite``. Input: one
``192 x 192`` RGB face crop in ``[0, 1]``; outputs: 468 landmarks ``(x, y, z)`` in crop px
(``z`` a relative depth at about the scale of ``x``) and a face-presence logit.

The graph has seven operator kinds (DEQUANTIZE of float16 weights, CONV_2D, DEPTHWISE_CONV_2D,
PRELU, ADD, MAX_POOL_2D, PAD of channels), each mapped one to one to ONNX in NCHW layout; the
weights are dequantised to float32 here. The ONNX graph takes ``(N, 3, 192, 192) float32`` with
a symbolic batch and returns ``landmarks (N, 1404)`` and ``presence (N, 1)`` (the logit).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from processors.logs import configure_logging

#: Where the weights come from (Apache-2.0): the wheel, its member and the member's SHA-256.
WHEEL = "mediapipe==0.10.21"
MEMBER = "mediapipe/modules/face_landmark/face_landmark.tflite"
TFLITE_SHA256 = "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814"
#: ONNX opset of the converted graph.
OPSET = 17


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_tflite(cache: Path) -> bytes:
    """The ``.tflite`` bytes from the pinned wheel (downloaded into ``cache`` once, no deps).

    Raises:
        SystemExit: the download fails or the member's SHA-256 is not :data:`TFLITE_SHA256`.
    """
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("mediapipe-0.10.21-*.whl"))
    if not wheels:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                            "--only-binary=:all:", "--python-version", "3.11",
                            "--platform", "manylinux_2_28_x86_64", "-q", "-d", str(cache), WHEEL],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"facemesh_convert: could not download {WHEEL}: {r.stderr.strip()}")
        wheels = sorted(cache.glob("mediapipe-0.10.21-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        data = z.read(MEMBER)
    if _sha256(data) != TFLITE_SHA256:
        raise SystemExit(f"facemesh_convert: {MEMBER} fails its sha256 pin {TFLITE_SHA256}")
    return data


def convert(tflite_bytes: bytes) -> bytes:
    """ONNX model bytes of the Face Mesh ``.tflite`` (see the module docstring).

    Raises:
        ValueError: an operator or option this converter does not map.
    """
    import onnx
    import tflite
    from onnx import TensorProto, helper, numpy_helper

    model = tflite.Model.GetRootAsModel(tflite_bytes, 0)
    graph = model.Subgraphs(0)
    ops = {v: k for k, v in tflite.BuiltinOperator.__dict__.items() if not k.startswith("_")}

    def tensor_array(index: int) -> np.ndarray:
        t = graph.Tensors(index)
        buf = model.Buffers(t.Buffer()).DataAsNumpy()
        dtype = {tflite.TensorType.FLOAT16: np.float16, tflite.TensorType.FLOAT32: np.float32,
                 tflite.TensorType.INT32: np.int32}[t.Type()]
        return np.frombuffer(buf.tobytes(), dtype).reshape(t.ShapeAsNumpy())

    consts: dict[int, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    name: dict[int, str] = {}  # tflite tensor index -> ONNX value name

    def value(index: int) -> str:
        return name.setdefault(index, graph.Tensors(index).Name().decode())

    def init(tag: str, arr: np.ndarray) -> str:
        n = f"{tag}_{len(inits)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), n))
        return n

    def pads_same(in_hw: tuple[int, int], k: int, s: int) -> list[int]:
        out = [-(-d // s) for d in in_hw]
        tot = [max((o - 1) * s + k - d, 0) for o, d in zip(out, in_hw, strict=True)]
        return [tot[0] // 2, tot[1] // 2, tot[0] - tot[0] // 2, tot[1] - tot[1] // 2]

    def shape(index: int) -> list[int]:
        return [int(v) for v in graph.Tensors(index).ShapeAsNumpy()]

    name[graph.Inputs(0)] = "input"
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = ops[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        ins = [op.Inputs(j) for j in range(op.InputsLength())]
        out = op.Outputs(0)
        o = op.BuiltinOptions()
        if kind == "DEQUANTIZE":
            consts[out] = tensor_array(ins[0]).astype(np.float32)
            continue
        if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            opt = (tflite.Conv2DOptions() if kind == "CONV_2D" else tflite.DepthwiseConv2DOptions())
            opt.Init(o.Bytes, o.Pos)
            if opt.FusedActivationFunction() != 0 or opt.DilationHFactor() != 1:
                raise ValueError(f"op {i}: fused activation or dilation not mapped")
            w = consts[ins[1]]
            if kind == "CONV_2D":  # (O, kh, kw, I) -> (O, I, kh, kw)
                w_onnx, group = w.transpose(0, 3, 1, 2), 1
            else:  # (1, kh, kw, C) -> (C, 1, kh, kw)
                w_onnx, group = w.transpose(3, 0, 1, 2), w.shape[3]
            k, s = w.shape[1], opt.StrideH()
            hw = (shape(ins[0])[1], shape(ins[0])[2])
            pads = pads_same(hw, k, s) if opt.Padding() == tflite.Padding.SAME else [0, 0, 0, 0]
            nodes.append(helper.make_node(
                "Conv", [value(ins[0]), init("w", w_onnx), init("b", consts[ins[2]])],
                [value(out)], kernel_shape=[k, k], strides=[s, s], pads=pads, group=group))
        elif kind == "PRELU":
            alpha = consts[ins[1]].reshape(-1)[:, None, None]  # (1, 1, C) -> (C, 1, 1)
            nodes.append(helper.make_node("PRelu", [value(ins[0]), init("a", alpha)],
                                          [value(out)]))
        elif kind == "ADD":
            opt = tflite.AddOptions()
            opt.Init(o.Bytes, o.Pos)
            if opt.FusedActivationFunction() != 0:
                raise ValueError(f"op {i}: fused activation not mapped")
            nodes.append(helper.make_node("Add", [value(ins[0]), value(ins[1])], [value(out)]))
        elif kind == "MAX_POOL_2D":
            opt = tflite.Pool2DOptions()
            opt.Init(o.Bytes, o.Pos)
            k, s = opt.FilterHeight(), opt.StrideH()
            hw = (shape(ins[0])[1], shape(ins[0])[2])
            pads = pads_same(hw, k, s) if opt.Padding() == tflite.Padding.SAME else [0, 0, 0, 0]
            nodes.append(helper.make_node("MaxPool", [value(ins[0])], [value(out)],
                                          kernel_shape=[k, k], strides=[s, s], pads=pads))
        elif kind == "PAD":
            p = tensor_array(ins[1])  # (4, 2) NHWC before/after
            nchw = [p[0], p[3], p[1], p[2]]
            pads = [int(v[0]) for v in nchw] + [int(v[1]) for v in nchw]
            nodes.append(helper.make_node("Pad",
                                          [value(ins[0]), init("p", np.array(pads, np.int64))],
                                          [value(out)], mode="constant"))
        else:
            raise ValueError(f"op {i}: {kind} not mapped")

    outs = [graph.Outputs(j) for j in range(graph.OutputsLength())]
    shapes = {shape(t)[-1]: t for t in outs}
    final = []
    for label, channels in (("landmarks", 1404), ("presence", 1)):
        nodes.append(helper.make_node("Flatten", [value(shapes[channels])], [label], axis=1))
        final.append(helper.make_tensor_value_info(label, TensorProto.FLOAT, ["N", channels]))
    g = helper.make_graph(nodes, "facemesh", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["N", 3, 192, 192])], final, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="cardstream facemesh_convert")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def main(argv: list[str] | None = None) -> int:
    """``--out FILE`` (required), ``--cache DIR`` (the wheel; default a temporary folder)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = convert(fetch_tflite(args.cache or Path(tmp)))
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data)} bytes, sha256 {_sha256(data)}")
    return 0


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    raise SystemExit(main())
