"""Pure geometry and metrics of the card processor (no model)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.card import geometry as geo
from processors.card.metrics import intersection_areas, quad_iou, summarise
from processors.card.rectify import canonical_size, choose_doc_type


def _raster_iou(a, b, size=400):
    ma = np.zeros((size, size), np.uint8)
    mb = np.zeros((size, size), np.uint8)
    cv2.fillPoly(ma, [np.round(np.asarray(a) * 4).astype(np.int32)], 1, shift=2)
    cv2.fillPoly(mb, [np.round(np.asarray(b) * 4).astype(np.int32)], 1, shift=2)
    return (ma & mb).sum() / max((ma | mb).sum(), 1)


def test_iou_of_offset_squares_is_one_third():
    a = [[0, 0], [10, 0], [10, 10], [0, 10]]
    b = [[5, 0], [15, 0], [15, 10], [5, 10]]  # overlap 50, union 150
    assert quad_iou(a, b) == pytest.approx(1 / 3, abs=1e-9)
    assert quad_iou(a, a) == pytest.approx(1.0)
    assert quad_iou(a, [[20, 20], [30, 20], [30, 30], [20, 30]]) == 0.0


def test_intersection_areas_of_nested_and_disjoint_squares():
    big = [[0, 0], [10, 0], [10, 10], [0, 10]]
    small = [[2, 2], [4, 2], [4, 4], [2, 4]]  # inside: IoU 0.04, but all of it overlaps
    assert intersection_areas(small, big) == pytest.approx((4.0, 4.0, 100.0))
    assert intersection_areas(big, [[20, 0], [30, 0], [30, 10], [20, 10]]) == (0.0, 100.0, 100.0)


def test_iou_matches_rasterised_iou_on_random_convex_quads():
    rng = np.random.default_rng(3)
    for _ in range(20):
        c = rng.uniform(120, 280, 2)
        a = cv2.boxPoints(((c[0], c[1]), tuple(rng.uniform(60, 150, 2)), rng.uniform(0, 90)))
        b = a + rng.normal(0, 15, a.shape)
        b = cv2.convexHull(b.astype(np.float32)).reshape(-1, 2)
        assert quad_iou(a, b[::-1]) == pytest.approx(_raster_iou(a, b), abs=0.02)


def test_summarise_counts_share_above_threshold():
    s = summarise([0.95, 0.85, 0.91, 0.2])
    assert s["n"] == 4
    assert s["mean_iou"] == pytest.approx((0.95 + 0.85 + 0.91 + 0.2) / 4)
    assert s["share_above"] == pytest.approx(0.5)


def test_order_corners_any_permutation():
    quad = np.array([[10.0, 20.0], [110.0, 15.0], [120.0, 80.0], [5.0, 90.0]])
    rng = np.random.default_rng(0)
    for _ in range(6):
        np.testing.assert_allclose(geo.order_corners(rng.permutation(quad)), quad)


def test_quad_from_mask_recovers_rounded_card_corners():
    quad = np.array([[60.0, 50.0], [330.0, 70.0], [310.0, 240.0], [45.0, 215.0]])
    mask = np.zeros((300, 400), np.uint8)
    cv2.fillPoly(mask, [np.round(quad * 16).astype(np.int32)], 255, cv2.LINE_AA, shift=4)
    for c in quad:  # cut rounded corners of radius 8 px
        cv2.circle(mask, tuple(int(v) for v in c), 8, 0, -1)
    mq = geo.quad_from_mask(mask)
    assert mq is not None
    assert np.max(np.hypot(*(mq.quad - quad).T)) < 2.5
    assert mq.rectangularity > 0.97


@pytest.mark.parametrize(("samples", "n_offs"), [(40, 11), (40, 61), (16, 7), (9, 33)])
def test_candidate_scores_match_the_mean_over_the_full_gather_bit_for_bit(samples: int,
                                                                          n_offs: int) -> None:
    """The line scores summed one sample at a time equal NumPy's mean over the (4, A, B, S)
    gather they replace exactly (the same additions in the same order), so no side search moves."""
    rng = np.random.default_rng(samples * 100 + n_offs)
    dn = rng.normal(size=(4, samples, n_offs)) * rng.uniform(0.1, 40.0)
    t = np.linspace(0.1, 0.9, samples)
    ia = np.arange(n_offs)
    idx = np.rint(ia[:, None, None] * (1 - t)[None, None, :]
                  + ia[None, :, None] * t[None, None, :]).astype(np.int64)
    want = np.abs(dn[:, np.arange(samples)[None, None, :], idx].mean(axis=3))
    got = geo._candidate_scores(dn, samples, n_offs)
    assert got.shape == (4, n_offs, n_offs) and got.flags.c_contiguous
    assert np.array_equal(got, want)


def test_side_search_snaps_to_a_step_edge():
    img = np.full((200, 300), 40.0, np.float32)
    true = np.array([[50.0, 40.0], [250.0, 40.0], [250.0, 160.0], [50.0, 160.0]])
    cv2.fillPoly(img, [true.astype(np.int32)], 200.0)
    gx, gy = geo.gradients(img, 1.0)
    start = true + np.array([[6, -5], [-4, 7], [5, 4], [-6, -3]], np.float64)
    q, scores, _ = geo.side_search(gx, gy, start, 10, 10)
    assert np.max(np.abs(q - true)) < 1.5
    assert np.all(scores > 20)


@pytest.mark.parametrize("seed", range(12))
def test_outermost_side_search_reaches_a_header_band(seed):
    """A card whose header band the mask missed (band height, grey level and sensor noise drawn
    from ``seed``): the top side's outward search (``outermost``) reaches the band's top edge and
    the other sides stay. Before the peak test compared in float32, a float64 score above its
    float32 dilation was no peak, and 11 of these 12 lost a side to the search's innermost line."""
    rng = np.random.default_rng(seed)
    band, level = int(rng.integers(18, 44)), float(rng.uniform(100.0, 150.0))
    img = np.full((260, 320), 30.0, np.float32)
    cv2.rectangle(img, (60, 90 - band), (260, 200), level, -1)
    cv2.rectangle(img, (60, 90), (260, 200), 220.0, -1)
    img += rng.normal(0.0, 3.0, img.shape).astype(np.float32)
    body = np.array([[60.0, 90.0], [260.0, 90.0], [260.0, 200.0], [60.0, 200.0]])
    gx, gy = geo.gradients(img, 1.0)
    q, scores, _ = geo.side_search(gx, gy, body, 4, 60, 2.0, outermost=0.6)
    assert q[:2, 1] == pytest.approx([90 - band - 0.5] * 2, abs=1.5)  # the band's top edge
    assert np.max(np.abs(q[2:] - body[2:])) < 1.5
    # a step of height H peaks at about H / sqrt(2 pi) / 1.25 per px after the smoothing
    assert 0.25 * (level - 30.0) < scores[0] < 0.4 * (level - 30.0)
    assert np.all(scores[1:] > 0.25 * (220.0 - 30.0))


def test_segment_edge_score_on_and_off_a_straight_edge():
    img = np.full((100, 100), 50.0, np.float32)
    img[:, 40:] = 150.0  # a vertical step of 100 grey levels between x = 39 and 40
    gx, gy = geo.gradients(img, 1.0)
    on = geo.segment_edge_score(gx, gy, np.array([39.5, 10.0]), np.array([39.5, 90.0]))
    assert 25.0 < on < 40.0  # 100 / sqrt(2 pi) / ~1.25 px after the smoothing
    assert geo.segment_edge_score(gx, gy, np.array([39.5, 90.0]), np.array([39.5, 10.0])) == on
    assert geo.segment_edge_score(gx, gy, np.array([20.0, 10.0]), np.array([20.0, 90.0])) < 0.01
    assert geo.segment_edge_score(gx, gy, np.array([10.0, 39.5]), np.array([90.0, 39.5])) < 0.01
    assert geo.segment_edge_score(gx, gy, np.array([5.0, 5.0]), np.array([5.0, 5.0])) == 0.0


def test_canonical_sizes_iso_7810_at_300_dpi():
    assert canonical_size("id_card", 300) == (1011, 637)
    assert canonical_size("passport", 300) == (1476, 1039)
    assert canonical_size("id_card", 150) == (505, 318)


def test_doc_type_from_option_or_aspect():
    assert choose_doc_type("passport", 1.58, 1.5) == "passport"
    assert choose_doc_type("auto", 1.58, 1.5) == "id_card"
    assert choose_doc_type("auto", 1.42, 1.5) == "passport"


def _pinhole_quad(w_mm: float, h_mm: float, tilt_deg: float, f: float,
                  size: tuple[int, int] = (1600, 1200)) -> np.ndarray:
    """Corners (px, TL TR BR BL) of a ``w_mm`` x ``h_mm`` rectangle tilted ``tilt_deg`` about
    its horizontal axis, turned 20 degrees in its plane, 20 mm off the optical axis and 250 mm
    in front of a pinhole camera of focal length ``f`` px whose principal point is the photo's
    centre."""
    spin, _ = cv2.Rodrigues(np.array([0.0, 0.0, np.radians(20.0)]))
    tilt, _ = cv2.Rodrigues(np.array([np.radians(tilt_deg), 0.0, 0.0]))
    pts = np.array([[-w_mm / 2, -h_mm / 2, 0], [w_mm / 2, -h_mm / 2, 0],
                    [w_mm / 2, h_mm / 2, 0], [-w_mm / 2, h_mm / 2, 0]]) @ (tilt @ spin).T
    pts += [20.0, -10.0, 250.0]
    return np.stack([f * pts[:, 0] / pts[:, 2] + size[0] / 2,
                     f * pts[:, 1] / pts[:, 2] + size[1] / 2], axis=1)


@pytest.mark.parametrize("f_share", [0.6, 0.8])
def test_metric_aspect_undoes_a_strong_tilt(f_share):
    """At 35 degrees of tilt the sides' mean lengths put an ID-3 page near or past the ID-1 /
    ID-3 split; the metric aspect, with the focal length estimated from the quad, stays
    within 2 % of the truth for both sizes (ISO/IEC 7810 ID-1 85.60 x 53.98, ID-3 125 x 88)."""
    size = (1600, 1200)
    f = f_share * float(np.hypot(*size))
    for w_mm, h_mm in ((85.60, 53.98), (125.0, 88.0)):
        quad = _pinhole_quad(w_mm, h_mm, 35.0, f, size)
        m = geo.metric_aspect(quad, size)
        assert m.value == pytest.approx(w_mm / h_mm, rel=0.02)
        assert m.low <= m.value <= m.high
    passport = _pinhole_quad(125.0, 88.0, 35.0, f, size)
    assert geo.approx_aspect(passport) > 1.5  # the sides alone call it ID-1
    naive_err = abs(geo.approx_aspect(passport) - 125 / 88)
    assert abs(geo.metric_aspect(passport, size).value - 125 / 88) < naive_err


def test_metric_aspect_of_a_frontal_view_is_its_side_ratio():
    size = (1600, 1200)
    quad = np.array([[300.0, 300.0], [1156.0, 300.0], [1156.0, 839.8], [300.0, 839.8]])
    m = geo.metric_aspect(quad, size)
    assert m.value == pytest.approx(856.0 / 539.8, rel=1e-3)
    assert not m.straddles(1.5)


def test_corner_angle_deviation_of_rectangle_tilt_and_kite():
    rect = [[0, 0], [100, 0], [100, 60], [0, 60]]
    assert geo.corner_angle_deviation(rect) == pytest.approx(0.0, abs=1e-9)
    # a symmetric trapezoid whose top is 20 px shorter per side over 60 px height: 90 - atan(60/20)
    trap = [[20, 0], [80, 0], [100, 60], [0, 60]]
    assert geo.corner_angle_deviation(trap) == pytest.approx(np.degrees(np.arctan2(20, 60)),
                                                             abs=1e-9)
    # the kite-shaped outline of a reclining animal (a real false positive): far from 90 degrees
    kite = [[290, 165], [1031, 486], [532, 594], [84, 496]]
    assert geo.corner_angle_deviation(kite) > 60


def test_kite_shaped_quad_is_no_card():
    from processors.card.detect import Detection
    from processors.card.processor import CardProcessor
    from processors.card.settings import CardSettings

    proc = CardProcessor.__new__(CardProcessor)  # the rule only reads settings
    proc.settings = CardSettings()
    good = dict(confidence=0.9, rectangularity=0.95, mask_contrast=0.8, area_frac=0.3, aspect=1.6)
    rect = Detection(quad=np.array([[100, 100], [420, 110], [415, 310], [95, 300]], float), **good)
    kite = Detection(quad=np.array([[290, 165], [1031, 486], [532, 594], [84, 496]], float), **good)
    assert not proc._no_card(rect)
    assert proc._no_card(kite)
    proc.settings = CardSettings(max_corner_angle_dev_deg=70)
    assert not proc._no_card(kite)
