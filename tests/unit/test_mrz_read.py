"""MRZ decoding, correction and verdicts on the recogniser's own alternatives
(processors/card/mrz/recognise.py, read.py), without the model."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from processors.card.mrz.icao import Format, check_digit, compose
from processors.card.mrz.read import _choose, judge
from processors.card.mrz.recognise import CLASSES, Read, best_path_of_length, decode
from schemas.reasons import ReasonCode

TODAY = dt.date(2026, 12, 4)
TD3 = compose(Format.TD3, document_code="P", issuing_state="UTO", document_number="L898902C3",
              nationality="UTO", birth_date="740812", sex="F", expiry_date="310415",
              primary_name="ERIKSSON", secondary_name="ANNA MARIA", optional_data="ZE184226B")


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
    r = judge(Format.TD3, reads(TD3), "id_card", TODAY)
    assert r.found and not r.readable and r.mrz is None
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,)


def test_many_uncertain_characters_are_unreadable():
    alts = {(0, i): (("A", 0.3), ("B", 0.25)) for i in range(10, 16)}
    r = judge(Format.TD3, reads(TD3, alts), "passport", TODAY)
    assert r.reasons == (ReasonCode.MRZ_UNREADABLE,)
    assert r.payload()["readable"] is False and r.payload()["checks"] is None


def _logp(frames: list[str], p: float = 0.9) -> np.ndarray:
    """Log-probabilities with ``p`` on each frame's label ('-' blank), the rest spread."""
    out = np.full((len(frames), len(CLASSES)), (1 - p) / (len(CLASSES) - 1))
    for t, f in enumerate(frames):
        out[t, CLASSES.index(f)] = p
    return np.log(out).astype(np.float32)


def test_ctc_greedy_and_alternatives():
    lp = _logp(list("-AA-B--<-<-"))
    r = decode(lp)
    assert r.text == "AB<<"
    assert r.alts[0][0][0] == "A" and r.alts[0][0][1] > 0.9


def test_ctc_length_constraint_splits_a_merged_filler_run():
    # '<<' with no blank between: greedy reads one '<'; the zone needs 4 characters
    frames = list("-A-B-<<<<<<-")
    lp = _logp(frames)
    lp[7, CLASSES.index("-")] = np.log(0.45)  # the model was unsure of a blank here
    lp[7, CLASSES.index("<")] = np.log(0.5)
    assert decode(lp).text == "AB<"
    assert decode(lp, (4,)).text == "AB<<"
    path = best_path_of_length(lp, 4)
    assert path is not None and path[7] == 0
    assert best_path_of_length(lp, 40) is None  # more characters than frames


def test_choose_formats_by_line_count_and_length():
    td1 = compose(Format.TD1, document_code="I", issuing_state="UTO", document_number="X1",
                  nationality="UTO", birth_date="740812", sex="F", expiry_date="300415",
                  primary_name="A", secondary_name="B")
    lps = [_logp(["-"] + [x for c in line for x in (c, "-")]) for line in td1]
    fmt, rs = _choose(lps)
    assert fmt is Format.TD1 and [r.text for r in rs] == list(td1)
    # three lines, the bottom two a TD3 zone: the line above is left out
    lps3 = [_logp(list("-A-B-C-")), *[_logp(["-"] + [x for c in line for x in (c, "-")])
                                      for line in TD3]]
    fmt, rs = _choose(lps3)
    assert fmt is Format.TD3 and [r.text for r in rs] == list(TD3)
    # lines far from every MRZ length: not an MRZ
    assert _choose([_logp(list("-A-B-")), _logp(list("-C-D-"))]) is None


@pytest.mark.parametrize("n", [44, 36])
def test_all_filler_lines_are_not_valid(n):
    lines = ("<" * n, "<" * n)
    fmt = Format.TD3 if n == 44 else Format.TD2
    r = judge(fmt, reads(lines), "passport", TODAY)
    assert r.found
    # every check digit position holds '<': no check passes, nothing expires
    assert not r.valid and r.expired is None
