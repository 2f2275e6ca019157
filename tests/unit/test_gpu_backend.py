"""The GPU pixel backend's code path on ONNX Runtime's CPU provider (``GraphPixels(device="cpu")``):
the same graphs, bindings by pointer and batch layout as on a GPU, against ``CpuPixels``.

Only nvImageCodec and device memory are left for the GPU host (``tests/unit/test_gpu_parity.py``).
"""

from __future__ import annotations

import io

import cv2
import numpy as np
import onnxruntime as ort
import pytest
import simplejpeg
from PIL import Image

from benchmarks.parity import card_parity, idphoto_parity, synthetic_uploads
from processors.base import Item
from processors.card.processor import CardProcessor
from processors.card.rectify import homography
from processors.card.settings import CardSettings
from processors.card.training.synth import sample
from processors.decode import DecodeSettings, EncodedImage, probe_image
from processors.errors import DecodeError, ProviderError
from processors.gpu.backend import CudaPixels, GraphPixels
from processors.gpu.device import DeviceBatch, DeviceImage, next_pow2
from processors.idphoto.processor import IdPhotoProcessor
from processors.idphoto.settings import IdPhotoSettings
from processors.models import manifest, model_path
from processors.pixels import CpuPixels, Decoded, pixel_backend
from processors.runtime import BatchedModel, RuntimeSettings
from schemas.reasons import ReasonCode

RT = RuntimeSettings(device="cpu", postprocess_threads=1)
DS = DecodeSettings()


def _jpeg(img: np.ndarray, quality: int = 92) -> bytes:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


@pytest.fixture(scope="module")
def backends() -> tuple[GraphPixels, CpuPixels]:
    return GraphPixels(RT, DS, device="cpu"), CpuPixels(DS, 1)


@pytest.fixture(scope="module")
def scenes() -> list[EncodedImage]:
    rng = np.random.default_rng(11)
    return [probe_image(_jpeg(sample(rng, size=size).image), DS)
            for size in ((1600, 1200), (1203, 901), (640, 480))]


def _pair(backends, scenes) -> tuple[list[Decoded], list[Decoded]]:
    g, c = backends
    dg = [d for d in g.decode(scenes, None) if isinstance(d, Decoded)]
    dc = [d for d in c.decode(scenes, None) if isinstance(d, Decoded)]
    assert len(dg) == len(dc) == len(scenes)  # no DecodeError
    return dg, dc


def test_decode_is_full_resolution_and_equal_to_the_cpu_decoder(backends, scenes) -> None:
    dg, dc = _pair(backends, scenes)
    host = backends[0].to_host([d.pixels for d in dg])
    for d, h, ref in zip(dg, host, dc, strict=True):
        assert isinstance(d.pixels, DeviceImage) and d.scale == 1.0
        assert (d.width, d.height) == (ref.width, ref.height)
        np.testing.assert_array_equal(h, ref.pixels)  # the host codec is the CPU decoder


def test_model_input_is_one_device_batch_close_to_the_cpu_one(backends, scenes) -> None:
    dg, dc = _pair(backends, scenes)
    x = backends[0].model_input(dg, 320)
    ref = backends[1].model_input(dc, 320)
    assert isinstance(x, DeviceBatch)
    assert x.shape == ref.shape == (3, 3, 320, 320) and x.capacity == next_pow2(3) == 4
    levels = np.abs(x.numpy() - ref) * np.array([0.229, 0.224, 0.225])[:, None, None] * 255
    # OpenCV's bilinear uint8 path (fixed point / IPP) rounds about 12 % of pixels the other way
    assert levels.max() <= 2.0
    assert levels.mean() < 0.35


def test_working_grey_and_grey_samples_match_the_cpu(backends, scenes) -> None:
    dg, dc = _pair(backends, scenes)
    for a, b in zip(backends[0].working_grey(dg, 1024), backends[1].working_grey(dc, 1024),
                    strict=True):
        assert a.shape == b.shape and a.dtype == np.uint8
        diff = np.abs(a.astype(np.int16) - b)
        assert diff.max() <= 1 and diff.mean() < 0.2
    pts = np.random.default_rng(2).uniform(-3, 1700, (40, 50, 2)).astype(np.float32)
    got, ref = backends[0].sample_grey(dg[0], pts), backends[1].sample_grey(dc[0], pts)
    assert got.shape == (40, 50)
    np.testing.assert_allclose(got, ref, atol=0.01)  # both bilinear in float32, then BT.601


@pytest.mark.parametrize("size", [(1011, 637), (300, 200)])  # 300 wide: area pre-filter by 3
def test_warp_to_host_and_jpeg_match_the_cpu(backends, scenes, size) -> None:
    dg, dc = _pair(backends, scenes)
    quad = np.array([[40.0, 30.0], [600.0, 45.0], [590.0, 430.0], [35.0, 420.0]])
    hms = np.stack([homography(quad, size)] * 3)
    out = backends[0].warp(dg, hms, [size] * 3)
    assert all(isinstance(o, DeviceImage) for o in out)
    for got, ref in zip(backends[0].to_host(out), backends[1].warp(dc, hms, [size] * 3),
                        strict=True):
        assert got.shape == ref.shape == (size[1], size[0], 3)
        assert np.abs(got.astype(np.int16) - ref).mean() < 0.1  # OpenCV's 1/32 px grid
    data = backends[0].encode_jpeg(out + [np.zeros((8, 8, 3), np.uint8)], 90)
    assert ([simplejpeg.decode_jpeg_header(d)[:2] for d in data]
            == [(size[1], size[0])] * 3 + [(8, 8)])


def test_non_jpeg_and_corrupt_uploads_take_the_cpu_decoder(backends) -> None:
    img = sample(np.random.default_rng(3), size=(320, 240)).image
    png = EncodedImage.from_array(img)
    cut = _jpeg(img)
    bad = probe_image(cut[: len(cut) // 2], DS)
    d_png, d_bad = backends[0].decode([png, bad], None)
    assert isinstance(d_png, Decoded)
    np.testing.assert_array_equal(backends[0].to_host([d_png.pixels])[0], img)
    assert isinstance(d_bad, DecodeError) and d_bad.reason == ReasonCode.CORRUPT_IMAGE


class _StoredCodec:
    """A codec that leaves the EXIF orientation to the backend, as nvImageCodec is set up."""

    oriented = False

    def __init__(self, backend: GraphPixels) -> None:
        self.backend = backend

    def decode(self, datas):
        return [self.backend.upload(simplejpeg.decode_jpeg(d, colorspace="BGR")) for d in datas]

    def encode(self, images, quality):
        return [None for _ in images]


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_is_applied_on_the_device(orientation: int) -> None:
    img = sample(np.random.default_rng(4), size=(400, 300)).image
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    Image.fromarray(img[..., ::-1]).save(buf, "JPEG", quality=95, exif=exif.tobytes())
    up = probe_image(buf.getvalue(), DS)
    g = GraphPixels(RT, DS, device="cpu")
    g.codec = _StoredCodec(g)
    (d,) = g.decode([up], None)
    (ref,) = CpuPixels(DS, 1).decode([up], None)
    assert (d.width, d.height) == (ref.width, ref.height) == (up.width, up.height)
    np.testing.assert_array_equal(g.to_host([d.pixels])[0], ref.pixels)
    (data,) = g.encode_jpeg([d.pixels], 90)  # the codec gave none: encoded on the host, counted
    assert simplejpeg.decode_jpeg_header(data)[:2] == (ref.height, ref.width)
    assert g.fallbacks.snapshot()["counts"]["encode_host"] == 1


def test_batched_model_runs_a_device_batch_in_place_with_padding(backends, scenes) -> None:
    dg, dc = _pair(backends, scenes)
    m = BatchedModel(model_path("u2netp"), manifest()["u2netp"]["sha256"], RT, "u2netp",
                     make_batch_symbolic=True, outputs=1)
    m.buckets, m.chosen_bucket = (1, 2, 4), 2
    x = backends[0].model_input(dg, 320)  # capacity 4: chunks of 2 and 1, the 1 runs as 1
    (got,) = m.run(x)
    (ref,) = m.run(x.numpy())
    assert got.shape == (3, 1, 320, 320)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    m.buckets, m.chosen_bucket = (1, 4), 4  # one chunk of 3, padded to bucket 4 in place
    padded = m.stats.padded
    (got4,) = m.run(x)
    assert m.stats.padded - padded == 1  # the 4th (spare) row of the batch padded the chunk
    np.testing.assert_allclose(got4, ref, atol=1e-4)


def _ref_and_graph(make, task: str, n: int, seed: int):
    """Uploads of ``task`` and two processors: the CPU path, and the graph backend's."""
    items = [Item(f"{task[0]}{i}", probe_image(u, DS), {})
             for i, u in enumerate(synthetic_uploads(task, n, (800, 600), seed=seed))]
    ref, test = make(), make()
    test.pixels = GraphPixels(RT, DS, device="cpu")
    return items, ref, test


def test_card_processor_on_graph_pixels_matches_the_cpu_path() -> None:
    items, ref, test = _ref_and_graph(lambda: CardProcessor(CardSettings(), RT), "card", 3, 7)
    r = card_parity(items, ref, test)
    assert r["n"] == 3 and r["same_status"] == 3
    assert r["ok"], r
    c = r["checks"]
    assert c["decode_luma"]["value"] == c["decode_bgr"]["value"] == 0.0  # the host codec
    # one batch and the pixel checks: one model-input run and one stack each, for 3 images
    assert test.pixels.graph_runs["model_input"] == test.pixels.graph_runs["stack"] == 2
    assert test.pixels.graph_runs["working_grey"] == 1
    assert c["quad_px"]["value"] <= 1.0 and c["warp_luma"]["value"] <= 2 / 255


def test_idphoto_processor_on_graph_pixels_matches_the_cpu_path() -> None:
    items, ref, test = _ref_and_graph(lambda: IdPhotoProcessor(IdPhotoSettings(), RT),
                                      "id_photo", 2, 8)
    r = idphoto_parity(items, ref, test)
    assert r["same_status"] == 2 and r["ok"], r
    assert r["alpha_mad_max"] == 0.0  # the host codec decodes exactly as the CPU backend


def test_the_cuda_backend_refuses_to_start_without_the_cuda_provider() -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has ONNX Runtime's CUDA provider")
    with pytest.raises(ProviderError, match="device=cuda requested.*CUDAExecutionProvider"):
        CudaPixels(RuntimeSettings(device="cuda"), DS)
    with pytest.raises(ProviderError, match="device=cuda requested"):
        pixel_backend(RuntimeSettings(device="cuda"), DS)
    assert isinstance(pixel_backend(RuntimeSettings(device="auto"), DS), CpuPixels)


def test_each_step_is_one_graph_run_per_upload_size_in_any_order() -> None:
    """Interleaved sizes: the decode stacks each size in one buffer, and every later step runs
    once per size (not per image), its results back in the caller's order."""
    from processors.gpu.backend import runs

    rng = np.random.default_rng(21)
    sizes = [(640, 480), (320, 240), (640, 480), (320, 240), (640, 480)]
    ups = [probe_image(_jpeg(sample(rng, size=s).image), DS) for s in sizes]
    g, c = GraphPixels(RT, DS, device="cpu"), CpuPixels(DS, 1)
    dg, dc = g.decode(ups, None), c.decode(ups, None)
    assert g.graph_runs["stack"] == 2
    assert sorted(runs([d.pixels for d in dg])) == [[0, 2, 4], [1, 3]]
    x = g.model_input(dg, 320)
    assert g.graph_runs["model_input"] == 2 and x.order is not None
    levels = np.abs(x.numpy() - c.model_input(dc, 320)) * 0.229 * 255
    assert levels.max() <= 2.0 and levels.mean() < 0.35  # each image in its own row again
    for a, b in zip(g.working_grey(dg, 256), c.working_grey(dc, 256), strict=True):
        assert a.shape == b.shape and np.abs(a.astype(np.int16) - b).mean() < 0.2
    assert g.graph_runs["working_grey"] == 2
    quads = [np.array([[40.0, 30.0], [w - 60, 45.0], [w - 50, h - 40], [35.0, h - 50]])
             for w, h in sizes]
    out_sizes = [(300, 190)] * 4 + [(200, 126)]  # the last one: another output size
    hms = np.stack([homography(q, s) for q, s in zip(quads, out_sizes, strict=True)])
    warped = g.warp(dg, hms, out_sizes)
    host = g.to_host(warped)
    for got, ref, s in zip(host, c.warp(dc, hms, out_sizes), out_sizes, strict=True):
        assert got.shape == ref.shape == (s[1], s[0], 3)
        assert np.abs(got.astype(np.int16) - ref).mean() < 0.5  # another image: tens of levels
    # per size run: one warp per stretch of one pre-filter factor and output size
    assert g.graph_runs["warp"] == 3 and g.graph_runs["to_host"] == 3
    assert g.graph_runs["area"] <= g.graph_runs["warp"]


def test_a_device_batch_in_another_order_comes_back_in_the_callers(tmp_path) -> None:
    from tests.unit.test_runtime import _model

    m = BatchedModel(_model(tmp_path / "m.onnx"), None, RT, "m", make_batch_symbolic=True)
    rows = np.arange(4 * 3 * 4 * 4, dtype=np.float32).reshape(4, 3, 4, 4)
    value = ort.OrtValue.ortvalue_from_numpy(rows)
    x = DeviceBatch(value, 3, 4, "cpu", 0, order=(2, 0, 1))  # row 0 holds image 2, ...
    np.testing.assert_array_equal(x.numpy(), rows[[1, 2, 0]])
    (got,) = m.run(x)
    np.testing.assert_allclose(got, rows[[1, 2, 0]] * 2 + 1)


def test_stack_graph_is_the_images_in_one_batch() -> None:
    from processors.gpu.graphs import stack_graph
    from processors.gpu.ops import graph_session

    imgs = [np.random.default_rng(k).integers(0, 255, (1, 5, 7, 3), dtype=np.uint8)
            for k in range(3)]
    (out,) = graph_session(stack_graph(3)).run(None, {f"x{k}": im for k, im in enumerate(imgs)})
    np.testing.assert_array_equal(out, np.concatenate(imgs))
    with pytest.raises(ValueError, match="at least one image"):
        stack_graph(0)
