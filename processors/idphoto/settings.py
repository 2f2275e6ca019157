"""ID-photo processor settings (``CARDSTREAM_IDPHOTO__*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MattingModelName = Literal["u2netp", "u2net", "u2net_human_seg", "silueta"]


class IdPhotoSettings(BaseModel):
    """Settings of the id_photo processor (frozen; part of the app settings).

    Attributes:
        model: rembg U2-Net family model used for the person matte. ``u2netp`` (4.4 MB) is pinned
            in ``processors/models.json``; the others are rembg's release files
            (``u2net.onnx``...) and must already be in the model home (see ``matting.REMBG_MODELS``).
        default_size: size used when an item carries no ``size`` option (see ``sizes.SIZES``).
        default_background: background used when an item carries no ``background`` option
            (``white``, ``blue``, ``red`` or ``#RRGGBB``).
        min_face_px: smallest accepted face-box height (source px); smaller faces are
            ``FACE_TOO_SMALL`` because the head would be upscaled too far (a one-inch head is
            ~250 px at 300 dpi, so 80 px means an upscale of about 3x).
        secondary_face_ratio: a second face counts (``MULTIPLE_FACES``) when its box height is at
            least this fraction of the largest face's; smaller faces (a poster far behind) are
            ignored.
        face_matte_min: a detected face counts only where the mean matte (0..1) inside its box
            reaches this value; removes detections on the background (posters, patterns).
        detect_max_side: images are downscaled so their longer side is at most this many px
            for face detection (boxes are mapped back to source px).
        haar_scale_factor: OpenCV ``detectMultiScale`` scaleFactor (pyramid step).
        haar_min_neighbors: OpenCV ``detectMultiScale`` minNeighbors (higher: fewer false faces).
        haar_min_face_frac: smallest face searched first, as a fraction of the detection
            image's shorter side. When that search finds no face on the person, a thorough one
            (``faces.FaceDetector.detect``) looks again down to the cascade's 20 px window;
            what it finds is ``FACE_TOO_SMALL`` below ``min_face_px`` or framed as usual.
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
    default_size: str = "one_inch"
    default_background: str = "white"
    min_face_px: int = Field(default=80, ge=8)
    secondary_face_ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    face_matte_min: float = Field(default=0.5, ge=0.0, le=1.0)
    detect_max_side: int = Field(default=640, ge=128)
    haar_scale_factor: float = Field(default=1.1, gt=1.0)
    haar_min_neighbors: int = Field(default=5, ge=1)
    haar_min_face_frac: float = Field(default=0.1, gt=0.0, lt=1.0)
    matte_threshold: int = Field(default=128, ge=1, le=254)
    matte_zoom_max_share: float = Field(default=0.6, ge=0.0, le=1.0)
    alpha_matting_foreground_threshold: int = Field(default=240, ge=0, le=255)
    alpha_matting_background_threshold: int = Field(default=10, ge=0, le=255)
    alpha_matting_erode_size: int = Field(default=10, ge=0)
    jpeg_quality: int = Field(default=95, ge=1, le=95)
