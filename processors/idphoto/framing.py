"""Head geometry, framing to a standard size, compositing on a colour, JPEG at 300 dpi.

The head is measured from two sources: the crown (top of the hair) is the top of the person
matte above the face, the chin is estimated from the Haar face box (:data:`CHIN_BELOW_BOX`). The
output is the similarity transform (uniform scale + shift) that puts the head height at the
middle of the size's allowed range, the crown at the middle of its allowed margin and the face
centre on the vertical mid-line. Areas outside the upload become background.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from processors.idphoto.faces import FaceBox
from processors.idphoto.sizes import DPI, SizeSpec

#: The chin lies this many face-box heights below the bottom of OpenCV's frontalface_alt2 box.
#: Measured on scikit-image's public-domain astronaut portrait (box h 92 px, chin 18 px below).
CHIN_BELOW_BOX = 0.2
#: Crown estimate (box heights above the box top) when the matte gives no usable column.
CROWN_ABOVE_BOX_FALLBACK = 0.5
#: Columns of the face box (as fractions of its width) searched for the crown.
CROWN_BAND = (0.25, 0.75)
#: Share of crown columns whose person pixels reach row 0 from which the head counts as cut.
CROPPED_COLUMN_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class HeadGeometry:
    """The head in source px.

    Attributes:
        crown_y: row of the top of the head (px).
        chin_y: estimated row of the chin (px).
        centre_x: column of the face centre (px).
        cropped: the head leaves the upload (matte reaches the top edge above the face, or the
            estimated chin lies below the bottom edge).
    """

    crown_y: float
    chin_y: float
    centre_x: float
    cropped: bool

    @property
    def height(self) -> float:
        """Chin-to-crown height (px)."""
        return self.chin_y - self.crown_y


def head_geometry(face: FaceBox, mask: np.ndarray, threshold: int) -> HeadGeometry:
    """Measure the head of ``face`` with the person matte.

    For every column in the middle half of the face box, the crown is the first person row of
    the run of person pixels (``mask >= threshold``) that reaches down to the upper forehead
    (``y + h/4``); the head's crown is the 10th percentile of those rows.

    Args:
        face: face box (source px).
        mask: ``(H, W) uint8`` person matte of the upload.
        threshold: matte level (0..255) from which a pixel is person.
    """
    H, W = mask.shape
    c0 = int(np.clip(face.x + CROWN_BAND[0] * face.w, 0, W - 1))
    c1 = int(np.clip(face.x + CROWN_BAND[1] * face.w, c0 + 1, W))
    y_start = int(np.clip(face.y + face.h / 4, 1, H))
    band = mask[:y_start, c0:c1] >= threshold  # (y_start, ncols) bool
    reliable = band[-1]  # the forehead row is person in this column
    crowns: list[int] = []
    for col in band.T[reliable]:
        bg_rows = np.flatnonzero(~col)
        crowns.append(int(bg_rows[-1]) + 1 if bg_rows.size else 0)
    chin = face.y + face.h * (1.0 + CHIN_BELOW_BOX)
    if crowns:
        arr = np.asarray(crowns)
        crown = float(np.percentile(arr, 10))
        top_cut = float(np.mean(arr == 0)) >= CROPPED_COLUMN_SHARE
    else:
        crown = face.y - CROWN_ABOVE_BOX_FALLBACK * face.h
        top_cut = crown <= 0
    return HeadGeometry(
        crown_y=crown,
        chin_y=chin,
        centre_x=face.x + face.w / 2.0,
        cropped=top_cut or chin > H,
    )


@dataclass(frozen=True, slots=True)
class Frame:
    """Where the output sits on the upload.

    Attributes:
        x0, y0: source position (px, float) of the output's top-left corner.
        scale: output px per source px.
        width, height: output size (px).
    """

    x0: float
    y0: float
    scale: float
    width: int
    height: int


def plan_frame(head: HeadGeometry, spec: SizeSpec) -> Frame:
    """The frame that puts ``head`` at ``spec``'s target head height and crown margin, centred."""
    scale = spec.target_head_px / max(head.height, 1.0)
    w, h = spec.width_px, spec.height_px
    x0 = head.centre_x - (w / 2.0) / scale
    y0 = head.crown_y - spec.target_crown_px / scale
    return Frame(x0=x0, y0=y0, scale=scale, width=w, height=h)


def warp(image: np.ndarray, frame: Frame, interpolation_up: int = cv2.INTER_CUBIC) -> np.ndarray:
    """Cut ``frame`` out of ``image``; outside the upload is 0.

    Args:
        image: ``(H, W, C) uint8`` or ``(H, W) uint8``.
        frame: the output placement.
        interpolation_up: OpenCV interpolation when enlarging (INTER_AREA is used to shrink).

    Returns:
        ``(frame.height, frame.width[, C]) uint8``.
    """
    s, x0, y0 = frame.scale, frame.x0, frame.y0
    src = image
    if s < 1.0:  # shrink with area averaging first, then place with a pure shift
        H, W = image.shape[:2]
        size = (max(1, round(W * s)), max(1, round(H * s)))
        src = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        sx, sy = size[0] / W, size[1] / H
        m = np.array([[1.0, 0.0, -x0 * sx], [0.0, 1.0, -y0 * sy]], dtype=np.float64)
        flags = cv2.INTER_LINEAR
    else:
        m = np.array([[s, 0.0, -x0 * s], [0.0, s, -y0 * s]], dtype=np.float64)
        flags = interpolation_up
    return cv2.warpAffine(
        src, m, (frame.width, frame.height), flags=flags,
        borderMode=cv2.BORDER_CONSTANT, borderValue=0,
    )


def composite(
    rgb: np.ndarray, alpha: np.ndarray, background_rgb: tuple[int, int, int]
) -> np.ndarray:
    """``rgb * a + background * (1 - a)``.

    Args:
        rgb: ``(H, W, 3) uint8`` foreground colours (RGB).
        alpha: ``(H, W) uint8`` coverage 0..255.
        background_rgb: background colour (RGB 0..255).

    Returns:
        ``(H, W, 3) uint8`` RGB, rounded.
    """
    a = alpha.astype(np.float32)[..., None] / 255.0
    bg = np.asarray(background_rgb, dtype=np.float32)
    out = rgb.astype(np.float32) * a + bg * (1.0 - a)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def alpha_matting_rgba(
    rgb: np.ndarray, mask: np.ndarray, fg_threshold: int, bg_threshold: int, erode_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """rembg's ``alpha_matting_cutout`` (closed-form alpha + ML foreground, pymatting).

    Args:
        rgb: ``(H, W, 3) uint8`` RGB (the framed crop: the cost grows with its pixel count).
        mask: ``(H, W) uint8`` U2-Net matte of the crop.
        fg_threshold, bg_threshold, erode_size: trimap parameters (rembg's 240, 10, 10).

    Returns:
        ``(foreground (H, W, 3) uint8 RGB, alpha (H, W) uint8)``. Where pymatting refuses the
        trimap (ValueError, e.g. no definite foreground) the crop and the matte are returned
        unchanged, as rembg falls back to the plain mask.
    """
    from rembg.bg import alpha_matting_cutout  # heavy import (pymatting/numba) only when used

    try:
        cut = alpha_matting_cutout(
            Image.fromarray(rgb, mode="RGB"), Image.fromarray(mask, mode="L"),
            fg_threshold, bg_threshold, erode_size,
        )
    except ValueError:
        return rgb, mask
    arr = np.asarray(cut)
    return np.ascontiguousarray(arr[..., :3]), np.ascontiguousarray(arr[..., 3])


def encode_jpeg(rgb: np.ndarray, quality: int, dpi: int = DPI) -> bytes:
    """JPEG bytes of ``(H, W, 3) uint8`` RGB with JFIF density ``dpi`` x ``dpi`` (PIL)."""
    buf = io.BytesIO()
    Image.fromarray(rgb, mode="RGB").save(buf, "JPEG", quality=quality, dpi=(dpi, dpi))
    return buf.getvalue()
