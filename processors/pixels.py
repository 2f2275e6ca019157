"""Pixel backends: the image work around the model, on the CPU or (a drop-in) on a GPU.

A processor receives :class:`~processors.decode.EncodedImage` uploads (bytes + validated
header) and asks its :class:`PixelBackend` for exactly the pixel work its pipeline needs:

1. :meth:`PixelBackend.decode`: the uploads, decoded at a requested long side (a JPEG at the
   smallest libjpeg DCT scale that keeps it) or at full resolution, one :class:`Decoded` handle
   each; bad data is a :class:`~processors.errors.DecodeError` in its place, never raised.
2. :meth:`PixelBackend.model_input`: the batch as the U²-Net input, ``(N, 3, S, S) float32``.
3. :meth:`PixelBackend.working_grey`: host grey copies for the CPU geometry (the card's quad
   search), ``(h, w) uint8`` at a long side of at most ``max_side`` (:func:`working_size`).
4. :meth:`PixelBackend.sample_grey`: bilinear grey samples of the decoded image at given points
   (the card's sub-pixel edge fit, a few thousand points per image).
5. :meth:`PixelBackend.warp`: the batched perspective warp, one ``3 x 3`` homography and output
   size per image (the rectified card).
6. :meth:`PixelBackend.to_host`: host copies of backend images (a small warped thumbnail for
   the orientation and quality checks; a full decoded image where a CPU step needs it).
7. :meth:`PixelBackend.encode_jpeg`: the warped outputs as JPEG bytes.

Everything else (quad geometry, verdicts, the orientation decision on a small host thumbnail)
runs on host arrays of at most ``max_side`` px and never touches the full-resolution pixels.

Backends: ``cpu`` (:class:`CpuPixels`, OpenCV/NumPy/libjpeg-turbo, always available) and
``cuda`` (:class:`processors.gpu.backend.CudaPixels`: nvImageCodec decode/encode, the resize,
grey, sampling and warp steps as ONNX graphs on the CUDA execution provider; nvImageCodec needs
a CUDA device even to import, so it is imported only when the backend is built).
:func:`pixel_backend` picks one from ``RuntimeSettings.device``. To add a backend: implement the
protocol in its own module (same shapes, dtypes and sampling rules, checked by the parity tests
against :class:`CpuPixels`), import its third-party packages inside that module only, and add it
to ``BACKENDS``.

Coordinates: pixel centres at integers (OpenCV's convention); a decoded point ``p`` is
``(p + 0.5) / scale - 0.5`` in the upload's displayed px (:attr:`Decoded.scale`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import cv2
import numpy as np
import structlog

from processors.base import map_in_threads
from processors.decode import DecodeSettings, EncodedImage, decode_probed
from processors.errors import DecodeError, ProviderError
from processors.runtime import RuntimeSettings
from processors.tracing import DECODE, span

log = structlog.get_logger("cardstream.pixels")

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
"""ImageNet channel statistics (RGB), as used by rembg's sessions."""

GREY_BGR = np.array([0.114, 0.587, 0.299], np.float32)
"""ITU-R BT.601 luma weights in B, G, R order (OpenCV's ``COLOR_BGR2GRAY``)."""

BACKENDS: dict[str, str] = {"cpu": "processors.pixels:CpuPixels",
                            "cuda": "processors.gpu.backend:CudaPixels"}
"""Backend name -> ``module:class``; the module is imported only when the backend is chosen."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded upload, held by its backend.

    Attributes:
        pixels: the backend's image. :class:`CpuPixels`: ``(height, width, 3) uint8`` BGR
            C-contiguous ``np.ndarray``; a GPU backend: its device buffer (only that backend
            reads it).
        width: decoded width (px).
        height: decoded height (px).
        scale: decoded px per upload px (1.0 at full resolution; M/8 for a DCT-scaled JPEG).
    """

    pixels: Any
    width: int
    height: int
    scale: float


@runtime_checkable
class PixelBackend(Protocol):
    """The pixel work a processor delegates (module docstring). Methods take a batch and return
    one result per image, in order; a backend may run them on threads or on a device."""

    name: str

    def decode(self, images: Sequence[EncodedImage], long_side: int | None
               ) -> list[Decoded | DecodeError]:
        """Decode each upload, upright (EXIF orientation applied), alpha flattened.

        Args:
            images: probed uploads.
            long_side: long side (px) the caller needs at least; None for full resolution. A
                backend decodes JPEG at the smallest scale M/8 (M = 1..8) whose long side is at
                least this (libjpeg-turbo's DCT scaling), other formats at full resolution; a
                backend that cannot scale returns full resolution (scale 1.0).

        Returns:
            A :class:`Decoded` per image, or the :class:`DecodeError` (``CORRUPT_IMAGE``,
            ``IMAGE_TOO_LARGE``) that refused it.
        """
        ...

    def model_input(self, images: Sequence[Decoded], side: int) -> Any:
        """The U²-Net input of the batch, prepared as rembg's ``normalize``: RGB, resized to
        ``side x side`` by area averaging (aspect not kept), divided by its maximum, minus the
        ImageNet mean, over the ImageNet std.

        Returns:
            ``(N, 3, side, side) float32`` that this backend's ``BatchedModel.run`` takes
            (:class:`CpuPixels`: a C-contiguous ``np.ndarray``).
        """
        ...

    def working_grey(self, images: Sequence[Decoded], max_side: int | None) -> list[np.ndarray]:
        """Host grey copies (BT.601) for CPU work: ``(h, w) uint8`` ``np.ndarray`` of size
        :func:`working_size` ``(width, height, max_side)`` (None: the decoded size), resized as
        :func:`shrink` does."""
        ...

    def sample_grey(self, image: Decoded, points: np.ndarray) -> np.ndarray:
        """Bilinear samples of the image's grey (BT.601, :data:`GREY_BGR`; not rounded) at
        ``points`` ``(..., 2) float32`` (x, y decoded px), coordinates clamped to the image
        (border replicated). Returns ``points.shape[:-1] float32`` grey levels 0..255."""
        ...

    def warp(self, images: Sequence[Decoded], homographies: np.ndarray,
             sizes: Sequence[tuple[int, int]]) -> list[Any]:
        """Perspective warps, bilinear, border replicated.

        Args:
            images: decoded images.
            homographies: ``(N, 3, 3) float64``; ``H[k]`` maps output px ``(x, y, 1)`` of image
                ``k`` to its decoded px (the inverse map, as ``cv2.WARP_INVERSE_MAP``).
            sizes: output ``(width, height)`` px per image.

        When the warped region is more than twice as wide as its output (mean length of the
        images of the output's top and bottom edges), the source is first area-averaged by the
        integer factor ``ceil(width / (2 * output width))`` (anti-aliasing).

        Returns:
            The backend's images (:class:`CpuPixels`: ``(h, w, 3) uint8`` BGR arrays).
        """
        ...

    def to_host(self, images: Sequence[Any]) -> list[np.ndarray]:
        """Host copies ``(h, w, 3) uint8`` BGR ``np.ndarray`` of backend images (those returned by
        :meth:`warp`, or :attr:`Decoded.pixels`)."""
        ...

    def encode_jpeg(self, images: Sequence[Any], quality: int) -> list[bytes]:
        """Baseline JPEG (4:2:0, ``quality`` 1..100, libjpeg's quality scale) of each image
        returned by :meth:`warp`."""
        ...


def working_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """Size ``(w, h)`` of a working copy of a ``width x height`` image with a long side of at most
    ``max_side`` px: scale ``s = min(1, max_side / max(width, height))``, each side
    ``max(1, round(side * s))``."""
    if max_side is None or max(width, height) <= max_side:
        return width, height
    s = max_side / max(width, height)
    return max(1, round(width * s)), max(1, round(height * s))


def shrink(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Downscale ``image`` (``(H, W[, C]) uint8``) to ``size`` = ``(w, h)`` px cheaply with little
    aliasing: halved by 2 x 2 area averaging (OpenCV's vectorised fast path) while both sides stay
    at or above the target, then bilinear for what remains. An image already at ``size`` is
    returned as is (not copied)."""
    h, w = image.shape[:2]
    while w >= 2 * size[0] and h >= 2 * size[1] and (w, h) != size:
        image = cv2.resize(image, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
        h, w = image.shape[:2]
    if (w, h) == size:
        return image
    return cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)


def normalise_rgb(small_bgr: np.ndarray) -> np.ndarray:
    """``(S, S, 3) uint8`` BGR -> ``(3, S, S) float32`` U²-Net input: RGB, divided by its maximum,
    ImageNet mean/std (rembg's ``normalize``)."""
    peak = max(float(small_bgr.max()), 1e-6)
    out = np.empty((3, *small_bgr.shape[:2]), np.float32)
    for c, plane in enumerate(cv2.split(small_bgr)[::-1]):  # B, G, R planes -> R, G, B
        # (x / peak - mean) / std as one multiply and one subtraction per pixel
        np.multiply(plane, 1.0 / (peak * IMAGENET_STD[c]), out=out[c], dtype=np.float32)
        out[c] -= IMAGENET_MEAN[c] / IMAGENET_STD[c]
    return out


def bilinear_grey(bgr: np.ndarray, points: np.ndarray) -> np.ndarray:
    """:meth:`PixelBackend.sample_grey` on a host ``(H, W, 3) uint8`` BGR array."""
    h, w = bgr.shape[:2]
    p = np.asarray(points, np.float32)
    x = np.clip(p[..., 0], 0.0, w - 1.0)
    y = np.clip(p[..., 1], 0.0, h - 1.0)
    x0 = np.minimum(x.astype(np.int32), w - 2) if w > 1 else np.zeros(x.shape, np.int32)
    y0 = np.minimum(y.astype(np.int32), h - 2) if h > 1 else np.zeros(y.shape, np.int32)
    fx = (x - x0)[..., None]
    fy = (y - y0)[..., None]
    x1 = np.minimum(x0 + 1, w - 1)
    y1 = np.minimum(y0 + 1, h - 1)
    top = bgr[y0, x0] * (1.0 - fx) + bgr[y0, x1] * fx
    bottom = bgr[y1, x0] * (1.0 - fx) + bgr[y1, x1] * fx
    return ((top * (1.0 - fy) + bottom * fy) @ GREY_BGR).astype(np.float32)


def antialias_factor(homography: np.ndarray, size: tuple[int, int]) -> int:
    """The integer area factor :meth:`PixelBackend.warp` applies first: ``ceil(src_w / (2 w))``
    when the warped region's width ``src_w`` (mean length, in source px, of the images of the
    output's top and bottom edges) is more than twice the output width ``w``, else 1."""
    w, h = size
    c = np.array([[0, 0, 1], [w - 1, 0, 1], [w - 1, h - 1, 1], [0, h - 1, 1]], np.float64)
    p = c @ np.asarray(homography, np.float64).T
    p = p[:, :2] / p[:, 2:3]
    src_w = (np.hypot(*(p[1] - p[0])) + np.hypot(*(p[2] - p[3]))) / 2.0
    return max(1, math.ceil(src_w / (2.0 * w))) if src_w > 2.0 * w else 1


def antialias_plan(homography: np.ndarray, size: tuple[int, int], src_size: tuple[int, int]
                   ) -> tuple[int, tuple[int, int], np.ndarray]:
    """How :meth:`PixelBackend.warp` runs for one image: ``(f, reduced_size, H)`` where ``f`` is
    :func:`antialias_factor`, ``reduced_size`` the ``(w, h)`` the source of ``src_size`` =
    ``(W, H)`` px is area-averaged to first (OpenCV's ``fx = fy = 1 / f``: each side
    ``round(side / f)``; ``src_size`` itself when ``f`` is 1) and ``H`` the homography from output
    px to reduced px (``(p + 0.5) / f - 0.5`` after ``homography``)."""
    hm = np.asarray(homography, np.float64)
    f = antialias_factor(hm, size)
    if f == 1:
        return 1, src_size, hm
    down = np.array([[1.0 / f, 0, 0.5 / f - 0.5], [0, 1.0 / f, 0.5 / f - 0.5], [0, 0, 1]])
    return f, (round(src_size[0] / f), round(src_size[1] / f)), down @ hm


def warp_host(image: np.ndarray, homography: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """:meth:`PixelBackend.warp` of one host ``(H, W, 3) uint8`` BGR array: ``(h, w, 3) uint8``
    for ``size`` = ``(w, h)``, ``homography`` mapping output px to ``image`` px."""
    f, _, hm = antialias_plan(homography, size, (image.shape[1], image.shape[0]))
    if f > 1:
        image = cv2.resize(image, None, fx=1.0 / f, fy=1.0 / f, interpolation=cv2.INTER_AREA)
    return cv2.warpPerspective(image, hm, size, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                               borderMode=cv2.BORDER_REPLICATE)


class CpuPixels:
    """:class:`PixelBackend` on the CPU: libjpeg-turbo decode (DCT scaling), OpenCV resize, warp
    and JPEG encode, per image on ``threads`` threads (:func:`processors.base.map_in_threads`).

    Args:
        decode: decode limits (the same as the probe's).
        threads: per-image threads (``RuntimeSettings.postprocess_threads``; 0: one per core).
    """

    name = "cpu"

    def __init__(self, decode: DecodeSettings, threads: int = 0) -> None:
        self.settings = decode
        self.threads = threads

    def decode(self, images: Sequence[EncodedImage], long_side: int | None
               ) -> list[Decoded | DecodeError]:
        """See :meth:`PixelBackend.decode`."""

        def one(img: EncodedImage) -> Decoded | DecodeError:
            try:
                px, scale = decode_probed(img, self.settings, long_side)
            except DecodeError as e:
                return e
            return Decoded(px, px.shape[1], px.shape[0], scale)

        with span(DECODE, attributes={"cardstream.decode.images": len(images),
                                     "cardstream.decode.backend": self.name}):
            return map_in_threads(one, images, self.threads)

    def model_input(self, images: Sequence[Decoded], side: int) -> np.ndarray:
        """See :meth:`PixelBackend.model_input`; resized by :func:`shrink`."""
        xs = map_in_threads(lambda d: normalise_rgb(shrink(d.pixels, (side, side))), images,
                            self.threads)
        return np.stack(xs)

    def working_grey(self, images: Sequence[Decoded], max_side: int | None) -> list[np.ndarray]:
        """See :meth:`PixelBackend.working_grey` (grey first, then :func:`shrink`)."""
        return map_in_threads(
            lambda d: shrink(cv2.cvtColor(d.pixels, cv2.COLOR_BGR2GRAY),
                             working_size(d.width, d.height, max_side)), images, self.threads)

    def sample_grey(self, image: Decoded, points: np.ndarray) -> np.ndarray:
        """See :meth:`PixelBackend.sample_grey`."""
        return bilinear_grey(image.pixels, points)

    def warp(self, images: Sequence[Decoded], homographies: np.ndarray,
             sizes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        """See :meth:`PixelBackend.warp`."""

        return map_in_threads(lambda k: warp_host(images[k].pixels, homographies[k], sizes[k]),
                              range(len(images)), self.threads)

    def to_host(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """See :meth:`PixelBackend.to_host`: the arrays themselves (already on the host)."""
        return list(images)

    def encode_jpeg(self, images: Sequence[np.ndarray], quality: int) -> list[bytes]:
        """See :meth:`PixelBackend.encode_jpeg` (OpenCV's libjpeg-turbo)."""
        return map_in_threads(lambda img: jpeg_bytes(img, quality), images, self.threads)


def jpeg_bytes(image: np.ndarray, quality: int) -> bytes:
    """``image`` (``(H, W, 3) uint8`` BGR, or ``(H, W)`` grey) as JPEG at ``quality`` (1-100),
    OpenCV's libjpeg-turbo.

    Raises:
        RuntimeError: OpenCV could not encode it.
    """
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return buf.tobytes()


def pixel_backend(runtime: RuntimeSettings, decode: DecodeSettings) -> PixelBackend:
    """The backend for ``runtime.device``: ``cpu`` -> :class:`CpuPixels`; ``cuda`` -> the ``cuda``
    backend (:data:`BACKENDS`); ``auto`` -> ``cuda`` when ONNX Runtime has the CUDA execution
    provider and the backend loads, else ``cpu``. A build without the ``cuda`` backend module
    uses :class:`CpuPixels` for ``cuda`` too (the model still runs on the GPU), with a log line.

    Raises:
        ProviderError: ``device="cuda"`` and the ``cuda`` backend's packages fail to load.
    """
    cpu = CpuPixels(decode, runtime.postprocess_threads)
    if runtime.device == "cpu":
        return cpu
    if runtime.device == "auto":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return cpu
    module, cls = BACKENDS["cuda"].split(":")
    try:
        return getattr(importlib.import_module(module), cls)(runtime, decode)
    except ModuleNotFoundError as e:
        if e.name == module:  # this build has no GPU pixel backend
            log.info("pixels_backend_cpu", device=runtime.device, why=f"no module {module}")
            return cpu
        failure: Exception = e
    except Exception as e:  # noqa: BLE001 - NVIDIA libraries raise their own types without a GPU
        failure = e
    if runtime.device == "cuda":
        if isinstance(failure, ProviderError):
            raise failure
        raise ProviderError(f"GPU pixel backend unavailable: {type(failure).__name__}: {failure}")
    log.info("pixels_backend_cpu", device=runtime.device, why=type(failure).__name__)
    return cpu
