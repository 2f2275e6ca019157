"""ICAO Doc 9303 machine-readable zones: layouts, 7-3-1 check digits, parsing and composing.

Written for this project from ICAO Doc 9303 (8th edition, 2021): part 3 (the character set
``A-Z 0-9 <``, the check digit of section 4.9: weights 7, 3, 1 repeating, letters A-Z valued
10-35, the filler ``<`` 0, the sum modulo 10), part 4 (TD3: 2 lines of 44 characters), part 5
(TD1: 3 lines of 30), part 6 (TD2: 2 lines of 36) and part 7 (machine-readable visas: MRV-A,
2 lines of 44; MRV-B, 2 lines of 36). Character positions below are 0-based slices of the lines
(Doc 9303 counts from 1).

- TD3 (passport data page, ID-3 125 x 88 mm):
  line 1: document code 0:2, issuing state 2:5, name 5:44;
  line 2: document number 0:9 + check 9, nationality 10:13, birth date 13:19 + check 19, sex 20,
  expiry 21:27 + check 27, personal number (optional data) 28:42 + check 42, composite check 43
  over 0:10, 13:20 and 21:43. The optional-data check may be ``<`` when that field is all filler.
- TD2 (ID-2 105 x 74 mm): line 1 as TD3 with the name in 5:36; line 2: as TD3 up to 28, optional
  data 28:35, composite check 35 over 0:10, 13:20 and 21:35.
- TD1 (ID-1 85.60 x 53.98 mm): line 1: document code 0:2, issuing state 2:5, document number
  5:14 + check 14, optional data 15:30; line 2: birth date 0:6 + check 6, sex 7, expiry 8:14 +
  check 14, nationality 15:18, optional data 18:29, composite check 29 over line 1 5:30 and
  line 2 0:7, 8:15, 18:29; line 3: name 0:30.
- MRV-A (a visa of 80 x 120 mm filling a passport page) and MRV-B (74 x 105 mm, ID-2): line 1
  as TD3 / TD2 with a document code opening with ``V`` (the second character the issuer's type
  or a filler); line 2: document number 0:9 + check 9, nationality 10:13, birth date 13:19 +
  check 19, sex 20, valid until 21:27 + check 27, optional data 28:44 (MRV-A) or 28:36 (MRV-B).
  A visa has no composite check digit and none over its optional data. Its shape is TD3's or
  TD2's: the ``V`` tells them apart (passports' codes open with ``P``, TD2 cards' with ``I``,
  ``A`` or ``C``).
- Document numbers longer than 9 characters (TD1 and TD2, Doc 9303 part 5 note j, part 6 note j):
  the 9 first characters stand in the number field, its check digit position holds ``<``, and
  the rest of the number followed by its check digit opens the optional data (ended by ``<``).

The name is ``PRIMARY<<SECONDARY<NAMES`` (``<<`` separates the primary and secondary
identifiers, ``<`` the words within one).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ<"
"""The MRZ character set (Doc 9303 part 3): digits, capital letters, the filler ``<``."""
DIGITS = "0123456789"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WEIGHTS = (7, 3, 1)
"""Check digit weights (Doc 9303 part 3, 4.9)."""


class Format(StrEnum):
    """MRZ layout: TD1 (3 x 30), TD2 (2 x 36), TD3 (2 x 44), and the visas MRV-A (2 x 44) and
    MRV-B (2 x 36)."""

    TD1 = "TD1"
    TD2 = "TD2"
    TD3 = "TD3"
    MRVA = "MRVA"
    MRVB = "MRVB"


SHAPE: dict[Format, tuple[int, int]] = {Format.TD1: (3, 30), Format.TD2: (2, 36),
                                        Format.TD3: (2, 44), Format.MRVA: (2, 44),
                                        Format.MRVB: (2, 36)}
"""``(lines, characters per line)`` per format."""
VISA: dict[Format, Format] = {Format.TD3: Format.MRVA, Format.TD2: Format.MRVB}
"""The visa format of each travel-document shape it shares (Doc 9303 part 7)."""
VISA_CODE = "V"
"""First character of a machine-readable visa's document code (Doc 9303 part 7)."""


def of_shape(fmt: Format, first: str) -> Format:
    """The format a zone of ``fmt``'s shape has when its first line opens with ``first``: the
    visa of that shape (:data:`VISA`) for ``V``, else ``fmt``."""
    return VISA.get(fmt, fmt) if first[:1] == VISA_CODE else fmt


def char_value(c: str) -> int:
    """Doc 9303 part 3 value of one MRZ character: ``0-9`` -> 0-9, ``A-Z`` -> 10-35, ``<`` -> 0.

    Raises:
        ValueError: ``c`` is not one character of :data:`ALPHABET`.
    """
    if len(c) != 1 or c not in ALPHABET:
        raise ValueError(f"not an MRZ character: {c!r}")
    return 0 if c == "<" else ALPHABET.index(c)


def check_digit(data: str) -> str:
    """The check digit (one of ``0-9``) of ``data``: sum of values x 7, 3, 1, ... modulo 10.

    Raises:
        ValueError: ``data`` holds a character outside :data:`ALPHABET`.
    """
    return str(sum(char_value(c) * WEIGHTS[i % 3] for i, c in enumerate(data)) % 10)


class Kind(StrEnum):
    """What a character position may hold (drives the recogniser's type correction)."""

    DIGIT = "digit"        # 0-9 (dates, check digits)
    ALPHA = "alpha"        # A-Z and < (codes, states, names)
    ALNUM = "alnum"        # A-Z, 0-9 and < (document number, optional data)
    SEX = "sex"            # M, F, X or <
    CHECK = "check"        # 0-9, or < where the standard allows a filler check digit


ALLOWED: dict[Kind, str] = {
    Kind.DIGIT: DIGITS, Kind.ALPHA: LETTERS + "<", Kind.ALNUM: ALPHABET,
    Kind.SEX: "MFX<", Kind.CHECK: DIGITS + "<",
}
"""Characters allowed per :class:`Kind`."""


@dataclass(frozen=True, slots=True)
class Span:
    """A field: ``line``, ``[start, stop)`` characters, its kind and name."""

    name: str
    line: int
    start: int
    stop: int
    kind: Kind


def _spans(fmt: Format) -> tuple[Span, ...]:
    D, A, N, S, C = Kind.DIGIT, Kind.ALPHA, Kind.ALNUM, Kind.SEX, Kind.CHECK
    if fmt is Format.TD1:
        return (Span("document_code", 0, 0, 2, A), Span("issuing_state", 0, 2, 5, A),
                Span("document_number", 0, 5, 14, N), Span("document_number_check", 0, 14, 15, C),
                Span("optional_data_1", 0, 15, 30, N),
                Span("birth_date", 1, 0, 6, D), Span("birth_date_check", 1, 6, 7, D),
                Span("sex", 1, 7, 8, S), Span("expiry_date", 1, 8, 14, D),
                Span("expiry_date_check", 1, 14, 15, D), Span("nationality", 1, 15, 18, A),
                Span("optional_data_2", 1, 18, 29, N), Span("composite_check", 1, 29, 30, D),
                Span("name", 2, 0, 30, A))
    width = SHAPE[fmt][1]
    visa = fmt in VISA.values()
    opt_stop = width if visa else width - 2 if fmt is Format.TD3 else width - 1
    spans = [Span("document_code", 0, 0, 2, A), Span("issuing_state", 0, 2, 5, A),
             Span("name", 0, 5, width, A),
             Span("document_number", 1, 0, 9, N), Span("document_number_check", 1, 9, 10, C),
             Span("nationality", 1, 10, 13, A), Span("birth_date", 1, 13, 19, D),
             Span("birth_date_check", 1, 19, 20, D), Span("sex", 1, 20, 21, S),
             Span("expiry_date", 1, 21, 27, D), Span("expiry_date_check", 1, 27, 28, D),
             Span("optional_data", 1, 28, opt_stop, N)]
    if fmt is Format.TD3:
        spans.append(Span("optional_data_check", 1, 42, 43, C))
    if not visa:
        spans.append(Span("composite_check", 1, width - 1, width, D))
    return tuple(spans)


SPANS: dict[Format, tuple[Span, ...]] = {f: _spans(f) for f in Format}
"""The fields of each format, in reading order."""


def position_kinds(fmt: Format) -> list[list[Kind]]:
    """Per line, per character: the :class:`Kind` of that position in ``fmt``."""
    rows, width = SHAPE[fmt]
    out = [[Kind.ALNUM] * width for _ in range(rows)]
    for s in SPANS[fmt]:
        for i in range(s.start, s.stop):
            out[s.line][i] = s.kind
    return out


def format_for(lines: Sequence[str]) -> Format | None:
    """The format whose shape ``lines`` have (number of lines and each one's length; a visa's
    by its first character, :func:`of_shape`), or None."""
    for fmt in (Format.TD1, Format.TD2, Format.TD3):
        rows, width = SHAPE[fmt]
        if len(lines) == rows and all(len(x) == width for x in lines):
            return of_shape(fmt, lines[0])
    return None


@dataclass(frozen=True, slots=True)
class Checks:
    """Validity of each check digit (None: the field has none in this format, as a visa's
    optional data and composite, or the standard lets the check be a filler for an all-filler
    field and it is).

    Attributes:
        document_number, birth_date, expiry_date, optional_data, composite: check digit valid.
    """

    document_number: bool
    birth_date: bool
    expiry_date: bool
    optional_data: bool | None
    composite: bool | None

    @property
    def all_valid(self) -> bool:
        """Every check digit present is valid."""
        return all(v is not False for v in (self.document_number, self.birth_date,
                                            self.expiry_date, self.optional_data,
                                            self.composite))

    def as_dict(self) -> dict[str, bool | None]:
        """``{field: valid}`` in the order of the fields."""
        return {"document_number": self.document_number, "birth_date": self.birth_date,
                "expiry_date": self.expiry_date, "optional_data": self.optional_data,
                "composite": self.composite}


@dataclass(frozen=True, slots=True)
class Mrz:
    """A parsed MRZ. Values are as printed, fillers turned to spaces where noted.

    Attributes:
        format: TD1, TD2, TD3, MRVA or MRVB.
        lines: the lines as read (``A-Z 0-9 <``).
        document_code: e.g. ``P``, ``I``, ``ID``, ``AC``, ``V`` (fillers removed).
        issuing_state, nationality: three-letter codes (Doc 9303 part 3; fillers removed).
        document_number: fillers removed, the long-number extension joined.
        birth_date, expiry_date: ``YYMMDD`` as printed (a visa's expiry: valid until).
        sex: ``M``, ``F``, ``X`` or ``<`` (unspecified).
        primary_name, secondary_name: words joined by spaces.
        optional_data: TD1: optional data 1 and 2 joined by a space (the long-number
            extension left out); TD2/TD3: the optional data (personal number); a visa's
            optional data; fillers removed.
        checks: :class:`Checks`.
    """

    format: Format
    lines: tuple[str, ...]
    document_code: str
    issuing_state: str
    document_number: str
    nationality: str
    birth_date: str
    sex: str
    expiry_date: str
    primary_name: str
    secondary_name: str
    optional_data: str
    checks: Checks = field(repr=False)

    def birth(self, today: dt.date) -> dt.date | None:
        """The birth date, its century chosen so that it is not after ``today``; None when the
        printed date is not a calendar date (or holds fillers)."""
        return _date(self.birth_date, today, future=False)

    def expiry(self, today: dt.date) -> dt.date | None:
        """The expiry date, its century chosen within ``today`` - 50 .. ``today`` + 49 years;
        None when not a calendar date."""
        return _date(self.expiry_date, today, future=True)

    def expired(self, today: dt.date) -> bool | None:
        """Whether the document expired before ``today`` (valid through its expiry date); None
        when the expiry date cannot be read as a date."""
        e = self.expiry(today)
        return None if e is None else e < today

    def values(self) -> dict[str, str]:
        """The printed field values (personal data: only where a contract allows it)."""
        return {"document_code": self.document_code, "issuing_state": self.issuing_state,
                "document_number": self.document_number, "nationality": self.nationality,
                "birth_date": self.birth_date, "sex": self.sex, "expiry_date": self.expiry_date,
                "primary_name": self.primary_name, "secondary_name": self.secondary_name,
                "optional_data": self.optional_data}


def _date(yymmdd: str, today: dt.date, future: bool) -> dt.date | None:
    if len(yymmdd) != 6 or not yymmdd.isdigit():
        return None
    yy, mm, dd = int(yymmdd[:2]), int(yymmdd[2:4]), int(yymmdd[4:])
    base = today.year - today.year % 100
    year = base + yy
    if future:
        if year > today.year + 49:
            year -= 100
        elif year < today.year - 50:
            year += 100
    elif year > today.year:
        year -= 100
    try:
        return dt.date(year, mm, dd)
    except ValueError:
        return None


def _strip(s: str) -> str:
    return s.replace("<", " ").strip()


def _name(s: str) -> tuple[str, str]:
    primary, _, secondary = s.rstrip("<").partition("<<")
    return _strip(primary), " ".join(w for w in secondary.split("<") if w)


def _ok(data: str, digit: str) -> bool:
    return digit in DIGITS and all(c in ALPHABET for c in data) and check_digit(data) == digit


def _long_number(number: str, check: str, optional: str) -> tuple[str, str, str]:
    """``(number, check digit, rest of optional data)`` with the long-number extension joined
    (TD1/TD2: the check position is ``<`` and the optional data opens with the rest + check)."""
    if check != "<" or not number.strip("<"):
        return number, check, optional
    head = optional.split("<", 1)[0]
    if len(head) < 2:
        return number, check, optional
    return number + head[:-1], head[-1], optional[len(head):]


def parse(lines: Sequence[str]) -> Mrz:
    """Parse MRZ ``lines`` (any format) and validate every check digit.

    Args:
        lines: 3 lines of 30 (TD1), 2 of 36 (TD2, or MRV-B when it opens with ``V``) or 2 of
            44 (TD3, or MRV-A), characters of :data:`ALPHABET` only.

    Returns:
        The :class:`Mrz`; check digits that fail are reported in ``checks``, never raised.

    Raises:
        ValueError: the lines have no MRZ shape, or hold a character outside the alphabet.
    """
    lines = tuple(lines)
    fmt = format_for(lines)
    if fmt is None:
        raise ValueError(f"no MRZ shape: {len(lines)} lines of lengths {[len(x) for x in lines]}")
    for x in lines:
        bad = set(x) - set(ALPHABET)
        if bad:
            raise ValueError(f"characters outside the MRZ alphabet: {len(bad)} kinds")
    if fmt is Format.TD1:
        l1, l2, l3 = lines
        number, check, opt1 = _long_number(l1[5:14], l1[14], l1[15:30])
        doc_ok = _ok(number, check)
        composite = _ok(l1[5:30] + l2[0:7] + l2[8:15] + l2[18:29], l2[29])
        primary, secondary = _name(l3)
        checks = Checks(doc_ok, _ok(l2[0:6], l2[6]), _ok(l2[8:14], l2[14]), None, composite)
        return Mrz(fmt, lines, _strip(l1[0:2]), _strip(l1[2:5]), _strip(number), _strip(l2[15:18]),
                   l2[0:6], l2[7], l2[8:14], primary, secondary,
                   " ".join(x for x in (_strip(opt1), _strip(l2[18:29])) if x), checks)
    l1, l2 = lines
    width = len(l1)
    primary, secondary = _name(l1[5:width])
    if fmt in VISA.values():  # no composite, no optional-data check (Doc 9303 part 7)
        number, opt = l2[0:9], l2[28:width]
        checks = Checks(_ok(number, l2[9]), _ok(l2[13:19], l2[19]), _ok(l2[21:27], l2[27]),
                        None, None)
        return Mrz(fmt, lines, _strip(l1[0:2]), _strip(l1[2:5]), _strip(number),
                   _strip(l2[10:13]), l2[13:19], l2[20], l2[21:27], primary, secondary,
                   _strip(opt), checks)
    if fmt is Format.TD3:
        number, check, opt = l2[0:9], l2[9], l2[28:42]
        opt_check = l2[42]
        # an all-filler personal number may carry a filler check digit (Doc 9303 part 4)
        opt_ok: bool | None = ((None if opt.strip("<") == "" else False) if opt_check == "<"
                               else _ok(opt, opt_check))
    else:
        number, check, opt = _long_number(l2[0:9], l2[9], l2[28:35])
        opt_ok = None
    composite = _ok(l2[0:10] + l2[13:20] + l2[21:width - 1], l2[width - 1])
    checks = Checks(_ok(number, check), _ok(l2[13:19], l2[19]), _ok(l2[21:27], l2[27]), opt_ok,
                    composite)
    return Mrz(fmt, lines, _strip(l1[0:2]), _strip(l1[2:5]), _strip(number), _strip(l2[10:13]),
               l2[13:19], l2[20], l2[21:27], primary, secondary, _strip(opt), checks)


def _field(value: str, width: int) -> str:
    """``value`` (spaces to fillers) padded with ``<`` to ``width``.

    Raises:
        ValueError: too long, or a character outside the alphabet.
    """
    v = value.upper().replace(" ", "<")
    if len(v) > width or set(v) - set(ALPHABET):
        raise ValueError(f"field of {len(v)} characters does not fit {width} MRZ characters")
    return v + "<" * (width - len(v))


def name_field(primary: str, secondary: str, width: int) -> str:
    """``PRIMARY<<SECONDARY<NAMES`` padded (or cut, as Doc 9303 truncates) to ``width``."""
    p = "<".join(primary.upper().split())
    s = "<".join(secondary.upper().split())
    text = p + ("<<" + s if s else "")
    return (text + "<" * width)[:width]


def compose(fmt: Format, *, document_code: str, issuing_state: str, document_number: str,
            nationality: str, birth_date: str, sex: str, expiry_date: str, primary_name: str,
            secondary_name: str = "", optional_data: str = "",
            optional_data_2: str = "") -> tuple[str, ...]:
    """The MRZ lines of a document, with every check digit computed (the generator's and the
    tests' source of valid zones).

    Args:
        fmt: the layout.
        document_code: 1-2 characters (``P``, ``PN``, ``I``, ``ID``, ``AC`` ...; a visa's opens
            with ``V``).
        issuing_state, nationality: 1-3 letters (ICAO codes, e.g. ``UTO``, the specimen state).
        document_number: up to 9 characters (TD1/TD2: longer numbers use the extension).
        birth_date, expiry_date: ``YYMMDD``.
        sex: ``M``, ``F``, ``X`` or ``<``.
        primary_name, secondary_name: words separated by spaces.
        optional_data: TD3: personal number (14); TD2: 7; TD1: optional data 1 (15); MRV-A:
            16; MRV-B: 8.
        optional_data_2: TD1 only: optional data of line 2 (11).

    Returns:
        The lines.

    Raises:
        ValueError: a field does not fit or holds a character outside the alphabet, or a
            visa's document code does not open with ``V`` (or another's does).
    """
    code, state, nat = _field(document_code, 2), _field(issuing_state, 3), _field(nationality, 3)
    number = document_number.upper()
    dob, exp = _field(birth_date, 6), _field(expiry_date, 6)
    if len(birth_date) != 6 or len(expiry_date) != 6:
        raise ValueError("dates are YYMMDD")
    sx = _field(sex, 1)
    if (fmt in VISA.values()) != code.startswith(VISA_CODE):
        raise ValueError("a visa's document code opens with V, and only a visa's")
    if fmt in VISA.values():
        width = SHAPE[fmt][1]
        num = _field(number, 9)
        l1 = code + state + name_field(primary_name, secondary_name, width - 5)
        l2 = (num + check_digit(num) + nat + dob + check_digit(dob) + sx + exp + check_digit(exp)
              + _field(optional_data, width - 28))
        return l1, l2
    if fmt is Format.TD3:
        num = _field(number, 9)
        opt = _field(optional_data, 14)
        opt_check = "<" if opt == "<" * 14 else check_digit(opt)
        l1 = code + state + name_field(primary_name, secondary_name, 39)
        body = num + check_digit(num) + nat + dob + check_digit(dob) + sx + exp + check_digit(exp)
        body += opt + opt_check
        l2 = body + check_digit(body[0:10] + body[13:20] + body[21:43])
        return l1, l2
    long_number = len(number) > 9
    num = _field(number[:9], 9)
    num_check = "<" if long_number else check_digit(num)
    ext = number[9:] + check_digit(_field(number, len(number))) + "<" if long_number else ""
    if fmt is Format.TD2:
        opt = _field(ext + optional_data.upper().replace(" ", "<"), 7)
        l1 = code + state + name_field(primary_name, secondary_name, 31)
        body = num + num_check + nat + dob + check_digit(dob) + sx + exp + check_digit(exp) + opt
        l2 = body + check_digit(body[0:10] + body[13:20] + body[21:35])
        return l1, l2
    opt1 = _field(ext + optional_data.upper().replace(" ", "<"), 15)
    l1 = code + state + num + num_check + opt1
    l2 = dob + check_digit(dob) + sx + exp + check_digit(exp) + nat + _field(optional_data_2, 11)
    l2 += check_digit(l1[5:30] + l2[0:7] + l2[8:15] + l2[18:29])
    l3 = name_field(primary_name, secondary_name, 30)
    return l1, l2, l3
