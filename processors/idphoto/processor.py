"""The ``id_photo`` processor: one batched U2-Net matting call and one batched MTCNN face search
per batch (each plus one more only where needed), then per image the framing, the crop of the
photo, optional alpha matting on it, compositing and JPEG encoding."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import structlog

from processors.base import Artifact, Item, ModelInfo, Outcome, map_in_threads
from processors.idphoto.faces import FaceBox, FaceDetector, faces_on_person
from processors.idphoto.framing import (
    alpha_matting_rgba,
    composite,
    cut,
    encode_jpeg,
    head_geometry,
    image_sampler,
    matte_sampler,
    plan_frame,
)
from processors.idphoto.matting import MATTE_SIDE, Matte, U2NetMatting
from processors.idphoto.settings import IdPhotoSettings
from processors.idphoto.sizes import InvalidOptionError, SizeSpec, get_size, parse_background
from processors.runtime import BatchStats, RuntimeSettings, sha256_file
from schemas.reasons import ReasonCode, Status, Task

log = structlog.get_logger("cardstream.idphoto")

#: Shorter side (px) of the working copy matting and face search read: twice the model's
#: 320 px, so the LANCZOS resize to 320x320 is a shrink and a zoomed crop of a person small in
#: the frame still has the model's resolution. Larger uploads are area-averaged to it once.
WORK_MIN_SIDE = 2 * MATTE_SIDE
#: Quarter turns tried, in this order, when no face is found upright (sideways is more common
#: than upside down).
TURNS = (1, 3, 2)


@dataclass(frozen=True, slots=True)
class View:
    """What matting and face search read of one upload.

    Attributes:
        image: ``(h, w, 3) uint8`` BGR, the upload at :attr:`factor` px per source px.
        factor: px of :attr:`image` per source px (<= 1).
        source_hw: ``(H, W)`` of the upload (px).
    """

    image: np.ndarray
    factor: float
    source_hw: tuple[int, int]


def work_view(image: np.ndarray) -> View:
    """The upload, area-averaged so its shorter side is :data:`WORK_MIN_SIDE` (or as is when it
    is smaller)."""
    h, w = image.shape[:2]
    f = WORK_MIN_SIDE / min(h, w)
    if f >= 1.0:
        return View(image, 1.0, (h, w))
    size = (max(1, round(w * f)), max(1, round(h * f)))
    small = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    return View(small, size[0] / w, (h, w))


@dataclass(frozen=True, slots=True)
class Found:
    """The faces counted on one upload, and the turn they were found at.

    Attributes:
        faces: counted faces (source px of the turned upload), largest first.
        turns: quarter turns counter-clockwise (``np.rot90``'s ``k``) of the upload.
        matte: the person matte of the turned upload.
    """

    faces: list[FaceBox]
    turns: int
    matte: Matte


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

    Raises:
        ModelError: the matting model or an MTCNN file is missing (named) or fails its pin.
        ProviderError: CUDA requested but not active.
    """

    task = Task.ID_PHOTO.value

    def __init__(self, settings: IdPhotoSettings, runtime: RuntimeSettings) -> None:
        self.settings = settings
        self.threads = runtime.postprocess_threads
        self.matting = U2NetMatting(settings.model, runtime)
        self.faces = FaceDetector(settings, runtime)
        self._version = f"{settings.model}.{(self.matting.sha256 or sha256_file(self.matting.path))[:12]}.mtcnn"

    @property
    def model(self) -> ModelInfo:
        """``idphoto-{model}``, version ``{model}.{sha256[:12]}.mtcnn``, active provider."""
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
        self.faces.detect([np.zeros((self.faces.canvas, self.faces.canvas, 3), np.uint8)])
        log.info("idphoto_warm", model=self.settings.model, bucket=bucket,
                 provider=self.matting.provider)

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """One outcome per item, in order, with one batched matting call and one batched face
        search for the whole batch (one more of each only for the items that need it: people
        small in their frame, uploads turned sideways).

        Args:
            items: N >= 1 items; ``image`` ``(H, W, 3) uint8`` BGR; options ``size``,
                ``background``, ``alpha_matting``.

        Returns:
            N outcomes: ``rejected`` (``NO_FACE``, ``MULTIPLE_FACES``, ``FACE_TOO_SMALL``,
            ``HEAD_CROPPED``), ``failed`` (``INTERNAL_ERROR`` for options the UploadEvent schema
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
        found: dict[int, Found] = {}
        ms = 0.0
        if valid:
            views = map_in_threads(lambda i: work_view(items[i].image), valid, self.threads)
            mattes = self.matting.predict_zoomed([(v.image, v.factor) for v in views],
                                                 [v.source_hw for v in views],
                                                 self.settings.matte_zoom_max_share)
            ms = self.matting.last_inference_ms
            faces, face_ms = self._faces(views, mattes)
            found = dict(zip(valid, faces, strict=True))
            ms += face_ms

        def one(i: int) -> Outcome:
            it, req = items[i], requests[i]
            t0 = time.perf_counter()
            if isinstance(req, InvalidOptionError):
                log.warning("idphoto_bad_options", upload_id=it.upload_id, error=str(req))
                out = Outcome(it.upload_id, Status.FAILED, (ReasonCode.INTERNAL_ERROR,),
                              {"error": str(req)})
            else:
                out = self._one(it, req, found[i], ms)
            log.debug("idphoto_item", upload_id=it.upload_id, status=str(out.status),
                      reasons=[str(r) for r in out.reasons],
                      ms=round((time.perf_counter() - t0) * 1e3, 1))
            return out

        return map_in_threads(one, range(len(items)), self.threads)

    def _canvas(self, view: View, box: tuple[float, float, float, float], turns: int = 0
                ) -> tuple[np.ndarray, float]:
        """The face-search canvas of ``box`` (source px) of an upload: its longer side scaled
        to the detector's canvas, RGB, turned by ``turns`` quarters; and canvas px per
        source px."""
        f = view.factor
        x0, y0, x1, y1 = (round(v * f) for v in box)
        roi = view.image[y0:max(y1, y0 + 1), x0:max(x1, x0 + 1)]
        k = self.faces.canvas / max(roi.shape[:2])
        size = (max(1, round(roi.shape[1] * k)), max(1, round(roi.shape[0] * k)))
        interp = cv2.INTER_AREA if k < 1.0 else cv2.INTER_LINEAR
        rgb = cv2.cvtColor(cv2.resize(roi, size, interpolation=interp), cv2.COLOR_BGR2RGB)
        return (np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb), k * f

    def _count(self, boxes: list[FaceBox], k: float, matte: Matte) -> list[FaceBox]:
        """Canvas boxes -> source px of ``matte``'s upload, then the ones that count."""
        bx0, by0 = matte.box[0], matte.box[1]
        src = [b.scaled(1.0 / k, bx0, by0) for b in boxes]
        cover = [matte.coverage(b.x, b.y, b.w, b.h) for b in src]
        return faces_on_person(src, cover, self.settings)

    def _faces(self, views: Sequence[View], mattes: Sequence[Matte]
               ) -> tuple[list[Found], float]:
        """The counted faces of every upload, with one batched search, and one more for the
        uploads where none was found upright: each turned by :data:`TURNS` (a selfie stored
        sideways or upside down without EXIF orientation; MTCNN sees upright faces only). The
        first turn with a face on the person wins. The search reads each matte's box (the
        upload, or the crop around a person small in the frame). Returns the faces per upload
        and the wall time of the model calls (ms)."""
        canv = [self._canvas(v, m.box) for v, m in zip(views, mattes, strict=True)]
        boxes = self.faces.detect([c for c, _ in canv])
        face_ms = self.faces.mtcnn.last_inference_ms
        out = [Found(self._count(b, k, m), 0, m)
               for b, (_, k), m in zip(boxes, canv, mattes, strict=True)]
        missing = [i for i, f in enumerate(out) if not f.faces]
        if not missing:
            return out, face_ms
        turned = [(i, t, *self._canvas(views[i], mattes[i].box, t)) for i in missing for t in TURNS]
        found = self.faces.detect([c for _, _, c, _ in turned])
        face_ms += self.faces.mtcnn.last_inference_ms
        for (i, t, _, k), b in zip(turned, found, strict=True):
            if out[i].faces or not b:
                continue
            m = mattes[i].rot90(t)
            faces = self._count(b, k, m)
            if faces:
                out[i] = Found(faces, t, m)
        return out, face_ms

    def _one(self, it: Item, req: PhotoRequest, found: Found, inference_ms: float) -> Outcome:
        spec = req.size
        payload: dict[str, Any] = {"size": spec.name, "background": req.background,
                                   "face_box": None, "width": spec.width_px,
                                   "height": spec.height_px}

        def reject(code: ReasonCode, **extra: Any) -> Outcome:
            return Outcome(it.upload_id, Status.REJECTED, (code,), {**payload, **extra},
                           inference_ms=inference_ms)

        faces, turns, matte = found.faces, found.turns, found.matte
        if not faces:
            return reject(ReasonCode.NO_FACE)
        if len(faces) > 1:
            return reject(ReasonCode.MULTIPLE_FACES, faces=len(faces))
        face: FaceBox = faces[0]
        payload["face_box"] = face.unrotated(turns, it.image.shape[:2]).as_list()
        if face.h < self.settings.min_face_px:
            return reject(ReasonCode.FACE_TOO_SMALL)
        head = head_geometry(face, matte, self.settings.matte_threshold,
                             resolution=spec.target_head_px / face.h)
        if head.cropped:
            return reject(ReasonCode.HEAD_CROPPED)
        frame = plan_frame(head, req.size)
        image = np.rot90(it.image, turns) if turns else it.image
        bgr = cut(image_sampler(image), image.shape[:2], frame, 3)
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        alpha = cut(matte_sampler(matte), matte.source_hw, frame)
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
