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

#: The alt2 cascade's window (px, the ``<size>`` of the XML file): the smallest face it can find.
CASCADE_WINDOW_PX = 20
#: CLAHE clip limit and tile grid of the thorough search (OpenCV's usual 2.0 and 8 x 8).
CLAHE_CLIP = 2.0
CLAHE_TILES = 8
#: Largest pyramid step of the thorough search: at 1.1 the cascade missed a 29 px face that
#: 1.05 finds (astronaut scaled into a 1200 x 900 frame, see the unit tests).
THOROUGH_SCALE_FACTOR = 1.05


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

    def detect(self, image_bgr: np.ndarray, thorough: bool = False) -> list[FaceBox]:
        """All frontal faces, largest first.

        Args:
            image_bgr: ``(H, W, 3) uint8`` BGR.
            thorough: the second search, which the processor makes only when the first found
                no face on the person: faces of any size down to the cascade's window
                (:data:`CASCADE_WINDOW_PX` in the detection image, not ``haar_min_face_frac``),
                local contrast (CLAHE, :data:`CLAHE_CLIP`, :data:`CLAHE_TILES`) instead of the
                global histogram equalisation, and a pyramid step of at most
                :data:`THOROUGH_SCALE_FACTOR`. A person far from the camera, or on a large
                plain background (which skews the global histogram until the face loses its
                contrast), is then told apart from no face at all, at no cost for the usual
                selfie.

        Returns:
            Face boxes in source px. The image is downscaled to ``detect_max_side`` (INTER_AREA)
            and converted to gray before the cascade.
        """
        s = self.settings
        h, w = image_bgr.shape[:2]
        scale = min(1.0, s.detect_max_side / max(h, w))
        small = image_bgr
        if scale < 1.0:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            small = cv2.resize(image_bgr, size, interpolation=cv2.INTER_AREA)
        gray = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
        if thorough:
            clahe = cv2.createCLAHE(clipLimit=CLAHE_CLIP, tileGridSize=(CLAHE_TILES, CLAHE_TILES))
            found = cascade(CASCADE_FILE).detectMultiScale(
                clahe.apply(gray), scaleFactor=min(s.haar_scale_factor, THOROUGH_SCALE_FACTOR),
                minNeighbors=s.haar_min_neighbors, minSize=(CASCADE_WINDOW_PX, CASCADE_WINDOW_PX))
        else:
            min_side = max(CASCADE_WINDOW_PX, int(s.haar_min_face_frac * min(gray.shape)))
            found = cascade(CASCADE_FILE).detectMultiScale(
                cv2.equalizeHist(gray), scaleFactor=s.haar_scale_factor,
                minNeighbors=s.haar_min_neighbors, minSize=(min_side, min_side))
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
