"""The card generator's ``hard`` scenes (objects touching the card, header bands like the
background)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.card.training import synth

QUAD = np.array([[200.0, 150.0], [440.0, 150.0], [440.0, 301.0], [200.0, 301.0]])


def test_touching_object_reaches_under_the_card_from_outside() -> None:
    bg = np.full((480, 640, 3), 60, np.uint8)
    inside = np.zeros((480, 640), np.uint8)
    cv2.fillConvexPoly(inside, QUAD.astype(np.int32), 1)
    for seed in range(20):
        out = synth.touching_object(bg, QUAD, np.random.default_rng(seed))
        assert out.shape == bg.shape and out.dtype == np.uint8
        changed = np.abs(out.astype(int) - bg).max(axis=2) > 0
        assert changed[inside > 0].sum() > 0, seed  # under one of the card's sides
        assert changed[inside == 0].sum() > 200, seed  # and outside it, touching the card
        # one connected object that crosses the card's outline
        n, lab = cv2.connectedComponents(changed.astype(np.uint8))
        crossing = {int(v) for v in np.unique(lab[(inside > 0) & changed])}
        assert any(((lab == c) & (inside == 0)).any() for c in crossing), seed


def test_header_band_takes_the_given_colour() -> None:
    colour = (10, 200, 30)
    hits = 0
    for seed in range(10):
        face, _ = synth.render_face(np.random.default_rng(seed), "id_card", band_bgr=colour,
                                    blank=False)
        row = face[3, face.shape[1] // 3 : 2 * face.shape[1] // 3]
        hits += bool((np.abs(np.median(row, axis=0) - colour) <= 2).all())
    assert hits >= 6  # the band is drawn on 80 % of faces


def test_hard_samples_keep_a_card_inside_the_frame() -> None:
    rng = np.random.default_rng(11)
    for _ in range(8):
        s = synth.sample(rng, size=(480, 360), hard=True, effects=False)
        assert s.image.shape == (360, 480, 3)
        assert s.quad is not None
        assert (s.quad >= 0).all() and (s.quad[:, 0] <= 480).all() and (s.quad[:, 1] <= 360).all()


def _inside(quad: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    m = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(m, np.round(quad).astype(np.int32), 1)
    return m > 0


def test_handheld_fingers_cross_the_card_edges_and_the_hand_is_behind(monkeypatch) -> None:
    """The hand-held class (issue 44): skin painted in front of the card crosses its outline
    (a thumb or fingers over an edge: inside and outside the card), and the palm and fingers
    behind it show outside the card only (the card is drawn over them)."""
    painted: list[np.ndarray] = []
    real = synth._paint_skin

    def spy(img, mask, rng, tips, width):
        painted.append(mask.copy())
        return real(img, mask, rng, tips, width)

    monkeypatch.setattr(synth, "_paint_skin", spy)
    for seed in range(8):
        painted.clear()
        s = synth.handheld_sample(np.random.default_rng(seed), size=(640, 480), effects=False)
        assert s.kind == "handheld" and s.doc_type in ("id_card", "passport")
        assert s.image.shape == (480, 640, 3)
        assert (s.quad >= 0).all() and (s.quad[:, 0] < 640).all() and (s.quad[:, 1] < 480).all()
        behind, front = (m > 0 for m in painted)
        card = _inside(s.quad, (480, 640))
        assert front[card].sum() > 50 and front[~card].sum() > 50, seed  # over the edge
        # behind the card: visible outside it; the card covers what lies under it
        assert behind[~card].sum() > 200, seed


def test_scan_sample_is_the_document_with_at_most_a_thin_margin() -> None:
    for seed in range(6):
        for mode in ("flatbed", "cropped"):
            s = synth.scan_sample(np.random.default_rng(seed), mode=mode)
            h, w = s.image.shape[:2]
            inter, area, frame = _areas(s.quad, w, h)
            assert s.kind == "scan" and s.doc_type in ("id_card", "passport")
            # the document covers most of the frame: margins of at most 8 % a side
            assert inter / frame > (0.7 if mode == "flatbed" else 0.95), (seed, mode)
            assert inter / area > 0.95  # and lies (almost) within it


def _areas(quad: np.ndarray, w: int, h: int) -> tuple[float, float, float]:
    from processors.card.metrics import intersection_areas

    frame = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    inter, area, frame_area = intersection_areas(quad, frame)
    return inter, area, frame_area


def test_frame_negative_has_a_document_shape_and_no_document() -> None:
    rng = np.random.default_rng(3)
    for _ in range(6):
        s = synth.frame_negative(rng)
        h, w = s.image.shape[:2]
        ratio = max(w, h) / min(w, h)
        assert s.quad is None and s.kind == "none"
        assert min(abs(ratio - 85.60 / 53.98), abs(ratio - 125 / 88)) < 0.01


def test_write_set_extra_kinds_leave_the_first_n_unchanged(tmp_path) -> None:
    import json

    plain = synth.write_set(tmp_path / "a", 3, seed=5)
    more = synth.write_set(tmp_path / "b", 3, seed=5,
                           extra={"scan": 2, "handheld": 2, "frame_negative": 1})
    a = json.loads(plain.read_text())["images"]
    b = json.loads(more.read_text())["images"]
    assert [c["file"] for c in b[:3]] == [c["file"] for c in a]
    for c in a:
        a_bytes = (tmp_path / "a" / c["file"]).read_bytes()
        assert a_bytes == (tmp_path / "b" / c["file"]).read_bytes()
    kinds = [c["expect"]["kind"] for c in b[3:]]
    assert kinds == ["none", "handheld", "handheld", "scan", "scan"]
    assert all(c["expect"]["doc_type"] in ("id_card", "passport") for c in b[4:])
    assert b[3]["expect"]["reason"] == "NO_CARD"


def test_write_set_refuses_an_unknown_kind(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown extra kinds"):
        synth.write_set(tmp_path, 1, seed=1, extra={"selfie": 1})


def test_webcam_handheld_puts_a_person_behind_and_may_colour_the_band_like_it(monkeypatch) -> None:
    """The webcam variant of the hand-held class: a person behind the card (the torso drawn by
    ``person_backdrop``), the card inside the frame, and the header band, when coloured like
    the surroundings, within a few grey levels of the ring around the card in the backdrop."""
    bands: list[tuple | None] = []
    backdrops: list[np.ndarray] = []
    real_face, real_person = synth.render_face, synth.person_backdrop

    def face_spy(rng, doc_type="id_card", **kw):
        bands.append(kw.get("band_bgr"))
        return real_face(rng, doc_type, **kw)

    def person_spy(bg, rng):
        out = real_person(bg, rng)
        backdrops.append(out)
        return out

    monkeypatch.setattr(synth, "render_face", face_spy)
    monkeypatch.setattr(synth, "person_backdrop", person_spy)
    coloured = 0
    for seed in range(10):
        bands.clear()
        backdrops.clear()
        s = synth.handheld_sample(np.random.default_rng(seed), size=(640, 480), effects=False,
                                  webcam=True)
        assert s.kind == "webcam_handheld" and len(backdrops) == 1
        assert (s.quad >= 0).all() and (s.quad[:, 0] < 640).all() and (s.quad[:, 1] < 480).all()
        band = bands[0]  # the held card's face comes first
        if band is None:
            continue
        coloured += 1
        card = _inside(s.quad, (480, 640)).astype(np.uint8)
        ring = cv2.dilate(card, np.ones((77, 77), np.uint8)) > card  # 0.08 of 480 px each side
        near = np.median(backdrops[0][ring], axis=0)
        assert np.abs(np.array(band) - near).max() <= 4 * 12, (seed, band, near)
    assert 3 <= coloured <= 9  # 60 % of the draws


def test_webcam_kind_leaves_the_other_kinds_of_a_set_unchanged(tmp_path) -> None:
    import json

    base = {"scan": 2, "handheld": 2, "frame_negative": 1}
    a = synth.write_set(tmp_path / "a", 0, seed=6, extra=base)
    b = synth.write_set(tmp_path / "b", 0, seed=6, extra={**base, "webcam_handheld": 2})
    ia, ib = json.loads(a.read_text())["images"], json.loads(b.read_text())["images"]
    assert [c["file"] for c in ib[:5]] == [c["file"] for c in ia]
    for c in ia:
        a_bytes = (tmp_path / "a" / c["file"]).read_bytes()
        assert a_bytes == (tmp_path / "b" / c["file"]).read_bytes()
    assert [c["expect"]["kind"] for c in ib[5:]] == ["webcam_handheld"] * 2
