"""Head geometry, framing to a standard size, compositing on a colour (the JPEG: ``output``).

The head is measured from two sources: the crown (top of the hair) is the top of the person
matte above the face, the chin is estimated from the face box (:data:`CHIN_BELOW_BOX`; the box
is derived from MTCNN landmarks in ``faces.box_from_landmarks``). The
output is the similarity transform (uniform scale + shift) that puts the head height at the
middle of the size's allowed range, the crown at the middle of its allowed margin and the face
centre on the vertical mid-line. Areas outside the upload become background.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from processors.idphoto.faces import FaceBox
from processors.idphoto.matting import Matte
from processors.idphoto.specs import PhotoSpec

#: The chin lies this many face-box heights below the bottom of the face box (the box OpenCV's
#: frontalface_alt2 cascade drew, which ``faces.box_from_landmarks`` reproduces). Measured on
#: scikit-image's public-domain astronaut portrait (box h 92 px, chin 18 px below).
CHIN_BELOW_BOX = 0.2
#: Crown estimate (box heights above the box top) when the matte gives no usable column.
CROWN_ABOVE_BOX_FALLBACK = 0.5
#: Columns of the face box (as fractions of its width) searched for the crown.
CROWN_BAND = (0.25, 0.75)
#: Share of crown columns whose person pixels reach row 0 from which the head counts as cut.
CROPPED_COLUMN_SHARE = 0.1
#: The crown is searched first in the rows up to this many box heights above the forehead row;
#: only a person run that reaches the top of that window (a raised arm, a tall hat) makes the
#: search go on to the upload's top edge.
CROWN_WINDOW_BOXES = 3.0


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


def head_geometry(face: FaceBox, matte: Matte, threshold: int,
                  resolution: float = 1.0) -> HeadGeometry:
    """Measure the head of ``face`` with the person matte.

    For every column in the middle half of the face box, the crown is the first person row of
    the run of person pixels (``mask >= threshold``) that reaches down to the upper forehead
    (``y + h/4``); the head's crown is the 10th percentile of those rows. The mask is resampled
    only over that band (:meth:`Matte.region`), at ``resolution`` px per source px, and first
    only :data:`CROWN_WINDOW_BOXES` box heights high.

    Args:
        face: face box (source px).
        matte: the upload's person matte.
        threshold: matte level (0..255) from which a pixel is person.
        resolution: band px per source px (<= 1): the frame's scale or more is enough, since
            the crown is only needed to the output's px.
    """
    H, W = matte.source_hw
    c0 = int(np.clip(face.x + CROWN_BAND[0] * face.w, 0, W - 1))
    c1 = int(np.clip(face.x + CROWN_BAND[1] * face.w, c0 + 1, W))
    y_start = int(np.clip(face.y + face.h / 4, 1, H))
    top = max(0, int(y_start - CROWN_WINDOW_BOXES * face.h))
    r = min(1.0, resolution)
    while True:
        size = (max(1, round((c1 - c0) * r)), max(1, round((y_start - top) * r)))
        band = matte.region(c0, top, c1, y_start, size if r < 1.0 else None) >= threshold
        reliable = band[-1]  # the forehead row is person in this column
        cols = band[:, reliable]  # (rows, ncols) bool
        # first row of the person run ending at the forehead row: after the last background row
        bg = ~cols
        last_bg = bg.shape[0] - 1 - np.argmax(bg[::-1], axis=0)
        runs_top = np.where(bg.any(axis=0), last_bg + 1, 0)
        if top == 0 or not cols.shape[1] or np.all(runs_top > 0):
            break
        top = 0  # a run reaches the window's top: look up to the upload's edge
    crowns = top + runs_top * ((y_start - top) / band.shape[0])
    chin = face.y + face.h * (1.0 + CHIN_BELOW_BOX)
    if crowns.size:
        crown = float(np.percentile(crowns, 10))
        top_cut = float(np.mean(runs_top == 0)) >= CROPPED_COLUMN_SHARE and top == 0
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

    def in_view(self, factor: float) -> Frame:
        """This frame on a copy of the upload at ``factor`` px per source px (a JPEG decoded
        at 1/2, say): the same output from fewer source px."""
        return Frame(self.x0 * factor, self.y0 * factor, self.scale / factor, self.width,
                     self.height)


def plan_frame(head: HeadGeometry, spec: PhotoSpec) -> Frame:
    """The frame that puts ``head`` at ``spec``'s target head height and crown margin, centred."""
    scale = spec.target_head_px / max(head.height, 1.0)
    w, h = spec.width_px, spec.height_px
    x0 = head.centre_x - (w / 2.0) / scale
    y0 = head.crown_y - spec.target_crown_px / scale
    return Frame(x0=x0, y0=y0, scale=scale, width=w, height=h)


#: ``sample(x0, y0, x1, y1, size)``: the source over source px ``[x0, x1) x [y0, y1)``
#: (integers) as an array of ``size`` ``(width, height)`` px (area-averaged when smaller).
Sampler = Callable[[int, int, int, int, tuple[int, int]], np.ndarray]


def image_sampler(image: np.ndarray) -> Sampler:
    """A :data:`Sampler` over ``image``: crop, then INTER_AREA to the size asked (or as is)."""

    def sample(x0: int, y0: int, x1: int, y1: int, size: tuple[int, int]) -> np.ndarray:
        roi = image[y0:y1, x0:x1]
        if roi.shape[1] == size[0] and roi.shape[0] == size[1]:
            return roi
        return cv2.resize(roi, size, interpolation=cv2.INTER_AREA)

    return sample


def matte_sampler(matte: Matte) -> Sampler:
    """A :data:`Sampler` over the upload's mask (:meth:`Matte.region`: LANCZOS from the model's
    resolution straight to the size asked)."""

    def sample(x0: int, y0: int, x1: int, y1: int, size: tuple[int, int]) -> np.ndarray:
        return matte.region(x0, y0, x1, y1, size)

    return sample


def cut(sample: Sampler, source_hw: tuple[int, int], frame: Frame, channels: int = 0,
        interpolation_up: int = cv2.INTER_CUBIC) -> np.ndarray:
    """Cut ``frame`` out of the upload, reading only the part under the frame; outside is 0.

    Shrinking (scale < 1): the region under the frame (plus a margin) is area-averaged to the
    output's scale, then shifted into place with INTER_LINEAR. Enlarging: the region at source
    px is warped with ``interpolation_up``. As :func:`warp` on the whole upload, without the
    cost of the parts the photo does not show.

    Args:
        sample: reads the upload (:func:`image_sampler`, :func:`matte_sampler`).
        source_hw: ``(H, W)`` of the upload (px).
        frame: the output placement.
        channels: 3 for colour, 0 for a ``(H, W)`` mask.
        interpolation_up: OpenCV interpolation when enlarging.

    Returns:
        ``(frame.height, frame.width[, channels]) uint8``.
    """
    s, x0, y0 = frame.scale, frame.x0, frame.y0
    H, W = source_hw
    margin = 2.0 + (1.0 / s if s < 1.0 else 0.0)
    rx0 = int(max(0, np.floor(x0 - margin)))
    ry0 = int(max(0, np.floor(y0 - margin)))
    rx1 = int(min(W, np.ceil(x0 + frame.width / s + margin)))
    ry1 = int(min(H, np.ceil(y0 + frame.height / s + margin)))
    shape = (frame.height, frame.width, channels) if channels else (frame.height, frame.width)
    if rx1 <= rx0 or ry1 <= ry0:
        return np.zeros(shape, np.uint8)
    if s < 1.0:
        size = (max(1, round((rx1 - rx0) * s)), max(1, round((ry1 - ry0) * s)))
        src = sample(rx0, ry0, rx1, ry1, size)
        sx, sy = size[0] / (rx1 - rx0), size[1] / (ry1 - ry0)
        m = np.array([[1.0, 0.0, -(x0 - rx0) * sx], [0.0, 1.0, -(y0 - ry0) * sy]], np.float64)
        flags = cv2.INTER_LINEAR
    else:
        src = sample(rx0, ry0, rx1, ry1, (rx1 - rx0, ry1 - ry0))
        m = np.array([[s, 0.0, -(x0 - rx0) * s], [0.0, s, -(y0 - ry0) * s]], np.float64)
        flags = interpolation_up
    return cv2.warpAffine(np.ascontiguousarray(src), m, (frame.width, frame.height), flags=flags,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def warp(image: np.ndarray, frame: Frame, interpolation_up: int = cv2.INTER_CUBIC) -> np.ndarray:
    """Cut ``frame`` out of ``image`` (the whole upload in memory); outside the upload is 0.

    Args:
        image: ``(H, W, C) uint8`` or ``(H, W) uint8``.
        frame: the output placement.
        interpolation_up: OpenCV interpolation when enlarging (INTER_AREA is used to shrink).

    Returns:
        ``(frame.height, frame.width[, C]) uint8`` (see :func:`cut`).
    """
    channels = image.shape[2] if image.ndim == 3 else 0
    return cut(image_sampler(image), image.shape[:2], frame, channels, interpolation_up)


def composite(
    rgb: np.ndarray, alpha: np.ndarray, background_rgb: tuple[int, int, int]
) -> np.ndarray:
    """``rgb * a + background * (1 - a)``, in integers.

    Args:
        rgb: ``(H, W, 3) uint8`` foreground colours (RGB).
        alpha: ``(H, W) uint8`` coverage 0..255.
        background_rgb: background colour (RGB 0..255).

    Returns:
        ``(H, W, 3) uint8`` RGB, ``(c * a + bg * (255 - a) + 127) // 255`` (the rounded blend,
        ties aside; at most 255 * 255 + 127, so uint16 holds it).
    """
    a = alpha.astype(np.uint16)[..., None]
    bg = np.asarray(background_rgb, dtype=np.uint16)
    out = rgb.astype(np.uint16) * a
    out += bg * (255 - a)
    out += 127
    out //= 255
    return out.astype(np.uint8)


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
