"""Dense face landmarks (468 points, MediaPipe Face Mesh) for the compliance report, batched.

Why a dense model beside MTCNN's five points (issue 39): the five points (eyes, nose tip, mouth
corners) give the roll and a rough yaw, but no chin (the framing estimates it from the face
box), no eyelids (eyes open?), no inner lips (mouth closed?) and no depth for the pitch. Face
Mesh gives all of these from one ``192 x 192`` crop per face: the chin (point 152), the eyelids
(159/145, 386/374), the inner lips (13/14), and a relative depth per point from which the yaw
and pitch follow. It costs one more batched model call per batch (about 2-3 ms per face on this
2-core CPU) and 2.4 MB of weights.

Weights: ``processors/idphoto/weights/facemesh.onnx``, converted from
``face_landmark.tflite`` of the ``mediapipe==0.10.21`` wheel (Apache-2.0) by
``processors/idphoto/facemesh_convert.py`` and pinned by SHA-256 in ``processors/models.json``
(``facemesh``).

Crops follow MediaPipe's ``face_landmark`` graph: a square around the face, turned so the eyes
are level (the roll from MTCNN's eyes), RGB scaled to ``[0, 1]``. The landmarks are mapped back
to the image the crop was cut from.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from processors.models import manifest, model_path
from processors.runtime import BatchedModel, RuntimeSettings

#: Side of the model's input (px).
SIDE = 192
#: Side of the crop per eye-to-mouth distance (eye midpoint to mouth midpoint): about 1.7 times
#: the framing's face box (``faces.BOX_PER_EYE_MOUTH`` 2.49), the margin MediaPipe's detection
#: ROI leaves round a face (its box scaled by 1.5).
CROP_PER_EYE_MOUTH = 4.2
#: The crop's centre below the eye midpoint, in eye-to-mouth distances (about the nose tip).
CENTRE_BELOW_EYES = 0.75

# Face Mesh indices (the topology of mediapipe/modules/face_geometry canonical_face_model).
NOSE_TIP = 1
CHIN = 152
FOREHEAD = 10
EYE_OUTER = (33, 263)  # left-in-image eye's outer corner, right-in-image eye's outer corner
EYE_INNER = (133, 362)
#: Each eye's contour (left, right in the image): its mean is the eye's centre (within about a
#: degree of the hand-measured iris line on the evaluation's portraits, steadier than MTCNN's
#: eye points on small faces).
EYE_CONTOURS = ((33, 7, 163, 144, 145, 153, 154, 155, 133, 173, 157, 158, 159, 160, 161, 246),
                (263, 249, 390, 373, 374, 380, 381, 382, 362, 398, 384, 385, 386, 387, 388, 466))
#: Upper/lower eyelid pairs of each eye (two pairs per eye) and its corners.
LIDS = (((159, 145), (158, 153)), ((386, 374), (385, 380)))
CORNERS = ((33, 133), (362, 263))
LIPS_INNER = (13, 14)
MOUTH_CORNERS = (61, 291)
CHEEKS = (234, 454)  # the face contour at the cheekbones, left and right in the image
#: The face's outline, for the illumination check (points of the face oval in order).
FACE_OVAL = (10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378,
             400, 377, 152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54,
             103, 67, 109)


@dataclass(frozen=True, slots=True)
class Mesh:
    """468 landmarks of one face in px of the image the crop was cut from.

    Attributes:
        points: ``(468, 3) float32``: ``x, y`` px and ``z`` a relative depth (smaller is nearer
            the camera) at the scale of ``x``.
        presence: the model's face-presence probability in ``[0, 1]``.
    """

    points: np.ndarray
    presence: float

    def xy(self, i: int) -> np.ndarray:
        """``(2,) float`` px of point ``i``."""
        return self.points[i, :2].astype(np.float64)

    def scaled(self, factor: float, dx: float = 0.0, dy: float = 0.0) -> Mesh:
        """The same mesh in another image's px: ``p * factor + (dx, dy)`` (depth scaled too)."""
        p = self.points.astype(np.float64) * factor
        p[:, 0] += dx
        p[:, 1] += dy
        return Mesh(p.astype(np.float32), self.presence)


def crop_transform(five: np.ndarray) -> np.ndarray:
    """``2 x 3`` affine map from image px to the ``192 x 192`` crop of one face.

    Args:
        five: ``(5, 2)`` MTCNN landmarks (left eye, right eye, nose, mouth corners), image px.

    Returns:
        The similarity (rotation that levels the eyes, scale, shift) as ``float64``.
    """
    eyes = five[0:2].mean(axis=0)
    mouth = five[3:5].mean(axis=0)
    d = float(np.linalg.norm(mouth - eyes)) or 1.0
    v = five[1] - five[0]
    angle = float(np.arctan2(v[1], v[0]))
    down = np.array([-np.sin(angle), np.cos(angle)])
    centre = eyes + CENTRE_BELOW_EYES * d * down
    k = SIDE / (CROP_PER_EYE_MOUTH * d)
    c, s = np.cos(-angle) * k, np.sin(-angle) * k
    m = np.array([[c, -s, 0.0], [s, c, 0.0]])
    m[:, 2] = SIDE / 2.0 - m[:, :2] @ centre
    return m


class FaceMesh:
    """Batched Face Mesh: one model call for every face of a batch.

    Args:
        runtime: ONNX Runtime settings (provider, threads); buckets up to 32 crops.

    Raises:
        ModelError: the packaged weights are missing or fail their SHA-256 pin.
    """

    def __init__(self, runtime: RuntimeSettings) -> None:
        self.model = BatchedModel.shared(model_path("facemesh", verify=False),
                                         manifest()["facemesh"]["sha256"], runtime, "facemesh",
                                         input_shape=(3, SIDE, SIDE))
        self.last_inference_ms = 0.0

    def landmarks(self, images_rgb: Sequence[np.ndarray],
                  fives: Sequence[np.ndarray]) -> list[Mesh]:
        """The meshes of N faces, one batched model call (wall time in ``last_inference_ms``).

        Args:
            images_rgb: N images ``(h, w, 3) uint8`` RGB (the same array may repeat).
            fives: N ``(5, 2)`` MTCNN landmarks in px of the matching image.

        Returns:
            N :class:`Mesh` in px of the matching image.
        """
        self.last_inference_ms = 0.0
        if not images_rgb:
            return []
        ms = [crop_transform(np.asarray(f, np.float64)) for f in fives]
        crops = np.stack([cv2.warpAffine(im, m, (SIDE, SIDE), flags=cv2.INTER_LINEAR,
                                         borderMode=cv2.BORDER_CONSTANT)
                          for im, m in zip(images_rgb, ms, strict=True)])
        x = np.ascontiguousarray(crops.transpose(0, 3, 1, 2), np.float32)
        x *= 1.0 / 255.0
        t0 = time.perf_counter()
        pts, logit = self.model.run(x)
        self.last_inference_ms = (time.perf_counter() - t0) * 1000.0
        out = []
        for m, p, lg in zip(ms, pts, logit, strict=True):
            p = p.reshape(468, 3).astype(np.float64)
            inv = cv2.invertAffineTransform(m)
            xy = p[:, :2] @ inv[:, :2].T + inv[:, 2]
            scale = float(np.sqrt(abs(np.linalg.det(inv[:, :2]))))
            pts3 = np.concatenate([xy, p[:, 2:3] * scale], axis=1).astype(np.float32)
            out.append(Mesh(pts3, float(1.0 / (1.0 + np.exp(-float(lg[0]))))))
        return out
