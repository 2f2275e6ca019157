"""Face Mesh landmarks and the ID-photo compliance report (issue 39), on the public-domain
astronaut portrait with hand-measured points (processors/idphoto/eval_truth.json)."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest
from skimage import data

from processors.idphoto.compliance import (
    Check,
    Report,
    background_stats,
    measure,
    pose_angles,
)
from processors.idphoto.evaluation import TRUTH_FILE
from processors.idphoto.facemesh import CHIN, EYE_CONTOURS, FaceMesh, Mesh, crop_transform
from processors.idphoto.framing import Frame, HeadGeometry
from processors.idphoto.inspection import fit_inside, head_with_mesh_chin
from processors.idphoto.settings import ComplianceSettings
from processors.idphoto.specs import get_spec
from processors.models import model_home
from processors.mtcnn import Mtcnn
from processors.runtime import RuntimeSettings
from schemas.models import IdPhotoCompliance
from schemas.reasons import ReasonCode

ASTRO = data.astronaut()  # RGB 512 x 512
TRUTH = json.loads(TRUTH_FILE.read_text(encoding="utf-8"))["astronaut"]
RT = RuntimeSettings(device="cpu")


@pytest.fixture(scope="module")
def five() -> np.ndarray:
    if not (model_home() / "mtcnn_onet.onnx").is_file():
        pytest.skip(f"MTCNN weights not in {model_home()} (run `make models`)")
    canvas = cv2.resize(ASTRO, (320, 320), interpolation=cv2.INTER_AREA)
    return Mtcnn(RT, 320, 24).detect([canvas])[0].landmarks[0].astype(np.float64) * (512 / 320)


def _turned(img: np.ndarray, angle: float) -> tuple[np.ndarray, np.ndarray]:
    c = (float(TRUTH["chin"][0]), 120.0)
    m = cv2.getRotationMatrix2D(c, angle, 1.0)
    return cv2.warpAffine(img, m, (512, 512), borderMode=cv2.BORDER_REPLICATE), m


@pytest.fixture(scope="module")
def meshes(five) -> dict[float, Mesh]:
    fm = FaceMesh(RT)
    out = {}
    angles = (0.0, 6.0, -10.0)
    imgs, fives = [], []
    for a in angles:
        img, m = _turned(ASTRO, a)
        imgs.append(img)
        fives.append(five @ m[:, :2].T + m[:, 2])
    for a, mesh in zip(angles, fm.landmarks(imgs, fives), strict=True):  # one batched call
        out[a] = mesh
    return out


def test_mesh_chin_is_the_hand_measured_chin(meshes) -> None:
    m = meshes[0.0]
    assert m.points.shape == (468, 3) and m.presence > 0.9
    assert np.hypot(*(m.xy(CHIN) - TRUTH["chin"])) < 3.0  # px of the 512 px portrait


def test_roll_follows_a_turned_portrait(meshes) -> None:
    el, er = np.array(TRUTH["eye_left"]), np.array(TRUTH["eye_right"])
    base = math.degrees(math.atan2(er[1] - el[1], er[0] - el[0]))  # 3.25 deg
    for a, mesh in meshes.items():
        # cv2's positive angle turns the picture counter-clockwise: the eye line's angle drops
        assert pose_angles(mesh).roll_deg == pytest.approx(base - a, abs=1.5)
        assert abs(pose_angles(mesh).yaw_deg) < 2.0


def test_expression_of_the_astronaut(meshes) -> None:
    pose = pose_angles(meshes[0.0])
    assert pose.eye_opening > 0.25  # eyes open (eval_truth: eyes_open true)
    assert pose.mouth_opening > 0.1  # a smile with the teeth showing (mouth_closed false)
    assert abs(pose.pitch_deg) < 1.0  # the calibration portrait reads frontal


def test_crop_transform_levels_the_eyes(five) -> None:
    m = crop_transform(five)
    eyes = five[:2] @ m[:, :2].T + m[:, 2]
    assert eyes[0, 1] == pytest.approx(eyes[1, 1], abs=1e-6)
    assert 0 < eyes[0, 0] < eyes[1, 0] < 192


def _photo_and_mesh(meshes, spec_name: str, background: tuple[int, int, int] | None):
    """The astronaut framed for ``spec_name`` by hand (crown/chin from the truth), on a plain
    ``background`` or on her own; the mesh moved into the photo."""
    spec = get_spec(spec_name)
    crown, chin = TRUTH["crown"][1], TRUTH["chin"][1]
    s = spec.target_head_px / (chin - crown)
    x0 = TRUTH["chin"][0] - spec.width_px / 2 / s
    y0 = crown - spec.target_crown_px / s
    m = np.array([[s, 0, -x0 * s], [0, s, -y0 * s]])
    photo = cv2.warpAffine(ASTRO, m, (spec.width_px, spec.height_px),
                           borderMode=cv2.BORDER_REPLICATE)
    alpha = np.zeros(photo.shape[:2], np.uint8)
    cv2.ellipse(alpha, (spec.width_px // 2, int(spec.height_px * 0.55)),
                (int(spec.width_px * 0.3), int(spec.height_px * 0.45)), 0, 0, 360, 255, -1)
    if background is not None:
        photo = np.where(alpha[..., None] > 0, photo, np.array(background, np.uint8))
    mesh = meshes[0.0].scaled(s, -x0 * s, -y0 * s)
    return spec, photo, alpha, mesh, (crown - y0) * s


def test_a_retouched_schengen_photo_passes_geometry_and_fails_mouth_and_replacement(meshes):
    spec, photo, alpha, mesh, crown = _photo_and_mesh(meshes, "schengen", (255, 255, 255))
    rep = measure(photo, alpha, mesh, crown, spec, "retouch", ComplianceSettings())
    c = rep.by_name()
    assert c["head_height"].passed and c["head_height"].value == pytest.approx(
        spec.target_head_px / spec.height_px, abs=0.02)
    assert c["crown_margin"].passed and c["centring"].passed and c["roll"].passed
    assert c["background_uniformity"].passed and c["background_colour"].passed
    assert rep.failed() == [ReasonCode.MOUTH_OPEN, ReasonCode.BACKGROUND_REPLACED]
    payload = rep.as_payload(spec, "retouch")
    assert payload["compliant"] is False
    IdPhotoCompliance.model_validate(payload)  # the contract's shape


def test_the_studio_size_asks_no_icao_rule(meshes):
    spec, photo, alpha, mesh, crown = _photo_and_mesh(meshes, "one_inch", (67, 142, 219))
    rep = measure(photo, alpha, mesh, crown, spec, "retouch", ComplianceSettings())
    assert rep.failed() == []  # blue is fine, the smile is not checked, replacing is allowed
    assert rep.by_name()["mouth_closed"].bound == (None, None)


def test_validate_mode_measures_the_uploads_own_background(meshes):
    spec, photo, alpha, mesh, crown = _photo_and_mesh(meshes, "us_passport", None)
    busy = np.ascontiguousarray(cv2.resize(cv2.cvtColor(data.brick(), cv2.COLOR_GRAY2RGB),
                                           photo.shape[1::-1]))
    textured = np.where(alpha[..., None] > 0, photo, busy)
    rep = measure(textured, alpha, mesh, crown, spec, "validate", ComplianceSettings())
    assert ReasonCode.BACKGROUND_NOT_UNIFORM in rep.failed()
    assert ReasonCode.BACKGROUND_REPLACED not in rep.failed()
    assert not rep.by_name()["background_replacement"].value


def test_greyscale_blur_and_dark(meshes):
    spec, photo, alpha, mesh, crown = _photo_and_mesh(meshes, "uk_passport", (235, 235, 235))
    grey = np.repeat(cv2.cvtColor(photo, cv2.COLOR_RGB2GRAY)[..., None], 3, axis=2)
    assert ReasonCode.GREYSCALE in measure(grey, alpha, mesh, crown, spec, "retouch",
                                           ComplianceSettings()).failed()
    blurred = cv2.GaussianBlur(photo, (0, 0), 6)
    rep = measure(blurred, alpha, mesh, crown, spec, "retouch", ComplianceSettings())
    assert ReasonCode.BLURRY in rep.failed()
    assert rep.by_name()["roll"].passed is None  # landmarks on a blurred face: not decided
    dark = (photo * 0.25).astype(np.uint8)
    assert ReasonCode.POOR_EXPOSURE in measure(dark, alpha, mesh, crown, spec, "retouch",
                                               ComplianceSettings()).failed()


def test_glare_on_glasses(meshes):
    spec, photo, alpha, mesh, crown = _photo_and_mesh(meshes, "schengen", (255, 255, 255))
    clean = measure(photo, alpha, mesh, crown, spec, "retouch", ComplianceSettings())
    assert clean.by_name()["eye_glare"].value < 0.02 and clean.by_name()["eye_glare"].passed
    glare = photo.copy()
    for contour in EYE_CONTOURS:
        c = mesh.points[list(contour), :2].mean(axis=0)
        r = np.ptp(mesh.points[list(contour), 0]) * 0.4
        cv2.ellipse(glare, (int(c[0]), int(c[1])), (int(r), int(r * 0.6)), 20, 0, 360,
                    (255, 255, 255), -1)
    rep = measure(glare, alpha, mesh, crown, spec, "retouch", ComplianceSettings())
    assert ReasonCode.GLARE in rep.failed()


def test_which_failures_reject_is_a_setting() -> None:
    rep = Report((Check("mouth_closed", 0.2, "ratio", (None, 0.08), False, ReasonCode.MOUTH_OPEN),
                  Check("roll", 1.0, "deg", (-8.0, 8.0), True, None)))
    assert rep.rejecting(ComplianceSettings()) == [ReasonCode.MOUTH_OPEN]
    assert rep.rejecting(ComplianceSettings(reject=frozenset())) == []
    assert rep.failed() == [ReasonCode.MOUTH_OPEN]


def test_background_stats_need_enough_background() -> None:
    rgb = np.full((100, 80, 3), 200, np.uint8)
    assert background_stats(rgb, np.full((100, 80), 255, np.uint8)) == (None, None)
    std, mean = background_stats(rgb, np.zeros((100, 80), np.uint8))
    assert std == 0.0 and mean == (200.0, 200.0, 200.0)


def test_fit_inside_moves_then_enlarges_the_frame() -> None:
    head = HeadGeometry(crown_y=10.0, chin_y=170.0, centre_x=250.0, cropped=False)
    f = Frame(x0=100.0, y0=-20.0, scale=1.0, width=300, height=400)
    g = fit_inside(f, head, (512, 512))
    assert (g.x0, g.y0, g.scale) == (100.0, 0.0, 1.0)  # moved down onto the upload
    small = fit_inside(f, head, (300, 512))  # too short: enlarged until the 400 px fit
    assert small.scale == pytest.approx(400 / 300)
    assert small.y0 >= 0 and small.y0 + 400 / small.scale <= 300 + 1e-9


def test_head_with_mesh_chin(meshes) -> None:
    head = HeadGeometry(crown_y=16.0, chin_y=181.5, centre_x=225.0, cropped=False)
    h2 = head_with_mesh_chin(head, meshes[0.0], (512, 512))
    assert h2.chin_y == pytest.approx(TRUTH["chin"][1], abs=3.0) and not h2.cropped
    assert head_with_mesh_chin(head, None, (512, 512)) is head
    cut = head_with_mesh_chin(head, meshes[0.0], (170, 512))  # the chin below the bottom edge
    assert cut.cropped
