"""Person matte with rembg's U2-Net family, run once per batch.

rembg runs its U2-Net sessions one image at a time on a graph whose input is fixed at
``[1,3,320,320]``. Here the same graph is loaded through :class:`processors.runtime.BatchedModel`
with the leading dim rewritten to a symbolic batch, and every image is pre- and post-processed
exactly as rembg 2.0.86 does (``rembg/sessions/base.py`` ``BaseSession.normalize`` and
``rembg/sessions/u2net*.py`` ``predict``), so a batched mask equals
``rembg.remove(img, session=new_session(name), only_mask=True)`` per image (up to 1 level of
0..255 where batched convolutions round differently).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from processors.base import map_in_threads
from processors.errors import ModelError
from processors.models import manifest, model_home, pinned_model
from processors.pixels import normalise_rgb
from processors.runtime import BatchedModel, RuntimeSettings

#: U2-Net input side (px); rembg's ``(320, 320)``.
MATTE_SIDE = 320


@dataclass(frozen=True, slots=True)
class RembgModelFile:
    """A rembg release model file.

    Attributes:
        file: file name in the model home (rembg's ``{name}.onnx``).
        md5: hex MD5 rembg's ``download_models`` checks (``rembg/sessions/{name}.py``, rembg
            2.0.86); their SHA-256 are not known offline, so files not pinned in
            ``models.json`` are verified by this MD5, as rembg itself does.
    """

    file: str
    md5: str


#: rembg's U2-Net family (same pre/post-processing). Source: rembg 2.0.86 ``sessions/*.py``.
REMBG_MODELS: dict[str, RembgModelFile] = {
    "u2netp": RembgModelFile("u2netp.onnx", "8e83ca70e441ab06c318d82300c84806"),
    "u2net": RembgModelFile("u2net.onnx", "60024c5c889badc19c04ad937298a77b"),
    "u2net_human_seg": RembgModelFile("u2net_human_seg.onnx", "c09ddc2e0104f800e3e1bb4652583d1f"),
    "silueta": RembgModelFile("silueta.onnx", "55e59e0d8062d2f5d013f4725ee84782"),
}


def _md5_file(path: Path) -> str:
    h = hashlib.md5()  # integrity check matching rembg's own pin, not security
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_model(name: str, runtime: RuntimeSettings | None = None) -> tuple[Path, str | None]:
    """Locate and verify the file of matting model ``name``.

    Models pinned in ``processors/models.json`` are verified by SHA-256 (``model_path``), in
    ``runtime``'s precision where they have an int8 build (:func:`processors.models.pinned_model`);
    the other rembg models by their MD5 from :data:`REMBG_MODELS`.

    Returns:
        ``(path, sha256)``: ``sha256`` is the pinned digest for :class:`BatchedModel` to check, or
        None when the file was verified here by MD5.

    Raises:
        ModelError: unknown name, missing file (the message names the expected path), or a
            digest mismatch.
    """
    if name in manifest():
        return pinned_model(name, runtime=runtime)
    spec = REMBG_MODELS.get(name)
    if spec is None:
        raise ModelError(f"unknown matting model {name!r}; known: {sorted(REMBG_MODELS)}")
    path = model_home() / spec.file
    if not path.is_file():
        raise ModelError(
            f"matting model {name!r} needs the file {path} (rembg release {spec.file}, "
            f"md5 {spec.md5}); it is not present — put it there or choose model 'u2netp'"
        )
    got = _md5_file(path)
    if got != spec.md5:
        raise ModelError(f"model file {path} has md5 {got}, expected rembg's {spec.md5}")
    return path, None


def preprocess(image_bgr: np.ndarray) -> np.ndarray:
    """rembg's ``BaseSession.normalize`` for one image.

    Args:
        image_bgr: ``(H, W, 3) uint8`` BGR.

    Returns:
        ``(3, 320, 320) float32``: RGB resized with PIL LANCZOS to 320x320, divided by the
        resized image's maximum, then ``(x - mean) / std`` per channel (ImageNet constants), in
        float32 (rembg computes in float64 and casts: the same input to 1e-7, the same masks).
    """
    # LANCZOS works per channel: resize the BGR bytes as they are, swap on the small result
    im = Image.fromarray(np.ascontiguousarray(image_bgr), mode="RGB")
    return normalise_rgb(np.asarray(im.resize((MATTE_SIDE, MATTE_SIDE), Image.Resampling.LANCZOS)))


def normalise(pred: np.ndarray) -> np.ndarray:
    """rembg's U2-Net ``predict`` output handling, before the resize to the source size.

    Args:
        pred: ``(320, 320) float32`` first output's channel 0 (``d0``, sigmoid).

    Returns:
        ``(320, 320) uint8``: per-image min-max to [0, 1], ``* 255`` truncated to uint8; all
        zero for a constant prediction.
    """
    ma = np.max(pred)
    mi = np.min(pred)
    if ma > mi:
        norm = (pred - mi) / (ma - mi)
        return (norm.clip(0, 1) * 255).astype("uint8")
    return np.zeros(pred.shape, dtype=np.uint8)


def postprocess(pred: np.ndarray, width: int, height: int) -> np.ndarray:
    """rembg's U2-Net ``predict`` output handling for one image.

    Args:
        pred: ``(320, 320) float32`` first output's channel 0 (``d0``, sigmoid).
        width, height: source size (px).

    Returns:
        ``(height, width) uint8`` mask: :func:`normalise`, then PIL LANCZOS resize to the source
        size.
    """
    small = Image.fromarray(normalise(pred), mode="L")
    return np.asarray(small.resize((width, height), Image.Resampling.LANCZOS))


@dataclass(frozen=True, slots=True)
class Matte:
    """A person matte kept at the model's resolution and placed on the upload.

    The mask rembg would return for the upload is :attr:`small` resized with PIL LANCZOS onto
    :attr:`box` and 0 elsewhere; nothing here computes it whole: :meth:`region` resamples only
    the part a step needs, at the resolution it needs.

    Attributes:
        small: ``(h, w) uint8`` the normalised prediction (:func:`normalise`; 320x320 for U2-Net).
        box: ``(x0, y0, x1, y1)`` source px (exclusive ends) that ``small`` covers: the whole
            upload, or the crop of a zoomed second look.
        source_hw: ``(H, W)`` of the upload (px).
    """

    small: np.ndarray
    box: tuple[float, float, float, float]
    source_hw: tuple[int, int]

    @classmethod
    def of_mask(cls, mask: np.ndarray) -> Matte:
        """A matte that is a full-resolution ``(H, W) uint8`` mask (its own box)."""
        h, w = mask.shape
        return cls(mask, (0, 0, w, h), (h, w))

    def region(self, x0: float, y0: float, x1: float, y1: float,
               size: tuple[int, int] | None = None) -> np.ndarray:
        """The upload's mask over source px ``[x0, x1) x [y0, y1)``, resampled to ``size``.

        With ``size`` None (integer bounds, one px per source px) the values equal those of the
        full LANCZOS resize at the same pixels (PIL computes each output pixel from its own
        centre, so a ``box`` resize is a sub-block of the full one). With a smaller ``size`` the
        same filter resamples straight to it (no full-resolution detour).

        Args:
            x0, y0, x1, y1: source px (floats allowed; ``x1 > x0``, ``y1 > y0``).
            size: ``(width, height)`` of the result (px); None: ``(x1 - x0, y1 - y0)`` rounded.

        Returns:
            ``(height, width) uint8``; 0 outside :attr:`box`.
        """
        w, h = size or (max(1, round(x1 - x0)), max(1, round(y1 - y0)))
        out = np.zeros((h, w), np.uint8)
        bx0, by0, bx1, by1 = self.box
        ix0, iy0, ix1, iy1 = max(x0, bx0), max(y0, by0), min(x1, bx1), min(y1, by1)
        kx, ky = w / (x1 - x0), h / (y1 - y0)  # result px per source px
        ox0, oy0 = round((ix0 - x0) * kx), round((iy0 - y0) * ky)
        ox1, oy1 = round((ix1 - x0) * kx), round((iy1 - y0) * ky)
        if ox1 <= ox0 or oy1 <= oy0:
            return out
        # source px of the result's pixel edges inside the box, then small px
        sx, sy = self.small.shape[1] / (bx1 - bx0), self.small.shape[0] / (by1 - by0)
        ex0, ex1 = x0 + ox0 / kx, x0 + ox1 / kx
        ey0, ey1 = y0 + oy0 / ky, y0 + oy1 / ky
        sbox = (min(max((ex0 - bx0) * sx, 0.0), self.small.shape[1]),
                min(max((ey0 - by0) * sy, 0.0), self.small.shape[0]),
                min(max((ex1 - bx0) * sx, 0.0), self.small.shape[1]),
                min(max((ey1 - by0) * sy, 0.0), self.small.shape[0]))
        im = Image.fromarray(self.small, mode="L")
        out[oy0:oy1, ox0:ox1] = np.asarray(
            im.resize((ox1 - ox0, oy1 - oy0), Image.Resampling.LANCZOS, box=sbox))
        return out

    def full(self) -> np.ndarray:
        """The whole ``(H, W) uint8`` mask (rembg's; for tests and tools, not the hot path)."""
        h, w = self.source_hw
        return self.region(0, 0, w, h)

    def coverage(self, x: float, y: float, w: float, h: float) -> float:
        """Mean matte (0..1) inside a source-px box, on :attr:`small` (nearest px rows and
        columns; 0 outside :attr:`box`)."""
        bx0, by0, bx1, by1 = self.box
        sx, sy = self.small.shape[1] / (bx1 - bx0), self.small.shape[0] / (by1 - by0)
        c0, c1 = round((x - bx0) * sx), round((x + w - bx0) * sx)
        r0, r1 = round((y - by0) * sy), round((y + h - by0) * sy)
        area = max(1, (c1 - c0) * (r1 - r0))
        roi = self.small[max(r0, 0):max(r1, 0), max(c0, 0):max(c1, 0)]
        return float(roi.sum(dtype=np.int64)) / 255.0 / area

    def rot90(self, turns: int) -> Matte:
        """This matte for ``np.rot90(upload, turns)`` (quarter turns counter-clockwise)."""
        k = turns % 4
        h, w = self.source_hw
        x0, y0, x1, y1 = self.box
        box = [(x0, y0, x1, y1), (y0, w - x1, y1, w - x0), (w - x1, h - y1, w - x0, h - y0),
               (h - y1, x0, h - y0, x1)][k]
        hw = (h, w) if k % 2 == 0 else (w, h)
        return Matte(np.ascontiguousarray(np.rot90(self.small, k)), box, hw)


#: ``crop_input([(upload index, (x0, y0, x1, y1) source px), ...])``: the ``(K, 3, 320, 320)
#: float32`` model input of those boxes, each resized to 320x320 as a whole image would be.
CropInput = Callable[[Sequence[tuple[int, tuple[int, int, int, int]]]], np.ndarray]

ZOOM_PAD = 0.15
"""Margin added on every side of the person's box for the zoomed second look, as a share of
the box's longer side (hair and shoulders the first, coarse matte under-reached)."""
ZOOM_FLOOR = 32
"""Matte value (0..255) from which the first matte's pixels count for the person's box: low, so
faint hair and arms stay inside the zoomed crop."""


def zoom_box(matte: Matte, max_share: float) -> tuple[int, int, int, int] | None:
    """The crop for a second, zoomed matte when the person is small in the frame.

    Args:
        matte: first matte of the whole image (measured on its model-resolution
            :attr:`~Matte.small`).
        max_share: zoom only when the padded box's longer side is at most this share of the
            image's longer side (the second look then has at least ``1 / max_share`` times the
            model's resolution on the person); 0 never zooms.

    Returns:
        ``(x0, y0, x1, y1)`` source px (exclusive ends): the person's box (pixels >=
        :data:`ZOOM_FLOOR`) squared up and padded by :data:`ZOOM_PAD`, clipped to the image; or
        None (no person, or already large enough).
    """
    if max_share <= 0:
        return None
    person = matte.small >= ZOOM_FLOOR
    rows, cols = np.flatnonzero(person.any(axis=1)), np.flatnonzero(person.any(axis=0))
    if not len(rows):
        return None
    h, w = matte.source_hw
    sx, sy = w / matte.small.shape[1], h / matte.small.shape[0]  # source px per small px
    bx0, bx1 = int(cols[0]) * sx, (int(cols[-1]) + 1) * sx
    by0, by1 = int(rows[0]) * sy, (int(rows[-1]) + 1) * sy
    side = max(bx1 - bx0, by1 - by0) * (1 + 2 * ZOOM_PAD)
    if side > max_share * max(h, w):
        return None
    cx, cy = (bx0 + bx1) / 2, (by0 + by1) / 2
    x0, y0 = max(0, round(cx - side / 2)), max(0, round(cy - side / 2))
    x1, y1 = min(w, round(cx + side / 2)), min(h, round(cy + side / 2))
    return (x0, y0, x1, y1) if x1 - x0 >= 8 and y1 - y0 >= 8 else None


class U2NetMatting:
    """Batched person matte with a rembg U2-Net model.

    Args:
        name: ``u2netp`` (default, pinned), ``u2net``, ``u2net_human_seg`` or ``silueta``.
        runtime: ONNX Runtime settings (provider, buckets, threads).

    Raises:
        ModelError: the model file is unknown, missing (named in the message) or fails its pin.
        ProviderError: CUDA asked for but not active.
    """

    def __init__(self, name: str, runtime: RuntimeSettings) -> None:
        path, sha256 = resolve_model(name, runtime)
        self.name = name
        self.path = path
        self.sha256 = sha256  # pinned digest, or None for models without one
        self.model = BatchedModel.shared(path, sha256, runtime, name, make_batch_symbolic=True,
                                         outputs=1, input_shape=(3, MATTE_SIDE, MATTE_SIDE))
        self.threads = runtime.postprocess_threads
        self.last_inference_ms = 0.0

    @property
    def provider(self) -> str:
        """Execution provider ONNX Runtime actually uses (``CPUExecutionProvider``...)."""
        return self.model.provider

    def warm_up(self) -> int:
        """Run every batch bucket once and choose the best; returns the chosen bucket."""
        return self.model.warm_up()

    def predict_input(self, x: np.ndarray, boxes: Sequence[tuple[float, float, float, float]],
                      source_hws: Sequence[tuple[int, int]]) -> list[Matte]:
        """Mattes from a prepared batch with one batched model call (split only by the bucket).

        Args:
            x: ``(N, 3, 320, 320) float32`` model input (:func:`preprocess` per image, or a pixel
                backend's ``model_input``).
            boxes: source px ``(x0, y0, x1, y1)`` each input image covers.
            source_hws: ``(H, W)`` of each upload (px).

        Returns:
            N :class:`Matte` at the model's resolution. ``last_inference_ms`` holds the wall
            time (ms) of the model call.
        """
        t0 = time.perf_counter()
        d0 = self.model.run(x)[0]
        self.last_inference_ms = (time.perf_counter() - t0) * 1000.0
        return [Matte(normalise(d0[i, 0]), boxes[i], source_hws[i]) for i in range(len(boxes))]

    def host_input(self, images_bgr: Sequence[np.ndarray]) -> np.ndarray:
        """rembg's input for host images: :func:`preprocess` each (on the thread pool), stacked
        ``(N, 3, 320, 320) float32``."""
        return np.stack(map_in_threads(preprocess, images_bgr, self.threads))

    def predict(self, images_bgr: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Full-size masks for N host images with one batched model call.

        Args:
            images_bgr: N >= 1 images, each ``(H_i, W_i, 3) uint8`` BGR.

        Returns:
            N masks, each ``(H_i, W_i) uint8`` (0 background .. 255 person), equal to rembg's
            ``remove(..., only_mask=True)`` per image within 1 level.
        """
        if not images_bgr:
            return []
        hws = [im.shape[:2] for im in images_bgr]
        mattes = self.predict_input(self.host_input(images_bgr),
                                    [(0, 0, w, h) for h, w in hws], hws)
        return [m.full() for m in mattes]

    def predict_zoomed(self, x: np.ndarray, source_hws: Sequence[tuple[int, int]],
                       max_share: float, crop_input: CropInput) -> list[Matte]:
        """Mattes of N uploads, then a second look at the people who are small in their frame.

        The model sees every upload at 320x320 px, so a person filling a fifth of a 2400 px
        frame gets about 64 px of it and a soft, haloed edge. For those uploads (see
        :func:`zoom_box`), the padded box around the person is matted again in one more batched
        call, and that matte replaces the first (outside the box the person is not: 0). Uploads
        whose person is already large cost nothing more.

        Args:
            x: ``(N, 3, 320, 320) float32`` model input of the whole uploads.
            source_hws: ``(H, W)`` of each upload (px).
            max_share: see :func:`zoom_box` (0: never zoom).
            crop_input: the model input of boxes of some uploads (:data:`CropInput`).

        Returns:
            N :class:`Matte` in source px. ``last_inference_ms`` adds both calls (ms).
        """
        mattes = self.predict_input(x, [(0, 0, w, h) for h, w in source_hws], source_hws)
        boxes = [(i, b) for i, m in enumerate(mattes) if (b := zoom_box(m, max_share)) is not None]
        if not boxes:
            return mattes
        first_ms = self.last_inference_ms
        zoomed = self.predict_input(crop_input(boxes), [b for _, b in boxes],
                                    [source_hws[i] for i, _ in boxes])
        for (i, _), m in zip(boxes, zoomed, strict=True):
            mattes[i] = m
        self.last_inference_ms += first_ms
        return mattes
