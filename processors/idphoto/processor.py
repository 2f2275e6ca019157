"""The ``id_photo`` processor: one batched U2-Net matting call per batch, then per-image faces,
framing, optional alpha matting on the framed crop, compositing and JPEG encoding."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from processors.base import Artifact, Item, ModelInfo, Outcome, map_in_threads
from processors.decode import DecodeSettings
from processors.errors import DecodeError
from processors.idphoto.faces import FaceBox, FaceDetector, faces_on_person
from processors.idphoto.framing import (
    alpha_matting_rgba,
    composite,
    encode_jpeg,
    head_geometry,
    plan_frame,
    warp,
)
from processors.idphoto.matting import U2NetMatting
from processors.idphoto.settings import IdPhotoSettings
from processors.idphoto.sizes import InvalidOptionError, SizeSpec, get_size, parse_background
from processors.pixels import Decoded, PixelBackend, pixel_backend
from processors.runtime import BatchStats, RuntimeSettings, sha256_file
from schemas.reasons import ReasonCode, Status, Task

log = structlog.get_logger("cardstream.idphoto")


@dataclass(frozen=True, slots=True)
class PhotoRequest:
    """An item's validated options.

    Attributes:
        size: the size spec.
        background: the option as given, normalised (``white`` or ``#rrggbb``).
        background_rgb: its RGB.
        alpha_matting: whether to run alpha matting on the framed crop.
    """

    size: SizeSpec
    background: str
    background_rgb: tuple[int, int, int]
    alpha_matting: bool


def parse_options(options: Mapping[str, Any], settings: IdPhotoSettings) -> PhotoRequest:
    """Validate an item's ``size`` / ``background`` / ``alpha_matting`` options.

    Missing or None values take the settings' defaults; ``alpha_matting`` None means the size's
    default (off for one_inch, on for the larger sizes).

    Raises:
        InvalidOptionError: unknown size, bad colour, or a non-boolean ``alpha_matting``.
    """
    size = get_size(str(options.get("size") or settings.default_size))
    background = str(options.get("background") or settings.default_background).strip().lower()
    rgb = parse_background(background)
    am = options.get("alpha_matting")
    if am is not None and not isinstance(am, bool):
        raise InvalidOptionError(f"alpha_matting must be true, false or null, not {am!r}")
    return PhotoRequest(size, background, rgb, size.alpha_matting if am is None else am)


class IdPhotoProcessor:
    """ID photos from selfies, in batches.

    Args:
        settings: ID-photo settings (matting model, face thresholds, defaults).
        runtime: ONNX Runtime settings.
        decode: decode limits (those the uploads were probed with; default
            :class:`DecodeSettings`); uploads are decoded at full resolution by the pixel
            backend (``processors.pixels``).

    Raises:
        ModelError: the matting model file is missing (named) or fails its pin; the Haar cascade
            is missing from OpenCV.
        ProviderError: CUDA requested but not active.
    """

    task = Task.ID_PHOTO.value

    def __init__(self, settings: IdPhotoSettings, runtime: RuntimeSettings,
                 decode: DecodeSettings | None = None) -> None:
        self.settings = settings
        self.threads = runtime.postprocess_threads
        self.pixels: PixelBackend = pixel_backend(runtime, decode or DecodeSettings())
        self.matting = U2NetMatting(settings.model, runtime)
        self.faces = FaceDetector(settings)
        self._version = f"{settings.model}.{(self.matting.sha256 or sha256_file(self.matting.path))[:12]}.haar-alt2"

    @property
    def model(self) -> ModelInfo:
        """``idphoto-{model}``, version ``{model}.{sha256[:12]}.haar-alt2``, active provider."""
        return ModelInfo(
            name=f"idphoto-{self.settings.model}",
            version=self._version,
            provider=self.matting.provider,
        )

    @property
    def bucket(self) -> int:
        """Largest batch of one matting call (chosen at warm-up)."""
        return self.matting.model.chosen_bucket

    @property
    def stats(self) -> BatchStats:
        """Counters of the matting model (calls, images, padding; shared with other users of u2netp)."""
        return self.matting.model.stats

    def warm_up(self) -> None:
        """Run every matting batch bucket once (choosing the best) and the face detector."""
        bucket = self.matting.warm_up()
        self.faces.detect(np.zeros((64, 64, 3), np.uint8))
        log.info("idphoto_warm", model=self.settings.model, bucket=bucket,
                 provider=self.matting.provider)

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """One outcome per item, in order, with one batched matting call for the whole batch.

        Args:
            items: N >= 1 items (encoded uploads); options ``size``, ``background``,
                ``alpha_matting``.

        Returns:
            N outcomes: ``rejected`` (``NO_FACE``, ``MULTIPLE_FACES``, ``FACE_TOO_SMALL``,
            ``HEAD_CROPPED``; the decoder's reason, e.g. ``CORRUPT_IMAGE``, for pixel data
            that fails to decode), ``failed`` (``INTERNAL_ERROR`` for options the UploadEvent schema
            forbids; payload ``{"error"}``), or ``accepted`` with a ``photo`` JPEG artifact
            (300 dpi). Accepted and rejected payloads carry ``size``, ``background``,
            ``face_box`` (``[x, y, w, h]`` source px, None without a single face), ``width`` and
            ``height`` (px of the requested size).
        """
        if not items:
            return []
        requests: list[PhotoRequest | InvalidOptionError] = []
        for it in items:
            try:
                requests.append(parse_options(it.options, self.settings))
            except InvalidOptionError as e:
                requests.append(e)
        valid = [i for i, r in enumerate(requests) if isinstance(r, PhotoRequest)]
        decoded = dict(zip(valid, self.pixels.decode([items[i].image for i in valid], None),
                           strict=True))
        valid = [i for i in valid if isinstance(decoded[i], Decoded)]
        images = dict(zip(valid, self.pixels.to_host([decoded[i].pixels for i in valid]),
                          strict=True))
        masks = dict(zip(valid, self.matting.predict_zoomed(
            [images[i] for i in valid], self.settings.matte_zoom_max_share), strict=True))
        ms = self.matting.last_inference_ms if valid else 0.0

        def one(i: int) -> Outcome:
            it, req = items[i], requests[i]
            t0 = time.perf_counter()
            if isinstance(req, InvalidOptionError):
                log.warning("idphoto_bad_options", upload_id=it.upload_id, error=str(req))
                out = Outcome(it.upload_id, Status.FAILED, (ReasonCode.INTERNAL_ERROR,),
                              {"error": str(req)})
            elif isinstance(bad := decoded[i], DecodeError):
                out = Outcome(it.upload_id, Status.REJECTED, (ReasonCode(bad.reason),),
                              {"size": req.size.name, "background": req.background,
                               "face_box": None})
            else:
                out = self._one(it, images[i], req, masks[i], ms)
            log.debug("idphoto_item", upload_id=it.upload_id, status=str(out.status),
                      reasons=[str(r) for r in out.reasons],
                      ms=round((time.perf_counter() - t0) * 1e3, 1))
            return out

        return map_in_threads(one, range(len(items)), self.threads)

    def _faces(self, image: np.ndarray, mask: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, list[FaceBox], int]:
        """The counted faces, and the image turned upright if it had to be.

        In this order, stopping at the first that finds a face on the person: the regular
        search; the thorough one (a face far from the camera, see ``FaceDetector.detect``); the
        regular search on the image turned by a quarter, a half and three quarters (a selfie
        stored sideways or upside down without EXIF orientation; the cascade sees upright faces
        only).

        Args:
            image: ``(H, W, 3) uint8`` BGR upload.
            mask: ``(H, W) uint8`` its person matte.

        Returns:
            ``(image, mask, faces, turns)``: ``np.rot90(image, turns)`` (a view) and its mask
            (contiguous), the faces in it (largest first; empty when none was found) and the
            quarter turns counter-clockwise.
        """
        s = self.settings
        faces = faces_on_person(self.faces.detect(image), mask, s)
        if not faces:
            faces = faces_on_person(self.faces.detect(image, thorough=True), mask, s)
        if faces:
            return image, mask, faces, 0
        for turns in (1, 3, 2):  # sideways is more common than upside down
            turned = np.rot90(image, turns)
            turned_mask = np.ascontiguousarray(np.rot90(mask, turns))
            faces = faces_on_person(self.faces.detect(np.ascontiguousarray(turned)),
                                    turned_mask, s)
            if faces:
                return turned, turned_mask, faces, turns
        return image, mask, [], 0

    def _one(self, it: Item, upload: np.ndarray, req: PhotoRequest, mask: np.ndarray,
             inference_ms: float) -> Outcome:
        spec = req.size
        payload: dict[str, Any] = {"size": spec.name, "background": req.background,
                                   "face_box": None, "width": spec.width_px,
                                   "height": spec.height_px}

        def reject(code: ReasonCode, **extra: Any) -> Outcome:
            return Outcome(it.upload_id, Status.REJECTED, (code,), {**payload, **extra},
                           inference_ms=inference_ms)

        image, mask, faces, turns = self._faces(upload, mask)
        if not faces:
            return reject(ReasonCode.NO_FACE)
        if len(faces) > 1:
            return reject(ReasonCode.MULTIPLE_FACES, faces=len(faces))
        face: FaceBox = faces[0]
        payload["face_box"] = face.unrotated(turns, upload.shape[:2]).as_list()
        if face.h < self.settings.min_face_px:
            return reject(ReasonCode.FACE_TOO_SMALL)
        head = head_geometry(face, mask, self.settings.matte_threshold)
        if head.cropped:
            return reject(ReasonCode.HEAD_CROPPED)
        frame = plan_frame(head, req.size)
        rgb = warp(np.ascontiguousarray(image[..., ::-1]), frame)
        alpha = warp(mask, frame)
        if req.alpha_matting:
            s = self.settings
            rgb, alpha = alpha_matting_rgba(
                rgb, alpha, s.alpha_matting_foreground_threshold,
                s.alpha_matting_background_threshold, s.alpha_matting_erode_size,
            )
        photo = composite(rgb, alpha, req.background_rgb)
        data = encode_jpeg(photo, self.settings.jpeg_quality)
        art = Artifact(name="photo", ext="jpg", content_type="image/jpeg", data=data,
                       width=frame.width, height=frame.height)
        return Outcome(it.upload_id, Status.ACCEPTED, (), payload, (art,),
                       inference_ms=inference_ms)
