"""Framing geometry on synthetic masks and images (no model): every size's head rule."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.idphoto.faces import FaceBox
from processors.idphoto.framing import (
    CHIN_BELOW_BOX,
    HeadGeometry,
    composite,
    head_geometry,
    plan_frame,
    warp,
)
from processors.idphoto.sizes import SIZES


def _person(h: int, w: int, crown: int, cx: int, rx: int, chin: int) -> np.ndarray:
    """``(h, w) uint8`` matte: an elliptical head from ``crown`` to ``chin`` plus shoulders."""
    m = np.zeros((h, w), np.uint8)
    cy, ry = (crown + chin) // 2, (chin - crown) // 2
    cv2.ellipse(m, (cx, cy), (rx, ry), 0, 0, 360, 255, -1)
    cv2.rectangle(m, (cx - 3 * rx, chin + ry // 3), (cx + 3 * rx, h - 1), 255, -1)
    return m


def test_crown_is_the_top_of_the_head_matte() -> None:
    m = _person(600, 500, crown=80, cx=250, rx=90, chin=330)
    face = FaceBox(x=180, y=150, w=140, h=140)
    g = head_geometry(face, m, threshold=128)
    assert not g.cropped
    assert 80 <= g.crown_y <= 90  # ellipse top, 10th percentile over the middle columns
    assert g.chin_y == pytest.approx(150 + 140 * (1 + CHIN_BELOW_BOX))
    assert g.centre_x == 250


def test_head_touching_the_top_edge_is_cropped() -> None:
    m = _person(600, 500, crown=-40, cx=250, rx=90, chin=250)
    g = head_geometry(FaceBox(x=180, y=60, w=140, h=140), m, threshold=128)
    assert g.cropped and g.crown_y == 0


def test_chin_below_the_bottom_edge_is_cropped() -> None:
    m = _person(300, 500, crown=60, cx=250, rx=90, chin=330)
    g = head_geometry(FaceBox(x=180, y=150, w=140, h=140), m, threshold=128)
    assert g.cropped


def test_background_above_an_unrelated_blob_is_ignored() -> None:
    m = _person(600, 500, crown=80, cx=250, rx=90, chin=330)
    m[10:30, 200:300] = 255  # something above the head, not connected to it
    g = head_geometry(FaceBox(x=180, y=150, w=140, h=140), m, threshold=128)
    assert 80 <= g.crown_y <= 90


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize("src_head", [120.0, 900.0])  # enlarge and shrink
def test_frame_puts_head_and_crown_inside_the_rule(name: str, src_head: float) -> None:
    spec = SIZES[name]
    crown, cx = 200.0, 700.0
    g = HeadGeometry(crown_y=crown, chin_y=crown + src_head, centre_x=cx, cropped=False)
    fr = plan_frame(g, spec)
    assert (fr.width, fr.height) == (spec.width_px, spec.height_px)
    # draw the head as a white band crown..chin on black and find it in the output
    H, W = int(crown + src_head + 400), 1400
    img = np.zeros((H, W), np.uint8)
    img[int(crown):int(crown + src_head), int(cx - 40):int(cx + 41)] = 255  # centred on cx
    out = warp(img, fr)
    rows = np.flatnonzero(out[:, fr.width // 2] > 127)
    head_px, crown_px = rows[-1] - rows[0] + 1, rows[0]
    lo, hi = spec.head_range_px
    clo, chi = spec.crown_range_px
    assert lo <= head_px <= hi, (head_px, lo, hi)
    assert clo <= crown_px <= chi, (crown_px, clo, chi)
    cols = np.flatnonzero(out[rows[len(rows) // 2]] > 127)
    assert abs((cols[0] + cols[-1]) / 2 - fr.width / 2) <= 1.5  # centred


def test_composite_uses_alpha() -> None:
    fg = np.full((2, 2, 3), 10, np.uint8)
    a = np.array([[0, 255], [128, 255]], np.uint8)
    out = composite(fg, a, (67, 142, 219))
    assert out[0, 0].tolist() == [67, 142, 219]
    assert out[0, 1].tolist() == [10, 10, 10]
    assert out[1, 0].tolist() == [round(10 * 128 / 255 + c * 127 / 255) for c in (67, 142, 219)]
