"""Frontal face detection for ID-photo framing: OpenCV 4.x Haar cascade (no download).

The detector is ``haarcascade_frontalface_alt2.xml`` shipped inside the opencv-python(-headless)
4.x wheel (``cv2.data.haarcascades``; OpenCV 5 ships none, hence ``opencv-python-headless<5``).
Why Haar and not MTCNN: see ``processors/idphoto/README.md``. The cascade runs per image (OpenCV
has no batched Haar call); it takes tens of ms per image at ``detect_max_side`` 640 px on a 2-core CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from processors.cascades import cascade
from processors.idphoto.settings import IdPhotoSettings

#: Cascade file inside ``cv2.data.haarcascades`` (OpenCV 4.x, Intel licence / BSD-3).
CASCADE_FILE = "haarcascade_frontalface_alt2.xml"


@dataclass(frozen=True, slots=True)
class FaceBox:
    """A face in source pixels.

    Attributes:
        x, y: top-left corner (px).
        w, h: width and height (px); the alt2 box spans roughly brows to mouth, the chin lies
            about ``0.2 h`` below its bottom (see ``framing.CHIN_BELOW_BOX``).
    """

    x: int
    y: int
    w: int
    h: int

    def as_list(self) -> list[int]:
        """``[x, y, w, h]`` (source px) for result payloads."""
        return [self.x, self.y, self.w, self.h]


class FaceDetector:
    """Haar-cascade frontal face detector.

    Args:
        settings: ID-photo settings (detection size, cascade parameters).

    Raises:
        ModelError: the cascade file is missing from the installed OpenCV (e.g. OpenCV 5).
    """

    def __init__(self, settings: IdPhotoSettings) -> None:
        self.settings = settings
        cascade(CASCADE_FILE)  # fail at start-up, not on the first upload

    def detect(self, image_bgr: np.ndarray) -> list[FaceBox]:
        """All frontal faces, largest first.

        Args:
            image_bgr: ``(H, W, 3) uint8`` BGR.

        Returns:
            Face boxes in source px. The image is downscaled to ``detect_max_side`` (INTER_AREA),
            converted to gray and histogram-equalised before the cascade.
        """
        s = self.settings
        h, w = image_bgr.shape[:2]
        scale = min(1.0, s.detect_max_side / max(h, w))
        small = image_bgr
        if scale < 1.0:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            small = cv2.resize(image_bgr, size, interpolation=cv2.INTER_AREA)
        gray = cv2.equalizeHist(cv2.cvtColor(small, cv2.COLOR_BGR2GRAY))
        min_side = max(20, int(s.haar_min_face_frac * min(gray.shape)))
        found = cascade(CASCADE_FILE).detectMultiScale(
            gray,
            scaleFactor=s.haar_scale_factor,
            minNeighbors=s.haar_min_neighbors,
            minSize=(min_side, min_side),
        )
        boxes = [
            FaceBox(
                round(x / scale),
                round(y / scale),
                round(bw / scale),
                round(bh / scale),
            )
            for (x, y, bw, bh) in (found if len(found) else [])
        ]
        return sorted(boxes, key=lambda b: b.w * b.h, reverse=True)


def faces_on_person(
    boxes: list[FaceBox], mask: np.ndarray, settings: IdPhotoSettings
) -> list[FaceBox]:
    """Keep the faces that count for the verdict.

    A face counts when the mean matte inside its box is at least ``face_matte_min`` (it lies on
    the segmented person, not on the background) and, unless it is the largest such face, its
    height is at least ``secondary_face_ratio`` of the largest one's.

    Args:
        boxes: detections, largest first (source px).
        mask: ``(H, W) uint8`` person matte of the same image.
        settings: thresholds.

    Returns:
        The counted faces, largest first.
    """
    on_person = []
    for b in boxes:
        roi = mask[max(b.y, 0) : b.y + b.h, max(b.x, 0) : b.x + b.w]
        if roi.size and float(roi.mean()) / 255.0 >= settings.face_matte_min:
            on_person.append(b)
    if not on_person:
        return []
    top = on_person[0].h
    return [b for b in on_person if b.h >= settings.secondary_face_ratio * top]
