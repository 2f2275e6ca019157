"""Locating the MRZ on rectified documents (processors/card/mrz/locate.py, read.locate_zone)
and the synthetic documents' truth (processors/card/training/documents.py). The faces are
printed in OCR-B: `make models` installs the font (scripts/fonts)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.card.mrz.icao import Format, compose, parse
from processors.card.mrz.locate import LINE_INPUT_H, band_maps, find_lines, line_crops
from processors.card.mrz.read import locate_zone, locate_zones
from processors.card.training.documents import (
    DOC_TYPE,
    REFERENCE_DATE,
    booklet_face,
    document,
    random_fields,
    render_document,
    spoil_check_digit,
)
from processors.card.training.synth import render_face


def _bands(face: np.ndarray, doc_type: str) -> list[np.ndarray]:
    grey = cv2.cvtColor(face, cv2.COLOR_BGR2GRAY)
    h, w = grey.shape
    return [cv2.warpPerspective(grey, a, size, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                borderMode=cv2.BORDER_REPLICATE)
            for a, size in band_maps(doc_type, (w, h))]


def _td1_band(seed: int = 3) -> np.ndarray:
    """The bottom band (grey ``uint8``, writable) of a TD1 card rendered at 10 px/mm from
    ``seed``'s random fields."""
    rng = np.random.default_rng(seed)
    lines = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD1, lines, px_per_mm=10.0)
    return _bands(face, "id_card")[0].copy()


@pytest.mark.parametrize("fmt", list(Format))
def test_zone_lines_are_found_on_each_format(fmt):
    rng = np.random.default_rng(3)
    lines = compose(fmt, **random_fields(rng, fmt, REFERENCE_DATE))
    face, _, boxes, _ = render_document(rng, fmt, lines, px_per_mm=10.0)
    bottom, top = _bands(face, DOC_TYPE[fmt])
    found = find_lines(bottom)
    assert len(found) == len(lines)
    assert find_lines(top) == []  # the top of the document holds no zone
    crops = line_crops(bottom, found)
    assert all(c.shape[0] == LINE_INPUT_H and c.shape[1] > 10 * LINE_INPUT_H for c in crops)
    # every line of a zone has one length: the crops are as wide as each other
    assert max(c.shape[1] for c in crops) - min(c.shape[1] for c in crops) <= 2


def test_an_upside_down_document_is_found_in_the_turned_band():
    rng = np.random.default_rng(4)
    lines = compose(Format.TD3, **random_fields(rng, Format.TD3, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD3, lines, px_per_mm=10.0)
    zone = locate_zone(_bands(np.ascontiguousarray(face[::-1, ::-1]), "passport"))
    assert zone is not None and zone.band == 1 and len(zone.lines) == 2


def test_a_dim_noisy_zone_is_found_by_the_denoised_search():
    """Low light (the document at 0.35 of its brightness) and the sensor noise that comes with
    it: at 0.4 of the ink level the noise joins the lines into each other; the second,
    denoised search finds the three lines."""
    rng = np.random.default_rng(6)
    lines = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD1, lines, px_per_mm=10.0)
    dim = face.astype(np.float32) * 0.35 + rng.normal(0, 7.0, face.shape)
    bands = _bands(np.clip(dim, 0, 255).astype(np.uint8), "id_card")
    assert len(find_lines(bands[0])) < 2 and len(find_lines(bands[1])) < 2
    assert len(find_lines(bands[0], denoise=True)) == 3
    zone = locate_zone(bands)
    assert zone is not None and zone.band == 0 and len(zone.lines) == 3


def test_documents_without_a_zone_have_none():
    rng = np.random.default_rng(5)
    front, _ = render_face(rng, "id_card", 856, blank=False)
    assert locate_zone(_bands(front, "id_card")) is None
    plain = np.full((540, 856, 3), 200, np.uint8)
    assert locate_zone(_bands(plain, "id_card")) is None


def test_generated_documents_are_seeded_and_truthful():
    a_img, a = document(np.random.default_rng(11))
    b_img, b = document(np.random.default_rng(11))
    assert np.array_equal(a_img, b_img) and a == b
    m = parse(a.lines)
    assert m.values() == a.fields and m.checks.as_dict() == a.checks
    assert a.doc_type == DOC_TYPE[Format(a.format)]
    assert 100 < a.dpi < 600 and 0 <= a.tilt_deg <= 35


def test_a_booklets_truth_is_its_data_pages():
    """An open booklet (``booklet=True``): the quad and DPI of the truth are the data page's,
    half the spread (the facing page above it), so the zone lies in the quad's bottom band."""
    img, t = document(np.random.default_rng(13), booklet=True, glare_share=0.0, hand_share=0.0)
    assert t.booklet and t.format == "TD3" and t.doc_mm == (125.0, 88.0)
    q = np.asarray(t.quad, np.float32)
    hom = cv2.getPerspectiveTransform(np.float32([[0, 0], [1250, 0], [1250, 880], [0, 880]]), q)
    page = cv2.warpPerspective(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), hom, (1250, 880),
                               flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
    bands = [cv2.warpPerspective(page, a, size, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
             for a, size in band_maps("passport", (1250, 880))]
    zone = locate_zone(bands)
    assert zone is not None and zone.band == 0 and len(zone.lines) == 2
    face = np.full((880, 1250, 3), 200, np.uint8)
    spread, alpha, box, mm = booklet_face(np.random.default_rng(1), face,
                                          np.full((880, 1250), 255, np.uint8), 10.0)
    x0, y0, x1, y1 = box
    assert (x1 - x0, y1 - y0) == (1250, 880) and y0 >= 880  # the data page below the facing one
    assert spread.shape[:2] == alpha.shape and abs(mm[1] / mm[0] - 176 / 125) < 0.05


def test_a_line_along_the_pages_edge_below_the_zone_does_not_hide_it():
    """A real UK specimen page cut from its scanned booklet: the page's edge (a thin, slightly
    curved dark line, joined into one band-wide candidate under the zone) was the band's lowest
    line; it starts no run, and the zone above it was not found (MRZ_UNREADABLE on the ID-1
    fallback view instead of a valid TD3 read)."""
    rng = np.random.default_rng(3)
    lines = compose(Format.TD3, **random_fields(rng, Format.TD3, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD3, lines, px_per_mm=10.0)
    h, w = face.shape[:2]
    xs = np.arange(0, w, 10)
    ys = h - 35 + 15.0 * (1 - ((xs - w / 2) / (w / 2)) ** 2)  # sagging 1.5 mm
    cv2.polylines(face, [np.stack([xs, ys], 1).astype(np.int32)], False, (60, 60, 60), 8)
    found = find_lines(_bands(face, "passport")[0])
    assert len(found) == 2 and all(ln.x1 - ln.x0 > 1000 for ln in found)
    assert found[1].yc < 230  # the zone's lines, not the edge (about 255)


def test_a_hand_over_the_zone_is_in_the_truth():
    """Documents held in a hand: the thumb lands on any of the four sides, so over the MRZ band
    on some and away from it on others; none is marked without a hand."""
    held = [document(np.random.default_rng(s), glare_share=0.0, hand_share=1.0)[1].hand_on_mrz
            for s in range(12)]
    assert any(held) and not all(held)
    assert not any(document(np.random.default_rng(s), glare_share=0.0,
                            hand_share=0.0)[1].hand_on_mrz for s in range(4))


def test_spoiled_documents_fail_one_check():
    rng = np.random.default_rng(12)
    lines = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    bad = parse(spoil_check_digit(rng, lines)).checks.as_dict()
    assert sum(v is False for v in bad.values()) in (1, 2)  # the field's (and the composite)


def test_the_bottom_bands_denoised_search_comes_before_the_top_band():
    """A zone the plain search misses (a dim, noisy capture; on real documents also a zone
    printed over a fine guilloche, whose lines join at the plain search's ink level) is read
    from the bottom band before two lines of print in the top band are taken for a zone (a
    page's header, turned): the orientation put the zone at the bottom."""
    rng = np.random.default_rng(6)
    lines = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD1, lines, px_per_mm=10.0)
    dim = face.astype(np.float32) * 0.35 + rng.normal(0, 7.0, face.shape)
    bottom = _bands(np.clip(dim, 0, 255).astype(np.uint8), "id_card")[0]
    other = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    clean, _, _, _ = render_document(rng, Format.TD1, other, px_per_mm=10.0)
    top = _bands(clean, "id_card")[0]  # two or three lines of print the plain search finds
    assert len(find_lines(bottom)) < 2 <= len(find_lines(top))
    zone = locate_zone([bottom, top])
    assert zone is not None and zone.band == 0 and len(zone.lines) == 3


def test_a_zone_printed_at_a_tight_line_pitch_keeps_its_three_lines():
    """A TD1 zone whose lines stand 1.2-1.3 line heights apart (measured heights vary by line:
    here 24-27.5 px on a pitch of 34 px, 1.24 of the tallest; a real Swiss identity card: 1.29)
    is found with its 3 lines (under the earlier bound of 1.3, one)."""
    rng = np.random.default_rng(3)
    lines = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD1, lines, px_per_mm=10.0)
    band = _bands(face, "id_card")[0]
    found = find_lines(band)
    assert len(found) == 3
    pitch = int(round(1.3 * float(np.median([ln.height for ln in found]))))
    half = pitch // 2
    tight = np.full_like(band, int(np.median(band)))
    for k, ln in enumerate(found):  # each line's strip moved onto the tighter pitch
        c, t = int(round(ln.yc)), 40 + k * pitch
        tight[t - half:t + half] = band[c - half:c + half]
    assert len(find_lines(tight)) == 3


def test_a_middle_line_run_on_into_the_cards_edges_keeps_the_zone_whole():
    """A TD1 zone whose middle line is joined at both ends to marks reaching the band's ends,
    and its bottom line at its right end (the card's edge and the background beside it,
    ``doc_20261205_0141``): the top line's ends agree with neither end of the middle line, but
    its left end agrees with the bottom line's, so the zone keeps its 3 lines. Compared with
    the line below it alone, the top line was dropped and the zone read as a TD2 of 2 lines."""
    band = _td1_band()
    found = find_lines(band)
    assert len(found) == 3

    def strokes(ln, x_from, x_to):  # thin dark strokes every 1.5 mm across the line's height
        y0, y1 = int(ln.yc - 0.4 * ln.height), int(ln.yc + 0.4 * ln.height)
        for x in range(int(x_from), int(x_to), 15):
            band[y0:y1, x:x + 3] = 30

    strokes(found[1], 0, found[1].x0 - 10)  # 1 mm off the print: the closing joins them
    strokes(found[1], found[1].x1 + 10, band.shape[1] - 2)
    strokes(found[2], found[2].x1 + 10, band.shape[1] - 2)
    joined = find_lines(band)
    assert len(joined) == 3
    assert [ln.yc for ln in joined] == pytest.approx([ln.yc for ln in found], abs=2)


def test_a_zone_in_the_top_band_is_read_when_the_bottom_band_holds_other_lines():
    """A document the orientation turned the wrong way up: its bottom band holds lines of
    print that are no zone (here another document's zone upside down; on the evaluation set
    an ID-1 card's background paragraph), its top band the zone. Both are located and read in
    the one call, and the reader takes the zone it reads (before: the bottom band's lines
    alone, read as an unreadable TD2)."""
    import datetime as dt

    from processors.card.mrz.read import MrzReader, View, locate_zones
    from processors.card.mrz.recognise import Recogniser
    from processors.runtime import RuntimeSettings

    rng = np.random.default_rng(8)
    lines = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD1, lines, px_per_mm=10.0)
    zone = _bands(face, "id_card")[0]
    other = compose(Format.TD1, **random_fields(rng, Format.TD1, REFERENCE_DATE))
    face2, _, _, _ = render_document(rng, Format.TD1, other, px_per_mm=10.0)
    stray = np.ascontiguousarray(_bands(face2, "id_card")[0][::-1, ::-1])
    bands = [stray, zone]
    assert [z.band for z in locate_zones(bands)] == [0, 1]
    assert locate_zone(bands).band == 0  # the first found, as the training data takes it
    got = MrzReader(Recogniser(RuntimeSettings(device="cpu"))).read(
        [[View("id_card", bands)]], dt.date(2026, 12, 4))[0]
    assert got.valid and got.turned and got.format is Format.TD1
    assert got.mrz is not None and got.mrz.lines == tuple(lines)


def test_lines_run_to_the_bands_end_also_give_the_denoised_zone():
    """A TD1 zone with faint speckle (single px 50 grey levels under the paper, 15 % of them)
    from the band's left end to 0.8 mm before each line's print: the plain search (print at
    0.4 of the ink level) joins the speckle to each line, so the zone's lines start at the
    band's end. Such a zone also gives the denoised search's zone, whose lines start at the
    print, as a second reading (counted only where it reads valid: ``doc_20261205_0367``, a
    dim passport whose zone strip's edge joined both lines, read a character off before). A
    clean band gives one zone."""
    band = _td1_band()
    found = find_lines(band)
    assert len(found) == 3 and len(locate_zones([band])) == 1
    paper = int(np.median(band))
    speckle = np.random.default_rng(0)
    for ln in found:
        y0, y1 = int(ln.yc - 0.4 * ln.height), int(ln.yc + 0.4 * ln.height)
        x1 = int(ln.x0) - 8
        band[y0:y1, :x1][speckle.random((y1 - y0, x1)) < 0.15] = paper - 50
    zones = locate_zones([band])
    assert len(zones) == 2 and all(len(z.lines) == 3 and z.band == 0 for z in zones)
    assert all(ln.x0 <= 1.0 for ln in zones[0].lines)  # the plain search's: to the band's end
    assert all(abs(ln.x0 - found[0].x0) <= 3.0 for ln in zones[1].lines)
    assert [z.second for z in zones] == [False, True]


def test_a_line_joined_to_a_mark_also_gives_the_zone_at_its_narrowest_extent():
    """A TD1 zone whose top line is joined at its left end to a dark blot 1.7 mm long (a
    thumb's edge over the zone's corner, ``doc_20261205_0492``): the run's widest extent
    starts every line at the blot, so each line's cells start early. Its lines' own ends
    differ by more than half a pitch, so the zone is also given at its narrowest extent, where
    every line starts at its print; a zone whose lines end alike is given once."""
    band = _td1_band()
    found = find_lines(band)
    assert len(found) == 3 and len(locate_zones([band])) == 1
    top = found[0]
    y0, y1 = int(top.yc - 0.45 * top.height), int(top.yc + 0.45 * top.height)
    band[y0:y1, int(top.x0) - 17:int(top.x0) - 8] = 40  # 0.8 mm off the print: joined to it
    zones = locate_zones([band])
    assert len(zones) == 2 and all(len(z.lines) == 3 for z in zones)
    assert all(ln.x0 == pytest.approx(top.x0 - 17, abs=2) for ln in zones[0].lines)
    assert all(ln.x0 == pytest.approx(top.x0, abs=3) for ln in zones[1].lines)
    assert [z.second for z in zones] == [False, True]


@pytest.mark.parametrize("shift", [-0.4, 0.4])
def test_print_off_its_ends_phase_reads_in_phase(shift):
    """A TD3 zone whose print sits off where its lines' ends put it (a real passport's
    printer, PassportEye's ``100_pass-hrv``, about a quarter pitch: its cells by the ends read
    ``P<<BRYFDEIMMRW…`` at 0.75): each line's print moved by ``shift`` pitches within its
    crop (the recogniser knows the font it was trained on well enough to read it a quarter
    pitch off; 0.4 is what it takes for that font). The cells by the ends read it unsurely
    and wrong; the phase variant moved the same way reads every character right and at least
    ``PHASE_MIN`` sure, and the zone's reads are its (``read._in_phase``)."""
    from processors.card.mrz.read import _in_phase
    from processors.card.mrz.recognise import (
        INK_SPAN,
        PAD_PX,
        PHASE_MIN,
        PHASE_SHIFTS,
        Recogniser,
        cells,
        phase_variants,
        read_line,
    )
    from processors.runtime import RuntimeSettings

    rng = np.random.default_rng(5)
    lines = compose(Format.TD3, **random_fields(rng, Format.TD3, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD3, lines, px_per_mm=10.0)
    zone = locate_zone(_bands(face, "passport"))
    assert zone is not None and len(zone.crops) == 2
    rec = Recogniser(RuntimeSettings(device="cpu"))
    plain, shifted = [], {s: [] for s in PHASE_SHIFTS}
    for crop, text in zip(zone.crops, lines, strict=True):
        pitch = (crop.shape[1] - 2 * PAD_PX) / (len(text) - 1 + INK_SPAN)
        moved = cv2.warpAffine(crop, np.float32([[1, 0, shift * pitch], [0, 1, 0]]),
                               (crop.shape[1], crop.shape[0]), borderMode=cv2.BORDER_REPLICATE)
        probs = rec.probs([cells(moved, len(text)), *phase_variants(moved, len(text))])
        r = [read_line(p) for p in probs]
        assert r[0].text != text and r[0].confidence < PHASE_MIN
        plain.append(r[0])
        same = PHASE_SHIFTS.index(next(s for s in PHASE_SHIFTS if s * shift > 0))
        for s, got in zip(PHASE_SHIFTS, r[1:], strict=True):
            shifted[s].append(got)
        assert r[1 + same].text == text and r[1 + same].confidence >= PHASE_MIN
    chosen = _in_phase(plain, [shifted[s] for s in PHASE_SHIFTS])
    assert [r.text for r in chosen] == list(lines)
