"""The ``id_photo`` processor: per batch one decode at a working size, one U2-Net matting call,
one MTCNN face search and one warp of the photos (each plus one more only where needed), then
per image the framing, the photo's alpha from the matte, optional alpha matting, compositing and
JPEG encoding."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import cv2
import numpy as np
import structlog

from processors.base import Artifact, Item, ModelInfo, Outcome, map_in_threads, outcomes_per_item
from processors.decode import DecodeSettings, EncodedImage
from processors.errors import DecodeError
from processors.idphoto.compliance import MODES, Mode
from processors.idphoto.facemesh import FaceMesh, Mesh
from processors.idphoto.faces import FaceBox, FaceDetector, faces_on_person
from processors.idphoto.framing import (
    Frame,
    HeadGeometry,
    alpha_matting_rgba,
    composite,
    cut,
    head_geometry,
    matte_sampler,
    plan_frame,
)
from processors.idphoto.inspection import fit_inside, head_with_mesh_chin, meshes, report
from processors.idphoto.matting import MATTE_SIDE, Matte, U2NetMatting
from processors.idphoto.output import encode_within, print_sheet
from processors.idphoto.settings import IdPhotoSettings
from processors.idphoto.sizes import InvalidOptionError, parse_background
from processors.idphoto.specs import PhotoSpec, get_spec
from processors.pixels import Decoded, PixelBackend, pixel_backend, shrink
from processors.runtime import BatchStats, RuntimeSettings, sha256_file
from schemas.reasons import ReasonCode, Status, Task

log = structlog.get_logger("cardstream.idphoto")

#: Shorter side (px) of the working copy that matting and face search read: twice the model's
#: 320 px, so rembg's LANCZOS resize to 320x320 is a shrink and the crop around a person small
#: in the frame keeps the model's resolution. At 480 px the LANCZOS costs half, but the crown
#: of the benchmarks' portraits moved by up to 23 px (median 0) against main; at 640, 2.3 px.
WORK_MIN_SIDE = 2 * MATTE_SIDE
#: Uploads are decoded once at the scale the photo of a head this tall (share of the upload's
#: shorter side) needs at the requested size, rounded up to a fast DCT scale (a 1600x1200 selfie
#: for a one-inch photo: full; 4032x3024: 1/2), never below the working copy's. A smaller head
#: needs more px: that upload is decoded again at the scale its frame needs (a second decode).
HEAD_SHARE_MIN = 0.3
#: A photo may enlarge its decoded source by up to this factor before the upload is decoded
#: again at the scale its frame needs (5 %: invisible in the print, and a second decode of a
#: 12 MP JPEG costs tens of ms).
UPSCALE_TOLERANCE = 1.05
#: Quarter turns tried, in this order, when no face is found upright (sideways is more common
#: than upside down).
TURNS = (1, 3, 2)


#: DCT scales libjpeg-turbo decodes fastest (SIMD reduced IDCTs): the other M/8 cost more than a
#: full decode (7/8 of a 2 MP JPEG 9.6 ms against 4.8 ms for 8/8, 3/8 of 12 MP 23 ms against
#: 21 ms for 1/2; ``benchmarks`` of issue 29, load average 13 on 2 cores).
FAST_SCALES = (0.125, 0.25, 0.5, 1.0)


def base_payload(req: PhotoRequest) -> dict[str, Any]:
    """The payload fields every outcome of a valid request carries, rejected ones included:
    ``size`` (name), ``background``, ``face_box`` None, ``width`` / ``height`` (px of the
    requested size at its dpi; the contract's ``IdPhotoPayload`` requires them positive),
    ``mode`` and ``dpi``."""
    spec = req.size
    return {"size": spec.name, "background": req.background, "face_box": None,
            "width": spec.width_px, "height": spec.height_px, "mode": req.mode, "dpi": spec.dpi}


def decode_side(width: int, height: int, scale: float) -> int:
    """Long side (px) to ask ``pixels.decode`` for, so a JPEG is decoded at the smallest of
    :data:`FAST_SCALES` that is at least ``scale`` (decoded px per upload px)."""
    long_ = max(width, height)
    f = next((v for v in FAST_SCALES if v >= scale), 1.0)
    return long_ if f >= 1.0 else max(1, math.floor(long_ * f))


def decode_long_side(width: int, height: int, target_head_px: float) -> int:
    """Long side (px) to decode a ``width x height`` upload at for a photo whose head is
    ``target_head_px`` tall (:data:`HEAD_SHARE_MIN`, :data:`WORK_MIN_SIDE`, :func:`decode_side`)."""
    short = min(width, height)
    return decode_side(width, height, max(target_head_px / (HEAD_SHARE_MIN * short),
                                          WORK_MIN_SIDE / short))


@dataclass(frozen=True, slots=True)
class View:
    """The host working copy of one upload that matting and face search read.

    Attributes:
        image: ``(h, w, 3) uint8`` BGR, the upload at :attr:`factor` px per source px.
        factor: px of :attr:`image` per source px (<= 1).
    """

    image: np.ndarray
    factor: float


def work_view(decoded_host: np.ndarray, scale: float) -> View:
    """The working copy of a decoded upload (``scale`` decoded px per upload px): shrunk
    (``pixels.shrink``) so its shorter side is :data:`WORK_MIN_SIDE`, or as is when smaller."""
    h, w = decoded_host.shape[:2]
    f = WORK_MIN_SIDE / min(h, w)
    if f >= 1.0:
        return View(decoded_host, scale)
    size = (max(1, round(w * f)), max(1, round(h * f)))
    return View(shrink(decoded_host, size), scale * size[0] / w)


def _crop(view: View, box: tuple[float, float, float, float]) -> np.ndarray:
    """The working copy's px under source px ``box`` ``(x0, y0, x1, y1)`` (at least 1 x 1)."""
    f = view.factor
    x0, y0, x1, y1 = (round(v * f) for v in box)
    return view.image[y0:max(y1, y0 + 1), x0:max(x1, x0 + 1)]


def upload_to_decoded(d: Decoded) -> np.ndarray:
    """``3 x 3`` map from upload px to ``d``'s px (pixel centres at integers)."""
    k = d.scale
    return np.array([[k, 0.0, 0.5 * k - 0.5], [0.0, k, 0.5 * k - 0.5], [0.0, 0.0, 1.0]])


def turned_to_upload(turns: int, source_hw: tuple[int, int]) -> np.ndarray:
    """``3 x 3`` map from px of ``np.rot90(upload, turns)`` to the upload's px."""
    h, w = source_hw
    return [np.eye(3),
            np.array([[0.0, -1.0, w - 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
            np.array([[-1.0, 0.0, w - 1.0], [0.0, -1.0, h - 1.0], [0.0, 0.0, 1.0]]),
            np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, h - 1.0], [0.0, 0.0, 1.0]])][turns % 4]


def frame_to_turned(frame: Frame) -> np.ndarray:
    """``3 x 3`` map from output px to px of the (turned) upload, as ``framing.cut`` places it."""
    s = frame.scale
    return np.array([[1.0 / s, 0.0, frame.x0], [0.0, 1.0 / s, frame.y0], [0.0, 0.0, 1.0]])


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
        size: the size's spec (``specs.json``), at the requested ``dpi``.
        background: the option as given, normalised (``white`` or ``#rrggbb``).
        background_rgb: its RGB.
        alpha_matting: whether to run alpha matting on the framed crop.
        mode: ``retouch`` (a new background) or ``validate`` (the upload's own, checked).
        target_kb: the largest JPEG size in KB, or None.
        print_sheet: whether to store a 6 x 4 in print sheet too.
    """

    size: PhotoSpec
    background: str
    background_rgb: tuple[int, int, int]
    alpha_matting: bool
    mode: Mode = "retouch"
    target_kb: float | None = None
    print_sheet: bool = False


@dataclass(frozen=True, slots=True)
class ItemStep:
    """Where one item of a batch stands (a step of :meth:`IdPhotoProcessor.process_batch`).

    Attributes:
        item: the upload.
    """

    item: Item

    @property
    def upload_id(self) -> str:
        """The item's upload id."""
        return self.item.upload_id


@dataclass(frozen=True, slots=True)
class Asked(ItemStep):
    """Step 1: the item's options validated (``req``: what it asks for)."""

    req: PhotoRequest


@dataclass(frozen=True, slots=True)
class Loaded(ItemStep):
    """Step 2: the item decoded at the scale its photo needs (:func:`decode_long_side`).

    Attributes:
        req: what it asks for.
        image: its pixels (any scale; ``image.scale`` decoded px per upload px).
    """

    req: PhotoRequest
    image: Decoded


@dataclass(frozen=True, slots=True)
class Plan(ItemStep):
    """Step 3: an item that passed every verdict, its photo planned.

    Attributes:
        req: what it asks for.
        image: its pixels.
        frame: output placement on the turned upload.
        found: faces, turn and matte.
        payload: the result's task fields.
        inference_ms: the batch's model time (ms).
        head: the head measured on the turned upload (crown from the matte, chin from the mesh).
        mesh: the face's landmarks in px of the turned upload (None: the face had none).
    """

    req: PhotoRequest
    image: Decoded
    frame: Frame
    found: Found
    payload: dict[str, Any]
    inference_ms: float
    head: HeadGeometry
    mesh: Mesh | None


Step = Outcome | Asked | Loaded | Plan
"""Where an item of a batch stands: each step is a new frozen value; an :class:`Outcome` is
final (rejected, failed, or the accepted photo)."""
S = TypeVar("S", Asked, Loaded, Plan)


def advance(steps: Sequence[Step], kind: type[S],
            run: Callable[[list[S]], Sequence[Step]]) -> list[Step]:
    """``steps`` with those of ``kind`` replaced, in place, by what ``run`` makes of them: one
    call for all of them (a batched model call or decode), none when there are none.

    Raises:
        ValueError: ``run`` returned another number of steps than it was given.
    """
    at = [i for i, x in enumerate(steps) if isinstance(x, kind)]
    todo = [x for x in steps if isinstance(x, kind)]
    out = list(steps)
    if todo:
        for i, x in zip(at, run(todo), strict=True):
            out[i] = x
    return out


def _flag(options: Mapping[str, Any], name: str) -> bool | None:
    v = options.get(name)
    if v is not None and not isinstance(v, bool):
        raise InvalidOptionError(f"{name} must be true, false or null, not {v!r}")
    return v


def parse_options(options: Mapping[str, Any], settings: IdPhotoSettings) -> PhotoRequest:
    """Validate an item's options: ``size``, ``background``, ``alpha_matting``, ``mode``,
    ``dpi``, ``target_kb``, ``print_sheet``.

    Missing or None values take the settings' defaults (``default_size``,
    ``default_background``, ``default_mode``); ``alpha_matting`` None means the size's default
    (off for one_inch, on for the larger sizes), ``dpi`` None the size's (300).

    Raises:
        InvalidOptionError: unknown size or mode, bad colour, a non-boolean flag, a dpi outside
            72..1200 or a target size outside 5..10000 KB.
    """
    size = get_spec(str(options.get("size") or settings.default_size))
    background = str(options.get("background") or settings.default_background).strip().lower()
    rgb = parse_background(background)
    am = _flag(options, "alpha_matting")
    given = str(options.get("mode") or settings.default_mode)
    mode = next((m for m in MODES if m == given), None)
    if mode is None:
        raise InvalidOptionError(f"mode must be retouch or validate, not {given!r}")
    dpi = options.get("dpi")
    if dpi is not None:
        if isinstance(dpi, bool) or not isinstance(dpi, int | float) or dpi != int(dpi) \
                or not 72 <= dpi <= 1200:
            raise InvalidOptionError(f"dpi must be an integer in 72..1200, not {dpi!r}")
        size = replace(size, dpi=int(dpi))
    kb = options.get("target_kb")
    if kb is not None and (isinstance(kb, bool) or not isinstance(kb, int | float)
                           or not 5 <= kb <= 10000):
        raise InvalidOptionError(f"target_kb must be a number in 5..10000, not {kb!r}")
    return PhotoRequest(size, background, rgb, size.alpha_matting if am is None else am,
                        mode, None if kb is None else float(kb),
                        bool(_flag(options, "print_sheet")))


class IdPhotoProcessor:
    """ID photos from selfies, in batches.

    Args:
        settings: ID-photo settings (matting model, face thresholds, defaults).
        runtime: ONNX Runtime settings.
        decode: decode limits (those the uploads were probed with; default
            :class:`DecodeSettings`); uploads are decoded, resized and warped by the pixel
            backend (``processors.pixels``).

    Raises:
        ModelError: the matting model or an MTCNN file is missing (named) or fails its pin.
        ProviderError: CUDA requested but not active.
    """

    task = Task.ID_PHOTO.value

    def __init__(self, settings: IdPhotoSettings, runtime: RuntimeSettings,
                 decode: DecodeSettings | None = None) -> None:
        self.settings = settings
        self.threads = runtime.postprocess_threads
        self.pixels: PixelBackend = pixel_backend(runtime, decode or DecodeSettings())
        self.matting = U2NetMatting(settings.model, runtime)
        self.faces = FaceDetector(settings, runtime)
        self.facemesh = FaceMesh(runtime)
        # mtcnn2: MTCNN's last NMS by intersection over the smaller box (issue 39); a face box
        # or verdict may differ from mtcnn's for the same upload, so its output keys differ too
        self._version = (f"{settings.model}."
                         f"{(self.matting.sha256 or sha256_file(self.matting.path))[:12]}"
                         ".mtcnn2.facemesh")

    @property
    def model(self) -> ModelInfo:
        """``idphoto-{model}``, version ``{model}.{sha256[:12]}.mtcnn2.facemesh``, active
        provider."""
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
        """Counters of the matting model (calls, images, padding; shared with other users of
        u2netp)."""
        return self.matting.model.stats

    def warm_up(self) -> None:
        """Run every matting batch bucket once (choosing the best), the face detector, Face
        Mesh, and alpha matting on a small crop: pymatting's numba kernels compile on their
        first call (about a minute on a fresh virtualenv, cached on disk after), which a fresh
        user's first two-inch upload paid (``compute_ms`` 57729, and the upload behind it
        waited)."""
        bucket = self.matting.warm_up()
        self.faces.detect([np.zeros((self.faces.canvas, self.faces.canvas, 3), np.uint8)])
        z = np.zeros((64, 64, 3), np.uint8)
        self.facemesh.landmarks([z], [np.array([[20, 24], [44, 24], [32, 34], [22, 44], [42, 44]],
                                               np.float64)])
        t0 = time.perf_counter()
        side, s = 96, self.settings
        matte = np.zeros((side, side), np.uint8)
        matte[side // 5:-side // 5, side // 5:-side // 5] = 255  # a square left by the erosion
        rgb = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
        alpha_matting_rgba(rgb, matte, s.alpha_matting_foreground_threshold,
                           s.alpha_matting_background_threshold, s.alpha_matting_erode_size)
        log.info("idphoto_warm", model=self.settings.model, bucket=bucket,
                 provider=self.matting.provider,
                 alpha_matting_ms=round((time.perf_counter() - t0) * 1000, 1))

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """One outcome per item, in order.

        Each item goes through a chain of frozen steps (:data:`Step`): its options
        (:class:`Asked`), its pixels (:class:`Loaded`), its verdict and frame (:class:`Plan`)
        and its photo; an item that stops early keeps its :class:`Outcome`. Between the steps,
        the batch's items at that step share one call: one decode (at the scale the photos
        need, :func:`decode_long_side`; one per distinct scale), one matting call, one face
        search (three MTCNN calls); one more matting call only for people small in their
        frame, one more face search only for uploads with no face upright; one batched warp of
        the accepted photos (and one more decode only for those that need more px). Per item
        on the host: the verdict, the framing, the alpha of the photo from the matte, optional
        alpha matting, compositing and the JPEG.

        Args:
            items: N >= 1 items (encoded uploads); options ``size``, ``background``,
                ``alpha_matting``.

        Returns:
            N outcomes: ``rejected`` (``NO_FACE``, ``MULTIPLE_FACES``, ``FACE_TOO_SMALL``,
            ``HEAD_CROPPED``; the decoder's reason, e.g. ``CORRUPT_IMAGE``, for pixel data
            that fails to decode), ``failed`` (``INTERNAL_ERROR`` for options the UploadEvent
            schema forbids, payload ``{"error"}``; or for an item whose post-processing raised,
            which leaves the others unaffected: :func:`processors.base.outcomes_per_item`), or
            ``accepted`` with a ``photo`` JPEG artifact (300 dpi). Accepted and rejected
            payloads carry ``size``, ``background``,
            ``face_box`` (``[x, y, w, h]`` source px, None without a single face), ``width`` and
            ``height`` (px of the requested size).
        """
        if not items:
            return []
        steps: list[Step] = [self._ask(it) for it in items]
        steps = advance(steps, Asked, self._load)
        steps = advance(steps, Loaded, self._plans)
        outs = [x for x in advance(steps, Plan, self._photographs) if isinstance(x, Outcome)]
        for o in outs:
            log.debug("idphoto_item", upload_id=o.upload_id, status=str(o.status),
                      reasons=[str(r) for r in o.reasons])
        return outs

    def _ask(self, it: Item) -> Asked | Outcome:
        """Step 1: the item's options (:func:`parse_options`), or ``failed`` INTERNAL_ERROR
        for options the UploadEvent schema forbids."""
        try:
            return Asked(it, parse_options(it.options, self.settings))
        except InvalidOptionError as e:
            log.warning("idphoto_bad_options", upload_id=it.upload_id, error=str(e))
            return Outcome(it.upload_id, Status.FAILED, (ReasonCode.INTERNAL_ERROR,),
                           {"error": str(e)})

    def _load(self, asked: Sequence[Asked]) -> list[Loaded | Outcome]:
        """Step 2: decode at the scale each photo needs (:func:`decode_long_side`); pixel data
        that fails to decode is ``rejected`` with the decoder's reason."""
        decoded = self._decode([a.item.image for a in asked], [decode_long_side(
            a.item.image.width, a.item.image.height, a.req.size.target_head_px) for a in asked])
        return [Loaded(a.item, a.req, d) if isinstance(d, Decoded)
                else Outcome.undecodable(a.item.upload_id, d, base_payload(a.req))
                for a, d in zip(asked, decoded, strict=True)]

    def _plans(self, loaded: Sequence[Loaded]) -> list[Plan | Outcome]:
        """Step 3: the person mattes and faces of the batch (:meth:`person_mattes`,
        :meth:`_faces`), then per item the verdict and frame (:meth:`_plan`)."""
        views, mattes = self.person_mattes([x.item for x in loaded], [x.image for x in loaded])
        found, face_ms = self._faces(views, mattes)
        mesh = self._meshes(views, found)
        ms = self.matting.last_inference_ms + face_ms + self.facemesh.last_inference_ms
        return outcomes_per_item(lambda k: self._plan(loaded[k], found[k], mesh[k], ms),
                                 [x.item for x in loaded], self.threads, task=self.task,
                                 inference_ms=ms)

    def _meshes(self, views: Sequence[View], found: Sequence[Found]) -> list[Mesh | None]:
        """The Face Mesh of every upload with exactly one face large enough to frame, one
        batched call (``facemesh.last_inference_ms``); None for the others."""
        one = [k for k, f in enumerate(found)
               if len(f.faces) == 1 and f.faces[0].h >= self.settings.min_face_px]
        self.facemesh.last_inference_ms = 0.0
        out: list[Mesh | None] = [None] * len(found)
        got = meshes(self.facemesh, [(views[k].image, views[k].factor) for k in one],
                     [(found[k].faces[0], found[k].turns) for k in one])
        for k, m in zip(one, got, strict=True):
            out[k] = m
        return out

    def _photographs(self, plans: Sequence[Plan]) -> list[Outcome]:
        """Step 4: the photos of the planned items (:meth:`_photos`, one batched warp), then
        per item the accepted outcome (:meth:`_finish`)."""
        photos = self._photos(plans)
        return outcomes_per_item(lambda k: self._finish(plans[k], photos[k]),
                                 [p.item for p in plans], self.threads, task=self.task,
                                 inference_ms=plans[0].inference_ms)

    def person_mattes(self, items: Sequence[Item], decoded: Sequence[Decoded]
                      ) -> tuple[list[View], list[Matte]]:
        """The working copies and person mattes of decoded uploads: one matting call on the
        working copies, one more for the people small in their frame
        (``U2NetMatting.predict_zoomed``); ``matting.last_inference_ms`` holds both calls (ms).

        Args:
            items: the uploads (their probed size, for a DCT-scaled JPEG).
            decoded: each item's pixels from ``pixels.decode`` (any scale).

        Returns:
            ``(views, mattes)``, one each per item: the host working copy (:func:`work_view`)
            and the :class:`Matte` in the upload's px.
        """
        hws = [self._source_hw(it, d) for it, d in zip(items, decoded, strict=True)]
        host = self.pixels.to_host([d.pixels for d in decoded])
        views = map_in_threads(lambda k: work_view(host[k], decoded[k].scale),
                               range(len(decoded)), self.threads)
        mattes = self.matting.predict_zoomed(
            self.matting.host_input([v.image for v in views]), hws,
            self.settings.matte_zoom_max_share,
            lambda boxes: self.matting.host_input([_crop(views[i], b) for i, b in boxes]))
        return views, mattes

    @staticmethod
    def _source_hw(it: Item, d: Decoded) -> tuple[int, int]:
        """``(H, W)`` of the upload as displayed: the decoded size at scale 1 (Pillow applies
        a TIFF's or HEIF's orientation itself), else the JPEG header's."""
        return (d.height, d.width) if d.scale == 1.0 else (it.image.height, it.image.width)

    def _decode(self, images: Sequence[EncodedImage], long_sides: Sequence[int]
                ) -> list[Decoded | DecodeError]:
        """``pixels.decode`` of ``images``, each at its long side (px; one batched call per
        distinct side, the smallest first), in order."""
        out: dict[int, Decoded | DecodeError] = {}
        for side in sorted(set(long_sides)):
            idx = [i for i, v in enumerate(long_sides) if v == side]
            out.update(zip(idx, self.pixels.decode([images[i] for i in idx], side), strict=True))
        return [out[i] for i in range(len(images))]

    def _canvases(self, views: Sequence[View], mattes: Sequence[Matte]
                  ) -> tuple[list[np.ndarray], list[float]]:
        """The face-search canvases (RGB) of each matte's box: its longer side scaled to the
        detector's canvas (INTER_AREA from the working copy); and canvas px per source px."""
        out, ks = [], []
        for v, m in zip(views, mattes, strict=True):
            roi = _crop(v, m.box)
            k = self.faces.canvas / max(roi.shape[:2])
            size = (max(1, round(roi.shape[1] * k)), max(1, round(roi.shape[0] * k)))
            interp = cv2.INTER_AREA if k < 1.0 else cv2.INTER_LINEAR
            out.append(cv2.cvtColor(cv2.resize(roi, size, interpolation=interp),
                                    cv2.COLOR_BGR2RGB))
            ks.append(size[0] / (m.box[2] - m.box[0]))
        return out, ks

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
        canvases, ks = self._canvases(views, mattes)
        boxes = self.faces.detect(canvases)
        face_ms = self.faces.mtcnn.last_inference_ms
        out = [Found(self._count(b, k, m), 0, m)
               for b, k, m in zip(boxes, ks, mattes, strict=True)]
        missing = [i for i, f in enumerate(out) if not f.faces]
        if not missing:
            return out, face_ms
        turned = [(i, t) for i in missing for t in TURNS]
        found = self.faces.detect([np.ascontiguousarray(np.rot90(canvases[i], t))
                                   for i, t in turned])
        face_ms += self.faces.mtcnn.last_inference_ms
        for (i, t), b in zip(turned, found, strict=True):
            if out[i].faces or not b:
                continue
            m = mattes[i].rot90(t)
            faces = self._count(b, ks[i], m)
            if faces:
                out[i] = Found(faces, t, m)
        return out, face_ms

    def _plan(self, x: Loaded, found: Found, mesh: Mesh | None,
              inference_ms: float) -> Plan | Outcome:
        """The verdict, and for an accepted item its frame (host work on the matte only): the
        chin from the mesh (:func:`~processors.idphoto.inspection.head_with_mesh_chin`), and
        in ``validate`` mode the frame moved onto the upload (:func:`fit_inside`)."""
        it, spec = x.item, x.req.size
        payload = base_payload(x.req)

        def reject(code: ReasonCode, **extra: Any) -> Outcome:
            return Outcome(it.upload_id, Status.REJECTED, (code,), {**payload, **extra},
                           inference_ms=inference_ms)

        faces, turns, matte = found.faces, found.turns, found.matte
        if not faces:
            return reject(ReasonCode.NO_FACE)
        if len(faces) > 1:
            return reject(ReasonCode.MULTIPLE_FACES, faces=len(faces))
        face: FaceBox = faces[0]
        hw = matte.rot90(-turns).source_hw if turns else matte.source_hw
        payload["face_box"] = face.unrotated(turns, hw).as_list()
        if face.h < self.settings.min_face_px:
            return reject(ReasonCode.FACE_TOO_SMALL)
        head = head_with_mesh_chin(
            head_geometry(face, matte, self.settings.matte_threshold,
                          resolution=spec.target_head_px / face.h), mesh, matte.source_hw)
        if head.cropped:
            return reject(ReasonCode.HEAD_CROPPED)
        frame = plan_frame(head, spec)
        if x.req.mode == "validate":
            frame = fit_inside(frame, head, matte.source_hw)
        return Plan(it, x.req, x.image, frame, found, payload, inference_ms, head, mesh)

    def _photos(self, plans: Sequence[Plan]) -> list[np.ndarray]:
        """The colour photos of the planned items, ``(h, w, 3) uint8`` BGR host arrays, by one
        batched warp of the decoded uploads; an upload decoded at fewer px than its frame needs
        is decoded again at the scale it needs (one more batched decode)."""
        srcs = [p.image for p in plans]
        again = [k for k, p in enumerate(plans)
                 if p.frame.scale > p.image.scale * UPSCALE_TOLERANCE]
        if again:
            images = [plans[k].item.image for k in again]
            redone = self._decode(images, [decode_side(im.width, im.height, plans[k].frame.scale)
                                           for k, im in zip(again, images, strict=True)])
            for k, d in zip(again, redone, strict=True):
                if isinstance(d, Decoded):
                    srcs[k] = d
        hm, sizes = [], []
        for p, src in zip(plans, srcs, strict=True):
            m = p.found.matte
            hw = m.rot90(-p.found.turns).source_hw if p.found.turns else m.source_hw
            hm.append(upload_to_decoded(src) @ turned_to_upload(p.found.turns, hw)
                      @ frame_to_turned(p.frame))
            sizes.append((p.frame.width, p.frame.height))
        return self.pixels.to_host(self.pixels.warp(srcs, np.stack(hm), sizes))

    def _finish(self, plan: Plan, bgr: np.ndarray) -> Outcome:
        """The photo (``retouch``: alpha from the matte, optional alpha matting, composited on
        the background; ``validate``: as framed), its compliance report, the JPEG (at the
        spec's dpi, within ``target_kb``) and the optional print sheet.

        The report's failed checks are the outcome's reasons; it is ``rejected`` when one of
        them is in ``settings.compliance.reject``, else ``accepted`` (the others annotate).
        The photo is stored either way, so a rejected photo can be looked at.
        """
        it, req = plan.item, plan.req
        frame, matte, spec = plan.frame, plan.found.matte, req.size
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        alpha = cut(matte_sampler(matte), matte.source_hw, frame)
        photo = rgb
        if req.mode == "retouch":
            if req.alpha_matting:
                s = self.settings
                rgb, alpha = alpha_matting_rgba(
                    rgb, alpha, s.alpha_matting_foreground_threshold,
                    s.alpha_matting_background_threshold, s.alpha_matting_erode_size,
                )
            photo = composite(rgb, alpha, req.background_rgb)
        payload = dict(plan.payload)
        status = Status.ACCEPTED
        reasons: tuple[ReasonCode, ...] = ()
        if plan.mesh is not None:
            rep = report(photo, alpha, plan.mesh, plan.head.crown_y, frame, spec, req.mode,
                         self.settings.compliance, matte.source_hw)
            payload["compliance"] = rep.as_payload(spec, req.mode)
            reasons = tuple(ReasonCode(r) for r in rep.failed())
            if rep.rejecting(self.settings.compliance):
                status = Status.REJECTED
        jpeg = encode_within(photo, self.settings.jpeg_quality, spec.dpi, req.target_kb)
        if req.target_kb is not None:
            payload["target_kb_met"] = jpeg.fits
        arts = [Artifact(name="photo", ext="jpg", content_type="image/jpeg", data=jpeg.data,
                         width=frame.width, height=frame.height)]
        if req.print_sheet:
            sheet, _ = print_sheet(photo, spec.dpi)
            arts.append(Artifact(name="sheet", ext="jpg", content_type="image/jpeg",
                                 data=encode_within(sheet, self.settings.jpeg_quality, spec.dpi,
                                                    None).data,
                                 width=sheet.shape[1], height=sheet.shape[0]))
        return Outcome(it.upload_id, status, reasons, payload, tuple(arts),
                       inference_ms=plan.inference_ms)
