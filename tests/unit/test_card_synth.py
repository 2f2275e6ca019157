"""The card generator's ``hard`` scenes (objects touching the card, header bands like the
background)."""

from __future__ import annotations

import cv2
import numpy as np

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
