"""The model options of the GPU path that the CPU can check: fp16 weights and the TensorRT
provider's options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from processors.card.training.synth import sample
from processors.idphoto.matting import preprocess
from processors.models import manifest, model_path
from processors.runtime import BatchedModel, RuntimeSettings, providers_for, tensorrt_options


@pytest.mark.parametrize("name", ["u2netp", "card_u2netp"])
def test_fp16_model_moves_the_mask_by_under_one_level(name: str) -> None:
    """fp16 weights and activations (fp32 I/O) on ONNX Runtime's CPU provider against fp32: the
    min-max normalised mask of synthetic scenes, as the processors read it. Measured: mean
    0.03-0.31 levels of 255, under 0.1 % of pixels change side at 0.5."""
    args = (model_path(name), manifest()[name]["sha256"])
    m32 = BatchedModel(*args, RuntimeSettings(device="cpu"), name, True, 1)
    m16 = BatchedModel(*args, RuntimeSettings(device="cpu", precision="fp16"), name, True, 1)
    rng = np.random.default_rng(12)
    x = np.stack([preprocess(sample(rng, size=(640, 480)).image) for _ in range(2)])
    (a,), (b,) = m32.run(x), m16.run(x)
    assert a.dtype == b.dtype == np.float32

    def norm(p: np.ndarray) -> np.ndarray:
        return (p - p.min()) / max(float(p.max() - p.min()), 1e-6)

    for k in range(2):
        ma, mb = norm(a[k, 0]), norm(b[k, 0])
        assert float(np.abs(ma - mb).mean()) < 1 / 255
        assert float(((ma > 0.5) != (mb > 0.5)).mean()) < 0.002


def test_tensorrt_options_name_the_cache_and_one_batch_profile(tmp_path: Path) -> None:
    s = RuntimeSettings(device="cuda", tensorrt=True, precision="fp16", trt_cache_dir=tmp_path)
    opts = tensorrt_options(s, "input.1", (3, 320, 320), 128)
    assert opts["trt_fp16_enable"] == "1" and opts["trt_engine_cache_enable"] == "1"
    assert opts["trt_engine_cache_path"] == opts["trt_timing_cache_path"] == str(tmp_path)
    assert opts["trt_profile_min_shapes"] == "input.1:1x3x320x320"
    assert (opts["trt_profile_opt_shapes"] == opts["trt_profile_max_shapes"]
            == "input.1:128x3x320x320")
    provs = providers_for(s, opts)
    assert [p[0] if isinstance(p, tuple) else p for p in provs] == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert providers_for(RuntimeSettings(device="cpu"), opts) == ["CPUExecutionProvider"]


def test_tensorrt_profile_comes_from_the_graph_and_the_buckets(tmp_path: Path) -> None:
    from processors.runtime import symbolic_batch

    data = symbolic_batch(model_path("u2netp").read_bytes())
    s = RuntimeSettings(device="cuda", tensorrt=True, buckets=(1, 2, 4, 8, 16, 32, 64),
                        max_bucket=32, trt_cache_dir=tmp_path / "trt")
    opts = BatchedModel._trt_options(data, s)
    name = onnx.load_model_from_string(data).graph.input[0].name
    assert opts["trt_profile_max_shapes"] == f"{name}:32x3x320x320"
    assert opts["trt_fp16_enable"] == "0"
    assert (tmp_path / "trt").is_dir()
