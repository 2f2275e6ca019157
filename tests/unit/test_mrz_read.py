"""MRZ cells, correction and verdicts on the recogniser's own alternatives
(processors/card/mrz/recognise.py, read.py), without the model."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from processors.card.mrz.icao import Format, check_digit, compose
from processors.card.mrz.read import UNCHECKED_MIN, MrzReader, View, Zone, candidates, judge
from processors.card.mrz.recognise import (
    CLASSES,
    INK_SPAN,
    PAD_PX,
    Read,
    cell_variants,
    cells,
    measured_pitch,
    read_line,
)
from schemas.reasons import ReasonCode

TODAY = dt.date(2026, 12, 4)
TD3 = compose(Format.TD3, document_code="P", issuing_state="UTO", document_number="L898902C3",
              nationality="UTO", birth_date="740812", sex="F", expiry_date="310415",
              primary_name="ERIKSSON", secondary_name="ANNA MARIA", optional_data="ZE184226B")

TD1_LINES = compose(Format.TD1, document_code="I", issuing_state="UTO",
                    document_number="D23145890", nationality="UTO", birth_date="740812", sex="F",
                    expiry_date="310415", primary_name="ERIKSSON", secondary_name="ANNA MARIA",
                    optional_data="")
SPOILT_TD1 = [TD1_LINES[0][:5] + ("1" if TD1_LINES[0][5] != "1" else "2") + TD1_LINES[0][6:],
              TD1_LINES[1], TD1_LINES[2]]
"""The TD1 zone above with its document number's check digit wrong."""


def _at(lines, p):
    """Reads of ``lines`` with every character at probability ``p``."""
    return [Read(text=line, alts=tuple(((c, p),) for c in line)) for line in lines]



def reads(lines, alts=None):
    """Reads of ``lines`` read with 0.99 each, except ``alts[(line, i)]``."""
    alts = alts or {}
    return [Read(text="".join(a[0][0] for a in row), alts=tuple(row))
            for row in ([alts.get((li, i), ((c, 0.99),)) for i, c in enumerate(line)]
                        for li, line in enumerate(lines))]


def test_clean_read_is_valid_and_not_corrected():
    r = judge(Format.TD3, reads(TD3), "passport", TODAY)
    assert r.found and r.readable and r.valid and not r.corrected
    assert r.reasons == ()
    assert r.expired is False
    assert r.payload()["checks"]["composite"] is True
    assert "values" not in r.payload()
    assert r.payload(values=True)["values"]["document_number"] == "L898902C3"


def test_type_correction_takes_the_digit_alternative():
    # birth date '740812' read with an O for the 0 (a digit field): the model's own 0 is taken
    r = judge(Format.TD3, reads(TD3, {(1, 15): (("O", 0.6), ("0", 0.38))}), "passport", TODAY)
    assert r.valid and r.corrected
    assert r.mrz.birth_date == "740812"


def test_type_correction_needs_the_alternative():
    # no digit among the alternatives: the letter stays and the check fails
    r = judge(Format.TD3, reads(TD3, {(1, 15): (("O", 0.6), ("Q", 0.38))}), "passport", TODAY)
    assert not r.valid
    assert ReasonCode.MRZ_CHECK_DIGIT in r.reasons


def test_a_digit_in_a_name_takes_its_look_alike_letter_among_the_alternatives():
    """Real print (PassportEye's ``100_pass-fin``) reads a name's ``O`` as ``0`` at 0.98 with
    ``O`` at 0.018, under ``TYPE_ALT_MIN``: the look-alike ``O`` is taken, and it is sure among
    the letters (0.018 of the 0.0186 the letters leave). Where another letter weighs as much
    (``B`` at 0.0019 beside ``O`` at 0.0017, PassportEye's ``25_pass-uto``), the name's
    character is unsure: MRZ_UNREADABLE, never a letter guessed. Without the look-alike among
    the alternatives the ``0`` stays and is 0 sure."""
    i = TD3[0].index("ERIKSSON") + 6  # the second O of ERIKSSON
    took = judge(Format.TD3, reads(TD3, {(0, i): (("0", 0.9813), ("O", 0.0184), ("1", 1e-4))}),
                 "passport", TODAY)
    assert took.valid and took.corrected and took.mrz is not None
    assert took.mrz.lines == tuple(TD3)
    both = judge(Format.TD3, reads(TD3, {(0, i): (("0", 0.9918), ("B", 0.0019), ("O", 0.0017))}),
                 "passport", TODAY)
    assert both.reasons == (ReasonCode.MRZ_UNREADABLE,) and both.mrz is None
    none = judge(Format.TD3, reads(TD3, {(0, i): (("0", 0.99), ("8", 0.005), ("6", 0.004))}),
                 "passport", TODAY)
    assert none.reasons == (ReasonCode.MRZ_UNREADABLE,)


def test_check_digit_correction_unique_alternative():
    # document number 'L898902C3': its 8 read as B (alnum field, so no type fix) with 8 second
    r = judge(Format.TD3, reads(TD3, {(1, 1): (("B", 0.55), ("8", 0.4))}), "passport", TODAY)
    assert r.valid and r.corrected
    assert r.mrz.document_number == "L898902C3"


def test_check_digit_correction_refuses_a_confident_character():
    r = judge(Format.TD3, reads(TD3, {(1, 1): (("B", 0.98), ("8", 0.02))}), "passport", TODAY)
    assert not r.valid and not r.corrected
    assert r.reasons == (ReasonCode.MRZ_CHECK_DIGIT,)


def test_check_digit_correction_refuses_ambiguity():
    """Two single replacements each make the check pass: neither is taken."""
    line = TD3[1]
    # find a second position whose alternative also fixes the check
    number, check = line[0:9], line[9]
    wrong = "B"
    broken = "L" + wrong + number[2:]
    other = None
    for i in range(2, 9):
        for c in "0123456789":
            cand = broken[:i] + c + broken[i + 1:]
            if c != broken[i] and check_digit(cand) == check:
                other = (i, c)
                break
        if other:
            break
    assert other is not None
    alts = {(1, 1): (("B", 0.55), ("8", 0.4)),
            (1, other[0]): ((line[other[0]], 0.6), (other[1], 0.35))}
    r = judge(Format.TD3, reads(TD3, alts), "passport", TODAY)
    assert not r.valid and not r.corrected
    assert ReasonCode.MRZ_CHECK_DIGIT in r.reasons


def test_a_printed_wrong_check_digit_is_reported_not_repaired():
    lines = (TD3[0], TD3[1][:19] + str((int(TD3[1][19]) + 3) % 10) + TD3[1][20:])
    r = judge(Format.TD3, reads(lines), "passport", TODAY)
    assert r.readable and not r.valid and not r.corrected
    assert r.mrz.checks.birth_date is False
    assert ReasonCode.MRZ_CHECK_DIGIT in r.reasons


def test_expired_document():
    lines = compose(Format.TD1, document_code="I", issuing_state="UTO",
                    document_number="D23145890", nationality="UTO", birth_date="740812",
                    sex="F", expiry_date="120415", primary_name="ERIKSSON",
                    secondary_name="ANNA MARIA")
    r = judge(Format.TD1, reads(lines), "id_card", TODAY)
    assert r.valid and r.expired is True
    assert r.reasons == (ReasonCode.DOCUMENT_EXPIRED,)


def test_td3_zone_on_an_id1_card_is_unreadable():
    """No TD3 fits an ID-1 card: MRZ_UNREADABLE, the values not given. Read with every check
    digit valid, the zone says the document is a passport (``other_type``); not where a check
    digit fails or a name's character is unsure."""
    r = judge(Format.TD3, reads(TD3), "id_card", TODAY)
    assert r.found and not r.readable and r.mrz is None
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,)
    assert r.other_type == "passport" and not r.checks_pass
    assert judge(Format.TD3, reads(TD3), "passport", TODAY).other_type is None
    bad = [TD3[0], TD3[1][:9] + ("1" if TD3[1][9] != "1" else "2") + TD3[1][10:]]
    assert judge(Format.TD3, reads(bad), "id_card", TODAY).other_type is None
    i = TD3[0].index("ERIKSSON")
    unsure = reads(TD3, {(0, i): (("E", 0.6), ("F", 0.39))})
    assert judge(Format.TD3, unsure, "id_card", TODAY).other_type is None


def test_a_correction_counts_only_in_a_zone_read_as_readable():
    """The birth date's ``O`` takes the recogniser's own ``0`` (a type correction) in both
    reads; on a passport the zone reads and ``corrected`` says the read stands on it, while the
    same TD3 zone on an ID-1 card is MRZ_UNREADABLE and gives no read: ``corrected`` is false
    there, as ``checks`` is null (it said true beside ``readable: false`` before)."""
    fix = {(1, 15): (("O", 0.6), ("0", 0.38))}
    read = judge(Format.TD3, reads(TD3, fix), "passport", TODAY)
    assert read.readable and read.valid and read.payload()["corrected"] is True
    refused = judge(Format.TD3, reads(TD3, fix), "id_card", TODAY)
    assert refused.reasons == (ReasonCode.MRZ_UNREADABLE,)
    assert (refused.payload()["readable"], refused.payload()["checks"],
            refused.payload()["corrected"]) == (False, None, False)


def test_many_uncertain_characters_are_unreadable():
    alts = {(0, i): (("A", 0.3), ("B", 0.25)) for i in range(10, 16)}
    r = judge(Format.TD3, reads(TD3, alts), "passport", TODAY)
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,)
    assert r.payload()["readable"] is False and r.payload()["checks"] is None


def test_an_unsure_unchecked_character_leaves_the_zone_unreadable_its_check_digits_passing():
    """A name's letter at 0.83 with another letter at 0.17 (PassportEye's ``43_pass-fra``):
    MRZ_UNREADABLE, no values, and ``checks_pass`` (every check digit passes on the read),
    which vouches for the page a zone must vouch for. Not where a check digit fails too, where
    too many characters are unsure, or where the format does not fit the document."""
    name = {(0, 16): (("I", 0.83), ("T", 0.17))}
    r = judge(Format.TD3, reads(TD3, name), "passport", TODAY)
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,) and r.mrz is None and r.checks_pass
    assert r.payload()["checks"] is None and not r.valid
    bad = TD3[1][:9] + str((int(TD3[1][9]) + 1) % 10) + TD3[1][10:]  # the number's check
    assert not judge(Format.TD3, reads([TD3[0], bad], name), "passport", TODAY).checks_pass
    many = {**name, **{(1, i): (("A", 0.3), ("B", 0.25)) for i in range(28, 33)}}
    assert not judge(Format.TD3, reads(TD3, many), "passport", TODAY).checks_pass
    assert not judge(Format.TD3, reads(TD3, name), "id_card", TODAY).checks_pass
    assert not judge(Format.TD3, reads(TD3), "passport", TODAY).checks_pass  # readable


def test_a_digit_left_in_a_name_is_not_sure():
    """A name's character read as ``0`` at 0.93 with no letter among the recogniser's
    alternatives: the type correction has nothing to take, so the ``0`` stays, and it is 0
    sure (a name holds no digit, Doc 9303 part 3), so the zone is MRZ_UNREADABLE. Before, the
    bound divided it by itself: 1.0 sure, and the zone valid with a digit in a name."""
    from processors.card.mrz.read import typed_confidence

    alts = {(0, 10): (("0", 0.93), ("8", 0.04), ("6", 0.02))}
    rs = reads(TD3, alts)
    chars = [list(r.text) for r in rs]
    assert typed_confidence(Format.TD3, chars, rs)[0][10] == 0.0
    r = judge(Format.TD3, rs, "passport", TODAY)
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,) and not r.valid


def test_a_name_character_is_judged_among_the_letters_its_place_allows():
    """A name's letter read at 0.65 with the digit ``0`` at 0.3 next: no digit may stand in a
    name (Doc 9303), so it is 0.93 sure among what may, and the zone reads. The same 0.65 with
    the letter ``Q`` next stays below ``UNCHECKED_MIN`` where no check digit covers it:
    unreadable."""
    name = TD3[0].index("ERIKSSON") + 3  # the second S of the primary name
    assert 0.65 < UNCHECKED_MIN < 0.65 / 0.7
    digit_next = {(0, name): ((TD3[0][name], 0.65), ("0", 0.3))}
    letter_next = {(0, name): ((TD3[0][name], 0.65), ("Q", 0.3))}
    r = judge(Format.TD3, reads(TD3, digit_next), "passport", TODAY)
    assert r.readable and r.valid and not r.corrected
    r = judge(Format.TD3, reads(TD3, letter_next), "passport", TODAY)
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,)


def test_candidates_by_line_count():
    assert candidates(1) == []
    assert candidates(2) == [(Format.TD3, 0), (Format.TD2, 0)]
    assert candidates(3) == [(Format.TD1, 0), (Format.TD3, 1), (Format.TD2, 1)]
    assert candidates(4)[0] == (Format.TD1, 1)


def test_cells_are_centred_on_the_characters():
    """A synthetic line of n dark bars at the Doc 9303 pitch, cropped as the locator crops it:
    every cell holds its bar in its middle."""
    n, pitch, h = 30, 27.0, 32
    width = int(round(2 * PAD_PX + (n - 1 + INK_SPAN) * pitch))
    crop = np.full((h, width), 220, np.uint8)
    for i in range(n):
        x0 = PAD_PX + i * pitch
        crop[8:24, int(round(x0 + 0.3 * INK_SPAN * pitch)):int(round(x0 + 0.7 * INK_SPAN
                                                                      * pitch))] = 30
    c = cells(crop, n)
    assert c.shape == (n, h, 24)
    dark = (c < 128).sum(axis=1)  # (n, 24) dark px per column
    centres = (dark * np.arange(24)).sum(axis=1) / dark.sum(axis=1)
    assert np.all(np.abs(centres - 11.5) < 1.5)


def _bars(n: int, pitch: float, extra: float = 0.0, lead: float = 0.0) -> np.ndarray:
    """A crop of ``n`` dark bars at ``pitch`` as the locator cuts it, its right end ``extra``
    px further out over a dark mark (the background in a card's rounded corner), its left end
    ``lead`` px of blank further out."""
    width = int(round(2 * PAD_PX + (n - 1 + INK_SPAN) * pitch + extra + lead))
    crop = np.full((32, width), 220, np.uint8)
    for i in range(n):
        x0 = PAD_PX + lead + i * pitch
        crop[8:24, int(round(x0 + 0.3 * INK_SPAN * pitch)):int(round(x0 + 0.7 * INK_SPAN
                                                                      * pitch))] = 30
    if extra:
        crop[4:28, int(round(width - PAD_PX - extra)):] = 40
    return crop


def test_a_line_with_a_stray_mark_at_its_end_is_also_cut_at_its_print_period():
    """The ends imply a pitch 5 % too long: the cells by the ends drift off the bars, and the
    variant at the measured period from the left end holds every bar in its middle."""
    n, pitch = 30, 27.0
    clean = cell_variants(_bars(n, pitch), n)
    assert len(clean) == 1  # period and ends agree: one cut
    got = cell_variants(_bars(n, pitch, extra=0.05 * (n - 1 + INK_SPAN) * pitch), n)
    assert len(got) == 5  # by the ends; from either end and a pitch in from it (1.5 spare)

    def centres(c):
        dark = (c[:-1] < 128).sum(axis=1)  # the last cell may hold the mark
        return (dark * np.arange(24)).sum(axis=1) / np.maximum(dark.sum(axis=1), 1)

    assert np.abs(centres(got[0]) - 11.5).max() > 3  # by the ends: drifted
    assert np.abs(centres(got[1]) - 11.5).max() < 1.5  # measured pitch, from the left


def _centred(c: np.ndarray) -> bool:
    """Every cell of ``c`` (``(n, 32, 24)``) holds a bar across its middle columns and nothing
    dark at its left edge (a cell a pitch off holds a blank or the mark instead)."""
    dark = (c < 128).any(axis=1)  # (n, 24)
    return bool(dark[:, 10:14].all() and not dark[:, :5].any())


@pytest.mark.parametrize("n", [30, 36, 44])
def test_a_line_with_a_blank_pitch_and_an_edge_at_its_ends_is_also_cut_a_pitch_in(n):
    """The locator's crop starts a blank pitch before the first character and runs on over
    the card's edge past the last (``doc_20261204_0014``, an ID-1 card): cut from either end
    at the measured period, the line loses a character at one end and reads a blank at the
    other. The cut a pitch in from the left end holds every bar in its middle."""
    pitch = 20.0
    got = cell_variants(_bars(n, pitch, extra=1.2 * pitch, lead=pitch), n)
    # by the ends; from the left end and the right end, none, one and two pitches in
    assert [_centred(c) for c in got] == [False, False, False, True, False, False, False]
    # a fallback view's lines get no cuts a pitch in (MrzReader.read)
    plain = cell_variants(_bars(n, pitch, extra=1.2 * pitch, lead=pitch), n, insets=False)
    assert [_centred(c) for c in plain] == [False, False, False]


@pytest.mark.parametrize("ratio", [0.88, 0.93, 1.08])
def test_a_line_seen_in_perspective_is_also_cut_at_its_changing_pitch(ratio):
    """A quad a few px off leaves the rectified line in perspective: its pitch changes along
    it (here the right end's is ``ratio`` times the left end's; 0.9 measured on a synthetic
    passport whose quad was 9 px off at one corner). Cells by the ends drift off the middle
    characters; the variant cut by a 1-D projective map, its ratio measured from the period
    of each half of the line, holds every bar in its middle."""
    n, pitch = 44, 22.0
    width = int(round(2 * PAD_PX + (n - 1 + INK_SPAN) * pitch))
    crop = np.full((32, width), 220, np.uint8)
    t = np.arange(n) / (n - 1)
    t = t / (t + np.sqrt(ratio) * (1 - t))
    for c in PAD_PX + 0.5 * INK_SPAN * pitch + (n - 1) * pitch * t:
        crop[8:24, int(round(c - 0.2 * INK_SPAN * pitch)):int(round(c + 0.2 * INK_SPAN
                                                                    * pitch))] = 30
    got = cell_variants(crop, n)
    assert len(got) == 2

    def centres(c):
        dark = (c < 128).sum(axis=1)
        return (dark * np.arange(24)).sum(axis=1) / np.maximum(dark.sum(axis=1), 1)

    assert np.abs(centres(got[0]) - 11.5).max() > 2.5  # by the ends: drifted mid-line
    assert np.abs(centres(got[1]) - 11.5).max() < 1.5  # by the measured ratio


@pytest.mark.parametrize("pitch", [18.26, 18.73, 19.1, 21.37])
@pytest.mark.parametrize("n", [30, 44])
def test_the_print_period_is_measured_to_a_hundredth_of_a_pixel(pitch, n):
    """A line at a pitch of a fraction of a px (bars drawn at twice the pitch, halved): the
    period is refined at a lag of many pitches, so the last of 44 cells cut at it is off by
    well under a px (at the one-pitch lag alone the error was up to 0.06 px, 2.5 px at the
    line's end)."""
    import cv2

    crop = cv2.resize(_bars(n, 2 * pitch), None, fx=0.5, fy=1.0, interpolation=cv2.INTER_AREA)
    nominal = (crop.shape[1] - 2 * PAD_PX) / (n - 1 + INK_SPAN)
    assert abs(measured_pitch(crop, nominal) - pitch) < 0.015


def test_read_line_keeps_the_alternatives():
    p = np.full((2, 37), 0.001, np.float32)
    p[0, CLASSES.index("O")], p[0, CLASSES.index("0")] = 0.6, 0.35
    p[1, CLASSES.index("<")] = 0.95
    r = read_line(p)
    assert r.text == "O<"
    assert [a for a, _ in r.alts[0][:2]] == ["O", "0"]
    assert r.confidence == pytest.approx((0.6 + 0.95) / 2, abs=1e-3)


def test_read_line_keeps_a_rare_alternatives_probability_to_a_ten_millionth():
    """PassportEye's ``100_pass-isl``: a name's ``O`` read as ``0`` at 0.9996086, ``O`` at
    0.0003447 and ``1`` at 0.0000147. Among the letters the ``O`` is 0.92 sure (its share of
    the 0.0003767 the digits leave); rounded to 1e-4 the same alternatives gave 0.0003 of
    0.0004, 0.75, and the zone, every check digit valid, came out MRZ_UNREADABLE."""
    p = np.zeros((1, len(CLASSES)), np.float32)
    p[0, CLASSES.index("0")], p[0, CLASSES.index("O")] = 0.9996086, 0.0003447
    p[0, CLASSES.index("1")] = 0.0000147  # the remaining 2e-6 spread too thin to show
    r = read_line(p)
    assert [a for a, _ in r.alts[0]] == ["0", "O", "1"]
    assert r.alts[0][1][1] == pytest.approx(0.0003447, abs=1e-7)
    i = TD3[0].index("ERIKSSON") + 6  # the second O of ERIKSSON
    got = judge(Format.TD3, reads(TD3, {(0, i): r.alts[0]}), "passport", TODAY)
    assert got.valid and got.corrected and got.mrz is not None
    assert got.mrz.lines == tuple(TD3)


def test_a_view_of_any_format_judges_every_format_and_takes_its_type_from_the_read():
    """The whole frame of a crop (``View.any_format``): its shape says nothing of the format.
    A TD2 zone read on its ID-1 view, where no TD2 fits an ID-1 card, counts there and makes
    the document a passport (ID-2); a more confident format that fits the view still comes
    first, and where it does not read valid, a valid read of another format counts. On an
    ordinary ID-1 view the same TD2 read stays MRZ_UNREADABLE."""
    td2 = compose(Format.TD2, document_code="I", issuing_state="UTO", document_number="D23145890",
                  nationality="UTO", birth_date="740812", sex="F", expiry_date="310415",
                  primary_name="ERIKSSON", secondary_name="ANNA MARIA", optional_data="")

    zones = [Zone(0, [], [])]
    r = MrzReader._judge({(0, Format.TD2): _at(td2, 0.99)}, zones,
                         [View("id_card", [], any_format=True)], TODAY)
    assert (r.format, r.doc_type, r.valid) == (Format.TD2, "passport", True)
    r = MrzReader._judge({(0, Format.TD2): _at(td2, 0.99)}, zones, [View("id_card", [])], TODAY)
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,) and r.doc_type == "id_card"
    # a fitting format read valid comes first, however confident the other
    views = [View("id_card", [], any_format=True)]
    r = MrzReader._judge({(0, Format.TD1): _at(TD1_LINES, 0.95), (0, Format.TD2): _at(td2, 0.99)},
                         zones, views, TODAY)
    assert (r.format, r.doc_type) == (Format.TD1, "id_card")
    # the fitting one read with a wrong check digit: the other format's valid read counts
    r = MrzReader._judge({(0, Format.TD1): _at(SPOILT_TD1, 0.99), (0, Format.TD2): _at(td2, 0.9)},
                         zones, views, TODAY)
    assert (r.format, r.doc_type, r.valid) == (Format.TD2, "passport", True)


@pytest.mark.parametrize("n", [44, 36])
def test_all_filler_lines_are_not_valid(n):
    lines = ("<" * n, "<" * n)
    fmt = Format.TD3 if n == 44 else Format.TD2
    r = judge(fmt, reads(lines), "passport", TODAY)
    assert r.found
    # every check digit position holds '<': no check passes, nothing expires
    assert not r.valid and r.expired is None


def test_a_type_in_doubt_takes_the_rectification_whose_format_fits():
    """A document searched on both rectifications (its type in doubt): a format that fits the
    view's document type wins over a more confident read that does not (a TD3 zone is not on
    an ID-1 card); among fitting ones the most confident; the read says which type it was
    read on."""

    views = [View("id_card", []), View("passport", [])]
    zones = [Zone(0, [], []), Zone(1, [], [])]
    tried = {(0, Format.TD3): _at(TD3, 0.99), (1, Format.TD3): _at(TD3, 0.9)}
    r = MrzReader._judge(tried, zones, views, TODAY)
    assert (r.format, r.doc_type, r.turned, r.valid) == (Format.TD3, "passport", True, True)
    tried = {(0, Format.TD1): _at(TD1_LINES, 0.97), (1, Format.TD3): _at(TD3, 0.9)}
    r = MrzReader._judge(tried, zones, views, TODAY)
    assert (r.format, r.doc_type, r.turned, r.valid) == (Format.TD1, "id_card", False, True)
    tried = {(0, Format.TD1): _at(TD1_LINES, 0.9), (1, Format.TD3): _at(TD3, 0.97)}
    assert MrzReader._judge(tried, zones, views, TODAY).doc_type == "passport"


def test_a_bands_second_reading_counts_only_where_it_reads_valid():
    """A band read twice (its widest and narrowest extent, or the plain and the denoised
    search): the second reading (``Zone.second``) is taken only where the first does not read
    valid and it does, however confident; an invalid second reading never replaces the first
    (lines of ordinary print cut to one extent read as a zone, and a card without a zone would
    be told MRZ_UNREADABLE: 9 held-out cards before this rule)."""

    views = [View("id_card", []), View("id_card", [])]
    zones = [Zone(0, [], []), Zone(0, [], [], second=True)]
    # the first reads a wrong check digit, the second valid: the second
    r = MrzReader._judge({(0, Format.TD1): _at(SPOILT_TD1, 0.99),
                          (1, Format.TD1): _at(TD1_LINES, 0.95)}, zones, views, TODAY)
    assert r.valid and r.mrz is not None and r.mrz.lines == tuple(TD1_LINES)
    # the first valid: the first, even where the second is more confident
    r = MrzReader._judge({(0, Format.TD1): _at(TD1_LINES, 0.95),
                          (1, Format.TD1): _at(SPOILT_TD1, 0.99)}, zones, views, TODAY)
    assert r.valid and r.mrz is not None and r.mrz.lines == tuple(TD1_LINES)
    # neither valid: the first's verdict, not the more confident second's
    r = MrzReader._judge({(0, Format.TD1): _at(SPOILT_TD1, 0.95),
                          (1, Format.TD1): _at(SPOILT_TD1, 0.99)}, zones, views, TODAY)
    assert not r.valid and r.found
    r = MrzReader._judge({(1, Format.TD1): _at(SPOILT_TD1, 0.99)}, zones, views, TODAY)
    assert not r.found  # a second reading alone, not valid: no zone


class _Recorder:
    """A recogniser double: reads every cell as ``<`` at 0.99 and counts the cells sent."""

    def __init__(self) -> None:
        self.cells = 0

    def probs(self, batch):
        self.cells += sum(len(b) for b in batch)
        out = []
        for b in batch:
            p = np.full((len(b), len(CLASSES)), 0.01 / (len(CLASSES) - 1), np.float32)
            p[:, CLASSES.index("<")] = 0.99
            out.append(p)
        return out


def test_the_other_types_view_is_searched_only_where_the_own_one_does_not_fit():
    """A passport page rectified as a passport shows a two-line zone, which fits: its ID-1
    fallback view is never searched (no cell of it is read). Rectified as an ID-1 card, the
    two-line zone fits no ID-1 format: the passport fallback is searched and read too."""
    import cv2

    from processors.card.mrz.locate import band_maps
    from processors.card.rectify import canonical_size
    from processors.card.training.documents import REFERENCE_DATE, random_fields, render_document

    rng = np.random.default_rng(21)
    lines = compose(Format.TD3, **random_fields(rng, Format.TD3, REFERENCE_DATE))
    face, _, _, _ = render_document(rng, Format.TD3, lines, px_per_mm=10.0)
    grey = cv2.cvtColor(face, cv2.COLOR_BGR2GRAY)

    def bands(doc_type):  # the page rectified to the type's canonical size (ISO/IEC 7810)
        size = canonical_size(doc_type, 300)
        page = cv2.resize(grey, size, interpolation=cv2.INTER_AREA)
        return [cv2.warpPerspective(page, a, s, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                    borderMode=cv2.BORDER_REPLICATE)
                for a, s in band_maps(doc_type, size)]

    def cells(*views):
        rec = _Recorder()
        MrzReader(rec).read([list(views)], TODAY)
        return rec.cells

    page, card = bands("passport"), bands("id_card")
    alone = cells(View("passport", page))
    assert alone > 0
    assert cells(View("passport", page), View("id_card", card, fallback=True)) == alone
    as_card = cells(View("id_card", card))
    assert as_card > 0  # the zone is found there too, and read at TD3 and TD2 pitch
    assert cells(View("id_card", card), View("passport", page, fallback=True)) == as_card + alone



VISA = compose(Format.MRVA, document_code="V", issuing_state="UTO", document_number="L8988901C",
               nationality="XXX", birth_date="400907", sex="F", expiry_date="310415",
               primary_name="ERIKSSON", secondary_name="ANNA MARIA", optional_data="6ZE184226B")


def test_a_zone_of_td3_shape_opening_with_v_is_judged_as_a_visa():
    """ICAO Doc 9303 part 7: the reader reads two lines of 44 as TD3 cells; one that opens with
    ``V`` is an MRV-A visa, judged without a composite check (as TD3 its last filler would
    fail the composite) and with its optional data up to the end of the line; on an ID-1
    rectification too (a visa sticker's 1.5 lies on the split). Its TD2-shaped sibling is
    MRV-B."""
    as_td3 = judge(Format.TD3, reads(VISA), "passport", TODAY)
    assert (as_td3.format, as_td3.valid, as_td3.mrz.format) == (Format.MRVA, True, Format.MRVA)
    for doc_type in ("passport", "id_card"):
        r = MrzReader._judge({(0, Format.TD3): _at(VISA, 0.99)}, [Zone(0, [], [])],
                             [View(doc_type, [])], TODAY)
        assert (r.format, r.readable, r.valid, r.expired) == (Format.MRVA, True, True, False)
        assert r.payload()["checks"] == {"document_number": True, "birth_date": True,
                                         "expiry_date": True, "optional_data": None,
                                         "composite": None}
        assert r.payload(values=True)["values"]["optional_data"] == "6ZE184226B"
    b = compose(Format.MRVB, document_code="V", issuing_state="UTO", document_number="L8988901C",
                nationality="XXX", birth_date="400907", sex="F", expiry_date="310415",
                primary_name="ERIKSSON", optional_data="6ZE1842")
    r = MrzReader._judge({(0, Format.TD2): _at(b, 0.99)}, [Zone(0, [], [])],
                         [View("passport", [])], TODAY)
    assert (r.format, r.valid) == (Format.MRVB, True)
    r = MrzReader._judge({(0, Format.TD2): _at(b, 0.99)}, [Zone(0, [], [])],
                         [View("id_card", [])], TODAY)
    assert r.format is Format.MRVB and not r.readable  # MRV-B is ID-2, never on an ID-1 card
    # a passport page (its quad chose ID-3) whose zone only its ID-1 fallback view read as a
    # visa stays a passport: a fallback ID-1 view never decides the type by an MRV-A zone (a
    # fresh user's off-spec visa pages were rectified as squeezed ID-1 cards)
    r = MrzReader._judge({(1, Format.TD3): _at(VISA, 0.99)}, [None, Zone(0, [], [])],
                         [View("passport", []), View("id_card", [], fallback=True)], TODAY)
    assert (r.format, r.valid, r.doc_type) == (Format.MRVA, True, "passport")
    # a visa's birth date with a wrong check digit is reported, not repaired
    SPOILT_TD1 = (VISA[0], VISA[1][:19] + "1" + VISA[1][20:])
    r = judge(Format.MRVA, reads(SPOILT_TD1), "passport", TODAY)
    assert r.readable and not r.valid and r.reasons == (ReasonCode.MRZ_CHECK_DIGIT,)


def test_a_phase_shift_is_taken_for_the_whole_zone_only_where_it_reads_every_line_surely():
    """``read._in_phase``: the zone's plain reads, a line of them under ``PHASE_MIN``, give way
    to a phase shift's only where every line of the shift reads at least ``PHASE_MIN`` and more
    confidently than the plain reads on the mean; plain reads all at least ``PHASE_MIN`` stay;
    a line read surely a quarter pitch over beside one read unsurely either way
    (``doc_20261204_0196``: a thumb-free zone cut in perspective, whose other line read a
    document number three characters wrong and passing its check digit) keeps the plain
    reads."""
    from processors.card.mrz.read import _in_phase
    from processors.card.mrz.recognise import PHASE_MIN, PHASE_SHIFTS

    def line(text, p):
        return Read(text=text, alts=tuple(((c, p),) for c in text))

    a, b = TD3
    plain = [line("P<<BRYFDEIMMRW" + a[14:], 0.75), line(b, 0.85)]
    sure = [line(a, 0.99), line(b, 0.98)]
    half = [line(a, 0.99), line("1F83IXGWG" + b[9:], 0.87)]
    assert len(PHASE_SHIFTS) == 2 and PHASE_MIN > 0.87
    assert _in_phase(plain, [half, sure]) == sure
    assert _in_phase(plain, [sure, half]) == sure
    assert _in_phase(plain, [half, half]) == plain
    assert _in_phase(plain, []) == plain
    steady = [line(a, 0.995), line(b, 0.995)]  # already surer than the shift
    assert _in_phase(steady, [sure, sure]) == steady
    # every line sure on the mean, two characters unsure (a fresh user's bold print moved
    # 0.35 pitch: a document number two characters wrong, passing its check digits): plain
    shaky = [line(a, 0.99), Read(text=b, alts=tuple(((c, 0.56 if i < 2 else 0.99),)
                                                    for i, c in enumerate(b)))]
    assert shaky[1].confidence >= PHASE_MIN
    assert _in_phase(plain, [shaky, half]) == plain
    # already sure, a shift reads a hair more confidently (doc_20261205_0028): plain
    kept = [line(a, 1.0), line(b, 0.985)]
    assert _in_phase(kept, [[line(a, 0.999), line(b[:-1] + "7", 0.987)], half]) == kept
