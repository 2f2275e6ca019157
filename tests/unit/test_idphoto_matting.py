"""Batched U2-Net masks equal rembg.remove(..., only_mask=True) per image; model file errors."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from skimage import data

from processors.errors import ModelError
from processors.idphoto.matting import REMBG_MODELS, U2NetMatting, resolve_model
from processors.models import model_home
from processors.runtime import RuntimeSettings


def _rgb(a: np.ndarray) -> np.ndarray:
    if a.dtype == bool:
        a = a.astype(np.uint8) * 255
    if a.ndim == 2:
        a = np.stack([a] * 3, axis=-1)
    return np.ascontiguousarray(a[..., :3])


def _images() -> dict[str, np.ndarray]:
    """10 RGB images: portraits, animals, objects, textures, a gray and a binary one, crops."""
    astro = data.astronaut()
    return {
        "astronaut": astro,
        "astronaut_crop": np.ascontiguousarray(astro[40:300, 120:330]),  # odd, non-square size
        "coffee": data.coffee(),
        "chelsea": data.chelsea(),
        "rocket": data.rocket(),
        "brick": _rgb(data.brick()),
        "grass": _rgb(data.grass()),
        "camera": _rgb(data.camera()),
        "horse": _rgb(data.horse()),
        "side_by_side": np.concatenate([astro, astro], axis=1),
    }


@pytest.fixture(scope="module")
def rembg_session():
    from rembg import new_session

    if not (model_home() / "u2netp.onnx").is_file():
        pytest.skip(f"u2netp.onnx not in {model_home()} (run `make models`)")
    # explicit session: rembg's default model would try a download
    return new_session("u2netp", providers=["CPUExecutionProvider"])


def test_batched_masks_equal_rembg_remove(rembg_session) -> None:
    from rembg import remove

    imgs = _images()
    n = len(imgs)
    # rembg's own arithmetic: the fp32 file (the CPU default is its int8 build, tested below)
    m = U2NetMatting("u2netp", RuntimeSettings(device="cpu", buckets=(1, n), cpu_max_bucket=n,
                                               precision="fp32"))
    calls0, images0 = m.model.stats.calls, m.model.stats.images  # the session is process-wide
    masks = m.predict([rgb[..., ::-1] for rgb in imgs.values()])  # BGR in
    assert m.model.stats.calls - calls0 == 1 and m.model.stats.images - images0 == n  # one call
    assert m.last_inference_ms > 0
    worst = {}
    for (name, rgb), mask in zip(imgs.items(), masks, strict=True):
        ref = np.asarray(remove(Image.fromarray(rgb), session=rembg_session, only_mask=True))
        assert mask.shape == ref.shape == rgb.shape[:2], name
        assert mask.dtype == np.uint8
        worst[name] = int(np.abs(mask.astype(np.int16) - ref.astype(np.int16)).max())
    assert max(worst.values()) <= 1, worst
    # the masks are real: the portrait is mostly person where the face is, brick is not a person
    a = masks[0]
    assert a[100:150, 200:250].mean() > 200
    assert masks[0].mean() > masks[5].mean()


def test_int8_build_keeps_the_portraits_masks() -> None:
    """The CPU default (``precision: auto``) loads ``u2netp.int8``: on the portraits its masks
    stay within 2.5 levels (mean over the mask) of the fp32 file's (measured 0.98, 2.19 and 1.48;
    the cat, not a portrait, 7.55)."""
    imgs = {k: v for k, v in _images().items() if k.startswith(("astronaut", "side_by_side"))}
    rt = RuntimeSettings(device="cpu", buckets=(1,))
    int8, fp32 = U2NetMatting("u2netp", rt), U2NetMatting("u2netp", rt.model_copy(
        update={"precision": "fp32"}))
    assert int8.path.name == "u2netp.int8.onnx" and fp32.path.name == "u2netp.onnx"
    bgr = [rgb[..., ::-1] for rgb in imgs.values()]
    for name, a, b in zip(imgs, int8.predict(bgr), fp32.predict(bgr), strict=True):
        assert float(np.abs(a.astype(np.int16) - b).mean()) <= 2.5, name


def test_missing_optional_model_names_the_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("U2NET_HOME", str(tmp_path))
    with pytest.raises(ModelError) as e:
        resolve_model("u2net_human_seg")
    assert str(tmp_path / REMBG_MODELS["u2net_human_seg"].file) in str(e.value)
    with pytest.raises(ModelError, match="unknown matting model"):
        resolve_model("birefnet")


def test_optional_model_is_checked_by_md5(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("U2NET_HOME", str(tmp_path))
    (tmp_path / "silueta.onnx").write_bytes(b"not the real weights")
    with pytest.raises(ModelError, match="md5"):
        resolve_model("silueta")


def test_zoom_box_only_for_a_small_person() -> None:
    from processors.idphoto.matting import ZOOM_PAD, Matte, zoom_box

    m = np.zeros((1800, 2400), np.uint8)
    assert zoom_box(Matte.of_mask(m), 0.6) is None  # no person
    m[1300:1800, 900:1400] = 255
    x0, y0, x1, y1 = zoom_box(Matte.of_mask(m), 0.6)
    pad = round(500 * ZOOM_PAD)
    assert (x0, y0, x1, y1) == (900 - pad, 1300 - pad, 1400 + pad, 1800)  # clipped at the bottom
    assert zoom_box(Matte.of_mask(m), 0.2) is None  # 650 px of 2400 is above a 0.2 share
    assert zoom_box(Matte.of_mask(m), 0.0) is None  # off
    big = np.zeros((512, 512), np.uint8)
    big[60:512, 100:420] = 255
    assert zoom_box(Matte.of_mask(big), 0.6) is None  # the person already fills the frame
    # measured on the model's 320 px matte of the upload: the same box to a px of that matte
    small = Matte(np.asarray(Image.fromarray(m).resize((320, 320), Image.Resampling.NEAREST)),
                  (0, 0, 2400, 1800), (1800, 2400))
    sx0, sy0, sx1, sy1 = zoom_box(small, 0.6)
    assert abs(sx0 - x0) <= 8 and abs(sy0 - y0) <= 6 and abs(sx1 - x1) <= 8 and sy1 == 1800


def test_matte_region_is_a_block_of_the_full_mask() -> None:
    """``Matte.region`` at source px equals the same pixels of rembg's full LANCZOS resize
    (within 1 level: PIL's fixed-point passes round a few px of a block differently), on the
    whole upload and on a zoomed crop's box; 0 outside the box."""
    import cv2

    from processors.idphoto.matting import Matte

    rng = np.random.default_rng(3)  # a smooth matte-like field (mattes have no pixel noise)
    small = cv2.normalize(cv2.GaussianBlur(rng.normal(0, 1, (320, 320)), (0, 0), 4), None, 0, 255,
                          cv2.NORM_MINMAX).astype(np.uint8)
    whole = Matte(small, (0, 0, 1600, 1200), (1200, 1600))
    full = np.asarray(Image.fromarray(small).resize((1600, 1200), Image.Resampling.LANCZOS))
    assert np.array_equal(whole.full(), full)
    def same(a: np.ndarray, b: np.ndarray) -> bool:
        d = np.abs(a.astype(int) - b.astype(int))
        return a.shape == b.shape and d.max() <= 1 and (d > 0).mean() < 0.001

    assert same(whole.region(700, 100, 860, 400), full[100:400, 700:860])
    crop = Matte(small, (400, 300, 1040, 1100), (1200, 1600))
    placed = np.zeros((1200, 1600), np.uint8)
    placed[300:1100, 400:1040] = np.asarray(
        Image.fromarray(small).resize((640, 800), Image.Resampling.LANCZOS))
    assert np.array_equal(crop.full(), placed)
    assert same(crop.region(350, 250, 600, 500), placed[250:500, 350:600])
    half = crop.region(400, 300, 1040, 1100, (320, 400))  # straight to half resolution
    assert half.shape == (400, 320)
    area = cv2.resize(placed[300:1100, 400:1040], (320, 400), interpolation=cv2.INTER_AREA)
    assert np.abs(half.astype(int) - area.astype(int)).max() <= 2
    turned = crop.rot90(1)
    d = np.abs(turned.full().astype(int) - np.rot90(placed, 1).astype(int))
    assert d.max() <= 2 and (d > 0).mean() < 0.05  # PIL runs its two passes in the other order


@pytest.mark.skipif(not (model_home() / "u2netp.onnx").is_file(), reason="run `make models`")
def test_zoomed_matte_of_a_small_person_matches_the_close_up() -> None:
    """The astronaut (512 px) on a 2400x1800 grey frame: the model sees her at ~68 px, and the
    plain matte has a wide soft band; the zoomed second look gives her close-up matte back."""
    from processors.idphoto.matting import Matte, zoom_box

    astro = np.ascontiguousarray(data.astronaut()[..., ::-1])
    frame = np.full((1800, 2400, 3), 128, np.uint8)
    frame[1288:, 944:1456] = astro
    m = U2NetMatting("u2netp", RuntimeSettings(device="cpu", buckets=(1, 2)))
    close_up = m.predict([astro])[0]
    plain = m.predict([frame])[0]
    uploads = [frame, astro]

    def crops(boxes):
        return m.host_input([uploads[i][y0:y1, x0:x1] for i, (x0, y0, x1, y1) in boxes])

    zoomed = [z.full() for z in m.predict_zoomed(m.host_input(uploads),
                                                 [u.shape[:2] for u in uploads], 0.6, crops)]

    def soft(a: np.ndarray) -> int:
        return int(((a > 20) & (a < 235)).sum())

    assert np.array_equal(zoomed[1], close_up)  # a large person: the first matte, untouched
    z = zoomed[0]
    assert soft(z) * 4 < soft(plain)  # the halo: 77k soft px -> 12k
    x0, y0, x1, y1 = zoom_box(Matte.of_mask(plain), 0.6)
    assert 0 < x0 < 944 and 0 < y0 < 1288 and 1456 < x1 < 2400 and y1 == 1800
    outside = z.copy()
    outside[y0:y1, x0:x1] = 0
    assert not outside.any()  # the first matte's halo is gone outside the crop
    inside = z[1288:, 944:1456]
    agree = np.logical_xor(inside > 128, close_up > 128).sum() / (close_up > 128).sum()
    assert agree < 0.03, agree  # the same person mask as the close-up, within 3 %
