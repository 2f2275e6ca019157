"""The scan path (:mod:`processors.card.scan`) on the generator's scans, crops and frame-shaped
photos without a document (geometry and print only; no model)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.card import geometry as geo
from processors.card import scan
from processors.card.detect import Detection
from processors.card.metrics import quad_iou
from processors.card.settings import CardSettings
from processors.card.training import synth
from processors.pixels import shrink, working_size
from tests.unit.scans import guilloche, on_lid, outlined_figure, portrait

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


def _no_print(kind: str) -> np.ndarray:
    """A document-shaped thing without a document's print (ID-1 856 x 540 px, or a 7 x 5 inch
    photo print, aspect 1.40, within 1.5 % of ID-3's)."""
    rng = np.random.default_rng(5)
    if kind == "grey":
        return np.full((540, 856, 3), 150, np.uint8)
    if kind == "blank":
        return synth.render_face(np.random.default_rng(3), "id_card", width=856, blank=True)[0]
    if kind == "noise":
        return rng.integers(0, 256, (540, 856, 3), dtype=np.uint8)
    if kind == "smooth_noise":
        return cv2.GaussianBlur(rng.integers(0, 256, (540, 856, 3), dtype=np.uint8), (0, 0), 3)
    if kind == "checkerboard":  # 20 px squares, grey 30 and 230
        yy, xx = np.mgrid[0:540, 0:856]
        return np.repeat((((yy // 20 + xx // 20) % 2) * 200 + 30).astype(np.uint8)[..., None],
                         3, axis=2)
    if kind == "dot_grid":  # dark dots of 7 px radius every 25 px across and 30 px down
        face = np.full((540, 856, 3), 235, np.uint8)
        for y in range(20, 540, 30):
            for x in range(20, 856, 25):
                cv2.circle(face, (x, y), 7, (30, 30, 30), -1)
        return face
    if kind == "tiles":  # rows of tiles 26 and 18 px wide in turn (widths vary: spread 0.2)
        face = np.full((540, 856, 3), 200, np.uint8)
        for y in range(0, 540, 32):
            x, k = 0, 0
            while x < 856:
                w = (26, 18)[k % 2]
                cv2.rectangle(face, (x + 2, y + 2), (x + w, y + 28), (120, 120, 120), -1)
                x, k = x + w + 4, k + 1
        return face
    if kind == "stacked_barcode":  # rows of bars 3-11 px wide, 3-11 px apart
        face = np.full((540, 856, 3), 240, np.uint8)
        for y in range(40, 500, 34):
            x = 40
            while x < 806:
                w = int(rng.integers(3, 12))
                cv2.rectangle(face, (x, y), (x + w, y + 24), (20, 20, 20), -1)
                x += w + int(rng.integers(3, 12))
        return face
    return portrait((980, 700))


@pytest.mark.parametrize("kind", ["grey", "blank", "noise", "smooth_noise", "photo_print",
                                  "checkerboard", "dot_grid", "tiles", "stacked_barcode"])
@pytest.mark.parametrize(("level", "blur"), [(30, 0.7), (240, 0.7), (240, 0.0)])
def test_a_document_shape_on_a_lid_without_print_is_no_document(kind: str, level: int,
                                                                 blur: float) -> None:
    """A grey or blank card, noise, a photo print, a checkerboard, a dot grid, tiles or a
    stacked barcode on a lid: the shape is a document's, but there is no print in rows on a
    plain ground, or (the last four) its "glyphs" are solid shapes, not strokes
    (``scan.SOLID_MAX_SHARE``), so it is no document. The sharp dot grid on the white lid
    (a fresh user's file) has blurrier dots at the working size than the softened one, so they
    cover less of their boxes (its solid share 0.75 at ``SOLID_FILL`` 0.65, 0.15 at 0.7).
    Before round 6 26 of these 27 were documents (with 3-4 margined edges the print was not
    asked for; the photo print on the dark lid had only one margined edge). The same lid with a
    printed card face on it is one."""
    grey, _ = _working(on_lid(_no_print(kind), level, blur=blur))
    v = scan.judge(grey, SETTINGS)
    assert not v.document and v.confidence == 0.0, (v.glyphs, v.frame.edges, v.frame.aspect)
    assert v.glyphs >= 0, v.frame.aspect  # the shape is a document's: the print decided
    face, _ = synth.render_face(np.random.default_rng(3), "id_card", width=856, blank=False)
    printed = scan.judge(_working(on_lid(face, level, blur=blur))[0], SETTINGS)
    assert printed.document and printed.confidence == 1.0
    assert printed.glyphs >= SETTINGS.scan_min_print_glyphs


def test_a_page_with_a_card_on_it_is_no_document_of_its_own() -> None:
    """An ID-1 card (520 px wide) lying on a plain A4 page (1240 x 1754 px, 150 dpi: ISO 216's
    aspect 1.414 lies 0.4 % from ID-3's 1.420) on a dark lid: the page has four margins and a
    passport page's shape, but its only print is the card's, too small for a document of the
    page's size, so the page is no document (before round 6 it was, and replaced a suspect card
    on it). The card alone, cut from the page, is one."""
    face, alpha = synth.render_face(np.random.default_rng(9), "id_card", width=520, blank=False)
    card = np.array([[300, 500], [820, 500], [820, 828], [300, 828]], np.float64)
    page = synth.composite(np.full((1754, 1240, 3), 245, np.uint8), face, alpha, card)
    v = scan.judge(_working(on_lid(page, 60, margin=40))[0], SETTINGS)
    assert sum(v.frame.edges) == 4 and abs(v.frame.aspect - 2 ** 0.5) < 0.01, v.frame.aspect
    assert not v.document and 0 <= v.glyphs < SETTINGS.scan_min_print_glyphs, v.glyphs
    alone = scan.judge(_working(on_lid(page[500:828, 300:820], 60))[0], SETTINGS)
    assert alone.document and alone.glyphs >= SETTINGS.scan_min_print_glyphs


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


def _turned_page(centre: tuple[float, float], deg: float, width: float = 1000.0,
                 aspect: float = 125.0 / 88.0) -> np.ndarray:
    """``(4, 2)`` TL, TR, BR, BL of an ID-3 page ``width`` px wide turned by ``deg``."""
    h = width / aspect
    t = np.deg2rad(deg)
    rot = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    box = np.array([[-width / 2, -h / 2], [width / 2, -h / 2], [width / 2, h / 2],
                    [-width / 2, h / 2]])
    return box @ rot.T + np.asarray(centre)


def _sides(quad: np.ndarray) -> list[np.ndarray]:
    return [geo.line_through(quad[i], quad[(i + 1) % 4]) for i in range(4)]


FRAME = (1040, 720)
FRAME_LINES = _sides(np.array([[0, 0], [FRAME[0] - 1, 0], [FRAME[0] - 1, FRAME[1] - 1],
                               [0, FRAME[1] - 1]], np.float64))


def test_a_side_the_frame_cuts_is_put_where_the_format_puts_it() -> None:
    """A page turned 1.8° whose top runs off the frame (its corners at y -11 and +20): the top
    on the frame would put both corners at y 0 (off by up to 20 px, and the warp would slant
    the print); rebuilt parallel to the bottom at the ID-3 height it lies on the page's own
    top (within 0.01 px)."""
    page = _turned_page((520.0, 356.0), -1.8)
    assert page[0, 1] > 0 > page[1, 1]  # the frame cuts the top
    lines = _sides(page)
    lines[0] = FRAME_LINES[0]
    before = geo.quad_from_lines(lines)
    assert np.abs(before - page).max() > 10
    got = geo.quad_from_lines(scan.complete_sides(lines, (False, True, True, True), FRAME))
    np.testing.assert_allclose(got, page, atol=0.01)


def test_a_side_cut_further_than_a_strip_is_squared_on_the_frame() -> None:
    """The frame cuts 60 px off an ID-1 page (more than ``CUT_SIDE_REACH`` of the frame): the
    format's place is not trusted, the side is turned square to the found ones and passes
    through the middle of its stretch of frame."""
    page = _turned_page((520.0, 255.3), 1.5, aspect=85.6 / 53.98)
    lines = _sides(page)
    lines[0] = FRAME_LINES[0]
    got = geo.quad_from_lines(scan.complete_sides(lines, (False, True, True, True), FRAME))
    top, bottom = got[1] - got[0], page[2] - page[3]
    assert abs(top[0] * bottom[1] - top[1] * bottom[0]) / np.linalg.norm(top) < 1e-6  # parallel
    stretch = geo.quad_from_lines(lines)
    mid = (stretch[0] + stretch[1]) / 2
    assert abs(float(np.dot(geo.line_through(got[0], got[1])[:2], mid))
               + float(geo.line_through(got[0], got[1])[2])) < 1e-6
    np.testing.assert_allclose(got[2:], page[2:], atol=1e-6)  # the found sides stay


def test_sides_stay_when_none_or_all_were_found() -> None:
    page = _turned_page((520.0, 356.0), 1.0)
    assert scan.complete_sides(FRAME_LINES, (False,) * 4, FRAME) is FRAME_LINES
    assert scan.complete_sides(_sides(page), (True,) * 4, FRAME)[0] is not None
    np.testing.assert_allclose(
        geo.quad_from_lines(scan.complete_sides(_sides(page), (True,) * 4, FRAME)), page)


# (seed, format) of the MRZ generator's scans whose page the frame cuts, with 2-3 sides
# found as margined edges: the side on the frame put the corners 6-27 px off before
# ``complete_sides``, 1.0-1.4 px after
CUT_SCANS = [(2, "TD1"), (3, "TD3"), (4, "TD1"), (4, "TD3"), (6, "TD3"), (7, "TD3"),
             (11, "TD1")]


@pytest.mark.parametrize(("seed", "fmt"), CUT_SCANS)
def test_a_turned_scan_cut_by_the_frame_gets_its_true_corners(seed: int, fmt: str) -> None:
    from processors.card.mrz.icao import Format
    from processors.card.training import documents
    from processors.pixels import bilinear_grey

    img, truth = documents.document(np.random.default_rng(seed), Format[fmt], capture="scan")
    h, w = img.shape[:2]
    quad = np.asarray(truth.quad)
    assert (quad < 0).any() or (quad[:, 0] > w).any() or (quad[:, 1] > h).any()  # cut
    grey, _ = _working(img)
    v = scan.judge(grey, SETTINGS)
    assert v.document and 2 <= sum(v.frame.edges) <= 3
    det = scan.detection(v, grey.shape, (w, h), lambda p: bilinear_grey(img, p))
    assert np.abs(det.quad - quad).max() <= 3.0


def _det(quad: np.ndarray, confidence: float, frame: tuple[int, int] = FRAME,
         edge_support: float = 0.0) -> Detection:
    return Detection(quad=np.asarray(quad, np.float64), confidence=confidence,
                     edge_support=edge_support,
                     area_frac=geo.polygon_area(quad) / float(frame[0] * frame[1]),
                     aspect=geo.approx_aspect(quad))


PAGE = np.array([[20, 30], [1020, 30], [1020, 734], [20, 734]], np.float64)
PORTRAIT = np.array([[60, 120], [330, 120], [330, 470], [60, 470]], np.float64)  # upright
PANEL = np.array([[20, 100], [1020, 100], [1020, 560], [20, 560]], np.float64)  # 2.17


def _no_call() -> int:
    raise AssertionError("the card's print was measured where no rule needs it")


def test_an_upright_printless_part_of_a_page_is_its_portrait() -> None:
    """The card path's portrait (upright, 12 % of the frame) is suspect even at confidence
    0.94, and the page the scan path finds around it replaces it, with any number of margined
    edges, because it carries no print; the same quad with print on it (a card lying on a
    page) stays, as does a confident landscape card in a document's shape (not suspect) and a
    card inside no page."""
    frame = (1040, 764)
    portrait = _det(PORTRAIT, 0.94, frame)
    assert scan.inner_suspect(portrait)
    assert scan.replaces(_det(PAGE, 1.0, frame), portrait, lambda: 0)
    assert not scan.replaces(_det(PAGE, 1.0, frame), portrait,
                             lambda: scan.PORTRAIT_MAX_GLYPHS)
    card = np.array([[60, 120], [60 + 250 * 125 / 88, 120], [60 + 250 * 125 / 88, 370],
                     [60, 370]], np.float64)  # landscape, ID-3's shape
    assert not scan.inner_suspect(_det(card, 0.94, frame))
    far = PORTRAIT + np.array([900.0, 0.0])  # outside the page
    assert not scan.replaces(_det(PAGE, 1.0, frame), _det(far, 0.5, frame), _no_call)


def test_a_confident_card_in_a_photo_is_no_portrait_of_the_frame() -> None:
    """A card held over gravel, found at confidence 1.0 on 37 % of the frame, its shape off a
    format's by the perspective (aspect 1.78): it is suspect (the scan path is asked), but it
    covers far more of the frame than a portrait covers of a page (``PORTRAIT_SHARE``), so a
    frame the scan path took for a document does not replace it, print or none."""
    frame = (1040, 764)
    held = np.array([[280, 260], [1010, 290], [990, 690], [280, 670]], np.float64)
    card = _det(held, 1.0, frame)
    assert scan.inner_suspect(card) and card.aspect > 1.68
    assert not scan.replaces(_det(PAGE, 1.0, frame, edge_support=0.25), card, lambda: 0)


def test_a_panel_gives_way_only_to_a_page_found_by_three_margined_edges() -> None:
    """A coloured panel (60 % of the page) found at 0.88 is suspect; the page replaces it when
    the scan path found it by 3-4 margined edges, not when by one (a photo of a card on a table,
    the frame cut to a document's shape by the table's border); a card found at 0.95 stays."""
    frame = (1040, 764)
    panel = _det(PANEL, 0.88, frame)
    assert scan.inner_suspect(panel)
    assert scan.replaces(_det(PAGE, 1.0, frame, edge_support=0.75), panel, _no_call)
    assert not scan.replaces(_det(PAGE, 1.0, frame, edge_support=0.25), panel, _no_call)
    assert not scan.inner_suspect(_det(PANEL, 0.95, frame))


def test_the_same_page_with_a_corner_astray_gives_way_to_its_margined_edges() -> None:
    """The card path found the page with one corner 40 px astray (IoU 0.97, not inside the
    page) at 0.73: the scan path's page, found by 4 margined edges, replaces it."""
    astray = PAGE.copy()
    astray[1] += (40.0, -25.0)
    card = _det(astray, 0.73)
    assert not scan.encloses(PAGE, astray)
    assert scan.replaces(_det(PAGE, 1.0, edge_support=1.0), card, _no_call)
    assert not scan.replaces(_det(PAGE, 1.0, edge_support=0.5), card, _no_call)


def test_one_of_two_documents_side_by_side_stays() -> None:
    """Two ID-1 cards scanned one above the other with a 14 mm gap: their outline has ID-3's
    shape (1.425) and may be found by 4 margined edges, and each card covers 0.44 of it. A card
    found there at 0.69 stays (``PART_MAX_SHARE``, ``PANEL_MIN_SHARE``): it is one of two
    documents, not a panel or a part of one; so does an open booklet's data page (half of it)."""
    px = 700 / 85.6
    h = 53.98 * px
    outline = np.array([[40, 40], [740, 40], [740, 40 + 2 * h + 14 * px],
                        [40, 40 + 2 * h + 14 * px]], np.float64)
    frame = (780, int(outline[2, 1]) + 40)
    assert abs(geo.approx_aspect(outline) / (125 / 88) - 1) < SETTINGS.scan_aspect_tol
    upper = np.array([[40, 40], [740, 40], [740, 40 + h], [40, 40 + h]], np.float64)
    card = _det(upper, 0.69, frame)
    assert scan.inner_suspect(card) and card.area_frac < scan.INNER_CARD_AREA
    assert not scan.replaces(_det(outline, 1.0, frame, edge_support=1.0), card, _no_call)
    half = PAGE.copy()
    half[2:, 1] = (PAGE[0, 1] + PAGE[2, 1]) / 2  # the data page of an open booklet
    assert not scan.replaces(_det(PAGE, 1.0, edge_support=1.0), _det(half, 0.6), _no_call)


def test_a_degenerate_page_replaces_nothing() -> None:
    nothing = np.zeros((4, 2))
    assert not scan.replaces(_det(nothing, 1.0, edge_support=1.0), _det(nothing, 0.5),
                             _no_call)
    assert scan.quad_glyphs(np.full((64, 64), 128, np.uint8),
                            np.array([[np.nan, 0], [10, 0], [10, 5], [0, 5]])) == 0


@pytest.mark.parametrize(("seed", "fmt"), CUT_SCANS[:4])
@pytest.mark.parametrize(("width", "level"), [(1, 0), (3, 0), (2, 128), (3, 255)])
def test_a_thin_frame_border_is_not_taken_for_the_documents_margins(
        seed: int, fmt: str, width: int, level: int) -> None:
    """The turned, cut scans above exported with a 1-3 px line of white, black or grey around
    them (known gap 14): the border is cut off (:func:`scan.thin_border`) and the document's own
    corners are found as without it. Without the cut, the border's inner edge was each side's
    outermost margined edge and the frame's shape no format's: NO_CARD or a quad off by tens of
    px."""
    from processors.card.mrz.icao import Format
    from processors.card.training import documents
    from processors.pixels import bilinear_grey

    img, truth = documents.document(np.random.default_rng(seed), Format[fmt], capture="scan")
    img = cv2.copyMakeBorder(img, width, width, width, width, cv2.BORDER_CONSTANT,
                             value=(level, level, level))
    h, w = img.shape[:2]
    quad = np.asarray(truth.quad) + width
    grey, _ = _working(img)
    v = scan.judge(grey, SETTINGS)
    assert v.document
    det = scan.detection(v, grey.shape, (w, h), lambda p: bilinear_grey(img, p))
    assert np.abs(det.quad - quad).max() <= 3.0 + width  # a side on the frame takes it in


def test_a_lid_or_a_page_running_to_the_frame_is_no_thin_border() -> None:
    """A scanner lid's margin (30 px of one level) and a page whose print runs to the frame keep
    their every line: only 1-:data:`scan.BORDER_MAX_PX` lines of one level before a line that
    is not are a border, cut with one line more."""
    rng = np.random.default_rng(0)
    page = rng.integers(0, 256, (400, 600), dtype=np.uint8)
    assert scan.thin_border(page) == (0, 0, 0, 0)
    lid = cv2.copyMakeBorder(page, 30, 30, 30, 30, cv2.BORDER_CONSTANT, value=235)
    assert scan.thin_border(lid) == (0, 0, 0, 0)
    framed = page.copy()
    framed[:2], framed[:, -4:] = 255, 0  # 2 px of white on top, 4 of black on the right
    assert scan.thin_border(framed) == (3, 5, 0, 0)
    framed[:, -5:] = 0  # 5 px is a margin, not a border
    assert scan.thin_border(framed)[1] == 0


@pytest.mark.parametrize(("seed", "fmt"), [(1, "TD2"), (2, "TD3"), (3, "TD1")])
def test_a_documents_outline_on_a_page_is_the_document(seed: int, fmt: str) -> None:
    """A figure of a document on a page (ICAO Doc 9303's specimens: a thin rounded outline,
    captions above and below): the frame is no document (the captions make its margins busy),
    the outline is (:func:`scan.outline`, asked with ``outlined``), its corners those of the
    outline's rectangle."""
    from processors.pixels import bilinear_grey

    page, quad = outlined_figure(seed, fmt)
    h, w = page.shape[:2]
    grey, _ = _working(page)
    assert not scan.judge(grey, SETTINGS).document
    v = scan.judge(grey, SETTINGS, outlined=True)
    assert v.document and all(v.frame.edges) and v.confidence == 1.0
    det = scan.detection(v, grey.shape, (w, h), lambda p: bilinear_grey(page, p))
    assert np.abs(det.quad - quad).max() <= 3.0


def test_an_empty_box_drawn_on_a_page_is_no_document() -> None:
    """The same outline with nothing inside: a quadrilateral of a document's shape, without
    print."""
    page, _ = outlined_figure(1, print_inside=False)
    grey, _ = _working(page)
    v = scan.judge(grey, SETTINGS, outlined=True)
    assert not v.document and v.glyphs < SETTINGS.scan_min_print_glyphs


@pytest.mark.parametrize(("seed", "period", "depth"), [(10, 14, 25), (11, 16, 25), (12, 14, 30)])
def test_a_page_under_security_print_is_a_document_only_a_zone_can_vouch_for(
        seed: int, period: float, depth: float) -> None:
    """A passport face that is the whole frame, printed over with guilloche: its plain ground
    (:func:`scan.ground_share`) falls under ``scan_min_ground`` and over
    :data:`scan.BUSY_GROUND` (PassportEye's Czech and French specimens, 0.255-0.257), so the
    frame is no document; asked with ``outlined`` (the card path found none), it is one that
    needs a valid zone (:func:`scan.busy_page`). The frame-shaped scenes stay no document."""
    face, _ = synth.render_face(np.random.default_rng(seed), "passport", width=1000, blank=False)
    grey, _ = _working(guilloche(face, period, depth))
    plain = scan.judge(grey, SETTINGS)
    ground = scan.ground_share(scan.rectified_grey(grey, plain.frame.quad))
    assert scan.BUSY_GROUND <= ground < SETTINGS.scan_min_ground
    assert not plain.document and plain.glyphs >= SETTINGS.scan_min_print_glyphs
    v = scan.judge(grey, SETTINGS, outlined=True)
    assert v.document and v.needs_zone
    assert np.abs(v.frame.quad - plain.frame.quad).max() == 0.0
    for k in range(6):
        s = synth.frame_negative(np.random.default_rng(100 + k))
        assert not scan.judge(_working(s.image)[0], SETTINGS, outlined=True).document


def test_the_document_inside_a_quad_is_found_by_its_edges_not_by_the_lid_s_shape() -> None:
    """A TD1 card (the generator's face) on a dark lid 12 % of its width wide all round, the
    card 2.2 % narrower than ID-1 (a card path's quad a few px off squeezes its warp so: a
    second fresh user's trial, ``A17_grey``, 1.551). The lid's own outline,
    (83.7 + 2 x 10.3) / (54.0 + 2 x 10.3) = 1.40, lies nearer ID-3's shape than the card lies
    to ID-1's, and :func:`scan.frame_quad` takes the whole frame, no edge found. Among the
    combinations with at least 2 margined edges (:func:`scan.inner_document`, asked inside a
    card path's quad) the card is found by its four."""
    from processors.card.mrz.icao import Format
    from processors.card.training import documents

    rng = np.random.default_rng(5)
    lines = documents.compose(Format.TD1, **documents.random_fields(
        rng, Format.TD1, documents.REFERENCE_DATE, 0.0))
    face, alpha, _, _ = documents.render_document(rng, Format.TD1, lines)
    a = alpha[..., None] / 255.0
    card = (face * a + np.array([34, 30, 30]) * (1.0 - a)).astype(np.uint8)
    m = round(0.12 * card.shape[1])
    card = cv2.resize(card, (round(0.978 * card.shape[1]), card.shape[0]),
                      interpolation=cv2.INTER_AREA)
    lid = cv2.copyMakeBorder(card, m, m, m, m, cv2.BORDER_CONSTANT, value=(34, 30, 30))
    grey, f = _working(lid)
    s = CardSettings(scan_min_area_frac=0.4)
    whole = scan.frame_quad(grey, s)
    assert not any(whole.edges) and abs(whole.aspect / 1.42 - 1.0) < 0.02  # ID-3's shape
    inner = scan.inner_document(grey, s, 2)
    truth = (np.array([[m, m], [m + card.shape[1], m], [m + card.shape[1], m + card.shape[0]],
                       [m, m + card.shape[0]]], np.float64) + 0.5) * f - 0.5
    assert inner.document and all(inner.frame.edges)
    assert quad_iou(inner.frame.quad, truth) > 0.95
