"""``processors/gpu/nvcodec.py`` and the backend's codec fallbacks on the CPU, through the
nvImageCodec test double (``tests/doubles.py``: decodes as nvJPEG differs from libjpeg-turbo,
encodes with OpenCV), and the GPU settings that reach ONNX Runtime's CUDA provider."""

from __future__ import annotations

import io
import sys

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from processors.card.training.synth import sample
from processors.decode import DecodeSettings, EncodedImage, probe_image
from processors.errors import DecodeError, ProviderError
from processors.gpu.backend import Fallbacks, GraphPixels, HostCodec
from processors.gpu.device import DeviceImage
from processors.pixels import CpuPixels, Decoded
from processors.runtime import BatchedModel, RuntimeSettings, cuda_provider_options, providers_for
from schemas.reasons import ReasonCode
from streams.settings import load_settings
from tests.doubles import nvimgcodec_double

RT = RuntimeSettings(device="cpu", postprocess_threads=1)
DS = DecodeSettings()


@pytest.fixture
def nvimgcodec(monkeypatch: pytest.MonkeyPatch):
    """The double installed as ``nvidia.nvimgcodec`` (``processors.gpu.nvcodec`` imported
    afresh against it, and dropped again after the test)."""
    import types

    fake = nvimgcodec_double()
    pkg = types.ModuleType("nvidia")
    pkg.nvimgcodec = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvidia", pkg)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", fake)
    sys.modules.pop("processors.gpu.nvcodec", None)
    yield fake
    sys.modules.pop("processors.gpu.nvcodec", None)


def _uploads(n: int = 3, size: tuple[int, int] = (640, 480)) -> list[EncodedImage]:
    rng = np.random.default_rng(5)
    out = []
    for _ in range(n):
        ok, buf = cv2.imencode(".jpg", sample(rng, size=size).image, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append(probe_image(buf.tobytes(), DS))
    return out


def _backend(choice: str = "auto") -> GraphPixels:
    g = GraphPixels(RT, DS, device="cpu")
    g.start_codec(choice)
    return g


def test_nvimagecodec_decodes_orients_and_encodes_through_the_backend(nvimgcodec) -> None:
    g = _backend()
    assert type(g.codec).__name__ == "NvImageCodec"
    assert g.codec.version == "nvImageCodec 0.9.0-double"
    ups = _uploads()
    dg, dc = g.decode(ups, None), CpuPixels(DS, 1).decode(ups, None)
    assert nvimgcodec.calls["decode"] == 3
    for d, ref in zip(dg, dc, strict=True):
        assert isinstance(d, Decoded) and isinstance(d.pixels, DeviceImage)
        host = g.to_host([d.pixels])[0]
        diff = np.abs(host.astype(np.int16) - ref.pixels)
        # nvJPEG-like decoding (fast IDCT, plain chroma upsampling) is close, not equal
        assert 0 < diff.mean() < 2.0
        grey = cv2.cvtColor(host, cv2.COLOR_BGR2GRAY).astype(np.int16)
        assert np.abs(grey - cv2.cvtColor(ref.pixels, cv2.COLOR_BGR2GRAY)).mean() < diff.mean()
    data = g.encode_jpeg([d.pixels for d in dg], 88)
    assert nvimgcodec.calls["encode"] == 3
    assert [simplejpeg.decode_jpeg_header(b)[:2] for b in data] == [(480, 640)] * 3
    assert g.fallbacks.snapshot()["counts"] == {"codec_start": 0, "decode_host": 0,
                                                "encode_host": 0}


def test_the_stored_orientation_is_turned_by_the_orient_graph(nvimgcodec) -> None:
    img = sample(np.random.default_rng(4), size=(400, 300)).image
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    Image.fromarray(img[..., ::-1]).save(buf, "JPEG", quality=95, exif=exif.tobytes())
    up = probe_image(buf.getvalue(), DS)
    (d,) = _backend().decode([up], None)
    (ref,) = CpuPixels(DS, 1).decode([up], None)
    assert (d.width, d.height) == (ref.width, ref.height) == (300, 400)


def test_a_codec_that_fails_to_start_leaves_the_host_codec_counted(nvimgcodec) -> None:
    nvimgcodec.start_error = RuntimeError("CUDA error 35: driver too old")
    g = _backend("auto")
    assert isinstance(g.codec, HostCodec)
    snap = g.fallbacks.snapshot()
    assert snap["counts"]["codec_start"] == 1
    assert snap["why"]["codec_start"] == "RuntimeError: CUDA error 35: driver too old"
    (d,) = g.decode(_uploads(1), None)  # and the backend still works
    assert isinstance(d, Decoded)
    with pytest.raises(ProviderError,
                       match="nvImageCodec unavailable: RuntimeError: CUDA error 35"):
        _backend("nvimgcodec")


def test_without_the_package_auto_counts_it_and_host_never_imports_it() -> None:
    sys.modules.pop("processors.gpu.nvcodec", None)
    g = _backend("auto")
    assert isinstance(g.codec, HostCodec)
    # the same reason whether or not other CUDA wheels put an ``nvidia`` namespace there
    assert g.fallbacks.snapshot()["why"]["codec_start"] == "no module nvidia.nvimgcodec"
    h = _backend("host")
    assert isinstance(h.codec, HostCodec) and h.fallbacks.snapshot()["counts"]["codec_start"] == 0
    with pytest.raises(ValueError, match="codec must be"):
        _backend("nvjpeg")


def test_a_failing_decode_call_falls_back_to_the_cpu_decoder_counted(nvimgcodec) -> None:
    g = _backend()
    nvimgcodec.decode_error = RuntimeError("nvjpegStatus 7")
    ups = _uploads(2)
    dg, dc = g.decode(ups, None), CpuPixels(DS, 1).decode(ups, None)
    for d, ref in zip(dg, dc, strict=True):  # the CPU decoder's own pixels, uploaded
        np.testing.assert_array_equal(g.to_host([d.pixels])[0], ref.pixels)
    assert g.fallbacks.snapshot()["counts"]["decode_host"] == 2
    assert g.fallbacks.snapshot()["why"]["decode_host"] == "RuntimeError: nvjpegStatus 7"


def test_a_jpeg_the_codec_refuses_gets_the_cpu_decoders_reason(nvimgcodec) -> None:
    good = _uploads(1)[0]
    cut = probe_image(good.data[: len(good.data) // 3], DS)
    g = _backend()
    d_good, d_cut = g.decode([good, cut], None)
    assert isinstance(d_good, Decoded)
    assert isinstance(d_cut, DecodeError) and d_cut.reason == ReasonCode.CORRUPT_IMAGE
    assert g.fallbacks.snapshot()["counts"]["decode_host"] == 1


@pytest.mark.parametrize("failure", ["error", "none"])
def test_an_encode_failure_is_encoded_on_the_host_counted(nvimgcodec, failure: str) -> None:
    g = _backend()
    dg = g.decode(_uploads(2), None)
    if failure == "error":
        nvimgcodec.encode_error = RuntimeError("nvjpegEncode failed")
    else:
        nvimgcodec.encode_none = True
    data = g.encode_jpeg([d.pixels for d in dg] + [np.zeros((8, 8, 3), np.uint8)], 90)
    assert [simplejpeg.decode_jpeg_header(b)[:2] for b in data] == [(480, 640)] * 2 + [(8, 8)]
    assert g.fallbacks.snapshot()["counts"]["encode_host"] == 2


def test_fallbacks_refuse_unknown_kinds_and_ignore_zero() -> None:
    f = Fallbacks()
    f.add("decode_host", 0, "nothing")
    assert f.snapshot() == {"counts": {"codec_start": 0, "decode_host": 0, "encode_host": 0},
                            "why": {}}
    with pytest.raises(ValueError, match="fallback kind"):
        f.add("warp_host")


def test_cuda_provider_options_carry_arena_cap_and_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cuda_provider_options(RuntimeSettings()) == {
        "device_id": "0", "arena_extend_strategy": "kSameAsRequested"}
    s = RuntimeSettings(cuda_device_id=1, cuda_mem_limit_mib=4096,
                        cuda_arena_extend_strategy="kNextPowerOfTwo")
    assert cuda_provider_options(s, tf32=False) == {
        "device_id": "1", "arena_extend_strategy": "kNextPowerOfTwo",
        "gpu_mem_limit": str(4096 * 2**20), "use_tf32": "0"}
    assert providers_for(RuntimeSettings(device="cpu")) == ["CPUExecutionProvider"]
    monkeypatch.setenv("CARDSTREAM_RUNTIME__CUDA_CODEC", "host")
    monkeypatch.setenv("CARDSTREAM_RUNTIME__CUDA_MEM_LIMIT_MIB", "2048")
    rt = load_settings().runtime
    assert (rt.cuda_codec, rt.cuda_mem_limit_mib) == ("host", 2048)
    with pytest.raises(ValueError):
        RuntimeSettings(cuda_mem_limit_mib=-1)
    with pytest.raises(ValueError):
        RuntimeSettings(cuda_codec="nvjpeg")  # type: ignore[arg-type]


def test_a_model_names_the_provider_it_asked_for(tmp_path) -> None:
    from tests.unit.test_runtime import _model

    m = BatchedModel(_model(tmp_path / "m.onnx"), None, RuntimeSettings(device="cpu"), "m")
    assert m.requested_provider == m.provider == "CPUExecutionProvider"


def test_card_parity_tolerates_nvjpeg_like_decoding_check_by_check(nvimgcodec) -> None:
    """The card path on the graph backend with the nvImageCodec stand-in (its chroma and IDCT
    differ from libjpeg-turbo's) against the CPU path: every check within its bound, the BGR
    figures above the luma ones, each check reported on its own."""
    from benchmarks.parity import CARD_CHECKS, card_parity, synthetic_uploads
    from processors.base import Item
    from processors.card.processor import CardProcessor
    from processors.card.settings import CardSettings

    items = [Item(f"c{i}", probe_image(u, DS), {})
             for i, u in enumerate(synthetic_uploads("card", 3, (800, 600), seed=7))]
    ref, test = CardProcessor(CardSettings(), RT), CardProcessor(CardSettings(), RT)
    test.pixels = _backend()
    r = card_parity(items, ref, test)
    assert tuple(r["checks"]) == CARD_CHECKS
    assert r["ok"], {k: v for k, v in r["checks"].items() if not v["ok"]}
    c = r["checks"]
    assert 0 < c["decode_luma"]["value"] < c["decode_bgr"]["value"] <= c["decode_bgr"]["max"]
    assert c["status"] == {"value": 1.0, "min": 0.9, "ok": True}
    assert nvimgcodec.calls["decode"] >= 6 and test.pixels.fallbacks.snapshot()["counts"] == {
        "codec_start": 0, "decode_host": 0, "encode_host": 0}
