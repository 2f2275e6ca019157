"""CardProcessor on uploads that are already the document (the scan path, u2netp on the CPU):
flatbed scans with a thin margin and pre-cropped documents are accepted and rectified; with the
scan path off (``scan=False``, the card path alone, as before issue 44) the same uploads are
NO_CARD or PARTIAL_CARD; a photo of the same shape without a document stays NO_CARD."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.base import Item
from processors.card.metrics import quad_iou
from processors.card.settings import CardSettings
from processors.card.training import synth
from processors.decode import DecodeSettings, probe_image
from processors.errors import ModelError
from processors.runtime import RuntimeSettings
from schemas.reasons import ReasonCode, Status
from tests.unit.scans import on_lid, outlined_figure, portrait


def _processor(**card):
    from processors.card import CardProcessor

    try:
        return CardProcessor(CardSettings(**card), RuntimeSettings(device="cpu", max_bucket=4,
                                                                   intra_op_threads=2))
    except ModelError as e:
        pytest.skip(f"card model file not available ({e}); run `make models`")


@pytest.fixture(scope="module")
def both():
    return _processor(), _processor(scan=False)


def _item(name: str, image: np.ndarray) -> Item:
    ok, buf = cv2.imencode(".png", image)
    assert ok
    return Item(upload_id=name, image=probe_image(buf.tobytes(), DecodeSettings()))


# (seed, doc_type, mode) -> what the card path alone says (measured; see the module doc)
UPLOADS = [(1, "passport", "flatbed", ReasonCode.NO_CARD),
           (3, "passport", "flatbed", ReasonCode.PARTIAL_CARD),
           (1, "id_card", "cropped", ReasonCode.NO_CARD),
           (4, "id_card", "cropped", ReasonCode.PARTIAL_CARD)]


def test_scans_and_crops_are_accepted_and_rectified(both) -> None:
    on, off = both
    samples = [synth.scan_sample(np.random.default_rng(seed), dt, mode)
               for seed, dt, mode, _ in UPLOADS]
    items = [_item(f"scan{k}", s.image) for k, s in enumerate(samples)]
    after, before = on.process_batch(items), off.process_batch(items)
    for (seed, dt, mode, reason), s, o, b in zip(UPLOADS, samples, after, before, strict=True):
        # the card path alone rejects every one; the reason is the fp32 model's (the int8 build,
        # the CPU default, says NO_CARD for seed 4's crop: its confidence 0.49 against fp32's
        # 0.57 on a document that fills the frame)
        assert b.status is Status.REJECTED, (seed, mode, b.reasons)
        assert {reason, ReasonCode.NO_CARD} & set(b.reasons), (seed, mode, b.reasons)
        assert o.status is Status.ACCEPTED, (seed, mode, o.reasons)
        # the card path's verdicts are gone (verification may still annotate, e.g. NO_PORTRAIT
        # on a drawn portrait)
        assert not {ReasonCode.NO_CARD, ReasonCode.PARTIAL_CARD, ReasonCode.BLURRY,
                    ReasonCode.GLARE} & set(o.reasons)
        assert quad_iou(o.payload["quad"], s.quad) > 0.95
        assert o.payload["doc_type"] == dt
        (art,) = o.artifacts
        assert (art.width, art.height) == ((1011, 637) if dt == "id_card" else (1476, 1039))


def test_document_shaped_photo_without_a_document_stays_no_card(both) -> None:
    on, _ = both
    rng = np.random.default_rng(21)
    items = [_item(f"neg{k}", synth.frame_negative(rng).image) for k in range(4)]
    for o in on.process_batch(items):
        assert o.status is Status.REJECTED and ReasonCode.NO_CARD in o.reasons
        assert o.payload["quad"] is None


@pytest.mark.parametrize("level", [30, 240])
def test_a_blank_or_grey_card_on_a_lid_stays_no_card(both, level: int) -> None:
    """A blank card and a plain grey one of ID-1's shape, 30 px margins on a dark and a white
    lid: the card path finds no card, and the scan path, which finds the four margins, finds
    no print on it (``scan.judge``), so both stay NO_CARD with no quad. Before round 6 all four
    were accepted as ID cards (NO_PORTRAIT and PHOTOCOPY only annotated them)."""
    on, _ = both
    faces = {"blank": synth.render_face(np.random.default_rng(3), "id_card", width=856,
                                        blank=True)[0],
             "grey": np.full((540, 856, 3), 150, np.uint8)}
    items = []
    for name, face in faces.items():
        items.append(_item(name, on_lid(face, level)))
    for o in on.process_batch(items):
        # (BLURRY may join it: a blank frame has no detail to be sharp)
        assert o.status is Status.REJECTED and ReasonCode.NO_CARD in o.reasons, (
            o.upload_id, o.reasons, o.payload.get("doc_type"))
        assert o.payload["quad"] is None


# (seed, format) of the MRZ generator's scans where the card path is suspect: 34/TD3 and 12/TD3
# took the portrait (upright, no print; confidence 0.94, IoU 0.14 and 0.15 with the page; the
# second in ID-3's own aspect ratio, 1.43), 7/TD2 and 11/TD3 found the page with a corner
# astray (0.76 and 0.73; IoU 0.96 and 0.93, the MRZ unreadable in the slanted warp)
PARTS = [(34, "TD3"), (12, "TD3"), (7, "TD2"), (11, "TD3")]


@pytest.mark.parametrize(("seed", "fmt"), PARTS)
def test_a_scan_whose_card_path_took_a_part_is_the_whole_page(both, seed: int,
                                                              fmt: str) -> None:
    """The scan path's page replaces a suspect card-path quad (``scan.replaces``): the
    result's quad is the page's (IoU >= 0.95: 12/TD3's page runs off the frame on three
    sides and its quad is the frame, IoU 0.97; the others 0.99) and its MRZ reads with every
    check digit."""
    from processors.card.mrz.icao import Format
    from processors.card.training import documents

    on, _ = both
    img, truth = documents.document(np.random.default_rng(seed), Format[fmt], capture="scan")
    (o,) = on.process_batch([_item(f"{seed}{fmt}", img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], np.asarray(truth.quad)) >= 0.95
    mrz = o.payload["mrz"]
    assert mrz["format"] == fmt and ReasonCode.MRZ_UNREADABLE not in o.reasons
    assert all(mrz["checks"][k] == v for k, v in truth.checks.items() if v is not None)


def test_a_lone_portrait_print_on_a_dark_lid_stays_too_small(both) -> None:
    """The shared cases' portrait printed 35 x 45 mm (7 px/mm) alone on a dark scanner lid with
    30 px margins: the card path finds it too small for a card (CARD_TOO_SMALL, as in round 4),
    and the scan path, which takes the lid's frame for a passport page with the print as its
    portrait, is not asked. Found by a fresh user's trial: accepted as a passport at 6c16036,
    which asked the scan path before the size check."""
    on, _ = both
    photo = portrait((245, 315))  # 35 x 45 mm at 7 px/mm
    (o,) = on.process_batch([_item("print", on_lid(photo, 30))])
    assert o.status is Status.REJECTED, (o.reasons, o.payload.get("doc_type"))
    assert o.reasons == (ReasonCode.CARD_TOO_SMALL,)


@pytest.mark.parametrize(("seed", "fmt"), [(2, "TD1"), (3, "TD3")])
def test_a_white_page_scanned_to_saturation_is_no_glare(both, seed: int, fmt: str) -> None:
    """A white document scanned on a flatbed or exported from a PDF (ICAO Doc 9303's specimen
    pages) has its paper at 250-255 all over: the saturated share measures the paper, not
    glare, so it is accepted with its MRZ read (it was GLARE and GLARE_ON_MRZ, rejected); a
    saturated spot on the same page at a paper level of 225 is still GLARE."""
    import datetime as dt

    from processors.card.mrz.icao import Format, compose
    from processors.card.training import documents

    rng = np.random.default_rng(seed)
    lines = compose(Format[fmt], **documents.random_fields(rng, Format[fmt], dt.date(2026, 1, 1),
                                                            0.0))
    face, alpha, _, _ = documents.render_document(rng, Format[fmt], lines)
    grey = cv2.cvtColor(face, cv2.COLOR_BGR2GRAY)
    white = face.copy()
    # a specimen page exported from a PDF: its ground and what lies outside its corners white
    white[(grey > 0.8 * np.percentile(grey, 75)) | (alpha < 0.5)] = 255
    assert np.mean(cv2.inRange(white, (250,) * 3, (255,) * 3) > 0) > 0.5
    on, _ = both
    out = on.process_batch([_item("white", white)])[0]
    assert out.status == Status.ACCEPTED, out.reasons
    assert ReasonCode.GLARE not in out.reasons and ReasonCode.GLARE_ON_MRZ not in out.reasons
    assert out.payload["quality"]["glare"] == 0.0
    assert out.payload["mrz"]["valid"]
    dim = cv2.convertScaleAbs(white, alpha=225.0 / 255.0)
    h, w = dim.shape[:2]
    cv2.circle(dim, (w // 2, h // 3), h // 5, (255, 255, 255), -1)  # a glare spot
    spot = on.process_batch([_item("spot", dim)])[0]
    assert ReasonCode.GLARE in spot.reasons and spot.status == Status.REJECTED


def test_a_figure_of_a_document_on_a_page_is_read(both) -> None:
    """A specimen figure (a document printed in black on white inside its outline, on a page
    with captions, as in ICAO Doc 9303) is accepted with its MRZ read and every check digit
    valid: its white ground is no glare (it was GLARE and GLARE_ON_MRZ, rejected), and where the
    card model finds no card in it (the standard's own figures: confidence 0.37-0.41), the scan
    path's outline does (``tests/unit/test_card_scan.py``)."""
    page, quad = outlined_figure(1, "TD2")
    on, _ = both
    out = on.process_batch([_item("figure", page)])[0]
    assert out.status == Status.ACCEPTED, out.reasons
    assert quad_iou(out.payload["quad"], quad) > 0.98
    assert out.payload["mrz"]["format"] == "TD2" and out.payload["mrz"]["valid"]


def test_a_form_drawn_in_a_documents_outline_is_no_card(both) -> None:
    """A blank form or a certificate in a box of a passport's shape, with captions (a fresh
    user's trial): the outline and its print pass the scan path's tests, but no machine-readable
    zone is on it, so it is NO_CARD (it was a passport, accepted, at confidence 1.0)."""
    page, quad = outlined_figure(1, "TD3", print_inside=False)
    rng = np.random.default_rng(7)
    x0, y0, x1, y1 = (int(v) for v in (*quad[0], *quad[2]))
    words = ["NAME", "DATE", "SIGNATURE", "ADDRESS", "CITY", "FORM", "No.", "ISSUED"]
    for y in range(y0 + 50, y1 - 30, 42):
        text = " ".join(rng.choice(words, 4)) + " ________"
        cv2.putText(page, text, (x0 + 30, y), cv2.FONT_HERSHEY_SIMPLEX, 0.9, (0, 0, 0), 2)
    on, _ = both
    out = on.process_batch([_item("form", page)])[0]
    assert out.reasons == (ReasonCode.NO_CARD,), out.reasons
    assert out.payload["quad"] is None


def test_random_zone_lines_in_a_documents_outline_are_no_card(both) -> None:
    """Two lines of random OCR-B in a passport figure's place (a fresh user's trial): they read
    as a zone of the format's shape, but no check digit holds, and an outline alone is too
    little evidence: NO_CARD (it was a passport, accepted with MRZ_CHECK_DIGIT)."""
    page, _ = outlined_figure(2, "TD3", random_zone=True)
    on, _ = both
    out = on.process_batch([_item("fake", page)])[0]
    assert out.reasons == (ReasonCode.NO_CARD,), out.reasons


def _letter(seed: int, width: int = 900) -> np.ndarray:
    """A letter on white A4 paper (1 : 1.414, ID-3's 125 : 88 within half a per cent), scanned
    edge to edge: a heading, a salutation and lines of words in black."""
    rng = np.random.default_rng(seed)
    h = round(width * 1.414)
    page = np.full((h, width, 3), 252, np.uint8)
    words = ["the", "order", "ticket", "seat", "event", "date", "refund", "your", "please", "we"]
    cv2.putText(page, "BOOKING CONFIRMATION", (60, 110), cv2.FONT_HERSHEY_SIMPLEX, 1.1,
                (0, 0, 0), 2)
    for y in range(200, h - 120, 34):
        text = " ".join(rng.choice(words, int(rng.integers(5, 9))))
        cv2.putText(page, text, (60, y), cv2.FONT_HERSHEY_SIMPLEX, 0.75, (20, 20, 20), 2)
    return cv2.GaussianBlur(page, (0, 0), 0.6)


@pytest.mark.parametrize("turn", [False, True])
def test_a_white_letter_without_portrait_or_zone_is_no_card(both, turn: bool) -> None:
    """A letter on A4 scanned or exported edge to edge (a booking confirmation uploaded instead
    of a passport) has a passport data page's shape: with neither a portrait nor a
    machine-readable zone on its white paper it is NO_CARD (it was a passport, accepted with
    annotations); the same page tinted is still taken for a document (the rule needs white
    paper; a portrait keeps it too: the next test)."""
    page = _letter(3)
    if turn:
        page = cv2.rotate(page, cv2.ROTATE_90_CLOCKWISE)
    on, _ = both
    out = on.process_batch([_item("letter", page)])[0]
    assert out.reasons == (ReasonCode.NO_CARD,), out.reasons
    assert out.payload["quad"] is None and out.payload["doc_type"] is None
    land = page if turn else cv2.rotate(page, cv2.ROTATE_90_CLOCKWISE)
    tinted = (land.astype(np.float32) * np.array([0.78, 0.86, 0.80])).astype(np.uint8)
    kept = on.process_batch([_item("tinted", tinted)])[0]
    assert kept.payload["doc_type"] == "passport", kept.reasons
    assert kept.payload["quality"]["brightness"] < 210


def test_only_a_white_page_without_portrait_or_zone_is_no_data_page() -> None:
    """The scan path's data-page rule needs every piece of evidence: the passport type, no zone
    found, no portrait in the portrait zone, white paper (the page's median grey: a dark
    letterhead over a third of a letter keeps it white); a document of the ID-1 type (a card
    front carries no zone) or a measure not taken keeps the document."""
    from types import SimpleNamespace as NS

    from processors.card.processor import PAPER_WHITE, _no_data_page

    def ver(found: bool = False, portrait: bool | None = False) -> NS:
        return NS(mrz=NS(found=found), quality=NS(portrait=portrait))

    white = np.full((360, 512, 3), 250, np.uint8)
    white[:120] = 30  # a dark letterhead: the page's mean 176, its median 250
    assert _no_data_page("passport", ver(), white)
    assert _no_data_page("passport", ver(), white[..., 0])  # a grey thumbnail
    assert not _no_data_page("id_card", ver(), white)
    assert not _no_data_page("passport", ver(found=True), white)
    assert not _no_data_page("passport", ver(portrait=True), white)
    assert not _no_data_page("passport", ver(portrait=None), white)  # the portrait not searched
    tinted = np.full((360, 512, 3), int(PAPER_WHITE) - 2, np.uint8)
    assert not _no_data_page("passport", ver(), tinted)
    assert _no_data_page("passport", ver(), tinted + 4)
    assert not _no_data_page("passport", None, white)
    assert not _no_data_page("passport", NS(mrz=None, quality=ver().quality), white)
    assert not _no_data_page("passport", NS(mrz=NS(found=False), quality=None), white)
