"""From a found face to its compliance report: the steps the ID-photo processor adds (issue 39).

- :func:`meshes` — Face Mesh for every counted face of a batch in **one** model call, on the
  working copies the face search read (turned like the face was found), in px of the turned
  upload;
- :func:`head_with_mesh_chin` — the head geometry with the chin from the mesh (point 152)
  instead of the face box's estimate;
- :func:`fit_inside` — ``validate`` mode: the frame moved (then, if the upload is too small for
  it, enlarged) so it lies on the upload, whose own background the photo keeps;
- :func:`report` — the photo's :class:`~processors.idphoto.compliance.Report`, with the mesh
  and the crown mapped into the photo's px.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import cv2
import numpy as np

from processors.idphoto.compliance import Mode, Report, measure
from processors.idphoto.facemesh import CHIN, FaceMesh, Mesh
from processors.idphoto.faces import FaceBox
from processors.idphoto.framing import Frame, HeadGeometry
from processors.idphoto.settings import ComplianceSettings
from processors.idphoto.specs import PhotoSpec


def meshes(facemesh: FaceMesh, views: Sequence[tuple[np.ndarray, float]],
           faces: Sequence[tuple[FaceBox, int]]) -> list[Mesh | None]:
    """The mesh of one face per upload, one batched model call.

    Args:
        facemesh: the batched Face Mesh.
        views: per upload ``(image BGR (h, w, 3) uint8, factor)``: the working copy and its
            px per upload px.
        faces: per upload ``(face, turns)``: the counted face in px of ``np.rot90(upload,
            turns)`` (with its MTCNN ``marks``) and those quarter turns.

    Returns:
        Per upload the :class:`Mesh` in px of the turned upload, or None for a face without
        landmarks.
    """
    todo = [(i, f.marks) for i, (f, _) in enumerate(faces) if f.marks is not None]
    out: list[Mesh | None] = [None] * len(faces)
    if not todo:
        return out
    images: list[np.ndarray] = []
    fives: list[np.ndarray] = []
    for i, marks in todo:
        (im, k), (_, turns) = views[i], faces[i]
        # OpenCV's channel swap: the same bytes as NumPy's strided ``im[..., ::-1]`` copy at
        # about a fifth of its CPU (issue 40: 1.9 ms per 2 MP upload under load)
        rgb = cv2.cvtColor(im, cv2.COLOR_BGR2RGB)
        if turns % 4:
            rgb = np.ascontiguousarray(np.rot90(rgb, turns))
        images.append(rgb)
        fives.append(marks * k)
    for (i, _), m in zip(todo, facemesh.landmarks(images, fives), strict=True):
        out[i] = m.scaled(1.0 / views[i][1])
    return out


def head_with_mesh_chin(head: HeadGeometry, mesh: Mesh | None, source_hw: tuple[int, int]
                        ) -> HeadGeometry:
    """``head`` with its chin at the mesh's chin point (152), when there is a mesh.

    ``head.cropped`` is recomputed: the crown's own cut (the matte reaching the top edge) stays,
    the chin's is judged from the mesh's chin.
    """
    if mesh is None:
        return head
    chin = float(mesh.points[CHIN, 1])
    top_cut = head.cropped and head.chin_y <= source_hw[0]
    return replace(head, chin_y=chin, cropped=top_cut or chin > source_hw[0])


def fit_inside(frame: Frame, head: HeadGeometry, source_hw: tuple[int, int]) -> Frame:
    """``frame`` moved onto the upload (``validate`` mode keeps the upload's own background, so
    the photo may not reach past its edges).

    First the frame is shifted; where the upload is narrower or shorter than the frame at its
    scale, the frame is enlarged (a larger head in the photo) about the head's centre until it
    fits, then shifted. The checks then say whether the head still meets the spec.
    """
    h, w = source_hw
    s = frame.scale
    need = max(frame.width / w, frame.height / h)  # smallest scale whose frame fits
    if need > s:
        cx, cy = head.centre_x, (head.crown_y + head.chin_y) / 2.0
        ox, oy = (cx - frame.x0) * s, (cy - frame.y0) * s  # the head centre's output px
        s = need
        frame = Frame(cx - ox / s, cy - oy / s, s, frame.width, frame.height)
    x0 = min(max(frame.x0, 0.0), w - frame.width / s)
    y0 = min(max(frame.y0, 0.0), h - frame.height / s)
    return Frame(x0, y0, s, frame.width, frame.height)


def report(photo_rgb: np.ndarray, alpha: np.ndarray, mesh: Mesh, crown_y: float, frame: Frame,
           spec: PhotoSpec, mode: Mode, settings: ComplianceSettings,
           source_hw: tuple[int, int]) -> Report:
    """The compliance report of one photo.

    Args:
        photo_rgb: ``(H, W, 3) uint8`` the delivered photo (RGB).
        alpha: ``(H, W) uint8`` the matte cut to the photo.
        mesh: the face's mesh in px of the (turned) upload.
        crown_y: the crown's row in px of the (turned) upload.
        frame: where the photo sits on the (turned) upload.
        spec, mode, settings: see :func:`~processors.idphoto.compliance.measure`.
        source_hw: ``(H, W)`` of the (turned) upload, for the photo's px that lie on it.
    """
    s = frame.scale
    in_photo = mesh.scaled(s, -frame.x0 * s, -frame.y0 * s)
    hh, ww = photo_rgb.shape[:2]
    xs = frame.x0 + (np.arange(ww) + 0.5) / s
    ys = frame.y0 + (np.arange(hh) + 0.5) / s
    valid = ((ys >= 0) & (ys < source_hw[0]))[:, None] & ((xs >= 0) & (xs < source_hw[1]))[None, :]
    return measure(photo_rgb, alpha, in_photo, (crown_y - frame.y0) * s, spec, mode, settings,
                   None if mode == "retouch" or valid.all() else valid)
