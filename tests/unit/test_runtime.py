"""ONNX runtime wrapper: symbolic batch rewrite, buckets and padding, SHA-256 pins, providers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from processors.errors import ModelError, ProviderError
from processors.runtime import (
    SPINNING_KEY,
    X64_PRECISION_KEY,
    BatchedModel,
    RuntimeSettings,
    _saturation_probe,
    int8_saturates,
    model_precision,
    sha256_file,
)


def _model(path: Path, batch: int | str = 1) -> Path:
    """A tiny graph y = x * 2 + 1 over (batch, 3, 4, 4) float32, batch fixed at 1 like rembg's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, 4, 4])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["m"]),
                           helper.make_node("Add", ["m", "one"], ["y"])], "g", [x], [y], [two, one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_fixed_batch_graph_runs_any_batch_after_rewrite(tmp_path: Path) -> None:
    p = _model(tmp_path / "m.onnx")
    bm = BatchedModel(p, sha256_file(p), RuntimeSettings(device="cpu"), "t",
                      make_batch_symbolic=True)
    x = np.random.default_rng(0).random((7, 3, 4, 4), dtype=np.float32)
    (y,) = bm.run(x)
    assert y.shape == (7, 3, 4, 4)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize(("batch", "sample", "ok"), [
    (1, (3, 4, 4), True), ("n", (3, 4, 4), True), (1, (3, 8, 8), False), (1, (1, 4, 4), False),
    (1, (3, 4), False), (1, (3, 4, 4, 1), False)])
def test_input_shape_is_checked_at_load(tmp_path: Path, batch: int | str, sample: tuple[int, ...],
                                        ok: bool) -> None:
    p = _model(tmp_path / "m.onnx", batch)
    build = lambda: BatchedModel(p, None, RuntimeSettings(device="cpu"), "t",  # noqa: E731
                                 make_batch_symbolic=True, input_shape=sample)
    if ok:
        assert build().input_shape == sample
    else:
        with pytest.raises(ModelError, match=r"its input 'x' is \(.*, 3, 4, 4\)"):
            build()


def test_outputs_fetches_only_the_leading_graph_outputs(tmp_path: Path) -> None:
    p = _model(tmp_path / "m.onnx")
    m = onnx.load(p)  # add a second output z = y + 1 after y, as U²-Net's side outputs follow d0
    one = helper.make_tensor("one_b", TensorProto.FLOAT, [], [1.0])
    m.graph.initializer.append(one)
    m.graph.node.append(helper.make_node("Add", ["y", "one_b"], ["z"]))
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 4]))
    onnx.save(m, p)
    x = np.ones((3, 3, 4, 4), np.float32)
    every = BatchedModel(p, None, RuntimeSettings(device="cpu"), "t",
                         make_batch_symbolic=True).run(x)
    first = BatchedModel(p, None, RuntimeSettings(device="cpu"), "t", make_batch_symbolic=True,
                         outputs=1).run(x)
    assert [o.shape for o in every] == [(3, 3, 4, 4), (3, 3, 4, 4)]
    np.testing.assert_allclose(every[1], 4.0)
    assert len(first) == 1
    np.testing.assert_allclose(first[0], 3.0)


@pytest.mark.parametrize(("n", "bucket"), [(1, 1), (5, 4), (9, 4), (32, 8), (33, 32)])
def test_calls_are_ceil_n_over_bucket_and_padding_to_buckets(tmp_path: Path, n: int,
                                                             bucket: int) -> None:
    p = _model(tmp_path / "m.onnx")
    bm = BatchedModel(p, None, RuntimeSettings(device="cpu", cpu_max_bucket=32), "t",
                      make_batch_symbolic=True)
    bm.chosen_bucket = bucket
    bm.run(np.zeros((n, 3, 4, 4), np.float32))
    assert bm.stats.calls == math.ceil(n / bucket)
    assert bm.stats.images == n
    last = n - (math.ceil(n / bucket) - 1) * bucket
    assert bm.stats.padded == bm.bucket_for(last) - last


def test_warm_up_measures_buckets_and_leaves_counters(tmp_path: Path) -> None:
    p = _model(tmp_path / "m.onnx")
    bm = BatchedModel(p, None, RuntimeSettings(device="cpu", buckets=(1, 2, 4)), "t",
                      make_batch_symbolic=True)
    chosen = bm.warm_up((3, 4, 4))
    assert chosen in (1, 2, 4) and bm.chosen_bucket == chosen
    assert set(bm.stats.bucket_ips) <= {1, 2, 4} and 1 in bm.stats.bucket_ips
    assert (bm.stats.calls, bm.stats.images, bm.stats.padded) == (0, 0, 0)


def test_max_bucket_caps_the_buckets(tmp_path: Path) -> None:
    p = _model(tmp_path / "m.onnx")
    bm = BatchedModel(p, None, RuntimeSettings(device="cpu", max_bucket=4), "t",
                      make_batch_symbolic=True)
    assert bm.buckets == (1, 2, 4)
    cpu = BatchedModel(p, None, RuntimeSettings(device="cpu"), "t", make_batch_symbolic=True)
    assert cpu.buckets == (1, 2, 4, 8)  # cpu_max_bucket


def test_sha256_pin_and_missing_file(tmp_path: Path) -> None:
    p = _model(tmp_path / "m.onnx")
    with pytest.raises(ModelError, match="sha256"):
        BatchedModel(p, "0" * 64, RuntimeSettings(device="cpu"), "t")
    with pytest.raises(ModelError, match="missing"):
        BatchedModel(tmp_path / "nope.onnx", "0" * 64, RuntimeSettings(device="cpu"), "t")


@pytest.mark.parametrize("sha", [None, "0" * 64], ids=["unpinned", "pinned"])
def test_a_folder_or_an_empty_file_is_named_as_such(tmp_path: Path, sha: str | None) -> None:
    """A user's ``--model`` that is a folder or a 0-byte file gets one plain line, not
    "missing" and not ONNX Runtime's internal message."""
    folder, empty = tmp_path / "dir.onnx", tmp_path / "empty.onnx"
    folder.mkdir()
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match=r"^cannot load .*dir\.onnx: not a regular file$"):
        BatchedModel(folder, sha, RuntimeSettings(device="cpu"), "t")
    expect = "sha256" if sha else r"^cannot load .*empty\.onnx: empty file \(0 bytes\)$"
    with pytest.raises(ModelError, match=expect):
        BatchedModel(empty, sha, RuntimeSettings(device="cpu"), "t")


def test_cuda_requested_without_cuda_fails_loudly(tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA; the check is for CPU-only installs")
    p = _model(tmp_path / "m.onnx")
    with pytest.raises(ProviderError, match="CUDA"):
        BatchedModel(p, None, RuntimeSettings(device="cuda"), "t", make_batch_symbolic=True)


@pytest.mark.parametrize(("precision", "cpu", "gpu"), [
    ("auto", "int8", "fp32"), ("fp32", "fp32", "fp32"), ("fp16", "fp16", "fp16"),
    ("int8", "int8", ProviderError)])
def test_model_precision_resolves_auto_by_provider(monkeypatch: pytest.MonkeyPatch, precision: str,
                                                   cpu: str, gpu: object) -> None:
    """``auto`` is int8 on the CPU provider and fp32 on a GPU; int8 asked for a GPU session is
    refused at start-up (the int8 files are calibrated for the CPU provider's kernels)."""
    import onnxruntime as ort

    assert model_precision(RuntimeSettings(device="cpu", precision=precision)) == cpu
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    on_gpu = RuntimeSettings(device="cuda", precision=precision)
    if gpu is ProviderError:
        with pytest.raises(ProviderError, match="int8 runs on ONNX Runtime's CPU provider only"):
            model_precision(on_gpu)
    else:
        assert model_precision(on_gpu) == gpu
    assert RuntimeSettings().precision == "auto"


def _asks_exact(sess) -> bool:  # noqa: ANN001 (an onnxruntime session)
    """Whether ``sess`` was built with :data:`X64_PRECISION_KEY` set."""
    try:
        return sess.get_session_options().get_session_config_entry(X64_PRECISION_KEY) == "1"
    except RuntimeError:  # ORT: "SessionOptions does not have configuration with key"
        return False


def test_int8_products_are_exact_on_every_cpu(tmp_path: Path) -> None:
    """255 x 127 twice is 64770, past int16: the U8S8 kernels of x86-64 CPUs without VNNI add
    such pairs in 16 bits and saturate (66000 here on an AVX2-only AMD EPYC, not 130000), so the
    runtime's sessions ask for exact products there (``X64_PRECISION_KEY``) and only there (on
    an Intel Xeon with VNNI and AMX the key made the int8 card model 2.8 x slower, same bits).
    Either way the model computes the exact sum."""
    import onnxruntime as ort

    path = tmp_path / "q.onnx"
    path.write_bytes(_saturation_probe())
    bm = BatchedModel(path, None, RuntimeSettings(device="cpu"), "t", make_batch_symbolic=True)
    exact = round(4 * 255 * 127 / 1000) * 1000.0
    (y,) = bm.run(np.full((3, 4, 2, 2), 255.0, np.float32))
    np.testing.assert_array_equal(y, np.full((3, 1, 2, 2), exact))
    # the probe's verdict is this CPU's: a session that never asks saturates exactly when it says
    plain = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    (raw,) = plain.run(None, {"x": np.full((1, 4, 2, 2), 255.0, np.float32)})
    assert bool(np.any(raw != exact)) is int8_saturates()
    assert _asks_exact(bm.session) is int8_saturates()


@pytest.mark.parametrize("saturates", [True, False])
def test_exact_products_are_asked_only_where_the_kernels_saturate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saturates: bool) -> None:
    """A CPU session carries the key where the probe found saturating kernels, and no key
    elsewhere (where ORT's U8U8 rewrite would only slow exact kernels down); a probe that cannot
    run counts as saturating (exact and slower rather than fast and wrong)."""
    import processors.runtime as rt

    monkeypatch.setattr(rt, "_SATURATES", [saturates])
    bm = BatchedModel(_model(tmp_path / "m.onnx"), None, RuntimeSettings(device="cpu"), "t",
                      make_batch_symbolic=True)
    assert _asks_exact(bm.session) is saturates
    monkeypatch.setattr(rt, "_SATURATES", [])
    monkeypatch.setattr(rt, "_saturation_probe", lambda: b"not an onnx model")
    assert rt.int8_saturates() is True


def test_cpu_sessions_do_not_spin_by_default_and_give_the_same_outputs(tmp_path: Path) -> None:
    """Intra-op spinning off (the default on the CPU provider) changes how idle threads wait,
    not what the kernels compute: the outputs equal a spinning session's, bit for bit."""
    p = _model(tmp_path / "m.onnx")
    quiet = BatchedModel(p, None, RuntimeSettings(device="cpu", intra_op_threads=2), "t",
                         make_batch_symbolic=True)
    spinning = BatchedModel(p, None, RuntimeSettings(device="cpu", intra_op_threads=2,
                                                     intra_op_spinning=True), "t",
                            make_batch_symbolic=True)
    assert quiet.session.get_session_options().get_session_config_entry(SPINNING_KEY) == "0"
    assert spinning.session.get_session_options().get_session_config_entry(SPINNING_KEY) == "1"
    x = np.random.default_rng(3).random((5, 3, 4, 4), dtype=np.float32)
    (a,), (b,) = quiet.run(x), spinning.run(x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, x * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("arena", [True, False])
def test_cpu_arena_setting_and_shrink(tmp_path: Path, arena: bool) -> None:
    """``cpu_arena`` (on by default) is the CPU session's memory arena; ``shrink`` runs one
    uncounted call, and the outputs stay what they were."""
    p = _model(tmp_path / "m.onnx")
    m = BatchedModel(p, None, RuntimeSettings(device="cpu", buckets=(1, 2, 4), cpu_arena=arena),
                     "t", make_batch_symbolic=True, input_shape=(3, 4, 4))
    assert m.session.get_session_options().enable_cpu_mem_arena is arena
    assert RuntimeSettings().cpu_arena is True
    x = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    before = m.run(x)[0]
    calls = m.stats.calls
    m.shrink()
    assert m.stats.calls == calls
    np.testing.assert_array_equal(m.run(x)[0], before)
    np.testing.assert_array_equal(before, x * 2 + 1)
