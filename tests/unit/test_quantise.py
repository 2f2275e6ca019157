"""processors.quantise: QDQ int8 files from fp32 graphs, nodes kept in float, the pins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from processors.errors import ModelError
from processors.models import file_precision, manifest, pinned_model
from processors.quantise import RECIPES, destination, float_nodes, quantise, snr_db
from processors.runtime import RuntimeSettings, sha256_file


def _graph(tmp: Path) -> Path:
    """``x (1, 3, 16, 16)`` -> conv1 3x3 (8) -> relu -> conv2 3x3 (4) -> relu -> conv3 1x1 (1) ->
    sigmoid, seeded weights, opset 11 and a fixed batch (as rembg's graphs are)."""
    rng = np.random.default_rng(3)
    inits, nodes, prev = [], [], "x"
    for k, (cin, cout, ks) in enumerate(((3, 8, 3), (8, 4, 3), (4, 1, 1)), start=1):
        w = rng.normal(0, 0.5, (cout, cin, ks, ks)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, cout).astype(np.float32), f"b{k}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{k}", f"b{k}"], [f"c{k}"], name=f"conv{k}",
                                      pads=[ks // 2] * 4))
        act = "Sigmoid" if k == 3 else "Relu"
        nodes.append(helper.make_node(act, [f"c{k}"], [f"a{k}"], name=f"act{k}"))
        prev = f"a{k}"
    g = helper.make_graph(nodes, "toy", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("a3", TensorProto.FLOAT, [1, 1, 16, 16])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 7
    path = tmp / "toy.onnx"
    onnx.save(m, str(path))
    return path


def _inputs(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(n)]


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _weight_of(model: onnx.ModelProto, conv: str) -> str:
    """What feeds the weight input of the node ``conv``: an initializer's name, or the op of the
    node producing it."""
    node = next(n for n in model.graph.node if n.name.startswith(conv) and n.op_type == "Conv")
    producer = {o: n for n in model.graph.node for o in n.output}.get(node.input[1])
    return producer.op_type if producer is not None else "initializer"


def test_qdq_int8_per_channel_with_a_node_kept_in_float(tmp_path: Path) -> None:
    src, dst = _graph(tmp_path), tmp_path / "toy.int8.onnx"
    quantise(src, dst, _inputs(16, 1), tmp_path, keep_float=["conv2"])
    m = onnx.load(str(dst))
    ops = [n.op_type for n in m.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    assert m.opset_import[0].version >= 13
    # conv1's weights: int8, one scale per output channel (axis 0); conv2's stay float
    assert _weight_of(m, "conv1") == "DequantizeLinear"
    assert _weight_of(m, "conv2") == "initializer"
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    w1 = next(v for k, v in inits.items() if v.dtype == np.int8 and v.shape == (8, 3, 3, 3))
    assert np.abs(w1).max() == 127  # symmetric: each channel's largest weight at full scale
    scales = [v for k, v in inits.items() if v.dtype == np.float32 and v.shape == (8,)
              and k.endswith("_scale")]
    assert scales, "no per-channel weight scale of 8 values"
    # the symbolic batch and the outputs: close to fp32 (a sigmoid in 0..1)
    x = np.concatenate(_inputs(3, 2))
    ref = np.concatenate([_run(src, x[k:k + 1]) for k in range(3)])
    got = _run(dst, x)
    assert got.shape == (3, 1, 16, 16)
    assert float(np.abs(ref - got).mean()) < 0.02
    assert snr_db(ref, got) > 20.0


def test_a_node_to_keep_that_the_graph_lacks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not in the graph"):
        quantise(_graph(tmp_path), tmp_path / "x.onnx", _inputs(2, 1), tmp_path,
                 keep_float=["Conv_765"])
    with pytest.raises(ModelError, match=r"not in the graph: \['Conv_810'\]"):
        quantise(_graph(tmp_path), tmp_path / "x.onnx", _inputs(2, 1), tmp_path,
                 float_from="conv2", quantised=["Conv_810"])


def test_a_float_tail_with_its_quantised_exceptions(tmp_path: Path) -> None:
    """``float_from`` leaves that node and every later quantisable node in fp32, less
    ``quantised`` (how the card's stage 1d and side outputs stay float but its full-resolution
    convolutions do not)."""
    src, dst = _graph(tmp_path), tmp_path / "toy.int8.onnx"
    g = onnx.load(str(src)).graph
    assert float_nodes(g, ["conv1"], "conv2", ["conv3"]) == ["conv1", "conv2", "act2", "act3"]
    assert float_nodes(g, (), "act2") == ["act2", "conv3", "act3"]
    assert float_nodes(g, ["conv2"]) == ["conv2"]
    quantise(src, dst, _inputs(16, 1), tmp_path, float_from="conv2", quantised=["conv3"])
    m = onnx.load(str(dst))
    assert [_weight_of(m, c) for c in ("conv1", "conv2", "conv3")] == [
        "DequantizeLinear", "initializer", "DequantizeLinear"]


def test_snr_db() -> None:
    a = np.array([3.0, 4.0])
    assert snr_db(a, a) == float("inf")
    assert snr_db(a, a + np.array([0.3, 0.4])) == pytest.approx(20.0)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_int8_file_is_committed_pinned_and_points_at_its_source(name: str) -> None:
    entry, recipe = manifest()[name], RECIPES[name]
    assert entry["precision"] == "int8" and entry["quantised_from"] == recipe.source
    assert recipe.source in manifest() and name == f"{recipe.source}.int8"
    assert sha256_file(destination(name)) == entry["sha256"]


@pytest.mark.parametrize(("precision", "card", "idphoto", "ran"), [
    ("auto", "card_u2netp.int8.onnx", "u2netp.int8.onnx", ("int8", "int8")),
    ("int8", "card_u2netp.int8.onnx", "u2netp.int8.onnx", ("int8", "int8")),
    ("fp32", "card_u2netp.onnx", "u2netp.onnx", ("fp32", "fp32")),
    ("fp16", "card_u2netp.onnx", "u2netp.onnx", ("fp16", "fp16"))])
def test_precision_picks_the_pinned_file(precision: str, card: str, idphoto: str,
                                         ran: tuple[str, str]) -> None:
    """On the CPU provider, ``auto`` loads the int8 builds that passed the precision gate (both
    today: no entry says ``"auto": false``), ``int8`` every int8 build; the digest returned is
    the chosen file's pin; a model without an int8 build keeps its own file."""
    rt = RuntimeSettings(device="cpu", precision=precision)  # type: ignore[arg-type]  # a checked choice
    got = {n: pinned_model(n, runtime=rt) for n in ("card_u2netp", "u2netp", "card_orient")}
    assert (got["card_u2netp"][0].name, got["u2netp"][0].name) == (card, idphoto)
    for path, sha in got.values():
        entry = next(e for e in manifest().values() if e["file"] == path.name)
        assert sha == entry["sha256"] == sha256_file(path)
    assert got["card_orient"] == pinned_model("card_orient")
    assert tuple(file_precision(got[n][0], rt) for n in ("card_u2netp", "u2netp")) == ran
    assert "auto" not in manifest()["card_u2netp.int8"] and "auto" not in manifest()["u2netp.int8"]


def test_a_build_that_failed_the_gate_is_taken_only_when_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An int8 entry pinned ``"auto": false`` (it failed ``benchmarks.precision_gate``): ``auto``
    on the CPU keeps the fp32 file, ``int8`` takes the build."""
    import processors.models as models

    pins = {k: dict(v) for k, v in manifest().items()}
    pins["card_u2netp.int8"]["auto"] = False
    monkeypatch.setattr(models, "manifest", lambda: pins)
    auto, int8 = (RuntimeSettings(device="cpu", precision=p) for p in ("auto", "int8"))
    assert pinned_model("card_u2netp", runtime=auto)[0].name == "card_u2netp.onnx"
    assert pinned_model("card_u2netp", runtime=int8)[0].name == "card_u2netp.int8.onnx"
    assert pinned_model("u2netp", runtime=auto)[0].name == "u2netp.int8.onnx"


def test_gpu_sessions_keep_the_float_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` on a GPU is fp32 (the int8 files are QDQ graphs for the CPU provider's kernels),
    a ``--model`` override is taken as given and not checked."""
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    rt = RuntimeSettings(device="cuda")
    assert pinned_model("u2netp", runtime=rt) == pinned_model("u2netp")
    assert file_precision(pinned_model("u2netp", runtime=rt)[0], rt) == "fp32"
    assert pinned_model("u2netp", Path("x.onnx"), rt) == (Path("x.onnx"), None)


def test_the_sensitivity_pass_runs_int8_exactly(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The sensitivity pass's sessions compute int8 products as the runtime's do (exact
    products asked where the CPU's fast kernels saturate, x86 without VNNI, and only there), so
    they measure the quantisation and not saturation."""
    import processors.runtime as rt
    from processors.quantise import _session

    for saturates in (True, False):
        monkeypatch.setattr(rt, "_SATURATES", [saturates])
        sess, fetch = _session(_graph(tmp_path), ["a1", "not_there"])
        try:
            asked = sess.get_session_options().get_session_config_entry(
                rt.X64_PRECISION_KEY) == "1"
        except RuntimeError:  # ORT: no such key
            asked = False
        assert asked is saturates
        assert fetch == ["a1"]
