"""The compliance report of an ID photo: one check per rule, measured on the framed photo.

Each :class:`Check` carries the measured value, the bound from the photo's
:class:`~processors.idphoto.specs.PhotoSpec` (or from :class:`ComplianceSettings` where the
spec's source gives words, not numbers), whether it passed, and the reason code a failure
gives. What is measured, in px of the output photo (``H x W``):

- geometry (the spec's mm, ``specs.json``): head height = chin (Face Mesh point 152) to crown
  (the top of the person matte, ``framing.head_geometry``) as a share of ``H``; crown margin
  (top edge to crown, mm); eye line (the eyes' height above the bottom edge, mm); chin margin
  (chin to the bottom edge, mm); horizontal centring (the face's mid-point from the centre, as
  a share of ``W``; ISO/IEC 19794-5 section 8.3.2);
- pose (ISO/IEC 19794-5 section 8.2): roll (the eye line's angle), yaw and pitch from the
  mesh's depth (:func:`pose_angles`);
- expression (ICAO Doc 9303 part 3: eyes open, mouth closed): the eyelid gap per eye width
  and the inner-lip gap per mouth width;
- background: its luma's standard deviation (uniformity) and mean colour (the spec's rule),
  measured on the pixels the matte calls background; in ``validate`` mode these are the
  upload's own, in ``retouch`` mode the painted colour, and a spec whose issuer refuses
  replaced backgrounds fails ``background_replacement``;
- light: the mean luma of the face's left and right halves (illumination symmetry), the face's
  mean luma (exposure), its colourfulness (a grey-scale photo), the variance of the Laplacian
  of the face at a fixed scale (sharpness), and the share of specular white round each eye
  (the glare of glasses).

The thresholds the sources do not give in numbers are this project's, in
:class:`~processors.idphoto.settings.ComplianceSettings`
(``CARDSTREAM_IDPHOTO__COMPLIANCE__*``), set from the evaluation
(``processors/idphoto/evaluation.py``).
Everything here works on small arrays: about 2-4 ms per photo on this 2-core box.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import cv2
import numpy as np

from processors.idphoto.facemesh import (
    CHEEKS,
    CHIN,
    CORNERS,
    EYE_CONTOURS,
    FACE_OVAL,
    FOREHEAD,
    LIDS,
    LIPS_INNER,
    MOUTH_CORNERS,
    Mesh,
)
from processors.idphoto.settings import ComplianceSettings
from processors.idphoto.specs import PhotoSpec, background_ok, pose_limits
from schemas.reasons import ReasonCode

Mode = Literal["retouch", "validate"]
MODES: tuple[Mode, ...] = ("retouch", "validate")

#: Symmetric point pairs (left, right in the image) whose depth difference gives the yaw:
#: eye corners, mouth corners and four pairs of the face contour (Face Mesh indices).
YAW_PAIRS = ((33, 263), (133, 362), (61, 291), (234, 454), (93, 323), (132, 361), (58, 288),
             (172, 397))
#: The forehead-to-chin line's tilt (degrees, from the mesh's depth) of a face looking straight
#: at the camera: measured on scikit-image's public-domain astronaut portrait, whose eye line
#: and face look frontal (12.2 degrees); one calibration image (see the evaluation's notes).
PITCH_NEUTRAL_DEG = 12.2
#: Matte level (0..255) under which a photo pixel counts as background, and the px (of the
#: photo) kept away from the person's edge.
BACKGROUND_ALPHA = 16
BACKGROUND_MARGIN_PX = 6
#: The checks decided from the landmarks alone (left undecided on a face too blurred to pass).
LANDMARK_CHECKS = frozenset({"roll", "yaw", "pitch", "eyes_open", "mouth_closed"})
#: Longer side (px) of the copy the background is measured on.
BACKGROUND_SIDE = 200
#: Side (px) the face is resampled to for the sharpness measure (a scale-free variance of the
#: Laplacian): about the inter-ocular distance times 4.
SHARPNESS_SIDE = 128


@dataclass(frozen=True, slots=True)
class Check:
    """One rule of the report.

    Attributes:
        name: the rule (``head_height``, ``roll``...).
        value: what was measured (None: could not be measured here).
        unit: ``share`` (of the photo's height or width), ``mm``, ``deg``, ``ratio``, ``luma``...
        bound: ``(min, max)``, either None when open; None when the rule has no bound here.
        passed: True, False, or None when not measured.
        reason: the reason code a failure gives (None when passed or not measured).
    """

    name: str
    value: float | None
    unit: str
    bound: tuple[float | None, float | None] | None
    passed: bool | None
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        """The contract's ``compliance.checks[]`` item (values rounded to 4 decimals)."""
        return {"name": self.name,
                "value": None if self.value is None else round(float(self.value), 4),
                "unit": self.unit,
                "bound": None if self.bound is None else [
                    None if b is None else round(float(b), 4) for b in self.bound],
                "passed": self.passed}


def _check(name: str, value: float | None, unit: str, lo: float | None, hi: float | None,
           below: str | None, above: str | None) -> Check:
    """A bounded check: fails with ``below`` under ``lo`` and with ``above`` over ``hi``."""
    if value is None or not np.isfinite(value):
        return Check(name, None, unit, (lo, hi), None, None)
    if lo is not None and value < lo:
        return Check(name, value, unit, (lo, hi), False, below)
    if hi is not None and value > hi:
        return Check(name, value, unit, (lo, hi), False, above)
    return Check(name, value, unit, (lo, hi), True, None)


@dataclass(frozen=True, slots=True)
class Report:
    """The checks of one photo, in a fixed order."""

    checks: tuple[Check, ...]

    def failed(self) -> list[str]:
        """Reason codes of the failed checks, in check order, without repeats."""
        out: list[str] = []
        for c in self.checks:
            if c.passed is False and c.reason and c.reason not in out:
                out.append(c.reason)
        return out

    def rejecting(self, settings: ComplianceSettings) -> list[str]:
        """The failed reason codes that reject under ``settings``."""
        return [r for r in self.failed() if r in settings.reject]

    def by_name(self) -> dict[str, Check]:
        """The checks by name."""
        return {c.name: c for c in self.checks}

    def as_payload(self, spec: PhotoSpec, mode: Mode) -> dict[str, Any]:
        """The result's ``compliance`` object: ``spec``, ``mode``, ``compliant`` and ``checks``."""
        return {"spec": spec.name, "mode": mode, "compliant": not self.failed(),
                "checks": [c.as_dict() for c in self.checks]}


@dataclass(frozen=True, slots=True)
class Pose:
    """Head rotation and expression from one mesh.

    Attributes:
        roll_deg: the eye line's angle to the horizontal (positive: the right-in-image eye lower).
        yaw_deg: rotation about the vertical axis (positive: the right-in-image cheek farther
            from the camera than the left).
        pitch_deg: rotation about the horizontal axis relative to a frontal face (positive: the
            chin farther from the camera than the forehead, a lowered head).
        eye_opening: the smaller of the two eyes' eyelid gap per eye width.
        mouth_opening: the inner-lip gap per mouth width.
    """

    roll_deg: float
    yaw_deg: float
    pitch_deg: float
    eye_opening: float
    mouth_opening: float


def _dist(p: np.ndarray, a: int, b: int) -> float:
    return float(np.hypot(*(p[a, :2] - p[b, :2])))


def eye_centres(mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
    """The eyes' centres (left, right in the image), ``(2,) float64`` px: the mean of each
    eye's contour (:data:`~processors.idphoto.facemesh.EYE_CONTOURS`)."""
    p = mesh.points[:, :2].astype(np.float64)
    return p[list(EYE_CONTOURS[0])].mean(axis=0), p[list(EYE_CONTOURS[1])].mean(axis=0)


def pose_angles(mesh: Mesh) -> Pose:
    """Roll, yaw, pitch and expression of ``mesh`` (any image's px).

    Roll: the line through the eyes' centres (:func:`eye_centres`). Yaw: ``atan2`` of the
    summed depth differences over the summed horizontal differences of :data:`YAW_PAIRS` (a
    symmetric pair's depth difference is ``sin`` of the yaw times its span). Pitch: the same for
    the forehead (10) to chin (152) line against the vertical, less :data:`PITCH_NEUTRAL_DEG`.
    """
    p = mesh.points.astype(np.float64)
    le, re = eye_centres(mesh)
    roll = float(np.degrees(np.arctan2(re[1] - le[1], re[0] - le[0])))
    a = np.array([i for i, _ in YAW_PAIRS])
    b = np.array([j for _, j in YAW_PAIRS])
    # in the face's own frame (roll removed) so a tilted head does not read as a turn
    c, s = np.cos(np.radians(roll)), np.sin(np.radians(roll))
    dx = (p[b, 0] - p[a, 0]) * c + (p[b, 1] - p[a, 1]) * s
    yaw = float(np.degrees(np.arctan2((p[b, 2] - p[a, 2]).sum(), dx.sum())))
    v = p[CHIN] - p[FOREHEAD]
    dy = -v[0] * s + v[1] * c
    pitch = float(np.degrees(np.arctan2(v[2], dy))) - PITCH_NEUTRAL_DEG
    eyes = [np.mean([_dist(p, u, d) for u, d in lids]) / max(_dist(p, *corner), 1e-6)
            for lids, corner in zip(LIDS, CORNERS, strict=True)]
    mouth = _dist(p, *LIPS_INNER) / max(_dist(p, *MOUTH_CORNERS), 1e-6)
    return Pose(roll, yaw, pitch, float(min(eyes)), float(mouth))


def _luma(rgb: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


def _face_masks(shape: tuple[int, int], mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
    """The face oval's left and right halves (split at the chin-forehead line) as bool masks."""
    p = mesh.points[:, :2].astype(np.float64)
    oval = np.round(p[list(FACE_OVAL)]).astype(np.int32)
    mask = np.zeros(shape, np.uint8)
    cv2.fillPoly(mask, [oval], 1)
    top, bottom = p[FOREHEAD], p[CHIN]
    ys, xs = np.ogrid[0:shape[0], 0:shape[1]]
    d = bottom - top
    side = (xs - top[0]) * d[1] - (ys - top[1]) * d[0]  # > 0: right of the midline in the image
    face = mask.astype(bool)
    return face & (side < 0), face & (side >= 0)


def background_stats(rgb: np.ndarray, alpha: np.ndarray, valid: np.ndarray | None = None
                     ) -> tuple[float | None, tuple[float, float, float] | None]:
    """The background's luma standard deviation and mean RGB.

    Measured on a copy of the photo area-averaged to about :data:`BACKGROUND_SIDE` px (the
    checks are about walls and patterns, not pixel noise, and this keeps them to about a
    millisecond): the background is where the matte ``alpha < BACKGROUND_ALPHA``, shrunk by
    :data:`BACKGROUND_MARGIN_PX` (photo px) away from the person, and within ``valid`` (the
    part of the photo that lies on the upload). Returns ``(None, None)`` when under 3 % of the
    photo is background.
    """
    h, w = rgb.shape[:2]
    k = max(1, round(max(h, w) / BACKGROUND_SIDE))
    size = (max(1, w // k), max(1, h // k))
    small = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA) if k > 1 else rgb
    a = cv2.resize(alpha, size, interpolation=cv2.INTER_AREA) if k > 1 else alpha
    bg: np.ndarray = (a < BACKGROUND_ALPHA).astype(np.uint8)
    if valid is not None:
        v = valid.astype(np.uint8)
        bg &= cv2.resize(v, size, interpolation=cv2.INTER_NEAREST) if k > 1 else v
    r = max(1, round(BACKGROUND_MARGIN_PX / k))
    bg = cv2.erode(bg, np.ones((2 * r + 1, 2 * r + 1), np.uint8),
                   borderType=cv2.BORDER_CONSTANT, borderValue=1)
    if int(cv2.countNonZero(bg)) < 0.03 * bg.size:
        return None, None
    _, std = cv2.meanStdDev(_luma(small), mask=bg)
    mean = cv2.mean(small, mask=bg)
    return float(std[0, 0]), (float(mean[0]), float(mean[1]), float(mean[2]))


def measure(photo_rgb: np.ndarray, alpha: np.ndarray, mesh: Mesh, crown_y: float,
            spec: PhotoSpec, mode: Mode, settings: ComplianceSettings,
            valid: np.ndarray | None = None) -> Report:
    """The compliance report of one framed photo.

    Args:
        photo_rgb: ``(H, W, 3) uint8`` RGB, the photo as it will be delivered (``retouch``: on
            its new background; ``validate``: on the upload's own).
        alpha: ``(H, W) uint8`` the person matte cut to the photo (0 background .. 255 person).
        mesh: the face's landmarks in the photo's px.
        crown_y: the crown's row in the photo's px (top of the matte above the face).
        spec: the size's rules.
        mode: ``retouch`` or ``validate``.
        settings: thresholds.
        valid: ``(H, W) bool``, the photo's px that lie on the upload (None: all).

    Returns:
        The :class:`Report`; a check whose input is missing (no background visible, say) has
        ``passed`` None and never fails. On a face too blurred to pass ``sharpness`` the
        landmarks cannot be trusted: the pose and expression checks keep their values but
        are not decided (``passed`` None).
    """
    h, w = photo_rgb.shape[:2]
    mm = spec.height_mm / h  # mm per px (the photo is spec.width_mm x spec.height_mm)
    p = mesh.points.astype(np.float64)
    chin_y = float(p[CHIN, 1])
    eye_y = float(np.mean([e[1] for e in eye_centres(mesh)]))
    face_cx = float(p[list(CHEEKS), 0].mean())
    pose = pose_angles(mesh)
    limits = pose_limits()
    hs = (spec.head_min_mm / spec.height_mm, spec.head_max_mm / spec.height_mm)
    checks = [
        _check("head_height", (chin_y - crown_y) / h, "share", hs[0], hs[1],
               ReasonCode.HEAD_TOO_SMALL, ReasonCode.HEAD_TOO_LARGE),
    ]
    cm = spec.crown_margin_mm
    checks.append(_check("crown_margin", crown_y * mm, "mm", cm and cm[0], cm and cm[1],
                         ReasonCode.HEAD_TOO_HIGH, ReasonCode.HEAD_TOO_LOW))
    el = spec.eye_line_mm
    checks.append(_check("eye_line", (h - eye_y) * mm, "mm", el and el[0], el and el[1],
                         ReasonCode.HEAD_TOO_LOW, ReasonCode.HEAD_TOO_HIGH))
    checks.append(_check("chin_margin", (h - chin_y) * mm, "mm", spec.chin_margin_min_mm, None,
                         ReasonCode.HEAD_TOO_LOW, None))
    t = limits.centre_tolerance
    checks.append(_check("centring", face_cx / w - 0.5, "share", -t, t,
                         ReasonCode.HEAD_NOT_CENTRED, ReasonCode.HEAD_NOT_CENTRED))
    checks.append(_check("roll", pose.roll_deg, "deg", -limits.roll_max_deg, limits.roll_max_deg,
                         ReasonCode.HEAD_TILTED, ReasonCode.HEAD_TILTED))
    checks.append(_check("yaw", pose.yaw_deg, "deg", -limits.yaw_max_deg, limits.yaw_max_deg,
                         ReasonCode.NOT_FACING_CAMERA, ReasonCode.NOT_FACING_CAMERA))
    checks.append(_check("pitch", pose.pitch_deg, "deg", -limits.pitch_max_deg,
                         limits.pitch_max_deg, ReasonCode.NOT_FACING_CAMERA,
                         ReasonCode.NOT_FACING_CAMERA))
    icao = spec.icao_rules
    checks.append(_check("eyes_open", pose.eye_opening, "ratio",
                         settings.min_eye_opening if icao else None, None,
                         ReasonCode.EYES_CLOSED, None))
    checks.append(_check("mouth_closed", pose.mouth_opening, "ratio", None,
                         settings.max_mouth_opening if icao else None, None,
                         ReasonCode.MOUTH_OPEN))
    bg_std, bg_rgb = background_stats(photo_rgb, alpha, valid)
    checks.append(_check("background_uniformity", bg_std, "luma_std", None,
                         settings.max_background_std if icao else None, None,
                         ReasonCode.BACKGROUND_NOT_UNIFORM))
    colour_ok = None if bg_rgb is None else background_ok(spec.background_rule, bg_rgb)
    checks.append(Check("background_colour",
                        None if bg_rgb is None else 0.299 * bg_rgb[0] + 0.587 * bg_rgb[1]
                        + 0.114 * bg_rgb[2], "luma", None, colour_ok,
                        None if colour_ok is not False else ReasonCode.BACKGROUND_COLOUR))
    replaced = mode == "retouch"
    checks.append(Check("background_replacement", 1.0 if replaced else 0.0, "bool", None,
                        not (replaced and not spec.replacement_allowed),
                        ReasonCode.BACKGROUND_REPLACED
                        if replaced and not spec.replacement_allowed else None))
    light = light_checks(photo_rgb, mesh, settings, icao, spec.colour_required)
    checks.extend(light)
    checks.append(_check("eye_glare", eye_glare(photo_rgb, mesh), "share", None,
                         settings.max_eye_glare if icao else None, None, ReasonCode.GLARE))
    if next(c for c in light if c.name == "sharpness").passed is False:  # landmarks unsure
        checks = [Check(c.name, c.value, c.unit, c.bound, None, None)
                  if c.name in LANDMARK_CHECKS else c for c in checks]
    return Report(tuple(checks))


def eye_glare(photo_rgb: np.ndarray, mesh: Mesh) -> float | None:
    """The larger of the two eyes' share of specular-white px (luma >= 245, chroma <= 30) in
    the eye's region: its contour's bounding box grown to twice its size (glasses' lenses
    reach past the eye). None when an eye lies outside the photo."""
    h, w = photo_rgb.shape[:2]
    p = mesh.points[:, :2].astype(np.float64)
    shares = []
    for contour in EYE_CONTOURS:
        q = p[list(contour)]
        c, half = (q.min(axis=0) + q.max(axis=0)) / 2.0, (q.max(axis=0) - q.min(axis=0))
        x0, y0 = np.floor(c - half).astype(int)
        x1, y1 = np.ceil(c + half).astype(int) + 1
        if x0 < 0 or y0 < 0 or x1 > w or y1 > h or x1 - x0 < 2 or y1 - y0 < 2:
            return None
        roi = photo_rgb[y0:y1, x0:x1].astype(np.int32)
        luma = roi @ np.array([77, 150, 29], np.int32) >> 8  # 0.299, 0.587, 0.114 in 1/256
        white = (luma >= 245) & (roi.max(axis=2) - roi.min(axis=2) <= 30)
        shares.append(float(white.mean()))
    return max(shares)


def light_checks(photo_rgb: np.ndarray, mesh: Mesh, settings: ComplianceSettings,
                 icao: bool, colour: bool) -> Sequence[Check]:
    """Illumination symmetry, exposure, colour and sharpness of the face (see :func:`measure`),
    all on the face's box resampled to :data:`SHARPNESS_SIDE` px square (INTER_AREA)."""
    h, w = photo_rgb.shape[:2]
    p = mesh.points[:, :2].astype(np.float64)
    oval = p[list(FACE_OVAL)]
    x0, y0 = np.floor(oval.min(axis=0)).astype(int)
    x1, y1 = np.ceil(oval.max(axis=0)).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 - x0 < 8 or y1 - y0 < 8:
        return [Check(n, None, u, None, None, None) for n, u in (
            ("illumination_symmetry", "ratio"), ("exposure", "luma"), ("colour", "chroma"),
            ("sharpness", "ratio"))]
    side = SHARPNESS_SIDE
    roi = cv2.resize(photo_rgb[y0:y1, x0:x1], (side, side), interpolation=cv2.INTER_AREA)
    k = np.array([side / (x1 - x0), side / (y1 - y0), 1.0], np.float32)
    local = Mesh((mesh.points - np.array([x0, y0, 0], np.float32)) * k, mesh.presence)
    left, right = _face_masks((side, side), local)
    luma = _luma(roi)
    face = (left | right).astype(np.uint8)
    lm = cv2.mean(luma, mask=left.astype(np.uint8))[0] if left.any() else np.nan
    rm = cv2.mean(luma, mask=right.astype(np.uint8))[0] if right.any() else np.nan
    asym = abs(lm - rm) / max((lm + rm) / 2.0, 1.0)
    mean = cv2.mean(luma, mask=face)[0] if face.any() else None
    chroma_img = roi.max(axis=2) - roi.min(axis=2)
    chroma = cv2.mean(chroma_img, mask=face)[0] if face.any() else None
    inner = cv2.erode(face, np.ones((7, 7), np.uint8))
    lap = cv2.Laplacian(luma, cv2.CV_64F)
    # divided by the face's own luma variance: a darker or flatter exposure scales both alike
    sharp = None
    if cv2.countNonZero(inner) > 50:
        _, lap_sd = cv2.meanStdDev(lap, mask=inner)
        _, luma_sd = cv2.meanStdDev(luma, mask=inner)
        sharp = float(lap_sd[0, 0] ** 2 / max(luma_sd[0, 0] ** 2, 1.0))
    lo, hi = settings.exposure_luma
    return [
        _check("illumination_symmetry", asym, "ratio", None,
               settings.max_illumination_asymmetry if icao else None, None,
               ReasonCode.UNEVEN_LIGHTING),
        _check("exposure", mean, "luma", lo, hi, ReasonCode.POOR_EXPOSURE,
               ReasonCode.POOR_EXPOSURE),
        _check("colour", chroma, "chroma", settings.min_colourfulness if colour else None, None,
               ReasonCode.GREYSCALE, None),
        _check("sharpness", sharp, "ratio", settings.min_sharpness, None,
               ReasonCode.BLURRY, None),
    ]
