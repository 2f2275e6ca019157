"""The GPU path's pixel graphs on ONNX Runtime's CPU provider, against OpenCV and Pillow.

The same graphs run on the CUDA provider on a GPU host (``tests/unit/test_gpu_parity.py``);
here they are checked against the CPU path's own functions on the same pixels.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from processors.card.detect import preprocess as card_preprocess
from processors.card.rectify import homography
from processors.card.training.synth import sample
from processors.gpu.graphs import prep_graph, warp_graph
from processors.gpu.ops import GraphOps
from processors.gpu.resample import area_weights, lanczos_weights, resize_weights
from processors.idphoto.framing import Frame
from processors.idphoto.framing import warp as frame_warp
from processors.idphoto.matting import preprocess as matte_preprocess
from processors.pixels import warp_host


@pytest.fixture(scope="module")
def ops() -> GraphOps:
    return GraphOps(threads=1)


def _noise(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    img = np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)
    return cv2.GaussianBlur(img, (0, 0), 1.5).reshape(img.shape) if min(h, w) > 16 else img


@pytest.mark.parametrize("src_hw", [(600, 800), (481, 641), (640, 480), (200, 400), (37, 41),
                                    (100, 900), (320, 320)])
def test_area_weights_reproduce_opencv_inter_area(src_hw: tuple[int, int]) -> None:
    img = _noise(*src_hw)
    ref = cv2.resize(img, (320, 320), interpolation=cv2.INTER_AREA).astype(np.float64)
    ry, rxt = resize_weights("area", src_hw, (320, 320))
    out = np.clip(np.rint(np.einsum("yH,HWc,Wx->yxc", ry, img.astype(np.float64), rxt,
                                    optimize=True)), 0, 255)
    diff = np.abs(out - ref)
    assert diff.max() <= 1.0  # OpenCV's fixed-point rounding against ours
    assert diff.mean() < 0.15


@pytest.mark.parametrize("src_hw", [(600, 800), (300, 1000), (90, 100)])
def test_lanczos_weights_reproduce_pillow_two_pass_resize(src_hw: tuple[int, int]) -> None:
    img = _noise(*src_hw, seed=1)
    ref = np.asarray(Image.fromarray(img).resize((320, 320), Image.Resampling.LANCZOS), np.float64)
    ly, lx = lanczos_weights(src_hw[0], 320), lanczos_weights(src_hw[1], 320)
    tmp = np.clip(np.rint(np.einsum("HWc,xW->Hxc", img.astype(np.float64), lx)), 0, 255)
    out = np.clip(np.rint(np.einsum("yH,Hxc->yxc", ly, tmp)), 0, 255)
    diff = np.abs(out - ref)
    assert diff.max() <= 1.0  # Pillow's 22-bit fixed-point coefficients against float64
    assert diff.mean() < 0.01


def test_weights_rows_sum_to_one_and_reject_bad_lengths() -> None:
    for w in (area_weights(1200, 320), area_weights(100, 320), lanczos_weights(1600, 320),
              lanczos_weights(50, 320)):
        np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match=">= 1"):
        area_weights(0, 320)
    with pytest.raises(ValueError, match="area or lanczos"):
        resize_weights("cubic", (10, 10), (5, 5))


def test_prep_graph_equals_card_preprocess(ops: GraphOps) -> None:
    s = sample(np.random.default_rng(3), size=(800, 600))
    other = _noise(333, 517, seed=2)
    x = ops.prep([s.image, other, s.image], kind="area")
    assert x.shape == (3, 3, 320, 320) and x.dtype == np.float32
    for got, im in zip(x, [s.image, other, s.image], strict=True):
        ref = card_preprocess(im)
        # one input level is 1/255/0.225 ~ 0.017 in normalised units
        assert np.abs(got - ref).max() < 0.02
        assert np.abs(got - ref).mean() < 1e-3


def test_prep_graph_equals_rembg_normalize(ops: GraphOps) -> None:
    im = _noise(450, 380, seed=4)
    got = ops.prep([im], kind="lanczos")[0]
    ref = matte_preprocess(im)
    # Pillow 13 runs the vertical pass first for some sizes (this one; its rule is not
    # established here) and the graph always runs the horizontal one first: the rounding in
    # between then differs by a level, up to 3 levels after the second pass (0.052 normalised)
    levels = np.abs(got - ref) * np.array([0.229, 0.224, 0.225])[:, None, None] * 255
    assert levels.max() <= 3.0
    assert levels.mean() < 0.3


def test_prep_graph_divides_by_the_image_maximum() -> None:
    """A dark image is stretched to its own maximum (rembg's ``/ max``), not to 255."""
    from processors.gpu.ops import graph_session

    sess = graph_session(prep_graph(side=4, mean=(0, 0, 0), std=(1, 1, 1)))
    img = np.full((1, 8, 8, 3), 50, np.uint8)
    img[0, 0, 0, 0] = 100
    ry, rxt = resize_weights("area", (8, 8), (4, 4))
    x = sess.run(None, {"image": img, "ry": ry, "rxt": rxt})[0]
    assert x.shape == (1, 3, 4, 4)
    peak = 62.0  # the 2x2 cell with the 100: (50 * 3 + 100) / 4 = 62.5, rounded half to even
    assert x[0, 0, 0, 0] == pytest.approx(1.0)
    np.testing.assert_allclose(x[0, 1], 50 / peak, rtol=1e-6)  # the whole image's maximum


def test_warp_graph_matches_the_cpu_card_warp(ops: GraphOps) -> None:
    s = sample(np.random.default_rng(5), size=(800, 600), doc_type="id_card")
    size = (505, 318)
    hom = homography(s.quad, size)
    ref = warp_host(s.image, hom, size)
    got = ops.warp(s.image, hom, (size[1], size[0]))
    assert got.shape == ref.shape
    mad = np.abs(got.astype(np.int16) - ref.astype(np.int16)).mean() / 255.0
    assert mad <= 2 / 255  # the parity bound of the rectified card
    assert mad < 0.5 / 255  # what it is: OpenCV's 1/32 px coordinate grid against float


def test_warp_graph_bicubic_zeros_matches_idphoto_frame_warp(ops: GraphOps) -> None:
    img = _noise(300, 240, seed=6)
    frame = Frame(x0=-20.5, y0=30.25, scale=1.7, width=200, height=260)  # runs off the left edge
    ref = frame_warp(img, frame)
    hom = np.array([[1 / frame.scale, 0, frame.x0], [0, 1 / frame.scale, frame.y0], [0, 0, 1]])
    got = ops.warp(img, hom, (frame.height, frame.width), mode="bicubic", padding="zeros")
    diff = np.abs(got.astype(np.int16) - ref.astype(np.int16))
    assert (got[:, :30] == 0).all() and (ref[:, :30] == 0).all()  # outside the upload is 0
    assert diff.mean() < 1.0


def test_resample_graph_one_channel_matches_opencv(ops: GraphOps) -> None:
    matte = _noise(400, 300, c=1, seed=7)[..., 0]
    got = ops.resample(matte, (133, 100), kind="area")
    ref = cv2.resize(matte, (100, 133), interpolation=cv2.INTER_AREA)
    assert got.shape == ref.shape == (133, 100)
    assert np.abs(got.astype(np.int16) - ref.astype(np.int16)).max() <= 1


def test_warp_graph_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError, match="bilinear or bicubic"):
        warp_graph(mode="nearest-ish")
    with pytest.raises(ValueError, match="border or zeros"):
        warp_graph(padding="mirror")
