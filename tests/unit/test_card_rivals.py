"""CardProcessor: a machine-readable zone read valid vouches for another quad of the upload
(``_Card.rival``, ``_Card.unzoned``; u2netp on the CPU, the card path's detection set by the
test so that the case is exact):

- a scan whose card path took a panel of the page gives way to the scan path's page where only
  the page reads a valid zone;
- a card path's quad too small on a scan gives way to the page where the page reads a valid
  zone, and stays CARD_TOO_SMALL where it does not;
- a detector's winner with a corner astray gives way to its runner-up where the winner's zone is
  found and does not read and the runner-up's does; where the winner shows no zone at all the
  runner-up is not tried (an ID-1 front without a zone never pays for it);
- a card with neither rival whose zone is found and does not read asks the scan path late and
  gives way to its page where the page's zone reads valid;
- a page under security print that the card path misses is taken where its zone reads valid
  (``scan.busy_page``), or unsure with every check digit passing, and is NO_CARD where it does
  not;
- a small card with no zone found asks the scan path late too, and gives way to its page where
  the page's zone reads, a check digit failing or not;
- a card path's quad around a scan's dark lid gives way to the card the scan path finds inside
  it, whose zone reads valid.
"""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest

from processors.base import Item
from processors.card import geometry as geo
from processors.card import scan
from processors.card.metrics import quad_iou
from processors.card.mrz.icao import Format
from processors.card.settings import CardSettings
from processors.card.training import documents
from processors.decode import DecodeSettings, probe_image
from processors.errors import ModelError
from processors.runtime import RuntimeSettings
from schemas.reasons import ReasonCode, Status
from tests.unit.scans import guilloche


@pytest.fixture(scope="module")
def proc():
    from processors.card import CardProcessor

    try:
        return CardProcessor(CardSettings(), RuntimeSettings(device="cpu", max_bucket=4,
                                                             intra_op_threads=2))
    except ModelError as e:
        pytest.skip(f"card model file not available ({e}); run `make models`")


def _item(image: np.ndarray) -> Item:
    ok, buf = cv2.imencode(".png", image)
    assert ok
    return Item(upload_id="u", image=probe_image(buf.tobytes(), DecodeSettings()))


def _frame(img: np.ndarray) -> np.ndarray:
    """The corners TL, TR, BR, BL of ``img``'s whole frame, ``(4, 2) float64`` px."""
    h, w = img.shape[:2]
    return np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)


def _scan_crop(seed: int, fmt: str, spoiled: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A scanned document cropped to its page, as a phone app's crop leaves it (no margins),
    printed with one wrong check digit where ``spoiled``: ``(BGR uint8 image, the page's
    corners (4, 2) px)``."""
    img, truth = documents.document(np.random.default_rng(seed), Format[fmt], capture="scan",
                                    invalid_share=1.0 if spoiled else 0.0)
    q = np.asarray(truth.quad, np.float64)
    x0, y0 = np.clip(q.min(0), 0, None).astype(int)
    x1, y1 = np.minimum(q.max(0), [img.shape[1], img.shape[0]]).astype(int)
    return np.ascontiguousarray(img[y0:y1, x0:x1]), q - [x0, y0]


def _card_path_finds_nothing(proc, monkeypatch) -> None:
    """Make ``proc``'s card path find no card (NO_CARD, as on PassportEye's Czech specimen page);
    the model still runs, the rest of the path is real."""
    real = proc.locate

    def none_found(images):
        dets, ms, greys = real(images)
        return [replace(d, quad=None, confidence=0.0, second_quad=None, runner_up=None)
                for d in dets], ms, greys

    monkeypatch.setattr(proc, "locate", none_found)


def _card_path_finds(proc, monkeypatch, quad: np.ndarray, confidence: float,
                     runner_up: np.ndarray | None = None) -> None:
    """Make ``proc``'s card path find ``quad`` (upload px; the uploads here decode at full size)
    at ``confidence``, with ``runner_up``; the model still runs, the rest of the path is real."""
    real = proc.locate

    def locate(images):
        dets, ms, greys = real(images)
        out = []
        for d, im in zip(dets, images, strict=True):
            assert im.scale == 1.0
            size = (im.width, im.height)
            out.append(replace(d, quad=quad, confidence=confidence, second_quad=None,
                               runner_up=runner_up,
                               area_frac=geo.polygon_area(quad) / float(size[0] * size[1]),
                               aspect=geo.approx_aspect(quad),
                               metric_aspect=geo.metric_aspect(quad, size).value))
        return out, ms, greys

    monkeypatch.setattr(proc, "locate", locate)


def _box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)


def test_a_scan_whose_card_path_took_a_panel_gives_way_to_the_page_that_reads(
        proc, monkeypatch) -> None:
    """A TD3 page cropped edge to edge; the card path takes its upper two thirds (a panel) at
    0.86, which the scan path's page (two margined sides found) does not replace by shape
    (``scan.replaces``). The panel shows no zone, the page reads one valid: the page is the
    result. With the rivals off (the processor before), the panel was."""
    img, page = _scan_crop(1, "TD3")
    h, w = img.shape[:2]
    _card_path_finds(proc, monkeypatch, _box(0.06 * w, 0.06 * h, 0.94 * w, 0.72 * h), 0.86)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95
    assert o.payload["mrz"]["valid"] and o.payload["mrz"]["format"] == "TD3"
    # the page's type and size are the ones its own inspection decided, not the panel's
    assert o.payload["doc_type"] == "passport"
    assert o.artifacts[0].width > o.artifacts[0].height
    assert (o.payload["width"], o.payload["height"]) == (o.artifacts[0].width,
                                                         o.artifacts[0].height)
    monkeypatch.setattr(type(proc), "_rivals", lambda *a: None)
    (before,) = proc.process_batch([_item(img)])
    assert quad_iou(before.payload["quad"], page) < 0.7
    assert not before.payload["mrz"]["found"]


def test_a_card_too_small_on_a_scan_gives_way_only_to_a_page_that_reads(proc,
                                                                        monkeypatch) -> None:
    """The same page; the card path finds a 158 x 135 px quad at 0.95: 2.1 % of the frame
    (over ``min_area_frac``, so not NO_CARD, which asks the scan path anyway) and under
    ``min_card_px`` (160), so CARD_TOO_SMALL before. The page reads a valid zone: it is the
    result (two such scans on the MRZ scan sets, a quad of 3.6 % and 5.2 %). With the zone
    painted over nothing vouches for the page: CARD_TOO_SMALL with the card path's quad, as
    before (a lone portrait print on a lid is the other such case,
    ``test_card_scan_processor``)."""
    img, page = _scan_crop(1, "TD3")
    h, w = img.shape[:2]
    small = _box(0.1 * w, 0.3 * h, 0.1 * w + 158, 0.3 * h + 135)
    assert geo.polygon_area(small) / (w * h) > CardSettings().min_area_frac
    _card_path_finds(proc, monkeypatch, small, 0.95)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95 and o.payload["mrz"]["valid"]
    blank = img.copy()
    blank[int(0.72 * h):] = 245  # ICAO Doc 9303 part 4: the TD3 zone, the page's bottom 23 mm
    (o,) = proc.process_batch([_item(blank)])
    assert o.status is Status.REJECTED and o.reasons == (ReasonCode.CARD_TOO_SMALL,)
    assert quad_iou(o.payload["quad"], small) > 0.99


def _corner_low(quad: np.ndarray, share: float) -> np.ndarray:
    """``quad`` with its bottom-right corner moved down by ``share`` of its left side."""
    out = quad.copy()
    out[2, 1] += share * float(np.linalg.norm(quad[3] - quad[0]))
    return out


def test_a_winner_with_a_corner_astray_gives_way_to_a_runner_up_that_reads(proc,
                                                                            monkeypatch) -> None:
    """A photographed TD2 page; the card path's winner has its bottom-right corner 12 % of the
    page's height low (IoU 0.93 with the page: on the MRZ evaluation set such a winner at 0.863
    had a runner-up at 0.992). Its zone is found and does not read; the runner-up (the page's
    true corners) reads valid and is the result. Without a runner-up the winner stays,
    MRZ_UNREADABLE."""
    img, truth = documents.document(np.random.default_rng(3), Format.TD2)
    page = np.asarray(truth.quad, np.float64)
    astray = _corner_low(page, 0.12)
    _card_path_finds(proc, monkeypatch, astray, 0.84, runner_up=page)
    (o,) = proc.process_batch([_item(img)])
    assert o.payload["mrz"]["valid"] and ReasonCode.MRZ_UNREADABLE not in o.reasons
    assert quad_iou(o.payload["quad"], page) > 0.99
    _card_path_finds(proc, monkeypatch, astray, 0.84)
    (o,) = proc.process_batch([_item(img)])
    assert ReasonCode.MRZ_UNREADABLE in o.reasons
    assert quad_iou(o.payload["quad"], astray) > 0.99


def test_a_runner_up_is_not_tried_where_the_winner_shows_no_zone(proc, monkeypatch) -> None:
    """A photographed TD3 page whose winner has its bottom-right corner 16 % low: its bands show
    no zone, so the runner-up (the true corners, which read) is not tried and the winner stays:
    the rule that keeps ID-1 fronts, which carry no zone, from paying a second verification."""
    img, truth = documents.document(np.random.default_rng(1), Format.TD3)
    page = np.asarray(truth.quad, np.float64)
    astray = _corner_low(page, 0.16)
    _card_path_finds(proc, monkeypatch, astray, 0.84, runner_up=page)
    (o,) = proc.process_batch([_item(img)])
    assert not o.payload["mrz"]["found"]
    assert quad_iou(o.payload["quad"], astray) > 0.99


def _page_on_lid(spoiled: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The TD3 page of :func:`_scan_crop` (seed 1) scanned on a white lid, a margin of 4 % of
    its width all round: ``(BGR uint8 image, the page's corners (4, 2) px)``."""
    crop, page = _scan_crop(1, "TD3", spoiled)
    m = round(0.04 * crop.shape[1])
    img = cv2.copyMakeBorder(crop, m, m, m, m, cv2.BORDER_CONSTANT, value=(250, 250, 250))
    return img, page + m


def _less_left_top(page: np.ndarray, left: float, top: float) -> np.ndarray:
    """The upright box of ``page``'s extent less its ``left`` and ``top`` shares."""
    (x0, y0), (x1, y1) = page.min(0), page.max(0)
    return _box(x0 + left * (x1 - x0), y0 + top * (y1 - y0), x1, y1)


def test_a_card_that_left_out_a_strip_of_the_page_gives_way_to_the_page_asked_late(
        proc, monkeypatch) -> None:
    """A TD3 page scanned on a white lid (a margin of 4 % of its width all round); the card
    path, sure of itself (1.0), over half the frame and off the frame (so neither suspect nor
    PARTIAL_CARD, and the scan path is not asked before the warp), leaves out the page's left
    and top tenth, as it left out a scan's dark end stripe and header band (scan seed 20261210
    #30). Its zone is found and its lines start characters late: no valid zone; there is no
    runner-up. The scan path, asked then (``_late_pages``), gives the page, whose zone reads
    valid: the page is the result. Where the scan path fails then, the whole frame, whose zone
    reads valid too, takes the card's place (``geo30``); without the late page and the whole
    frame, the card stays, its zone found and not valid."""
    img, page = _page_on_lid()
    part = _less_left_top(page, 0.1, 0.1)
    _card_path_finds(proc, monkeypatch, part, 1.0)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95
    assert o.payload["mrz"]["valid"] and o.payload["mrz"]["format"] == "TD3"

    def broken(*a, **k):
        raise RuntimeError("scan path")

    monkeypatch.setattr(type(proc), "_as_scan", broken)  # asked only late here
    (failed,) = proc.process_batch([_item(img)])  # the whole frame, not a failure
    assert quad_iou(failed.payload["quad"], _frame(img)) > 0.99
    assert failed.status is not Status.FAILED and failed.payload["mrz"]["valid"]
    monkeypatch.setattr(type(proc), "_late_pages", lambda *a: ())
    monkeypatch.setattr(type(proc), "_whole_frame", lambda *a: None)
    (before,) = proc.process_batch([_item(img)])
    assert quad_iou(before.payload["quad"], part) > 0.99
    assert before.payload["mrz"]["found"] and not before.payload["mrz"]["valid"]


def test_a_page_under_security_print_that_the_card_path_misses_is_vouched_for_by_its_zone(
        proc, monkeypatch) -> None:
    """A TD3 page cropped edge to edge and printed over with guilloche (its plain ground 0.28,
    under ``scan_min_ground``), which the card path misses (NO_CARD, as on PassportEye's Czech
    specimen page): the frame is a page only a valid zone vouches for (``scan.busy_page``).
    Its zone reads valid: accepted, the page's quad. With the zone mirrored (the same print
    and ground, no characters): NO_CARD. Without ``busy_page`` the page with its zone was
    NO_CARD; since ``geo30`` the whole frame, this crop's page, stands on its zone there too."""
    raw, page = _scan_crop(1, "TD3")
    img = guilloche(raw, 16.0, 30.0)
    _card_path_finds_nothing(proc, monkeypatch)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95 and o.payload["mrz"]["valid"]
    mirrored = img.copy()
    zone = slice(int(0.72 * img.shape[0]), None)  # the TD3 zone (ICAO Doc 9303 part 4)
    mirrored[zone] = img[zone, ::-1]  # the same print and ground, no characters
    (o,) = proc.process_batch([_item(mirrored)])
    assert o.status is Status.REJECTED and o.reasons == (ReasonCode.NO_CARD,)
    monkeypatch.setattr(scan, "busy_page", lambda *a: None)  # no busy page: the whole frame
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED and o.payload["mrz"]["valid"], o.reasons
    assert quad_iou(o.payload["quad"], _frame(img)) > 0.99
    monkeypatch.setattr(type(proc), "_whole_frame", lambda *a: None)  # the processor before
    (o,) = proc.process_batch([_item(img)])
    assert o.reasons == (ReasonCode.NO_CARD,)


def test_a_busy_page_is_vouched_for_by_a_zone_whose_check_digits_pass_though_it_is_unsure(
        proc, monkeypatch) -> None:
    """The page under guilloche the card path misses, its zone read with every name character
    unsure (``UNCHECKED_MIN`` above 1; PassportEye's ``43_pass-fra``: one name character at
    0.83, five check digits passing, was NO_CARD): the zone is MRZ_UNREADABLE, but its check
    digits pass, so it vouches for the page: accepted with MRZ_UNREADABLE, the page's quad.
    Printed with a wrong check digit, the same page is NO_CARD."""
    from processors.card.mrz import read

    _card_path_finds_nothing(proc, monkeypatch)
    monkeypatch.setattr(read, "UNCHECKED_MIN", 1.01)
    raw, page = _scan_crop(1, "TD3")
    (o,) = proc.process_batch([_item(guilloche(raw, 16.0, 30.0))])
    assert o.status is Status.ACCEPTED and ReasonCode.MRZ_UNREADABLE in o.reasons, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95 and not o.payload["mrz"]["readable"]
    spoiled, _ = _scan_crop(1, "TD3", spoiled=True)
    (o,) = proc.process_batch([_item(guilloche(spoiled, 16.0, 30.0))])
    assert o.reasons == (ReasonCode.NO_CARD,)


def test_a_portrait_taken_for_the_card_on_a_page_under_security_print_gives_way_to_the_page(
        proc, monkeypatch) -> None:
    """The same page under guilloche; the card path takes its portrait at 0.67 (a fresh user's
    overprinted pages: accepted as a passport with no zone, NO_PORTRAIT). The card is suspect,
    and the scan path's frame is a page of busy print: it cannot replace the card by shape, but
    as the card's rival it takes its place where its zone reads valid. Without ``busy_page``
    the whole frame does (``geo30``), and without either the portrait stays, its zone not
    found."""
    raw, page = _scan_crop(1, "TD3")
    img = guilloche(raw, 16.0, 30.0)
    h, w = img.shape[:2]
    face = _box(0.05 * w, 0.2 * h, 0.32 * w, 0.68 * h)  # the portrait's place on an ID-3 page
    _card_path_finds(proc, monkeypatch, face, 0.67)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95 and o.payload["mrz"]["valid"]
    monkeypatch.setattr(scan, "busy_page", lambda *a: None)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED and o.payload["mrz"]["valid"], o.reasons
    assert quad_iou(o.payload["quad"], _frame(img)) > 0.99
    monkeypatch.setattr(type(proc), "_whole_frame", lambda *a: None)
    (before,) = proc.process_batch([_item(img)])
    assert quad_iou(before.payload["quad"], face) > 0.99
    assert not before.payload["mrz"]["found"]


def test_a_card_whose_runner_up_does_not_read_either_asks_the_late_page(proc,
                                                                        monkeypatch) -> None:
    """The page on a lid of the late-page test, its card path's quad leaving out the page's left
    and top tenth, and a runner-up leaving out its left 15 % and top 2 %: neither reads a
    valid zone (a fresh user's scan, seed 9394 #33, green strip left
    out). The late page is asked as well, and it is the result (without it and the whole
    frame, the card stays)."""
    img, page = _page_on_lid()
    part = _less_left_top(page, 0.1, 0.1)
    second = _less_left_top(page, 0.15, 0.02)
    _card_path_finds(proc, monkeypatch, part, 1.0, runner_up=second)
    (o,) = proc.process_batch([_item(img)])
    assert o.status is Status.ACCEPTED, o.reasons
    assert quad_iou(o.payload["quad"], page) >= 0.95 and o.payload["mrz"]["valid"]
    monkeypatch.setattr(type(proc), "_late_pages", lambda *a: ())
    monkeypatch.setattr(type(proc), "_whole_frame", lambda *a: None)
    (before,) = proc.process_batch([_item(img)])
    assert quad_iou(before.payload["quad"], page) < 0.95
    assert before.payload["mrz"]["found"] and not before.payload["mrz"]["valid"]


def test_a_small_card_without_a_zone_gives_way_to_a_late_page_whose_zone_reads(
        proc, monkeypatch) -> None:
    """A TD3 page printed with one wrong check digit, scanned on a lid; the card path takes a
    landscape block of it in ID-1's shape, sure of it (0.95) and 5 % of the frame (neither
    suspect nor too small: scan seed 20261210 #116, the portrait taken at 0.92 in a
    trapezoid). The block shows no zone; being under ``scan.PORTRAIT_SHARE`` of the frame it
    asks the scan path late, and the page's zone reads, every character sure, one check digit
    failing: the page is the result, MRZ_CHECK_DIGIT, the document's true outcome. Without the
    late page the block stays, no zone found; with the page's zone painted over nothing
    vouches for the page and the block stays."""
    img, page = _page_on_lid(spoiled=True)
    h, w = img.shape[:2]
    block = _box(0.1 * w, 0.3 * h, 0.1 * w + 0.28 * w, 0.3 * h + 0.28 * w / 1.586)
    assert geo.polygon_area(block) / (w * h) < scan.PORTRAIT_SHARE
    _card_path_finds(proc, monkeypatch, block, 0.95)
    (o,) = proc.process_batch([_item(img)])
    assert quad_iou(o.payload["quad"], page) >= 0.95
    assert o.payload["mrz"]["readable"] and not o.payload["mrz"]["valid"]
    assert ReasonCode.MRZ_CHECK_DIGIT in o.reasons and o.payload["doc_type"] == "passport"
    blank = img.copy()
    blank[int(page[:, 1].max() - 0.28 * (page[:, 1].max() - page[:, 1].min())):] = 250
    (o,) = proc.process_batch([_item(blank)])
    assert quad_iou(o.payload["quad"], block) > 0.99 and not o.payload["mrz"]["found"]
    monkeypatch.setattr(type(proc), "_late_pages", lambda *a: ())
    (before,) = proc.process_batch([_item(img)])
    assert quad_iou(before.payload["quad"], block) > 0.99
    assert not before.payload["mrz"]["found"]


def test_a_card_scanned_on_a_dark_lid_and_shown_small_gives_way_to_the_card_inside(
        proc, monkeypatch) -> None:
    """A TD1 card (the generator's face, its MRZ valid) scanned on a dark lid (a margin of 6 %
    of its width), the scan shown turned by 4 degrees at the middle of a white canvas three
    times its size (fresh users' trials: the scan's dark rectangle was taken for the card, a
    passport by its shape, its zone read as TD2 and unreadable). The card path takes the dark
    rectangle at 0.95; the scan path, asked inside it (``_inner_page``, the rectangle warped
    upright), finds the card by the lid's edges all round, and its zone reads valid: it is
    the result. Without it the dark rectangle stays."""
    rng = np.random.default_rng(3)
    lines = documents.compose(Format.TD1, **documents.random_fields(
        rng, Format.TD1, documents.REFERENCE_DATE, 0.0))
    face, alpha, _, _ = documents.render_document(rng, Format.TD1, lines)
    lid = np.full_like(face, (38, 36, 40))
    card = (face.astype(np.float32) * (alpha[..., None] / 255.0)
            + lid * (1.0 - alpha[..., None] / 255.0)).astype(np.uint8)
    m = round(0.06 * card.shape[1])
    scan_img = cv2.copyMakeBorder(card, m, m, m, m, cv2.BORDER_CONSTANT, value=(38, 36, 40))
    h, w = scan_img.shape[:2]
    canvas = (3 * w, 3 * h)
    turn = cv2.getRotationMatrix2D((w / 2, h / 2), 4.0, 1.0)
    turn[:, 2] += (w, h)  # to the canvas's middle
    img = cv2.warpAffine(scan_img, turn, canvas, flags=cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_CONSTANT, borderValue=(247, 247, 247))

    def moved(pts: np.ndarray) -> np.ndarray:
        return np.c_[pts, np.ones(len(pts))] @ turn.T

    box = moved(_box(0, 0, w - 1, h - 1))
    inside = moved(_box(m, m, m + card.shape[1] - 1, m + card.shape[0] - 1))
    _card_path_finds(proc, monkeypatch, box, 0.95)
    (o,) = proc.process_batch([_item(img)])
    assert quad_iou(o.payload["quad"], inside) >= 0.95
    assert o.payload["mrz"]["valid"] and o.payload["mrz"]["format"] == "TD1"
    assert o.payload["doc_type"] == "id_card"
    monkeypatch.setattr(type(proc), "_inner_page", lambda *a: None)
    (before,) = proc.process_batch([_item(img)])
    assert quad_iou(before.payload["quad"], box) > 0.99
    assert not before.payload["mrz"]["valid"]
