"""The scan path (:mod:`processors.card.scan`) on the generator's scans, crops and frame-shaped
photos without a document (geometry and print only; no model)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.card import scan
from processors.card.metrics import quad_iou
from processors.card.settings import CardSettings
from processors.card.training import synth
from processors.pixels import shrink, working_size

SETTINGS = CardSettings()


def _working(image: np.ndarray) -> tuple[np.ndarray, float]:
    """The processor's grey working copy of ``image`` and its scale (working px per px)."""
    h, w = image.shape[:2]
    ws = working_size(w, h, SETTINGS.work_max_side)
    grey = shrink(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), ws)
    return grey, max(grey.shape) / max(h, w)


def _judge(s: synth.Sample) -> tuple[scan.ScanVerdict, float]:
    """The verdict on ``s`` and the IoU of its frame quad (in ``s``'s px) with the truth."""
    grey, f = _working(s.image)
    v = scan.judge(grey, SETTINGS)
    return v, quad_iou((v.frame.quad + 0.5) / f - 0.5, s.quad)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("doc_type", ["id_card", "passport"])
def test_flatbed_scan_is_the_document_within_its_margin(seed: int, doc_type: str) -> None:
    """A document square on a scanner lid with a thin margin: the margin's edges are found and
    the quad is the document's (IoU >= 0.95), whatever the print says."""
    s = synth.scan_sample(np.random.default_rng(seed), doc_type, "flatbed")
    v, iou = _judge(s)
    assert v.document, (v.frame.edges, v.frame.aspect, v.glyphs)
    assert iou >= 0.95
    assert v.confidence >= 0.5


@pytest.mark.parametrize("seed", [5, 6, 7, 8])
@pytest.mark.parametrize("doc_type", ["id_card", "passport"])
def test_pre_cropped_document_is_found(seed: int, doc_type: str) -> None:
    """A phone app's crop, cut up to 1.5 % inside the document or with up to 1.5 % of the
    scene left: the quad is the document (IoU above 0.9, the SmartDoc bar, with its true
    corners; a side left on the frame keeps up to 1.5 % of the scene)."""
    s = synth.scan_sample(np.random.default_rng(seed), doc_type, "cropped")
    v, iou = _judge(s)
    assert v.document
    assert iou > 0.9


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_document_that_is_the_frame_is_taken_by_its_print(seed: int) -> None:
    """A face that is the whole frame has no margin to find: the print decides (glyphs in rows
    on a plain ground) and the quad is the frame."""
    face, _ = synth.render_face(np.random.default_rng(seed), "passport", width=1000, blank=False)
    h, w = face.shape[:2]
    s = synth.Sample(face, np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64), "scan")
    v, iou = _judge(s)
    assert v.document and sum(v.frame.edges) < 3
    assert v.glyphs >= SETTINGS.scan_min_print_glyphs
    assert 0.0 < v.confidence <= 1.0
    assert iou >= 0.98


@pytest.mark.parametrize("seed", range(6))
def test_frame_shaped_photo_without_a_document_is_not_one(seed: int) -> None:
    """Scenes, textures and table tops cropped to ID-1's or ID-3's aspect ratio: the shape fits,
    the print does not."""
    s = synth.frame_negative(np.random.default_rng(100 + seed))
    v, _ = _judge(synth.Sample(s.image, np.zeros((4, 2)), "none"))
    assert not v.document
    assert v.confidence == 0.0


@pytest.mark.parametrize("texture", ["grass", "gravel"])
def test_busy_texture_has_glyph_like_blobs_but_no_plain_ground(texture: str) -> None:
    """Grass and gravel give MSER blobs in rows (the glyph count alone would take them), but
    hardly any plain ground; a rendered card face has both."""
    tex = cv2.cvtColor(cv2.resize(synth._skimage(texture), (scan.PRINT_WIDTH, 484)),
                       cv2.COLOR_BGR2GRAY)
    face, _ = synth.render_face(np.random.default_rng(3), "id_card", width=scan.PRINT_WIDTH,
                                blank=False)
    doc = cv2.cvtColor(face, cv2.COLOR_BGR2GRAY)
    assert scan.ground_share(tex) < SETTINGS.scan_min_ground <= scan.ground_share(doc)
    assert scan.print_glyphs(doc) >= SETTINGS.scan_min_print_glyphs


def test_phone_photo_of_a_card_is_not_a_scan() -> None:
    """A 4:3 photo of a card on a texture: the frame's shape is no document's (1.333 lies 6 %
    from ID-3's 1.420), so the scan path leaves it to the card path."""
    quad = np.array([[200, 150], [600, 170], [590, 420], [210, 400]], np.float64)
    image, _ = synth.card_on_texture(np.random.default_rng(4), quad, (800, 600))
    grey, _ = _working(image)
    v = scan.judge(grey, SETTINGS)
    assert not v.document and v.glyphs == -1


def test_end_stripe_is_not_taken_for_a_margin() -> None:
    """A plain end stripe along the document's short side has a straight edge and a plain
    strip out to the frame, like a margin; leaving it out would break the aspect ratio, so the
    side stays on the frame."""
    face, _ = synth.render_face(np.random.default_rng(9), "id_card", width=856, blank=False)
    face[:, :120] = (40, 90, 160)  # a plain end stripe, 14 % of the width
    h, w = face.shape[:2]
    s = synth.Sample(face, np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64), "scan")
    v, iou = _judge(s)
    assert v.document and not v.frame.edges[3]  # the left side stays on the frame
    assert iou >= 0.98


def test_scanned_travel_document_carries_its_truth() -> None:
    """The MRZ generator's scan capture (issue 44): the document's truth says ``scan``, its
    quad is the document's within a thin margin and its DPI is the scan's (150-300 dpi for a
    flatbed scan; a crop 640-1200 px wide)."""
    from processors.card.mrz.icao import Format
    from processors.card.training import documents

    for seed in range(4):
        img, truth = documents.document(np.random.default_rng(seed), Format.TD3, capture="scan")
        h, w = img.shape[:2]
        assert truth.capture == "scan" and truth.format == "TD3"
        quad = np.asarray(truth.quad)
        frame = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
        assert quad_iou(quad, frame) > 0.7
        assert abs(truth.rotation_deg) <= 2.5
        width_px = float(np.linalg.norm(quad[1] - quad[0]))
        assert truth.dpi == pytest.approx(width_px / (125.0 / 25.4), rel=0.03)
        assert 125 <= truth.dpi <= 305  # flatbed 150-300 dpi; a crop 640-1200 px: 130-244


def test_documents_write_set_adds_scans_after_the_photos(tmp_path) -> None:
    import json

    from processors.card.training import documents

    plain = json.loads(documents.write_set(tmp_path / "a", 1, seed=3).read_text())
    more = json.loads(documents.write_set(tmp_path / "b", 1, seed=3, scans=2).read_text())
    assert more["documents"][0] == plain["documents"][0]
    assert [d["truth"]["capture"] for d in more["documents"]] == ["photo", "scan", "scan"]
    assert [d["file"] for d in more["documents"][1:]] == ["scan_doc_3_0000.jpg",
                                                          "scan_doc_3_0001.jpg"]
