"""Read the MRZ of a batch of rectified documents: locate, one recogniser call, correct, parse.

For each document the two bands of :func:`processors.card.mrz.locate.band_maps` (bottom as
rectified, top turned by a half turn) are searched for the zone's lines; each zone is cut into
character cells at the pitch of every format its line count allows (3 lines: TD1, 30 per line;
the last 2 lines: TD3, 44, and TD2, 36), and, for the formats that fit the document's type, also
a quarter pitch to either side (a printer's phase, :func:`_in_phase`); every cell of the whole
batch goes to the recogniser in one batched call; each document takes the format it reads most
confidently, is corrected where the recogniser itself offered the character and the field's type
or a check digit asks for it, parsed (ICAO Doc 9303) and judged.

Corrections (``corrected`` in the result, for a zone judged readable), and no others:

1. *Type*: a position that may only hold digits (dates, check digits) read as a letter, or one
   that may only hold letters (codes, names) read as a digit, takes the best of the
   recogniser's own alternatives for that character that its type allows (``O`` -> ``0``,
   ``1`` -> ``I`` ...), when that alternative has probability at least :data:`TYPE_ALT_MIN`;
   where none has, the character's OCR-B look-alike (:data:`LOOK_ALIKE`) if the recogniser
   offers it among its alternatives at all. Either is then judged by its probability among
   what the type allows (:func:`typed_confidence`); a character the type forbids, left for
   want of one, is unsure.
2. *Check digit*: a field whose check digit fails may have **one** character replaced by one of
   the recogniser's alternatives for it (probability at least :data:`CHECK_ALT_MIN`, the
   character's own best below :data:`CHECK_TOP_MAX`, allowed by the position's type) when that
   makes the check pass and **no other** such single replacement does. The composite check may
   then correct, the same way, only positions no individual check digit vouches for. Nothing is
   ever tried "until valid": ambiguous or absent alternatives leave the check failing.

Outcomes: no zone (``found`` False: fewer than two lines, or no format read with a mean
character probability of :data:`MIN_CONFIDENCE`: print that is not an OCR-B zone);
``MRZ_UNREADABLE`` (a zone whose reads hold too many uncertain characters, an uncertain one
where no check digit could catch it (:data:`UNCHECKED_MIN`), each judged by its probability
among the characters its position allows (:func:`typed_confidence`), or a format that does not
fit the document's size, e.g. a TD3 zone on an ID-1 card);
``MRZ_CHECK_DIGIT`` (read, a check digit fails); ``DOCUMENT_EXPIRED`` (read, the expiry's check
digit valid and the date before ``today``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from processors.card.mrz import icao
from processors.card.mrz.icao import ALLOWED, SHAPE, Format, Mrz
from processors.card.mrz.locate import BAND_PX_PER_MM, Line, find_run, line_crops, spanned_lines
from processors.card.mrz.recognise import (
    PHASE_CHAR_MIN,
    PHASE_MIN,
    PHASE_SHIFTS,
    Read,
    Recogniser,
    cell_variants,
    phase_variants,
    read_line,
)
from schemas.reasons import ReasonCode

TYPE_ALT_MIN = 0.02
"""Smallest probability of an alternative taken for a type correction."""
LOOK_ALIKE = {"0": "O", "O": "0", "1": "I", "I": "1", "5": "S", "S": "5", "8": "B", "B": "8",
              "2": "Z", "Z": "2"}
"""OCR-B's letter and digit look-alikes (the confusions a zone's position types resolve): a
character its position's type forbids takes its look-alike where the recogniser offers it
among its alternatives at any probability and no allowed alternative reaches
:data:`TYPE_ALT_MIN`; :func:`typed_confidence` then judges it among what the type allows.
Real print reads OCR-B's ``O`` as ``0`` at 0.98 with ``O`` at 0.018 (PassportEye's
``100_pass-fin``: ``MARIA 0LIVIA``)."""
CHECK_ALT_MIN = 0.05
"""Smallest probability of an alternative taken for a check-digit correction."""
CHECK_TOP_MAX = 0.97
"""A character read with at least this probability is never replaced by a check digit."""
UNSURE_P = 0.5
"""A character whose best probability is below this is uncertain ..."""
MAX_UNSURE = 4
"""... and a zone with more uncertain characters than this is MRZ_UNREADABLE."""
UNCHECKED_MIN = 0.9
"""A character no check digit covers (names, document code, states, sex) read with a lower
probability (:func:`typed_confidence`) makes the zone MRZ_UNREADABLE: a wrong one there would
pass every check digit (on the synthetic set every read that was wrong yet valid was a name or
a document code). Chosen on a tuning set of 600 documents (seed 20261205, true corners), apart
from the evaluation set (seed 20261204), as the lowest value with no wrong-but-valid read: with
the shipped recogniser (``5aadd7ca…``) exact 0.902 at 0.9 and 0.95, 0.903 at 0.8 with one
document code read wrong yet valid (the first recogniser, ``be486a59…``: 0.882 at 0.9, 0.898
at 0.7 to 0.5, the first wrong-but-valid at 0.4)."""
MIN_CONFIDENCE = 0.6
"""A zone whose best format reads with a lower mean character probability is not an MRZ."""
FORMATS_FOR: dict[str, tuple[Format, ...]] = {
    "id_card": (Format.TD1, Format.MRVA),
    "passport": (Format.TD3, Format.TD2, Format.MRVA, Format.MRVB)}
"""Formats whose size fits each rectified document type (ID-1: TD1; ID-3 shape: TD3, and TD2's
ID-2, which has ID-3's aspect ratio; the visas of Doc 9303 part 7: MRV-B is ID-2, MRV-A's
120 x 80 mm (1.5) lies on the split between ID-1 (1.586) and ID-3 (1.42), so a visa sticker
photographed alone may be rectified as either)."""
TYPE_OF: dict[Format, str] = {Format.TD1: "id_card", Format.TD2: "passport",
                              Format.TD3: "passport", Format.MRVB: "passport"}
"""The document type a format's size decides on a view whose shape says nothing of it
(:attr:`View.any_format`; MRV-A fits both, :data:`FORMATS_FOR`, and leaves the view's type)."""


@dataclass(frozen=True, slots=True)
class MrzRead:
    """What the MRZ step found on one document.

    Attributes:
        found: a zone of MRZ-shaped lines was located and read.
        format: its format (None when not found or no format fits the reads).
        readable: the reads fit the format and the document, with few uncertain characters.
        mrz: the parsed zone (None unless readable). Holds personal data: never logged.
        corrected: a character of the read was corrected (type or check digit); False where
            not readable (no read is given, so there is no corrected character to stand on).
        expired: the document had expired at ``today`` (None: not readable, or the expiry's
            check digit fails).
        turned: the zone was found in the top band turned (the document read upside down).
        doc_type: the document type of the rectification the zone was read on (None: not
            found); when the type was in doubt, the format read decided it.
        reasons: ``MRZ_UNREADABLE``, ``MRZ_CHECK_DIGIT``, ``DOCUMENT_EXPIRED`` as they apply.
        checks_pass: not readable only for an unsure character that no check digit covers (a
            name's, a code's), with few unsure characters otherwise, the format fitting the
            document, and every check digit of the format passing on the read: a travel
            document's zone, which vouches for its page (``CardProcessor``), though its
            values are not given (PassportEye's ``43_pass-fra``: one name character at 0.83,
            five check digits passing).
        other_type: the document type whose format the zone was read in where that format
            does not fit the document read on (a TD3 zone on an ID-1 rectification), read with
            few unsure characters, every one no check digit covers sure, and every check digit
            valid: the document is of that type (``CardProcessor``: DOC_TYPE_MISMATCH where
            the upload named the other). None otherwise.
    """

    found: bool
    format: Format | None = None
    readable: bool = False
    mrz: Mrz | None = None
    corrected: bool = False
    expired: bool | None = None
    turned: bool = False
    doc_type: str | None = None
    reasons: tuple[ReasonCode, ...] = ()
    checks_pass: bool = False
    other_type: str | None = None

    @property
    def valid(self) -> bool:
        """Readable, and every check digit valid."""
        return self.mrz is not None and self.mrz.checks.all_valid

    def payload(self, values: bool = False, withheld: bool = False) -> dict[str, Any]:
        """The result's ``mrz`` object (``schemas``): ``found``, ``format``, ``readable``,
        ``valid``, ``checks``, ``expired``, ``corrected``; ``values`` (the printed fields)
        only when ``values`` is True; ``values_withheld: true`` when ``withheld`` (the upload
        asked for the values and the worker's setting does not allow them)."""
        out: dict[str, Any] = {
            "found": self.found, "format": self.format.value if self.format else None,
            "readable": self.readable, "valid": self.valid,
            "checks": self.mrz.checks.as_dict() if self.mrz is not None else None,
            "expired": self.expired, "corrected": self.corrected}
        if values and self.mrz is not None:
            out["values"] = self.mrz.values()
        if withheld:
            out["values_withheld"] = True
        return out


NOT_FOUND = MrzRead(found=False)


@dataclass(frozen=True, slots=True)
class View:
    """One rectification of a document that its zone is searched on.

    Attributes:
        doc_type: ``id_card`` or ``passport``, the shape it was rectified to.
        bands: its bands, ``(h, w) uint8`` grey: the bottom as rectified, then the top turned
            (:func:`processors.card.mrz.locate.band_maps`).
        fallback: searched only when no view before it shows a zone whose line count fits
            that view's document type (:func:`fits`): the other type's rectification of a card
            whose quad chose its type, in case the quad was wrong. It decides the type only
            with a readable zone.
        any_format: the quad's shape says nothing of the document's format (the whole frame
            of a crop that cut the document or kept something with it): every format is
            judged on this view as fitting it (the formats that fit its type are still read
            first, :meth:`MrzReader._judge`, and any other read counts where it is valid), and
            a readable read decides the type by its format (:data:`TYPE_OF`).
    """

    doc_type: str
    bands: Sequence[np.ndarray]
    fallback: bool = False
    any_format: bool = False

    @property
    def formats(self) -> tuple[Format, ...]:
        """The formats read on this view as fitting it (:data:`FORMATS_FOR` its type's, or all
        with :attr:`any_format`)."""
        return tuple(Format) if self.any_format else FORMATS_FOR.get(self.doc_type, tuple(Format))


@dataclass(frozen=True, slots=True)
class Zone:
    """The lines located on one document: the band they lie in (0 bottom, 1 top turned), the
    lines and their crops; ``second``: a second reading of a band that already gave a zone
    (the denoised search, or the narrowest extent: :func:`locate_zones`), whose read counts
    only where it is valid (:meth:`MrzReader._judge`): lines of ordinary print cut to one
    extent read as a zone too, and a document without a zone would be told MRZ_UNREADABLE."""

    band: int
    lines: list[Line]
    crops: list[np.ndarray]
    second: bool = False


BAND_END_PX = 1.0
"""A zone line whose end lies within this many px of its band's end runs to it
(:func:`_at_band_end`)."""


def locate_zones(bands: Sequence[np.ndarray]) -> list[Zone]:
    """The zones of a document from its bands (grey ``uint8``, bottom then top turned): each
    band that has 2-3 zone lines, found by the plain search or, where it finds none, the
    denoised one (``find_lines(denoise=True)``: a dim, noisy capture, or a zone printed over a
    fine guilloche whose lines join at the plain search's ink level). A band read once is read
    a second time (:attr:`Zone.second`, counted only where its read is valid) by the denoised
    search where the plain search's lines run to the band's end (:func:`_at_band_end`), and at
    the run's narrowest extent where its lines' own ends differ (:func:`_ends_differ`).
    Bottom first: the orientation put the zone there on all but a turned document. Both bands
    are kept where both hold lines, and the reader takes the one it reads most confidently: a
    page's header or a background paragraph reads as lines too, and on a document turned the
    wrong way up those lines lie in the bottom band while the zone lies in the top one."""
    out = []
    for k, band in enumerate(bands):
        again = False  # this band already gave a zone
        for denoise in (False, True):
            run = find_run(band, denoise)
            if len(run) < 2:
                continue
            lines = spanned_lines(run)
            out.append(Zone(k, lines, line_crops(band, lines), second=again))
            again = True
            if _ends_differ(run):
                narrow = spanned_lines(run, widest=False)
                out.append(Zone(k, narrow, line_crops(band, narrow), second=True))
            if denoise or not _at_band_end(lines, band.shape[1]):
                break
    return out


ENDS_DIFFER_PX = 0.5 * 2.54 * BAND_PX_PER_MM
"""Half a character pitch (ICAO Doc 9303 part 3: 2.54 mm) in band px: a zone whose lines'
own ends differ by more at either end (:func:`_ends_differ`) is also read at its narrowest
extent."""


def _ends_differ(run: list[Line]) -> bool:
    """Whether the lines of a zone's ``run`` (each with its own extent) end more than
    :data:`ENDS_DIFFER_PX` apart at either end: one line's end joined to a thumb, a mark or
    the card's edge (``doc_20261205_0492``: a thumb over the zone's top-left corner, its top
    line 1.7 mm longer than the others), or lost under glare. The zone is then also read with
    the run's narrowest extent (a second reading, :attr:`Zone.second`)."""
    x0s, x1s = [ln.x0 for ln in run], [ln.x1 for ln in run]
    return max(x0s) - min(x0s) > ENDS_DIFFER_PX or max(x1s) - min(x1s) > ENDS_DIFFER_PX


def _at_band_end(lines: list[Line], width: int) -> bool:
    """Whether the zone's ``lines`` run to an end of their band (``width`` px): the plain
    search's lines joined to the band's edge (a dim capture's noise, a clear zone's own edge,
    the background beside the card), so the denoised search's zone is read too (a second
    reading, :attr:`Zone.second`)."""
    return any(ln.x0 <= BAND_END_PX or ln.x1 >= width - 1 - BAND_END_PX for ln in lines)


def locate_zone(bands: Sequence[np.ndarray]) -> Zone | None:
    """The first zone :func:`locate_zones` finds (the bottom band's where it has one), None
    where there is none."""
    return next(iter(locate_zones(bands)), None)


def fits(zone: Zone | None, doc_type: str) -> bool:
    """A zone was found and a format its line count allows fits ``doc_type`` (a two-line zone
    is TD2 or TD3, never on an ID-1 card)."""
    return zone is not None and any(
        fmt in FORMATS_FOR.get(doc_type, tuple(Format)) for fmt, _ in candidates(len(zone.crops)))


def candidates(n_lines: int) -> list[tuple[Format, int]]:
    """``(format, first line)`` to try on a zone of ``n_lines`` lines (the zone is its lowest
    lines: a text line above a two-line zone may have joined it)."""
    out = []
    if n_lines >= 3:
        out.append((Format.TD1, n_lines - 3))
    if n_lines >= 2:
        out += [(Format.TD3, n_lines - 2), (Format.TD2, n_lines - 2)]
    return out


def _type_correct(fmt: Format, reads: list[Read]) -> tuple[list[list[str]], bool]:
    """Characters per line after the type correction (1 in the module doc), and whether any
    changed."""
    kinds = icao.position_kinds(fmt)
    out, changed = [], False
    for li, r in enumerate(reads):
        chars = list(r.text)
        for i, c in enumerate(chars):
            allowed = ALLOWED[kinds[li][i]]
            if c in allowed:
                continue
            alt = next((a for a, p in r.alts[i] if a in allowed and p >= TYPE_ALT_MIN), None)
            look = LOOK_ALIKE.get(c, "")
            if alt is None and look and look in allowed:
                alt = next((a for a, _ in r.alts[i] if a == look), None)
            if alt is not None:
                chars[i], changed = alt, True
        out.append(chars)
    return out, changed


_CHECKED: dict[Format, dict[str, tuple[list[tuple[int, int]], tuple[int, int]]]] = {}


def _checked(fmt: Format) -> dict[str, tuple[list[tuple[int, int]], tuple[int, int]]]:
    """Per check: ``(data positions, check position)`` as ``(line, index)`` (Doc 9303)."""
    if fmt in _CHECKED:
        return _CHECKED[fmt]
    spans = {s.name: s for s in icao.SPANS[fmt]}

    def pos(name: str) -> list[tuple[int, int]]:
        s = spans[name]
        return [(s.line, i) for i in range(s.start, s.stop)]

    out = {"document_number": (pos("document_number"), pos("document_number_check")[0]),
           "birth_date": (pos("birth_date"), pos("birth_date_check")[0]),
           "expiry_date": (pos("expiry_date"), pos("expiry_date_check")[0])}
    if fmt is Format.TD3:
        out["optional_data"] = (pos("optional_data"), pos("optional_data_check")[0])
    width = SHAPE[fmt][1]
    if fmt is Format.TD1:
        comp = ([(0, i) for i in range(5, 30)] + [(1, i) for i in range(0, 7)]
                + [(1, i) for i in range(8, 15)] + [(1, i) for i in range(18, 29)])
        out["composite"] = (comp, (1, 29))
    elif "composite_check" in spans:  # TD2, TD3 (a visa has none: Doc 9303 part 7)
        comp = ([(1, i) for i in range(0, 10)] + [(1, i) for i in range(13, 20)]
                + [(1, i) for i in range(21, width - 1)])
        out["composite"] = (comp, (1, width - 1))
    _CHECKED[fmt] = out
    return out


def _check_correct(fmt: Format, chars: list[list[str]], reads: list[Read]) -> bool:
    """The check-digit correction (2 in the module doc), in place; whether any changed."""
    kinds = icao.position_kinds(fmt)
    changed = False
    vouched: set[tuple[int, int]] = set()

    def lines() -> tuple[str, ...]:
        return tuple("".join(c) for c in chars)

    def valid(name: str) -> bool | None:
        return getattr(icao.parse(lines()).checks, name)

    for name, (data, check) in _checked(fmt).items():
        if name == "composite":
            data = [p for p in data if p not in vouched]
        if valid(name) is not False:
            if name != "composite":
                vouched.update(data + [check])
            continue
        fixes = []
        for li, i in data + [check]:
            alts = reads[li].alts[i]
            if alts[0][1] >= CHECK_TOP_MAX:
                continue
            for a, p in alts[1:]:
                if p < CHECK_ALT_MIN or a == chars[li][i] or a not in ALLOWED[kinds[li][i]]:
                    continue
                old = chars[li][i]
                chars[li][i] = a
                if valid(name):
                    fixes.append((li, i, a))
                chars[li][i] = old
        if len(fixes) == 1:
            li, i, a = fixes[0]
            chars[li][i], changed = a, True
            if name != "composite":
                vouched.update(data + [check])
    return changed


def typed_confidence(fmt: Format, chars: list[list[str]], reads: list[Read]) -> list[list[float]]:
    """Per line, per position: the probability of the character kept (``chars``, after the
    corrections) among those its position's type allows (Doc 9303 parts 4-5: a name holds no
    digit, a date no letter): ``p(kept) / (1 - p(alternatives the type forbids))``.

    Only the recogniser's best :data:`~processors.card.mrz.recognise.ALTERNATIVES` are known,
    so the forbidden mass is at least their forbidden share and the figure is a lower bound of
    the true conditional probability. An ``O`` read at 0.85 against ``0`` at 0.14 in a name is
    0.99 sure: the digit cannot stand there, and the type correction would not take it. A
    character the type forbids, kept because the recogniser offered nothing the type allows
    (a ``0`` in a name with no letter among its alternatives), is 0 sure: before, the bound
    divided it by itself and called it 1.0 (a fresh user's bold print read a secondary name
    ``BRQQHX0``, the zone valid)."""
    kinds = icao.position_kinds(fmt)
    out = []
    for li, r in enumerate(reads):
        row = []
        for i, alts in enumerate(r.alts):
            allowed = ALLOWED[kinds[li][i]]
            if chars[li][i] not in allowed:  # no alternative the type allows: it cannot stand
                row.append(0.0)
                continue
            kept = next((p for a, p in alts if a == chars[li][i]), 0.0)
            forbidden = sum(p for a, p in alts if a not in allowed)
            row.append(kept / max(1.0 - forbidden, kept, 1e-6))
        out.append(row)
    return out


def judge(fmt: Format, reads: list[Read], doc_type: str | None, today: dt.date) -> MrzRead:
    """Correct, parse and judge one document's reads of ``fmt``'s shape (a visa's where the
    first line opens with ``V``: :func:`icao.of_shape`) on a document of ``doc_type`` (None:
    of any type, :attr:`View.any_format`)."""
    fmt = icao.of_shape(fmt, reads[0].text if reads else "")
    chars, typed = _type_correct(fmt, reads)
    fixed = _check_correct(fmt, chars, reads)
    lines = tuple("".join(c) for c in chars)
    sure = typed_confidence(fmt, chars, reads)
    unsure = sum(1 for row in sure for p in row if p < UNSURE_P)
    covered = {p for data, check in _checked(fmt).values() for p in (*data, check)}
    unchecked_unsure = any(p < UNCHECKED_MIN for li, row in enumerate(sure)
                           for i, p in enumerate(row) if (li, i) not in covered)
    fits_type = doc_type is None or fmt in FORMATS_FOR.get(doc_type, tuple(Format))
    if unsure > MAX_UNSURE or unchecked_unsure or not fits_type:
        passes = unsure <= MAX_UNSURE and icao.parse(lines).checks.all_valid
        other = (TYPE_OF.get(fmt) if not fits_type and passes and not unchecked_unsure
                 else None)
        return MrzRead(found=True, format=fmt, reasons=(ReasonCode.MRZ_UNREADABLE,),
                       checks_pass=fits_type and passes, other_type=other)
    mrz = icao.parse(lines)
    reasons: list[ReasonCode] = []
    if not mrz.checks.all_valid:
        reasons.append(ReasonCode.MRZ_CHECK_DIGIT)
    expired = mrz.expired(today) if mrz.checks.expiry_date else None
    if expired:
        reasons.append(ReasonCode.DOCUMENT_EXPIRED)
    return MrzRead(found=True, format=fmt, readable=True, mrz=mrz, corrected=typed or fixed,
                   expired=expired, reasons=tuple(reasons))


class MrzReader:
    """Reads the MRZ of a batch of documents with one recogniser call.

    Args:
        recogniser: the batched line recogniser.
    """

    def __init__(self, recogniser: Recogniser) -> None:
        self.recogniser = recogniser

    def read(self, docs: Sequence[Sequence[View]], today: dt.date) -> list[MrzRead | Exception]:
        """One :class:`MrzRead` per document, or the exception its own locating or judging
        raised (the caller fails that document alone; the others are read).

        Args:
            docs: per document, the rectifications its zone is searched on (:class:`View`:
                the document type as rectified, and its bands); more than one when the type is
                in doubt, or chosen by the quad alone (the other type as a fallback view), and
                the format read decides it.
            today: the date expiry is judged at (the result's ``processed_at``).

        Raises:
            ModelError: the recogniser's call failed (the whole batch).
        """
        zones: list[list[Zone | None] | Exception] = []
        searched: list[list[View]] = []  # per document, a view per zone found on it
        plan = []  # (document, view, format, line): one entry per cell variant of a line read
        batch = []
        for d, views in enumerate(docs):
            try:
                found: list[Zone | None] = []
                seen: list[View] = []
                for v in views:
                    done = any(fits(z, w.doc_type) for z, w in zip(found, seen, strict=True))
                    zs = [] if v.fallback and done else locate_zones(v.bands)
                    found += zs or [None]
                    seen += [v] * max(len(zs), 1)
                # a fallback view's read decides the type: it gets no cuts a pitch in, which
                # read a TD3 zone printed squeezed on an ID-1 card on its passport view; the
                # lines of a format that fits the view's type are also cut at each phase shift
                # (the shift None: the cuts by the lines' ends)
                lines = [(vi, fmt, li, shift, c) for vi, z in enumerate(found) if z is not None
                         for fmt, first in candidates(len(z.crops))
                         for li in range(first, len(z.crops))
                         for shift, c in _cuts(z.crops[li], SHAPE[fmt][1],
                                               insets=not seen[vi].fallback,
                                               phases=fmt in seen[vi].formats)]
            except Exception as e:  # noqa: BLE001 - this document fails alone
                zones.append(e)
                searched.append(list(views))
                continue
            zones.append(found)
            searched.append(seen)
            for vi, fmt, li, shift, c in lines:
                plan.append((d, vi, fmt, li, shift))
                batch.append(c)
        probs = self.recogniser.probs(batch)
        # per document, view, format, line and shift: the variant read most confidently
        best: dict[tuple[int, int, Format, int, float | None], Read] = {}
        for key, p in zip(plan, probs, strict=True):
            r = read_line(p)
            if key not in best or r.confidence > best[key].confidence:
                best[key] = r
        reads: dict[tuple[int, int, Format, float | None], list[Read]] = {}
        for (d, vi, fmt, _, shift), r in best.items():  # insertion order: lines top to bottom
            reads.setdefault((d, vi, fmt, shift), []).append(r)
        tried: dict[int, dict[tuple[int, Format], list[Read]]] = {}
        for (d, vi, fmt, shift), rs in reads.items():
            if shift is None:
                tried.setdefault(d, {})[(vi, fmt)] = _in_phase(
                    rs, [reads[(d, vi, fmt, s)] for s in PHASE_SHIFTS
                         if (d, vi, fmt, s) in reads])
        out: list[MrzRead | Exception] = []
        for d, (got, views) in enumerate(zip(zones, searched, strict=True)):
            if isinstance(got, Exception):
                out.append(got)
                continue
            try:
                out.append(self._judge(tried.get(d, {}), got, views, today))
            except Exception as e:  # noqa: BLE001 - this document fails alone
                out.append(e)
        return out

    @staticmethod
    def _judge(tried: dict[tuple[int, Format], list[Read]], zones: list[Zone | None],
               views: Sequence[View], today: dt.date) -> MrzRead:
        """The format read most confidently, a format that fits its view's document type
        first, judged (``NOT_FOUND`` below :data:`MIN_CONFIDENCE`); where that read is not
        valid, the first valid read of a band's second reading (:attr:`Zone.second`, most
        confident first) instead. A read of TD3's or TD2's shape whose first line opens with
        ``V`` is a visa's (:func:`icao.of_shape`)."""
        if not tried:
            return NOT_FOUND
        tried = {(vi, icao.of_shape(fmt, reads[0].text)): reads
                 for (vi, fmt), reads in tried.items()}

        def key(kv: tuple[tuple[int, Format], list[Read]]) -> tuple[bool, float]:
            (vi, fmt), reads = kv
            return (fmt in FORMATS_FOR.get(views[vi].doc_type, tuple(Format)),
                    float(np.mean([r.confidence for r in reads])))

        def judged(kv: tuple[tuple[int, Format], list[Read]]) -> MrzRead:
            (vi, fmt), reads = kv
            if np.mean([r.confidence for r in reads]) < MIN_CONFIDENCE:
                return NOT_FOUND
            v = views[vi]
            return MrzReader._typed(judge(fmt, reads, None if v.any_format else v.doc_type,
                                          today), zones[vi], views, vi)

        first = [kv for kv in tried.items() if not _second(zones[kv[0][0]])]
        got = judged(max(first, key=key)) if first else NOT_FOUND
        if got.valid:
            return got
        # a view whose shape says nothing of the format (View.any_format): its other reads
        # count with every check digit valid (a TD2 zone read on a crop's ID-1 view, its
        # passport view stretched out of the locator's line heights)
        for kv in sorted((kv for kv in first if views[kv[0][0]].any_format), key=key,
                         reverse=True):
            other = judged(kv)
            if other.valid:
                return other
        # a band's second reading counts only with a valid read (Zone.second)
        for kv in sorted((kv for kv in tried.items() if _second(zones[kv[0][0]])),
                         key=key, reverse=True):
            other = judged(kv)
            if other.valid:
                return other
        return got

    @staticmethod
    def _typed(got: MrzRead, zone: Zone | None, views: Sequence[View], vi: int) -> MrzRead:
        """``got``, read on view ``vi``'s ``zone``, with its band (turned) and the document type
        it decides."""
        assert zone is not None  # a view read has a zone
        # a fallback view decides the type only with a readable zone: an unreadable one on it
        # (a TD3 zone printed on an ID-1 card) leaves the type the quad chose; so does a visa
        # read on an ID-1 fallback (MRV-A fits ID-1 only for a sticker photographed alone, whose
        # quad chose ID-1 itself: a passport page squeezed to ID-1 reads its zone too)
        v = views[vi]
        decides = not v.fallback or (got.readable and not (v.doc_type == "id_card"
                                                           and got.format is Format.MRVA))
        doc = v.doc_type if decides else views[0].doc_type
        if v.any_format and got.readable and got.format is not None:
            doc = TYPE_OF.get(got.format, doc)
        return replace(got, turned=zone.band == 1, doc_type=doc)


def _cuts(crop: np.ndarray, n: int, insets: bool, phases: bool
          ) -> list[tuple[float | None, np.ndarray]]:
    """A line's cell variants (:func:`recognise.cell_variants`), each with ``None``, then, with
    ``phases``, its phase variants (:func:`recognise.phase_variants`), each with its shift
    (pitches). A format that does not fit the view's document type (TD3 or TD2 on the last two
    lines of an ID-1 card's zone) gets none: its read counts only where no format that fits
    was read (:meth:`MrzReader._judge` ranks those first), and without them the 600 evaluation
    photos send the recogniser 723 cells a document instead of 840 (445 with no phase
    variants)."""
    return ([(None, c) for c in cell_variants(crop, n, insets=insets)]
            + (list(zip(PHASE_SHIFTS, phase_variants(crop, n), strict=True)) if phases
               else []))


def _in_phase(plain: list[Read], shifted: list[list[Read]]) -> list[Read]:
    """A zone's line reads: ``plain`` (cut by the lines' ends), or, where a line of it reads
    under :data:`recognise.PHASE_MIN`, the reads of the phase shift (``shifted``, one list of
    line reads per :data:`recognise.PHASE_SHIFTS`) whose every line reads at least
    :data:`recognise.PHASE_MIN` and every character at least :data:`recognise.PHASE_CHAR_MIN`,
    the most confident such, where it reads more confidently than ``plain``. A printer's
    phase is the whole zone's, so one shift is taken for all its lines, and only where it
    reads them surely: a line read a little more surely a quarter pitch over, beside one read
    unsurely either way (a thumb over the zone, a zone cut in perspective), keeps its plain
    read (``doc_20261204_0196``: one line's read rising from 0.93 to 0.99 made a read with
    three wrong characters in a document number, passing its check digit, the zone's most
    confident); so does a zone whose shifted lines are sure on the mean but hold unsure
    characters (a fresh user's bold print: two at 0.56-0.59, a document number two characters
    wrong, passing). Plain reads already sure stay (``doc_20261205_0028``: 1.0 and 0.985,
    exact, against 0.999 and 0.987 a quarter pitch over with glare on the last character)."""
    if min(r.confidence for r in plain) >= PHASE_MIN:
        return plain
    mean = float(np.mean([r.confidence for r in plain]))
    sure = [rs for rs in shifted if min(r.confidence for r in rs) >= PHASE_MIN
            and min(a[0][1] for r in rs for a in r.alts) >= PHASE_CHAR_MIN]
    if not sure:
        return plain
    top = max(sure, key=lambda rs: float(np.mean([r.confidence for r in rs])))
    return top if float(np.mean([r.confidence for r in top])) > mean else plain


def _second(zone: Zone | None) -> bool:
    """Whether ``zone`` is a band's second reading (:attr:`Zone.second`)."""
    return zone is not None and zone.second
