"""ID-photo processor settings (``CARDSTREAM_IDPHOTO__*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.models import Background, PhotoMode, PhotoSize
from schemas.reasons import ReasonCode

MattingModelName = Literal["u2netp", "u2net", "u2net_human_seg", "silueta"]


class ComplianceSettings(BaseModel):
    """Thresholds of the checks whose sources give words, and which failures reject.

    Attributes:
        reject: reason codes that make an ``id_photo`` result ``rejected``; any other failed
            check only annotates (its code is listed in ``reasons`` of an accepted result).
        min_eye_opening: smallest eyelid gap per eye width (each eye) for ``eyes_open``.
        max_mouth_opening: largest inner-lip gap per mouth width for ``mouth_closed``.
        max_background_std: largest standard deviation of the background's luma (0..255).
        max_illumination_asymmetry: largest ``|L - R| / mean(L, R)`` of the face halves' luma.
        exposure_luma: the face's mean luma must lie in this range (0..255).
        min_sharpness: smallest variance of the Laplacian of the face at 128 px, divided by
            the variance of the face's luma (scale- and exposure-free).
        min_colourfulness: smallest mean chroma (``max - min`` of RGB) of the face for a colour
            photo.
        max_eye_glare: largest share of an eye's region (its contour's box, doubled) that is
            specular white (luma >= 245, chroma <= 30): a catchlight is 1-3 %, the glare of
            glasses tens of %.
    """

    model_config = ConfigDict(frozen=True)

    reject: frozenset[ReasonCode] = frozenset({
        ReasonCode.HEAD_TOO_SMALL, ReasonCode.HEAD_TOO_LARGE, ReasonCode.HEAD_TOO_HIGH,
        ReasonCode.HEAD_TOO_LOW, ReasonCode.HEAD_NOT_CENTRED, ReasonCode.HEAD_TILTED,
        ReasonCode.NOT_FACING_CAMERA, ReasonCode.EYES_CLOSED, ReasonCode.MOUTH_OPEN,
        ReasonCode.BACKGROUND_NOT_UNIFORM, ReasonCode.BACKGROUND_COLOUR,
        ReasonCode.UNEVEN_LIGHTING, ReasonCode.POOR_EXPOSURE, ReasonCode.BLURRY,
        ReasonCode.GREYSCALE, ReasonCode.GLARE,
    })
    min_eye_opening: float = Field(default=0.12, ge=0.0)
    max_mouth_opening: float = Field(default=0.08, ge=0.0)
    max_background_std: float = Field(default=12.0, ge=0.0)
    max_illumination_asymmetry: float = Field(default=0.25, ge=0.0)
    exposure_luma: tuple[float, float] = (60.0, 215.0)
    min_sharpness: float = Field(default=0.015, ge=0.0)
    min_colourfulness: float = Field(default=6.0, ge=0.0)
    max_eye_glare: float = Field(default=0.08, ge=0.0, le=1.0)


class IdPhotoSettings(BaseModel):
    """Settings of the id_photo processor (frozen; part of the app settings).

    Attributes:
        model: rembg U2-Net family model used for the person matte. ``u2netp`` (4.4 MB) is pinned
            in ``processors/models.json``; the others are rembg's release files
            (``u2net.onnx``...) and must already be in the model home (see
            ``matting.REMBG_MODELS``).
        default_size: size used when an item carries no ``size`` option (``specs.json``):
            the one place this default is written; uploads, ``cardstream idphoto`` and the
            processor's own calls all take it from here.
        default_background: background used when an item carries no ``background`` option
            (``white``, ``blue``, ``red`` or ``#RRGGBB``); the one place, as ``default_size``.
        default_mode: ``retouch`` (a new background) or ``validate`` (the upload's own,
            checked) when an item carries no ``mode`` option.
        compliance: the report's thresholds and which failures reject
            (``CARDSTREAM_IDPHOTO__COMPLIANCE__*``, :class:`ComplianceSettings`).
        min_face_px: smallest accepted face-box height (source px); smaller faces are
            ``FACE_TOO_SMALL`` because the head would be upscaled too far (a one-inch head is
            ~250 px at 300 dpi, so 80 px means an upscale of about 3x).
        secondary_face_ratio: a second face counts (``MULTIPLE_FACES``) when its box height is at
            least this fraction of the largest face's; smaller faces (a poster far behind) are
            ignored.
        face_matte_min: a detected face counts only where the mean matte (0..1) inside its box
            reaches this value; removes detections on the background (posters, patterns).
        detect_canvas_px: faces are searched on each upload's matting view (the upload, or the
            crop around a person small in the frame) scaled so its longer side is this many px
            (MTCNN, ``faces.FaceDetector``); face boxes are mapped back to source px.
        detect_min_face_px: smallest face searched, in px of that canvas (>= 12, P-Net's
            window). At 24 px on a 320 px canvas a 1600x1200 upload's faces from 120 px are
            found, and smaller ones where the person is small enough to be matted from a crop.
        matte_threshold: matte value (0..255) from which a pixel is person, for finding the crown.
        matte_zoom_max_share: a person whose padded box spans at most this share of the frame's
            longer side is matted a second time from a crop around them, in one more batched
            call (``matting.U2NetMatting.predict_zoomed``); 0 turns it off.
        alpha_matting_foreground_threshold: trimap foreground threshold (rembg's default 240).
        alpha_matting_background_threshold: trimap background threshold (rembg's default 10).
        alpha_matting_erode_size: trimap erosion size px (rembg's default 10).
        jpeg_quality: quality of the encoded photo (PIL, 1..95).
    """

    model_config = ConfigDict(frozen=True)

    model: MattingModelName = "u2netp"
    default_size: PhotoSize = PhotoSize.ONE_INCH
    default_background: Background = "white"
    default_mode: PhotoMode = PhotoMode.RETOUCH
    compliance: ComplianceSettings = ComplianceSettings()
    min_face_px: int = Field(default=80, ge=8)
    secondary_face_ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    face_matte_min: float = Field(default=0.5, ge=0.0, le=1.0)
    detect_canvas_px: int = Field(default=320, ge=64, le=1024)
    detect_min_face_px: float = Field(default=24.0, ge=12.0)
    matte_threshold: int = Field(default=128, ge=1, le=254)
    matte_zoom_max_share: float = Field(default=0.6, ge=0.0, le=1.0)
    alpha_matting_foreground_threshold: int = Field(default=240, ge=0, le=255)
    alpha_matting_background_threshold: int = Field(default=10, ge=0, le=255)
    alpha_matting_erode_size: int = Field(default=10, ge=0)
    jpeg_quality: int = Field(default=95, ge=1, le=95)
