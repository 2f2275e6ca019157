"""ICAO Doc 9303 check digits, parsing and composing (processors/card/mrz/icao.py)."""

from __future__ import annotations

import datetime as dt
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.card.mrz import icao
from processors.card.mrz.icao import ALPHABET, Format, check_digit, compose, format_for, parse

# The specimens printed in ICAO Doc 9303 (the fictitious state Utopia, UTO)
TD3 = ("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<",
       "L898902C36UTO7408122F1204159ZE184226B<<<<<10")
TD1 = ("I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6",
       "ERIKSSON<<ANNA<MARIA<<<<<<<<<<")
TD2 = ("I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<", "D231458907UTO7408122F1204159<<<<<<<6")


def test_check_digit_values_and_weights():
    assert [icao.char_value(c) for c in "09AZ<"] == [0, 9, 10, 35, 0]
    assert check_digit("L898902C3") == "6"  # Doc 9303 part 3's worked example
    assert check_digit("740812") == "2"
    assert check_digit("120415") == "9"
    assert check_digit("") == "0"
    with pytest.raises(ValueError):
        check_digit("ab")


@pytest.mark.parametrize("lines,fmt", [(TD3, Format.TD3), (TD1, Format.TD1), (TD2, Format.TD2)])
def test_specimens_parse_with_every_check_valid(lines, fmt):
    m = parse(lines)
    assert m.format is fmt
    assert m.checks.all_valid
    assert (m.document_code, m.issuing_state, m.nationality) in (("P", "UTO", "UTO"),
                                                                 ("I", "UTO", "UTO"))
    assert (m.primary_name, m.secondary_name) == ("ERIKSSON", "ANNA MARIA")
    assert (m.birth_date, m.sex, m.expiry_date) == ("740812", "F", "120415")
    assert m.birth(dt.date(2026, 12, 4)) == dt.date(1974, 8, 12)
    assert m.expired(dt.date(2026, 12, 4)) is True
    assert m.expired(dt.date(2012, 4, 15)) is False  # valid through its expiry date
    assert compose(fmt, **{k: v for k, v in m.values().items()}) == lines


def test_td3_specimen_fields_and_filler_optional_check():
    m = parse(TD3)
    assert m.document_number == "L898902C3"
    assert m.optional_data == "ZE184226B"
    # an all-filler personal number may carry a filler check digit
    l2 = TD3[1][:28] + "<" * 14 + "<"
    l2 += check_digit(l2[0:10] + l2[13:20] + l2[21:43])
    assert parse((TD3[0], l2)).checks.optional_data is None
    assert parse((TD3[0], l2)).checks.all_valid
    # a filler check digit on a non-empty personal number is invalid
    bad = TD3[1][:42] + "<" + TD3[1][43]
    assert parse((TD3[0], bad)).checks.optional_data is False


@pytest.mark.parametrize("line,pos,name", [(1, 9, "document_number"), (1, 19, "birth_date"),
                                           (1, 27, "expiry_date"), (1, 42, "optional_data"),
                                           (1, 43, "composite")])
def test_each_td3_check_digit_is_checked(line, pos, name):
    lines = list(TD3)
    c = lines[line][pos]
    lines[line] = lines[line][:pos] + str((int(c) + 1) % 10) + lines[line][pos + 1:]
    checks = parse(lines).checks.as_dict()
    assert checks[name] is False
    # the composite covers the other check digits too
    assert {k for k, v in checks.items() if v is False} == {name, "composite"}


def test_long_document_number_extension_td1():
    lines = compose(Format.TD1, document_code="I", issuing_state="UTO",
                    document_number="D23145890734", nationality="UTO", birth_date="740812",
                    sex="F", expiry_date="120415", primary_name="ERIKSSON",
                    secondary_name="ANNA MARIA")
    assert lines[0][14] == "<"  # the check position holds the filler
    m = parse(lines)
    assert m.document_number == "D23145890734"
    assert m.checks.all_valid


def test_shapes_and_characters_refused():
    with pytest.raises(ValueError):
        parse(("P<UTO", "L898"))
    with pytest.raises(ValueError):
        parse((TD3[0].replace("P", "p"), TD3[1]))
    assert icao.format_for(("x" * 30,) * 3) is Format.TD1
    assert icao.format_for(("x" * 44, "x" * 43)) is None


def test_dates_that_are_not_calendar_dates():
    lines = list(TD3)
    lines[1] = lines[1][:13] + "741332" + check_digit("741332") + lines[1][20:]
    m = parse(lines)
    assert m.birth(dt.date(2026, 1, 1)) is None
    assert parse(TD3).expiry(dt.date(2026, 1, 1)) == dt.date(2012, 4, 15)


_mrz_text = st.text(alphabet=string.ascii_uppercase + string.digits, min_size=1, max_size=9)
_date = st.dates(min_value=dt.date(1930, 1, 1), max_value=dt.date(2060, 12, 31))


@settings(max_examples=200, deadline=None)
@given(fmt=st.sampled_from(list(Format)), number=_mrz_text, birth=_date, expiry=_date,
       sex=st.sampled_from("MFX<"), state=st.text(alphabet=string.ascii_uppercase, min_size=3,
                                                   max_size=3),
       primary=st.text(alphabet=string.ascii_uppercase, min_size=1, max_size=12),
       secondary=st.text(alphabet=string.ascii_uppercase, min_size=0, max_size=10),
       opt=st.text(alphabet=string.ascii_uppercase + string.digits, max_size=7))
def test_composed_zones_parse_back_valid(fmt, number, birth, expiry, sex, state, primary,
                                         secondary, opt):
    code = {Format.TD3: "P", Format.MRVA: "V", Format.MRVB: "VC"}.get(fmt, "I")
    lines = compose(fmt, document_code=code, issuing_state=state,
                    document_number=number, nationality=state, birth_date=birth.strftime("%y%m%d"),
                    sex=sex, expiry_date=expiry.strftime("%y%m%d"), primary_name=primary,
                    secondary_name=secondary, optional_data=opt)
    m = parse(lines)
    assert m.format is fmt
    assert m.checks.all_valid
    assert m.document_number == number
    assert m.birth_date == birth.strftime("%y%m%d")
    assert m.primary_name == primary
    assert m.optional_data == opt


@settings(max_examples=300, deadline=None)
@given(data=st.text(alphabet=ALPHABET, min_size=1, max_size=20), pos=st.integers(0, 19),
       new=st.sampled_from(string.digits))
def test_any_single_digit_change_breaks_the_check(data, pos, new):
    """7-3-1 weights are coprime to 10: changing one digit-valued character always changes the
    check digit (a letter can alias a digit: 'A' = 10 weighs as '0')."""
    pos %= len(data)
    old = data[pos]
    if old not in string.digits + "<" or new == old or (old == "<" and new == "0"):
        return
    assert check_digit(data[:pos] + new + data[pos + 1:]) != check_digit(data)


VISA_A = ("V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<",
          "L8988901C4XXX4009078F96121096ZE184226B<<<<<<")
"""ICAO Doc 9303 part 7's MRV-A specimen zone (Utopia, Anna Maria Eriksson)."""


def test_a_visa_zone_parses_without_composite_and_optional_checks():
    """Doc 9303 part 7: an MRV-A zone has TD3's shape and opens with ``V``; line 2 carries the
    document number, birth date and valid-until date with their check digits and 16 characters
    of optional data, and no composite check digit. MRV-B is the same in TD2's shape with 8.
    Read as TD3, the specimen's composite position (its last character, a filler) would fail."""
    m = parse(VISA_A)
    assert m.format is Format.MRVA and m.checks.all_valid
    assert m.checks.as_dict() == {"document_number": True, "birth_date": True,
                                  "expiry_date": True, "optional_data": None, "composite": None}
    assert (m.document_code, m.issuing_state, m.document_number, m.nationality, m.birth_date,
            m.sex, m.expiry_date, m.primary_name, m.secondary_name, m.optional_data) == (
        "V", "UTO", "L8988901C", "XXX", "400907", "F", "961210", "ERIKSSON", "ANNA MARIA",
        "6ZE184226B")
    assert format_for(VISA_A) is Format.MRVA
    assert format_for(("P" + VISA_A[0][1:], VISA_A[1])) is Format.TD3
    assert parse(("P" + VISA_A[0][1:], VISA_A[1])).checks.composite is False
    spoilt = (VISA_A[0], VISA_A[1][:19] + "9" + VISA_A[1][20:])
    assert parse(spoilt).checks.birth_date is False and not parse(spoilt).checks.all_valid
    b = compose(Format.MRVB, document_code="V", issuing_state="UTO", document_number="L8988901C",
                nationality="XXX", birth_date="400907", sex="F", expiry_date="961210",
                primary_name="ERIKSSON", secondary_name="ANNA MARIA", optional_data="6ZE1842")
    assert b == ("V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<",
                 "L8988901C4XXX4009078F96121096ZE1842<")
    assert parse(b).format is Format.MRVB and parse(b).checks.all_valid


def test_compose_keeps_visa_codes_to_visas():
    """A visa's document code opens with ``V`` and only a visa's does (a TD3 zone opening with
    ``V`` parses as MRV-A)."""
    kw = {"issuing_state": "UTO", "document_number": "L8988901C", "nationality": "XXX",
          "birth_date": "400907", "sex": "F", "expiry_date": "961210", "primary_name": "ERIKSSON"}
    with pytest.raises(ValueError, match="visa"):
        compose(Format.MRVA, document_code="P", **kw)
    with pytest.raises(ValueError, match="visa"):
        compose(Format.TD3, document_code="V", **kw)
