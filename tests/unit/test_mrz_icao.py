"""ICAO Doc 9303 check digits, parsing and composing (processors/card/mrz/icao.py)."""

from __future__ import annotations

import datetime as dt
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.card.mrz import icao
from processors.card.mrz.icao import ALPHABET, Format, check_digit, compose, parse

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
    lines = compose(fmt, document_code="P" if fmt is Format.TD3 else "I", issuing_state=state,
                    document_number=number, nationality=state, birth_date=birth.strftime("%y%m%d"),
                    sex=sex, expiry_date=expiry.strftime("%y%m%d"), primary_name=primary,
                    secondary_name=secondary, optional_data=opt)
    m = parse(lines)
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
