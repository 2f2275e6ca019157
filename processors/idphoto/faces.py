"""Faces for ID-photo framing: batched MTCNN landmarks, turned into the framing's face box.

The detector is :class:`processors.mtcnn.Mtcnn` (three ONNX calls per batch, see that module),
run on every upload's matting view scaled to a 320 px canvas. Its five landmarks give the face
box the framing uses (:func:`box_from_landmarks`): the box is defined as the OpenCV
``haarcascade_frontalface_alt2`` box the processor used before (brows to mouth; the chin about
``0.2 h`` below its bottom, ``framing.CHIN_BELOW_BOX``), so the head rule, ``min_face_px`` and the
``face_box`` of results keep their meaning. Why MTCNN: see ``processors/idphoto/README.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from processors.idphoto.settings import IdPhotoSettings
from processors.mtcnn import Faces, Mtcnn
from processors.runtime import RuntimeSettings

#: Side of the framing's face box per eye-to-mouth distance (eye midpoint to mouth midpoint).
#: Fitted on 40 variants of scikit-image's astronaut (scaled 0.7-3x, mirrored, turned +-4
#: degrees, shifted) against the Haar alt2 box the processor used before: mean 2.49, sd 0.06.
BOX_PER_EYE_MOUTH = 2.49
#: Top of that box above the eye line, in eye-to-mouth distances (same fit: mean 0.94, sd 0.04).
BOX_TOP_ABOVE_EYES = 0.94
#: Largest roll (degrees) of a face that counts as upright: the eye-to-mouth direction within
#: this angle of straight down. MTCNN also fires on faces turned by a quarter, with landmarks
#: that do not fit a face; such an upload is searched again turned (``processor.TURNS``).
MAX_ROLL_DEG = 45.0
#: Smallest distance between the eyes as a share of MTCNN's box width for an upright face: 0.47
#: to 0.52 on the 40 astronaut variants; on her face turned by a quarter MTCNN drew a box with
#: upright-looking landmarks squeezed together at 0.25.
MIN_EYE_SPAN = 0.35


def upright(faces: Faces) -> np.ndarray:
    """``(K,) bool``: which faces' landmarks are upright: the mouth below the eyes within
    :data:`MAX_ROLL_DEG`, the right eye right of the left one, the nose between the eye line and
    the mouth, and the eyes at least :data:`MIN_EYE_SPAN` of the box width apart."""
    landmarks = faces.landmarks
    eyes = landmarks[:, 0:2].mean(axis=1)
    mouth = landmarks[:, 3:5].mean(axis=1)
    down = mouth - eyes
    roll_ok = down[:, 1] > np.abs(down[:, 0]) * np.tan(np.radians(90.0 - MAX_ROLL_DEG))
    eyes_ok = landmarks[:, 1, 0] > landmarks[:, 0, 0]
    nose_ok = (landmarks[:, 2, 1] > eyes[:, 1]) & (landmarks[:, 2, 1] < mouth[:, 1])
    span = np.linalg.norm(landmarks[:, 1] - landmarks[:, 0], axis=1)
    span_ok = span >= MIN_EYE_SPAN * (faces.boxes[:, 2] - faces.boxes[:, 0] + 1.0)
    return roll_ok & eyes_ok & nose_ok & span_ok


@dataclass(frozen=True, slots=True)
class FaceBox:
    """A face in source pixels.

    Attributes:
        x, y: top-left corner (px, float).
        w, h: width and height (px); the box spans roughly brows to mouth, the chin lies
            about ``0.2 h`` below its bottom (see ``framing.CHIN_BELOW_BOX``).
        marks: ``(5, 2) float64`` MTCNN's landmarks in the same px (left eye, right eye, nose,
            mouth corners), or None; not part of equality.
    """

    x: float
    y: float
    w: float
    h: float
    marks: np.ndarray | None = field(default=None, compare=False, repr=False)

    def unrotated(self, turns: int, source_hw: tuple[int, int]) -> FaceBox:
        """This box, found in ``np.rot90(source, turns)``, in the source's px.

        Args:
            turns: quarter turns counter-clockwise (``np.rot90``'s ``k``, 0..3) that made the
                image the box was found in.
            source_hw: ``(H, W)`` of the source image (px).
        """
        h, w = source_hw
        x, y, bw, bh = self.x, self.y, self.w, self.h
        return [self,
                FaceBox(w - y - bh, x, bh, bw),
                FaceBox(w - x - bw, h - y - bh, bw, bh),
                FaceBox(y, h - x - bw, bh, bw)][turns % 4]

    def scaled(self, factor: float, dx: float = 0.0, dy: float = 0.0) -> FaceBox:
        """The box (and its landmarks) in another image's px: ``p * factor + (dx, dy)``."""
        marks = None if self.marks is None else self.marks * factor + np.array([dx, dy])
        return FaceBox(self.x * factor + dx, self.y * factor + dy, self.w * factor,
                       self.h * factor, marks)

    def iou(self, other: FaceBox) -> float:
        """Intersection over union (0..1) of this box and ``other`` (same px); 0.0 when either
        is empty."""
        w = min(self.x + self.w, other.x + other.w) - max(self.x, other.x)
        h = min(self.y + self.h, other.y + other.h) - max(self.y, other.y)
        inter = max(w, 0.0) * max(h, 0.0)
        union = self.w * self.h + other.w * other.h - inter
        return inter / union if union > 0 else 0.0

    def as_list(self) -> list[int]:
        """``[x, y, w, h]`` (source px, rounded) for result payloads."""
        return [round(self.x), round(self.y), round(self.w), round(self.h)]


def box_from_landmarks(landmarks: np.ndarray) -> list[FaceBox]:
    """The framing's face boxes from MTCNN landmarks.

    Args:
        landmarks: ``(K, 5, 2) float32`` px: left eye, right eye, nose, left and right mouth
            corner.

    Returns:
        K square boxes: side :data:`BOX_PER_EYE_MOUTH` times the eye-to-mouth distance, top
        :data:`BOX_TOP_ABOVE_EYES` of it above the eye line, centred on the mean of the eyes
        and mouth corners; each carries its landmarks (``marks``).
    """
    eyes = landmarks[:, 0:2].mean(axis=1)
    mouth = landmarks[:, 3:5].mean(axis=1)
    d = np.linalg.norm(mouth - eyes, axis=1)
    cx = landmarks[:, [0, 1, 3, 4], 0].mean(axis=1)
    side = BOX_PER_EYE_MOUTH * d
    top = eyes[:, 1] - BOX_TOP_ABOVE_EYES * d
    return [FaceBox(float(c - s / 2), float(t), float(s), float(s), m.astype(np.float64))
            for c, t, s, m in zip(cx, top, side, landmarks, strict=True)]


class FaceDetector:
    """Batched face detection for the ID-photo processor.

    Args:
        settings: ID-photo settings (canvas size, smallest face searched).
        runtime: ONNX Runtime settings for the MTCNN graphs.

    Raises:
        ModelError: an MTCNN weight file is missing (``make models``) or fails its pin.
    """

    def __init__(self, settings: IdPhotoSettings, runtime: RuntimeSettings) -> None:
        self.settings = settings
        self.mtcnn = Mtcnn(runtime, canvas=settings.detect_canvas_px,
                           min_face=settings.detect_min_face_px)

    @property
    def canvas(self) -> int:
        """Side (px) of the square canvas the images are given at (their longer side)."""
        return self.mtcnn.canvas

    def detect(self, canvases_rgb: Sequence[np.ndarray]) -> list[list[FaceBox]]:
        """Faces of every image, largest first, in each image's px (three model calls).

        Args:
            canvases_rgb: N images ``(h, w, 3) uint8`` RGB with ``max(h, w) <= canvas``.

        Returns:
            N lists of :class:`FaceBox`, largest first; faces that are not :func:`upright` are
            left out.
        """
        found: list[Faces] = self.mtcnn.detect(canvases_rgb)
        out = []
        for f in found:
            marks = f.landmarks[upright(f)] if len(f) else f.landmarks
            boxes = box_from_landmarks(marks) if len(marks) else []
            out.append(sorted(boxes, key=lambda b: b.h, reverse=True))
        return out


def faces_on_person(boxes: list[FaceBox], coverage: Sequence[float],
                    settings: IdPhotoSettings) -> list[FaceBox]:
    """Keep the faces that count for the verdict.

    A face counts when the mean matte inside its box is at least ``face_matte_min`` (it lies on
    the segmented person, not on the background) and, unless it is the largest such face, its
    height is at least ``secondary_face_ratio`` of the largest one's.

    Args:
        boxes: detections, largest first (source px).
        coverage: mean matte (0..1) inside each box, same order.
        settings: thresholds.

    Returns:
        The counted faces, largest first.
    """
    on_person = [b for b, c in zip(boxes, coverage, strict=True) if c >= settings.face_matte_min]
    if not on_person:
        return []
    top = on_person[0].h
    return [b for b in on_person if b.h >= settings.secondary_face_ratio * top]
