"""GPU path against CPU path on the same uploads, one test per check; runs only where there is a
CUDA device.

The checks and their bounds are :mod:`benchmarks.parity`'s (card: status share, decode luma and
BGR, model input, quads within 1 px, rectified card luma and BGR; ID photo: status share, matte
within 1/255, photo luma and BGR), each its own test, so a run names every check that fails. The
CPU half of the same code (the graph backend on ONNX Runtime's CPU provider, the nvImageCodec
stand-in) is checked on every machine by ``test_gpu_backend.py`` and ``test_gpu_codec.py``.
``benchmarks/gpu.sh`` runs the same comparison in its sweep (``--parity``); with
``CARDSTREAM_PARITY_JSON`` set, this file writes its figures there.
"""

from __future__ import annotations

import json
import os
import shutil

import onnxruntime as ort
import pytest

from benchmarks.parity import (
    CARD_CHECKS,
    IDPHOTO_CHECKS,
    card_parity,
    idphoto_parity,
    synthetic_uploads,
)
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


@pytest.fixture(scope="module")
def card() -> dict:
    ref, gpu = _procs("card")
    RESULTS["card"] = card_parity(_items("card", 16), ref, gpu)
    return RESULTS["card"]


@pytest.fixture(scope="module")
def idphoto() -> dict:
    ref, gpu = _procs("id_photo")
    RESULTS["id_photo"] = idphoto_parity(_items("id_photo", 6), ref, gpu)
    return RESULTS["id_photo"]


def test_backend_is_the_cuda_one_with_nvimagecodec() -> None:
    ref, gpu = _procs("card")
    assert gpu.pixels.name == "cuda"
    assert type(gpu.pixels.codec).__name__ == "NvImageCodec"
    assert gpu.batched_model.provider == "CUDAExecutionProvider"


@pytest.mark.parametrize("check", CARD_CHECKS)
def test_card_check(card: dict, check: str) -> None:
    assert card["checks"][check]["ok"], (check, card["checks"][check], card)


@pytest.mark.parametrize("check", IDPHOTO_CHECKS)
def test_idphoto_check(idphoto: dict, check: str) -> None:
    assert idphoto["checks"][check]["ok"], (check, idphoto["checks"][check], idphoto)
