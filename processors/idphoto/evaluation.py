"""Evaluation of the ID-photo compliance report on a set with known truth (issue 39).

``make``: builds the set from real portraits with hand-measured points (``eval_truth.json``:
scikit-image's public-domain astronaut, and her mirror image) by transforms whose effect on the
truth is known exactly:

- ``roll``: turned about the face by known angles (truth: the hand-measured eyes, turned);
- ``scale``: smaller or larger on a bigger wall (truth points scaled and moved);
- ``yaw`` / ``pitch``: the face turned in 3D by a piecewise-affine warp that moves the Face
  Mesh's points as a rotation of their 3D positions would (the hair, ears and background
  stay); truth: the applied angle (the portrait's own is judged 0 by eye);
- ``glare``: white, slightly blurred ellipses over one or both eyes (the glare of glasses;
  truth: glare);
- ``light``: a left-to-right gain ramp over the face (truth: even for a ramp of at most 15 %,
  uneven from 70 %); ``exposure``: a global gain (truth: poor under 0.3 or over 1.5, fine
  within 0.8-1.15); ``blur``: a Gaussian blur (truth: sharp up to sigma 0.7 px of a 160 px
  head, blurry from 3 px); ``grey``: the photo in grey levels;
- ``background``: the person cut out with the matte and put on a plain wall (uniform), on a
  blue wall (the wrong colour for a white rule) or on textures (brick, grass, gravel, coffee:
  not uniform), checked in ``validate`` mode;
- ``crop``: the crown cut off by the top edge (truth: ``HEAD_CROPPED``), ``tiny`` (a face
  too small in a large photo: ``FACE_TOO_SMALL``), ``none`` (no face: ``NO_FACE``), ``two``
  (two people: ``MULTIPLE_FACES``).

``run`` runs every image through the processor's steps with the variant's size and mode and
prints, per check, how often its decision agrees with the truth, and the errors of the head
height share (% of the photo's height), roll, yaw and pitch (degrees).

Run: ``python -m processors.idphoto.evaluation make --out DIR`` then
``python -m processors.idphoto.evaluation run --set DIR [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from processors.errors import EvalSetError
from processors.logs import configure_logging

if TYPE_CHECKING:
    from processors.idphoto.compliance import Mode

TRUTH_FILE = Path(__file__).with_name("eval_truth.json")
#: (size, mode) the variants cycle through, so every spec and both modes are exercised.
SIZES_MODES = (("schengen", "retouch"), ("us_passport", "validate"), ("uk_passport", "retouch"),
               ("cn_passport", "validate"), ("japan_passport", "retouch"),
               ("canada_visa", "validate"), ("india_passport", "retouch"),
               ("us_visa", "retouch"), ("one_inch", "retouch"), ("two_inch", "validate"))


# ---------------------------------------------------------------------------------------------
# making the set


def _astronaut() -> np.ndarray:
    from skimage import data

    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)


def _portraits() -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
    """The real portraits with their truth: the astronaut and her mirror image."""
    truth = json.loads(TRUTH_FILE.read_text(encoding="utf-8"))["astronaut"]
    img = _astronaut()
    w = img.shape[1]

    def mirror(p: list[float]) -> list[float]:
        return [w - 1.0 - p[0], p[1]]

    mirrored = {**truth, "crown": mirror(truth["crown"]), "chin": mirror(truth["chin"]),
                "eye_left": mirror(truth["eye_right"]), "eye_right": mirror(truth["eye_left"]),
                "yaw_deg": -truth["yaw_deg"]}
    return {"astronaut": (img, truth), "astronaut_mirrored": (img[:, ::-1].copy(), mirrored)}


POINTS = ("crown", "chin", "eye_left", "eye_right")


def _affine_truth(truth: Mapping[str, Any], m: np.ndarray) -> dict[str, Any]:
    out = dict(truth)
    for k in POINTS:
        x, y = truth[k]
        out[k] = [float(m[0, 0] * x + m[0, 1] * y + m[0, 2]),
                  float(m[1, 0] * x + m[1, 1] * y + m[1, 2])]
    return out


def _similarity(img: np.ndarray, truth: Mapping[str, Any], angle: float = 0.0,
                scale: float = 1.0, canvas: tuple[int, int] | None = None,
                at: tuple[float, float] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """``img`` turned by ``angle`` degrees (counter-clockwise on screen) and scaled about the
    face, placed so the face centre lands at ``at`` on a ``canvas`` (W, H); the rest is the
    portrait's edge replicated (a wall of her backdrop's colour)."""
    h, w = img.shape[:2]
    cw, ch = canvas or (w, h)
    c = np.mean([truth["eye_left"], truth["eye_right"], truth["chin"]], axis=0)
    m = cv2.getRotationMatrix2D((float(c[0]), float(c[1])), angle, scale)
    tx, ty = at or (c[0] * cw / w, c[1] * ch / h)
    m[:, 2] += np.array([tx, ty]) - c
    out = cv2.warpAffine(img, m, (cw, ch), flags=cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_REPLICATE)
    return out, _affine_truth(truth, m)


def _mesh_of(img: np.ndarray) -> np.ndarray:
    """Face Mesh points ``(468, 3)`` of the single face of ``img`` (BGR), via the processor's
    own face search."""
    an = Analyser.get()
    # no Item: the image is decoded at full resolution (scale 1.0), so person_mattes never reads it
    views, mattes = an.proc.person_mattes([None], [_decoded(img)])  # type: ignore[list-item]
    found, _ = an.proc._faces(views, mattes)
    from processors.idphoto.inspection import meshes

    face = found[0].faces[0]
    mesh = meshes(an.facemesh, [(views[0].image, views[0].factor)], [(face, 0)])[0]
    assert mesh is not None
    return mesh.points.astype(np.float64)


def _rotate3d(img: np.ndarray, truth: Mapping[str, Any], yaw: float = 0.0, pitch: float = 0.0
              ) -> tuple[np.ndarray, dict[str, Any]]:
    """The face turned in 3D by ``yaw`` and ``pitch`` degrees: a piecewise-affine warp moving
    each Face Mesh point as the rotation of its 3D position about the mesh's centre would,
    with a fixed ring round the head (hair and background stay)."""
    from skimage.transform import PiecewiseAffineTransform, warp

    p = _mesh_of(img)
    c = p.mean(axis=0)
    q = p - c
    a, b = math.radians(yaw), math.radians(pitch)
    # yaw about the vertical axis (positive: the right-in-image side goes away, z grows)
    ry = np.array([[math.cos(a), 0.0, -math.sin(a)], [0.0, 1.0, 0.0],
                   [math.sin(a), 0.0, math.cos(a)]])
    # pitch about the horizontal axis (positive: the chin goes away, z grows below)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, math.cos(b), -math.sin(b)],
                   [0.0, math.sin(b), math.cos(b)]])
    moved = q @ (rx @ ry).T + c
    h, w = img.shape[:2]
    ext = max(np.ptp(p[:, 0]), np.ptp(p[:, 1]))
    ring = [(c[0] + 0.95 * ext * math.cos(t), c[1] + 0.95 * ext * math.sin(t))
            for t in np.linspace(0, 2 * math.pi, 24, endpoint=False)]
    corners = [(0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)]
    fixed = np.array(ring + corners, np.float64)
    src = np.concatenate([p[:, :2], fixed])
    dst = np.concatenate([moved[:, :2], fixed])
    t = PiecewiseAffineTransform.from_estimate(dst, src)  # output px -> input px
    out = warp(img, t, output_shape=img.shape[:2], order=1, mode="edge", preserve_range=True)
    truth = dict(truth)
    truth["yaw_deg"] = truth["yaw_deg"] + yaw
    truth["pitch_deg"] = truth["pitch_deg"] + pitch
    return np.clip(out, 0, 255).astype(np.uint8), truth


def _person_mask(img: np.ndarray) -> np.ndarray:
    """The processor's matte of ``img`` at full size, ``(H, W) float32`` in [0, 1]."""
    an = Analyser.get()
    # no Item: the image is decoded at full resolution (scale 1.0), so person_mattes never reads it
    _, mattes = an.proc.person_mattes([None], [_decoded(img)])  # type: ignore[list-item]
    return mattes[0].full().astype(np.float32) / 255.0


def _on_wall(img: np.ndarray, wall: np.ndarray) -> np.ndarray:
    a = _person_mask(img)[..., None]
    return (img * a + wall * (1.0 - a)).round().astype(np.uint8)


def _texture(name: str, hw: tuple[int, int]) -> np.ndarray:
    from skimage import data

    t = getattr(data, name)()
    if t.ndim == 2:
        t = np.stack([t] * 3, axis=-1)
    t = cv2.cvtColor(t.astype(np.uint8), cv2.COLOR_RGB2BGR)
    return cv2.resize(t, (hw[1], hw[0]), interpolation=cv2.INTER_AREA)


def _face_ramp(img: np.ndarray, truth: Mapping[str, Any], a: float) -> np.ndarray:
    """A horizontal gain ramp ``1 - a/2 .. 1 + a/2`` across the face (eyes' span x 2.5)."""
    cx = (truth["eye_left"][0] + truth["eye_right"][0]) / 2.0
    span = 2.5 * abs(truth["eye_right"][0] - truth["eye_left"][0])
    x = (np.arange(img.shape[1]) - cx) / span
    g = 1.0 + a * np.clip(x, -0.5, 0.5)
    return np.clip(img * g[None, :, None], 0, 255).astype(np.uint8)


def _true_asymmetry(img: np.ndarray, truth: Mapping[str, Any]) -> float:
    """``|L - R| / mean(L, R)`` of the luma of the face's halves, on an ellipse drawn from the
    hand-measured points (eyes' span x 1.9 wide, brows to chin high), split at the eyes' midpoint:
    the lighting's truth, measured without the landmark model."""
    el, er, chin = (np.array(truth[k], np.float64) for k in ("eye_left", "eye_right", "chin"))
    mid = (el + er) / 2.0
    span = float(np.linalg.norm(er - el))
    centre = (mid + chin) / 2.0
    axes = (int(0.95 * span), int((chin[1] - mid[1]) / 2.0 + 0.4 * span))
    mask = np.zeros(img.shape[:2], np.uint8)
    cv2.ellipse(mask, (int(centre[0]), int(centre[1])), axes, 0, 0, 360, 1, -1)
    luma = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY).astype(np.float64)
    xs = np.arange(img.shape[1])[None, :]
    left = mask.astype(bool) & (xs < mid[0])
    right = mask.astype(bool) & (xs >= mid[0])
    lm, rm = luma[left].mean(), luma[right].mean()
    return float(abs(lm - rm) / ((lm + rm) / 2.0))


@dataclass
class Variant:
    """One image of the set with its truth."""

    name: str
    kind: str
    image: np.ndarray
    truth: dict[str, Any]
    size: str = "schengen"
    mode: str = "retouch"
    expect: dict[str, Any] = field(default_factory=dict)


def variants() -> list[Variant]:
    """Every image of the set (see the module docstring)."""
    out: list[Variant] = []
    for base, (img, truth) in _portraits().items():
        t0 = {**truth, "background": None, "lighting": "even", "exposure": "ok", "sharp": True,
              "colour": True}
        for ang in (-14, -9, -5, -2, 0, 2, 5, 9, 14):
            im, t = _similarity(img, t0, angle=ang, canvas=(640, 640))
            out.append(Variant(f"{base}_roll{ang:+d}", "roll", im, t))
        for k, (cw, ch), at in ((0.9, (900, 700), (450, 330)), (1.4, (800, 1000), (420, 420)),
                                (2.2, (1600, 1200), (760, 520))):
            im, t = _similarity(img, t0, scale=k, canvas=(cw, ch), at=at)
            out.append(Variant(f"{base}_scale{k}", "scale", im, t))
        for ang in (-20, -14, -9, -6, -3, 0, 3, 6, 9, 14, 20):
            im, t = _rotate3d(img, t0, yaw=ang)
            out.append(Variant(f"{base}_yaw{ang:+d}", "yaw", im, {**t, "geometry": False}))
        if base == "astronaut":
            for ang in (-15, -9, -3, 3, 9, 15):
                im, t = _rotate3d(img, t0, pitch=ang)
                out.append(Variant(f"{base}_pitch{ang:+d}", "pitch", im,
                                   {**t, "geometry": False}))
        for a in (-0.9, -0.6, -0.3, 0.0, 0.3, 0.6, 0.9):
            im = _face_ramp(img, t0, a)
            out.append(Variant(f"{base}_light{a:+.1f}", "light", im,
                               {**t0, "lighting": None, "asymmetry": _true_asymmetry(im, t0)}))
        for g in (0.3, 0.8, 1.15, 1.4):
            im = np.clip(img.astype(np.float32) * g, 0, 255).astype(np.uint8)
            out.append(Variant(f"{base}_exposure{g}", "exposure", im,
                               {**t0, "exposure": "ok" if 0.8 <= g <= 1.15 else "poor",
                                "lighting": None}))
        for s in (0.7, 3.0, 6.0):
            out.append(Variant(f"{base}_blur{s}", "blur", cv2.GaussianBlur(img, (0, 0), s),
                               {**t0, "sharp": s <= 0.7}))
        for k, (ax, ay) in enumerate(((9, 5), (12, 7))):  # the glare of glasses on one or both eyes
            glared = img.copy()
            for e in ((t0["eye_right"],) if k == 0 else (t0["eye_left"], t0["eye_right"])):
                cv2.ellipse(glared, (int(e[0]) + 3, int(e[1]) - 2), (ax, ay), 20, 0, 360,
                            (252, 253, 255), -1)
            out.append(Variant(f"{base}_glare{k + 1}", "glare",
                               cv2.GaussianBlur(glared, (0, 0), 0.8),
                               {**t0, "glare": True}))
        grey = cv2.cvtColor(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
        out.append(Variant(f"{base}_grey", "grey", grey, {**t0, "colour": False}))
        hw = img.shape[:2]
        rng = np.random.default_rng(39)
        # (wall, uniform, meets a white-or-off-white rule)
        walls = {"wall_grey": (np.full((*hw, 3), 228.0) + rng.normal(0, 1.5, (*hw, 3)),
                               True, True),
                 "wall_white": (np.full((*hw, 3), 246.0) + rng.normal(0, 1.5, (*hw, 3)),
                                True, True),
                 "wall_blue": (np.full((*hw, 3), (219.0, 142.0, 67.0)), True, False)}
        for tex in ("brick", "grass", "gravel", "coffee"):
            walls[tex] = (_texture(tex, hw).astype(np.float32), False, False)
        for wname, (wall, uniform, white) in walls.items():
            out.append(Variant(f"{base}_bg_{wname}", "background", _on_wall(img, wall),
                               {**t0, "background": "uniform" if uniform else "busy",
                                "background_colour": white}, size="us_passport",
                               mode="validate"))
    img, truth = _portraits()["astronaut"]
    up = np.ascontiguousarray(img[60:])  # the crown 15 px above the new top edge
    out.append(Variant("astronaut_crown_cut", "crop", up, {}, expect={"reason": "HEAD_CROPPED"}))
    tiny = np.full((1800, 2400, 3), 120, np.uint8)
    tiny[900:900 + 256, 1200:1200 + 256] = cv2.resize(img, (256, 256), interpolation=cv2.INTER_AREA)
    out.append(Variant("astronaut_tiny", "tiny", tiny, {}, expect={"reason": "FACE_TOO_SMALL"}))
    from skimage import data

    out.append(Variant("coffee", "none", cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR), {},
                       expect={"reason": "NO_FACE"}))
    out.append(Variant("two_people", "two", np.hstack([img, img]), {},
                       expect={"reason": "MULTIPLE_FACES"}))
    for i, v in enumerate(out):
        if v.kind not in ("background",):
            v.size, v.mode = SIZES_MODES[i % len(SIZES_MODES)]
    return out


def make(out: Path) -> int:
    """Write the set into ``out``: one PNG per variant and ``truth.json``; returns the count."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for v in variants():
        cv2.imwrite(str(out / f"{v.name}.png"), v.image)
        rows.append({"file": f"{v.name}.png", "kind": v.kind, "size": v.size, "mode": v.mode,
                     "truth": v.truth, "expect": v.expect})
    (out / "truth.json").write_text(json.dumps({"images": rows}, indent=1), encoding="utf-8")
    return len(rows)


# ---------------------------------------------------------------------------------------------
# running it


def _decoded(img: np.ndarray) -> Any:
    from processors.pixels import Decoded

    return Decoded(img, img.shape[1], img.shape[0], 1.0)


class Analyser:
    """The processor's steps for one host image at a time (built once)."""

    _one: Analyser | None = None

    def __init__(self) -> None:
        from processors.idphoto.facemesh import FaceMesh
        from processors.idphoto.processor import IdPhotoProcessor
        from processors.idphoto.settings import ComplianceSettings, IdPhotoSettings
        from processors.runtime import RuntimeSettings

        rt = RuntimeSettings(device="cpu")
        self.settings = IdPhotoSettings()
        self.proc = IdPhotoProcessor(self.settings, rt)
        self.facemesh = FaceMesh(rt)
        self.compliance = ComplianceSettings()

    @classmethod
    def get(cls) -> Analyser:
        if cls._one is None:
            cls._one = cls()
        return cls._one

    def analyse(self, img: np.ndarray, size: str, mode: Mode) -> dict[str, Any]:
        """``{"reason": code}`` for a rejected upload, else ``{"report", "frame", "ms"}``."""
        from processors.idphoto.framing import (
            composite,
            cut,
            head_geometry,
            matte_sampler,
            plan_frame,
            warp,
        )
        from processors.idphoto.inspection import fit_inside, head_with_mesh_chin, meshes, report
        from processors.idphoto.sizes import BACKGROUNDS
        from processors.idphoto.specs import get_spec

        spec = get_spec(size)
        # no Item: decoded at full resolution (scale 1.0), so person_mattes never reads it
        views, mattes = self.proc.person_mattes([None], [_decoded(img)])  # type: ignore[list-item]
        found, _ = self.proc._faces(views, mattes)
        f = found[0]
        if not f.faces:
            return {"reason": "NO_FACE"}
        if len(f.faces) > 1:
            return {"reason": "MULTIPLE_FACES"}
        face, turns, matte = f.faces[0], f.turns, f.matte
        if face.h < self.settings.min_face_px:
            return {"reason": "FACE_TOO_SMALL"}
        head = head_geometry(face, matte, self.settings.matte_threshold,
                             resolution=spec.target_head_px / face.h)
        mesh = meshes(self.facemesh, [(views[0].image, views[0].factor)], [(face, turns)])[0]
        head = head_with_mesh_chin(head, mesh, matte.source_hw)
        if head.cropped:
            return {"reason": "HEAD_CROPPED"}
        frame = plan_frame(head, spec)
        if mode == "validate":
            frame = fit_inside(frame, head, matte.source_hw)
        src = np.ascontiguousarray(np.rot90(img, turns))
        rgb = cv2.cvtColor(warp(src, frame), cv2.COLOR_BGR2RGB)
        alpha = cut(matte_sampler(matte), matte.source_hw, frame)
        photo = composite(rgb, alpha, BACKGROUNDS["white"]) if mode == "retouch" else rgb
        assert mesh is not None
        t0 = time.process_time()
        rep = report(photo, alpha, mesh, head.crown_y, frame, spec, mode,
                     self.compliance, matte.source_hw)
        return {"report": rep, "frame": frame, "turns": turns, "spec": spec,
                "report_cpu_ms": (time.process_time() - t0) * 1000.0}


#: Truth values this close to a bound are not decided (measurement tolerance: the hand
#: measurement's own error, a few tenths of a mm at the photo's scale, 1-2 degrees of angle).
BANDS = {"roll": 1.0, "yaw": 2.0, "pitch": 2.0, "head_height": 0.01, "crown_margin": 0.3,
         "eye_line": 0.3, "chin_margin": 0.3, "centring": 0.01, "illumination_symmetry": 0.05}
BOUNDARY = "boundary"


def _within(name: str, value: float, lo: float | None, hi: float | None) -> bool | str:
    """Whether ``value`` lies in ``[lo, hi]``; :data:`BOUNDARY` when within the check's band
    of a bound."""
    band = BANDS.get(name, 0.0)
    if any(b is not None and abs(value - b) < band for b in (lo, hi)):
        return BOUNDARY
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _truth_decisions(t: Mapping[str, Any], frame: Any, spec: Any) -> dict[str, Any]:
    """The truth's decision per check (None: no truth for it; :data:`BOUNDARY`: too close to
    a bound to decide) and the truth values."""
    from processors.idphoto.settings import ComplianceSettings
    from processors.idphoto.specs import pose_limits

    lim = pose_limits()
    cs = ComplianceSettings()
    d: dict[str, Any] = {}
    vals: dict[str, float] = {}
    el, er = np.array(t["eye_left"]), np.array(t["eye_right"])
    roll = math.degrees(math.atan2(er[1] - el[1], er[0] - el[0]))
    vals.update(roll=roll, yaw=t["yaw_deg"], pitch=t["pitch_deg"])
    for k, v, m in (("roll", roll, lim.roll_max_deg), ("yaw", t["yaw_deg"], lim.yaw_max_deg),
                    ("pitch", t["pitch_deg"], lim.pitch_max_deg)):
        d[k] = _within(k, v, -m, m)
    if t.get("geometry", True):
        s, h = frame.scale, spec.height_px
        crown = (t["crown"][1] - frame.y0) * s
        chin = (t["chin"][1] - frame.y0) * s
        share = (chin - crown) / h
        vals["head_height"] = share
        d["head_height"] = _within("head_height", share, spec.head_min_mm / spec.height_mm,
                                   spec.head_max_mm / spec.height_mm)
        mm = spec.height_mm / h
        if spec.crown_margin_mm:
            d["crown_margin"] = _within("crown_margin", crown * mm, *spec.crown_margin_mm)
        if spec.eye_line_mm:
            eye = ((el[1] + er[1]) / 2 - frame.y0) * s
            d["eye_line"] = _within("eye_line", (h - eye) * mm, *spec.eye_line_mm)
        if spec.chin_margin_min_mm:
            d["chin_margin"] = _within("chin_margin", (h - chin) * mm, spec.chin_margin_min_mm,
                                       None)
        cx = ((el[0] + er[0]) / 2 - frame.x0) * s
        d["centring"] = _within("centring", cx / spec.width_px - 0.5, -lim.centre_tolerance,
                                lim.centre_tolerance)
    if spec.icao_rules:
        d["eye_glare"] = not t.get("glare", False)
        d["eyes_open"] = t.get("eyes_open")
        d["mouth_closed"] = t.get("mouth_closed")
        if t.get("asymmetry") is not None:
            vals["illumination_symmetry"] = t["asymmetry"]
            d["illumination_symmetry"] = _within("illumination_symmetry", t["asymmetry"], None,
                                                 cs.max_illumination_asymmetry)
        elif t.get("lighting"):
            d["illumination_symmetry"] = t["lighting"] == "even"
        if t.get("background"):
            d["background_uniformity"] = t["background"] == "uniform"
    if t.get("background_colour") is not None and spec.background_rule != "any":
        d["background_colour"] = t["background_colour"]
    if t.get("exposure"):
        d["exposure"] = t["exposure"] == "ok"
    if t.get("sharp") is not None:
        d["sharpness"] = t["sharp"]
    if spec.colour_required and t.get("colour") is not None:
        d["colour"] = t["colour"]
    return {"decisions": d, "values": vals}


def run(folder: Path) -> dict[str, Any]:
    """Evaluate the set in ``folder``; returns per-check agreement and the numeric errors."""
    rows = json.loads((folder / "truth.json").read_text(encoding="utf-8"))["images"]
    an = Analyser.get()
    agree: dict[str, list[int]] = {}
    errors: dict[str, list[float]] = {"head_height_pct": [], "roll_deg": [], "yaw_deg": [],
                                      "pitch_deg": []}
    verdicts = [0, 0]
    cpu = []
    misses: list[str] = []
    rows_out: list[dict[str, Any]] = []
    boundary: dict[str, int] = {}
    for r in rows:
        img = cv2.imread(str(folder / r["file"]), cv2.IMREAD_COLOR)
        if img is None:
            raise EvalSetError(f"truth.json lists {r['file']}, which cannot be read as an image")
        res = an.analyse(img, r["size"], r["mode"])
        if r["expect"].get("reason"):
            ok = res.get("reason") == r["expect"]["reason"]
            verdicts[0] += ok
            verdicts[1] += 1
            if not ok:
                misses.append(f"{r['file']}: expected {r['expect']['reason']}, got "
                              f"{res.get('reason', 'a report')}")
            continue
        if "reason" in res:
            misses.append(f"{r['file']}: rejected {res['reason']} before the report")
            agree.setdefault("(report made)", [0, 0])[1] += 1
            continue
        agree.setdefault("(report made)", [0, 0])
        agree["(report made)"][0] += 1
        agree["(report made)"][1] += 1
        cpu.append(res["report_cpu_ms"])
        rep = res["report"].by_name()
        truth = _truth_decisions(r["truth"], res["frame"], res["spec"])
        row = {"file": r["file"], "size": r["size"], "mode": r["mode"],
               "truth": truth["values"], "measured": {k: c.value for k, c in rep.items()}}
        rows_out.append(row)
        for name, want in truth["decisions"].items():
            if want is None:
                continue
            if want == BOUNDARY:
                boundary[name] = boundary.get(name, 0) + 1
                continue
            got = rep[name].passed if name in rep else None
            a = agree.setdefault(name, [0, 0])
            a[0] += got == want
            a[1] += 1
            if got != want:
                misses.append(f"{r['file']} [{r['size']} {r['mode']}]: {name} measured "
                              f"{rep[name].value if name in rep else None} passed={got}, "
                              f"truth passed={want}")
        v = truth["values"]
        if "head_height" in v and rep["head_height"].value is not None:
            errors["head_height_pct"].append(100 * (rep["head_height"].value - v["head_height"]))
        for k in ("roll", "yaw", "pitch"):
            if rep[k].passed is not None:  # undecided (a face too blurred): not an estimate
                errors[f"{k}_deg"].append(rep[k].value - v[k])
                if r["kind"] in ("yaw", "pitch"):
                    errors.setdefault(f"{k}_deg within 9 deg of frontal", [])
                    if abs(v[k]) <= 9:
                        errors[f"{k}_deg within 9 deg of frontal"].append(rep[k].value - v[k])
    return {"images": len(rows), "agreement": agree, "boundary": boundary, "verdicts": verdicts,
            "errors": errors, "report_cpu_ms_median": float(np.median(cpu)) if cpu else None,
            "misses": misses, "rows": rows_out}


def table(res: Mapping[str, Any]) -> str:
    """The evaluation as text tables (Markdown)."""
    lines = [f"images: {res['images']}", "",
             "| check | truth cases | agree | share | at a bound (not decided) |",
             "| --- | --- | --- | --- | --- |"]
    for name, (ok, n) in res["agreement"].items():
        lines.append(f"| {name} | {n} | {ok} | {100.0 * ok / max(n, 1):.1f} % | "
                     f"{res['boundary'].get(name, 0)} |")
    ok, n = res["verdicts"]
    lines.append(f"| verdict of bad input (reason code) | {n} | {ok} "
                 f"| {100.0 * ok / max(n, 1):.1f} % |")
    lines += ["", "| error | n | mean | median abs | max abs |", "| --- | --- | --- | --- | --- |"]
    for name, vals in res["errors"].items():
        a = np.array(vals, np.float64)
        if len(a):
            lines.append(f"| {name} | {len(a)} | {a.mean():+.2f} | {np.median(np.abs(a)):.2f} | "
                         f"{np.abs(a).max():.2f} |")
    if res.get("report_cpu_ms_median") is not None:
        lines += ["", f"report CPU ms per photo (median, checks only): "
                      f"{res['report_cpu_ms_median']:.1f}"]
    if res["misses"]:
        lines += ["", "disagreements:"] + [f"- {m}" for m in res["misses"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``make --out DIR`` or ``run --set DIR [--json FILE]``."""
    ap = argparse.ArgumentParser(description="ID-photo compliance evaluation (issue 39)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("--out", type=Path, required=True)
    rn = sub.add_parser("run")
    rn.add_argument("--set", dest="folder", type=Path, required=True)
    rn.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "make":
        print(f"{make(args.out)} images written to {args.out}")
        return 0
    res = run(args.folder)
    print(table(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=float), encoding="utf-8")
    return 0


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    sys.exit(main())
