"""GPU path against CPU path on the same uploads; runs only where there is a CUDA device.

Bounds (issue 29): card quads within 1 px, rectified card mean absolute difference <= 2/255,
ID-photo alpha mean difference <= 1/255 (:mod:`benchmarks.parity`). The CPU half of the same
code (the graph backend on ONNX Runtime's CPU provider) is checked on every machine by
``test_gpu_backend.py``. ``benchmarks/gpu.sh`` runs this file first; with
``CARDSTREAM_PARITY_JSON`` set, the figures are written there.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnxruntime as ort
import pytest

from benchmarks.parity import card_parity, idphoto_parity, synthetic_uploads
from processors.decode import DecodeSettings, probe_image


def _no_cuda() -> str | None:
    """Why this machine cannot run the GPU path, or None."""
    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        return ("no CUDA device: ONNX Runtime's providers are "
                f"{providers} (the `gpu` extra on a machine with an NVIDIA GPU runs these)")
    if shutil.which("nvidia-smi") is None:
        return "no CUDA device: nvidia-smi (the NVIDIA driver) is not on this machine"
    return None


pytestmark = pytest.mark.skipif(_no_cuda() is not None, reason=str(_no_cuda()))

RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    path = os.environ.get("CARDSTREAM_PARITY_JSON")
    if path and RESULTS:
        with open(path, "w") as f:
            json.dump(RESULTS, f)


def _procs(task: str):
    from benchmarks.gpu_sweep import build
    from processors.runtime import RuntimeSettings

    buckets = dict(buckets=(1, 2, 4, 8), max_bucket=8, cpu_max_bucket=8)
    return (build(task, RuntimeSettings(device="cpu", **buckets)),
            build(task, RuntimeSettings(device="cuda", **buckets)))


def _items(task: str, n: int):
    from processors.base import Item

    ds = DecodeSettings()
    return [Item(f"{task[0]}{k}", probe_image(u, ds), {})
            for k, u in enumerate(synthetic_uploads(task, n, (1600, 1200), seed=101))]


def test_backend_is_the_cuda_one_with_nvimagecodec() -> None:
    ref, gpu = _procs("card")
    assert gpu.pixels.name == "cuda"
    assert type(gpu.pixels.codec).__name__ == "NvImageCodec"
    assert gpu.batched_model.provider == "CUDAExecutionProvider"


def test_decode_and_model_input_match_the_cpu() -> None:
    ref, gpu = _procs("card")
    items = _items("card", 4)
    dc = ref.pixels.decode([it.image for it in items], None)
    dg = gpu.pixels.decode([it.image for it in items], None)
    host = gpu.pixels.to_host([d.pixels for d in dg])
    # nvJPEG's IDCT and chroma upsampling against libjpeg-turbo's
    decode_mad = max(float(np.abs(h.astype(np.int16) - c.pixels).mean())
                     for h, c in zip(host, dc, strict=True))
    x = gpu.pixels.model_input(dg, 320).numpy()
    xc = ref.pixels.model_input(dc, 320)
    levels = np.abs(x - xc) * np.array([0.229, 0.224, 0.225])[:, None, None] * 255
    RESULTS["pixels"] = {"decode_mad_levels": round(decode_mad, 4),
                         "model_input_mad_levels": round(float(levels.mean()), 4)}
    assert decode_mad < 1.5
    assert levels.mean() < 1.0


def test_card_gpu_path_matches_the_cpu_path() -> None:
    ref, gpu = _procs("card")
    r = card_parity(_items("card", 16), ref, gpu)
    RESULTS["card"] = r
    assert r["same_status"] == r["n"], r
    assert r["quad_max_px"] <= 1.0, r
    assert r["rect_mad_max"] <= 2 / 255, r


def test_idphoto_gpu_path_matches_the_cpu_path() -> None:
    ref, gpu = _procs("id_photo")
    r = idphoto_parity(_items("id_photo", 6), ref, gpu)
    RESULTS["id_photo"] = r
    assert r["same_status"] == r["n"], r
    assert r["alpha_mad_max"] <= 1 / 255, r
