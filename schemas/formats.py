"""String formats shared by the JSON Schema files and the pydantic mirrors.

The patterns below are written once here and appear verbatim in the ``*.schema.json`` files (a
unit test keeps the two equal). They are ECMA-262 regular expressions, as JSON Schema 2020-12
requires (§6.4 of the Validation vocabulary), restricted to the subset that means the same in
Python's ``re``: ASCII classes written out (``[0-9]``, never ``\\d``, which in Python also matches
non-ASCII digits) and ``$`` only as the end anchor. Python's ``$`` also matches *before a final
newline*, which ECMA's does not (``"u1\\n"`` would pass ``^[a-z0-9]+$``); :func:`ecma_regex`
translates the anchor to ``\\Z`` so that both validators here have the ECMA meaning.

Timestamps are RFC 3339 ``date-time`` (section 5.6): ``2026-11-29T16:33:31.250Z`` or with a
numeric offset; checked by :func:`is_rfc3339` (pattern + a real calendar date; leap second 60
accepted as RFC 3339 allows).
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta, timezone

# Upload ids become object-key segments: ASCII letters, digits, '.', '_', '-', 1..128 chars and
# never '.' or '..' (so `{task}/{model_version}/{upload_id}/...` cannot climb out of its prefix).
UPLOAD_ID_PATTERN = r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}$"
# S3 bucket names (AWS "Bucket naming rules"): 3..63 chars, lowercase letters, digits, '.', '-'.
BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# Object keys: 1..1024 chars (the S3 limit is 1024 bytes of UTF-8), no control characters, no
# leading '/', and no '.' or '..' path segment.
OBJECT_KEY_PATTERN = r"^(?!/)(?!(?:.*/)?\.{1,2}(?:/|$))[^\x00-\x1f\x7f]{1,1024}$"
# Lowercase hex SHA-256 digest (FIPS 180-4), 64 characters.
SHA256_PATTERN = r"^[0-9a-f]{64}$"
# A media type "type/subtype" (RFC 6838 section 4.2 restricted-name characters), no parameters.
MEDIA_TYPE_PATTERN = (
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)
# Opaque tokens (trace_id, subject_ref): no spaces, so no free text such as a name fits.
OPAQUE_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
# ID-photo background: a named colour or sRGB hex "#RRGGBB".
BACKGROUND_PATTERN = r"^(?:white|blue|red|#[0-9A-Fa-f]{6})$"
# Names of an ID photo's compliance checks: lower snake case.
CHECK_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
# Reason and dead-letter codes: upper snake case. Known codes are listed in schemas/reasons.py;
# new ones may be added, so consumers accept any code of this shape.
CODE_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
# Names of a shadow comparison's measures (``quad_iou``): lower snake case.
MEASURE_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
# Padded base64, RFC 4648 section 4 alphabet, no whitespace (dead-letter keys, values, headers).
B64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# One line of text (dead-letter error messages).
ONE_LINE_PATTERN = r"^[^\r\n]*$"
# RFC 3339 section 5.6 date-time; 'T'/'Z' case-insensitive as the RFC allows.
RFC3339_PATTERN = (
    r"^[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[Tt]"
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)


@functools.lru_cache(maxsize=256)
def ecma_regex(pattern: str) -> re.Pattern[str]:
    """Compile an ECMA-262 pattern (JSON Schema ``pattern``) for Python with ECMA's ``$``.

    Every unescaped ``$`` outside a character class becomes ``\\Z`` (end of string only).
    Compiled with ``re.ASCII`` so that any ``\\d``/``\\w`` keeps its ECMA (ASCII) meaning.
    Use with :meth:`re.Pattern.search`, as JSON Schema patterns are not implicitly anchored.

    Raises:
        re.error: the pattern is not a valid regular expression.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # a ']' right after '[' or '[^' is a literal member of the class
            if pattern[i + 1 : i + 2] == "]":
                out.append("[]")
                i += 2
                continue
            if pattern[i + 1 : i + 3] == "^]":
                out.append("[^]")
                i += 3
                continue
        elif c == "$":
            out.append(r"\Z")
            i += 1
            continue
        out.append(c)
        i += 1
    return re.compile("".join(out), re.ASCII)


def matches(pattern: str, value: str) -> bool:
    """True when ``value`` matches the ECMA-262 ``pattern`` the way JSON Schema defines it."""
    return ecma_regex(pattern).search(value) is not None


def is_rfc3339(value: object) -> bool:
    """True when ``value`` is an RFC 3339 ``date-time`` string naming a real calendar instant.

    Non-strings return True (JSON Schema ``format`` only constrains strings; ``type`` catches
    the rest).
    """
    if not isinstance(value, str):
        return True
    if not matches(RFC3339_PATTERN, value):
        return False
    try:
        datetime.fromisoformat(_iso(value))
    except ValueError:
        return False
    return True


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC 3339 ``date-time`` into an aware :class:`datetime` (leap second -> :59).

    Raises:
        ValueError: ``value`` is not RFC 3339.
    """
    if not is_rfc3339(value):
        raise ValueError("not an RFC 3339 date-time")
    return datetime.fromisoformat(_iso(value))


def _iso(value: str) -> str:
    """RFC 3339 text -> what :meth:`datetime.fromisoformat` reads (leap second as :59, µs)."""
    text = value.upper().replace("Z", "+00:00")
    if text[17:19] == "60":
        text = text[:17] + "59" + text[19:]
    frac = re.search(r"\.([0-9]+)", text)
    if frac:  # datetime accepts at most 6 fractional digits
        text = text[: frac.start()] + "." + frac.group(1)[:6].ljust(6, "0") + text[frac.end() :]
    return text


def utc_now_rfc3339(now: datetime | None = None) -> str:
    """The current UTC time (or ``now``) as RFC 3339 with millisecond precision and ``Z``.

    ``2026-11-29T16:33:31.250Z``: the form cardstream writes in ``processed_at``/``failed_at``.
    """
    t = (now or datetime.now(UTC)).astimezone(timezone(timedelta(0)))
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
