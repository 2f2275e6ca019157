"""Bytes <-> events: the one place that turns Kafka records into typed events and back.

Record layout (all three topics): key = ``upload_id`` as UTF-8 (dead letters keep the original
key), value = compact UTF-8 JSON (``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)``
of the model's canonical dict, see :mod:`schemas.models`), headers ``content-type:
application/json`` and ``schema-version: 1`` (values as bytes).

Decoding checks, in this order, and raises :class:`~schemas.errors.ContractError` with the first
failing code (:class:`~schemas.reasons.DeadLetterCode`) and the JSON path of the problem:

1. ``NOT_JSON``: null value (tombstone), not UTF-8, not RFC 8259 JSON (``NaN``/``Infinity`` are
   not JSON), or an object with a repeated key (JSON parsers differ on which one wins).
2. ``UNSUPPORTED_SCHEMA_VERSION``: ``schema_version`` is an integer above the version this code
   reads, or a ``schema-version`` header is present and is not a decimal integer from 1 to that
   version (``abc``, ``0``, ``2``, an empty or null value; an absent header means 1).
3. ``SCHEMA_INVALID``: the JSON Schema file rejects the value (path of the best-matching error,
   ``jsonschema.exceptions.best_match``), then the pydantic mirror rejects it (it should not once
   the schema accepted; if it does, that is reported the same way).
4. Upload policy (configured per consumer): ``KEY_MISMATCH`` (record key present and not the
   ``upload_id``), ``BUCKET_NOT_ALLOWED``, ``INLINE_TOO_LARGE`` (decoded size above the limit,
   computed from the base64 length before decoding), ``BAD_BASE64``.

Error messages are one line and never echo field values (they could hold personal data): they
name the path and the rule broken.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
from collections.abc import Collection, Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal, TypeVar

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.exceptions import best_match
from pydantic import BaseModel
from pydantic import ValidationError as ModelError

from schemas import formats as F
from schemas.errors import ContractError, field_errors
from schemas.models import (
    SCHEMA_VERSION,
    TASKS,
    V1_TASKS,
    DeadLetter,
    QuarantineRef,
    ShadowDiff,
    UploadEvent,
    VerificationResult,
)
from schemas.reasons import DeadLetterCode as C

HEADERS_CONTENT_TYPE = "application/json"
#: Header names, as on the Kafka record.
CONTENT_TYPE_HEADER = "content-type"
SCHEMA_VERSION_HEADER = "schema-version"
#: Default largest inline image, bytes after base64 decoding (512 KiB).
INLINE_MAX_BYTES = 512 * 1024
#: Default number of original value bytes kept in a dead letter (64 KiB).
DLQ_VALUE_MAX_BYTES = 65536
#: Default size budget of a dead-letter record (256 KiB): record key + value + headers as
#: produced. Below librdkafka's ``message.max.bytes`` (1 000 000) and the dead-letter topic's
#: ``max.message.bytes`` (``TopicSettings.dlq_max_message_bytes``, 1 MiB), so a dead letter is
#: never refused for its size, whatever the original record held.
DLQ_RECORD_MAX_BYTES = 256 * 1024
#: Smallest budget :func:`make_dead_letter` accepts: the fixed fields (a 500-character error,
#: the source, the codes) plus an eighth each for the key and the headers always fit.
DLQ_RECORD_MIN_BYTES = 16 * 1024
#: Longest dead-letter ``error`` text, characters.
ERROR_MAX_CHARS = 500

Kind = Literal["UploadEvent", "VerificationResult", "DeadLetter", "ShadowDiff"]
#: Event kind -> (schema file, pydantic model).
EVENTS: dict[str, tuple[str, type[BaseModel]]] = {
    "UploadEvent": ("upload_event.v1.schema.json", UploadEvent),
    "VerificationResult": ("verification_result.v1.schema.json", VerificationResult),
    "DeadLetter": ("dead_letter.v1.schema.json", DeadLetter),
    "ShadowDiff": ("shadow_diff.v1.schema.json", ShadowDiff),
}
Record = tuple[bytes, bytes, list[tuple[str, bytes]]]
HeadersIn = Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None
M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------------------------------------
# JSON Schema validators (ECMA-262 patterns, RFC 3339 date-time asserted)


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if isinstance(instance, str) and not F.matches(pattern, instance):
        yield SchemaError(f"does not match {pattern!r}")


_FORMATS = FormatChecker(formats=())
_FORMATS.checks("date-time")(F.is_rfc3339)
_Validator = jsonschema.validators.extend(Draft202012Validator, {"pattern": _pattern_keyword})


def load_schema(kind: str) -> dict[str, Any]:
    """The parsed JSON Schema of ``kind`` (``UploadEvent`` | ``VerificationResult`` |
    ``DeadLetter`` | ``ShadowDiff``), read from the package's ``*.v1.schema.json``."""
    return json.loads(resources.files("schemas").joinpath(EVENTS[kind][0]).read_text("utf-8"))


def validator(kind: str) -> Draft202012Validator:
    """A draft 2020-12 validator for ``kind`` with ECMA-262 ``pattern`` semantics (``$`` is the
    end of the string) and ``format: date-time`` asserted as RFC 3339. Its ``task`` enum also
    takes the tasks registered beyond the v1 files (:func:`schemas.models.register_task`)."""
    return _validator(kind, tuple(t for t in TASKS if t not in V1_TASKS))


@cache
def _validator(kind: str, registered: tuple[str, ...]) -> Draft202012Validator:
    schema = load_schema(kind)
    task = schema.get("properties", {}).get("task")
    if registered and task is not None:
        task["enum"] = [*task["enum"], *registered]
    return _Validator(schema, format_checker=_FORMATS)


# ---------------------------------------------------------------------------------------------
# JSON text


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON: ``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)``.

    Raises:
        ContractError: ``SCHEMA_INVALID`` if a string holds a lone UTF-16 surrogate (UTF-8
            cannot encode it); ``ValueError`` for NaN/Infinity (the models never hold them).
    """
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ContractError(C.SCHEMA_INVALID, "a string holds a lone UTF-16 surrogate") from None


class RepeatedKey(ValueError):
    """An object of JSON text repeats a key (:func:`parse_json`). The message does not name it:
    a record's keys are whatever its producer wrote, and a dead letter carries no personal
    field; ``key`` is the key, for an answer to the sender of the text (the gateway's 422)."""

    def __init__(self, key: str) -> None:
        super().__init__("an object repeats a key")
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(key)
            seen.add(key)
    return d


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DOUBLE_MAX = sys.float_info.max
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _float(text: str) -> float:
    x = float(text)
    if math.isinf(x):
        raise ValueError("a number is out of the IEEE 754 double range")
    return x


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 309:  # 1.8e308 has 309 digits; past 4300 int() itself refuses
        raise ValueError("a number is out of the IEEE 754 double range")
    n = int(text)
    if abs(n) > _DOUBLE_MAX:
        raise ValueError("a number is out of the IEEE 754 double range")
    return n


def where_not_json(e: json.JSONDecodeError) -> str:
    """Why and where ``e``'s text is not JSON, as one phrase: ``Expecting value at char 7``
    (Python's message for a control character ends in its own "at")."""
    return f"{e.msg.removesuffix(' at')} at char {e.pos}"


def parse_json(text: str) -> Any:
    """Parse RFC 8259 JSON text strictly: no NaN/Infinity, no repeated keys, numbers within
    the IEEE 754 double range (RFC 8259 section 6 lets parsers limit the range; beyond it other
    teams' parsers lose or refuse the value), strings that are UTF-8 again, and no deeper
    nesting than Python's parser reads. The contract's one JSON parser: :func:`loads` (every
    record) and the upload options of the gateway and ``cardstream produce``
    (:func:`streams.produce.parse_options`).

    Raises:
        json.JSONDecodeError: not JSON text (``msg``, ``pos``).
        RepeatedKey: an object repeats a key (a ``ValueError``).
        ValueError: the rules above broken, with a plain reason (never a value).
    """
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                         parse_float=_float, parse_int=_int)
        if _SURROGATE_ESCAPE.search(text):  # rare: check the strings can be UTF-8 again
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        return obj
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone UTF-16 surrogate escape") from None
    except RecursionError:  # 5,000 nested [ (a fresh user's trial): no traceback, no 500
        raise ValueError("arrays or objects nested too deeply") from None


def loads(value: bytes | bytearray | memoryview | str | None) -> Any:
    """Parse a record's value as :func:`parse_json` does (UTF-8 first).

    Raises:
        ContractError: ``NOT_JSON`` at ``$``.
    """
    if value is None:
        raise ContractError(C.NOT_JSON, "value is null (tombstone)")
    try:
        text = value if isinstance(value, str) else bytes(value).decode("utf-8")
        return parse_json(text)
    except UnicodeDecodeError as e:
        raise ContractError(C.NOT_JSON, f"value is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        if not e.doc.strip():
            raise ContractError(C.NOT_JSON, "value is empty" + (" (whitespace only)" if e.doc
                                                                else "")) from None
        raise ContractError(C.NOT_JSON, f"value is not JSON: {where_not_json(e)}") from None
    except ValueError as e:  # a rule of parse_json's
        raise ContractError(C.NOT_JSON, f"value is not JSON: {e}") from None


# ---------------------------------------------------------------------------------------------
# paths and safe messages

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


def json_path(parts: Iterable[str | int]) -> str:
    """``("image", "ref", "bucket")`` -> ``$.image.ref.bucket``; ints -> ``[0]``; keys that are
    not identifiers -> ``['…']`` (quotes escaped)."""
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.match(p):
            out += f".{p}"
        else:
            out += "[" + json.dumps(p, ensure_ascii=True).replace("'", "\\'")[1:-1].join("''") + "]"
    return out


def _schema_message(err: SchemaError) -> tuple[str, list[str | int]]:
    """A one-line message without the instance value, and the path it applies to."""
    if err.validator in ("anyOf", "oneOf") and err.context:
        # "X or null": report the failure against X, not the null branch
        ctx = [c for c in err.context
               if not (c.validator == "type" and c.validator_value == "null")]
        inner = best_match(ctx)
        if inner is not None and len({c.relative_schema_path[0] for c in ctx}) == 1:
            return _schema_message(inner)
    path = list(err.absolute_path)
    # an error from a validator's iter_errors always carries its keyword and value (the stubs'
    # ``Unset`` is for errors built by hand)
    kw: str = str(err.validator)
    want: Any = err.validator_value
    if kw == "required":
        missing = [k for k in want if isinstance(err.instance, dict) and k not in err.instance]
        return f"required property '{missing[0] if missing else '?'}' is missing", path
    if kw == "additionalProperties" and isinstance(err.instance, dict):
        props = err.schema.get("properties", {}) if isinstance(err.schema, Mapping) else {}
        extra = sorted(k for k in err.instance if k not in props)
        if extra:
            return "unknown property (not allowed here)", [*path, extra[0]]
    if kw == "type":
        return f"expected type {want if isinstance(want, str) else ' or '.join(want)}", path
    if kw in ("enum", "const"):
        allowed = want if kw == "enum" else [want]
        return "must be one of " + ", ".join(json.dumps(a) for a in allowed), path
    if kw == "pattern":
        return "does not match the required pattern", path
    if kw == "format":
        return f"not a valid {want}", path
    if kw == "oneOf" and path and path[-1] == "image":
        return "needs exactly one of 'ref' or 'inline_b64'", path
    if kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
              "maxLength", "minItems", "maxItems"):
        return f"violates {kw} {want}", path
    if kw == "uniqueItems":
        return "items must not repeat", path
    return f"violates '{kw}'", path


# ---------------------------------------------------------------------------------------------
# generic decode


def _header_values(headers: HeadersIn, name: str) -> list[bytes | None]:
    """The values of every header named ``name`` (case-insensitive), in record order; a null
    value stays None."""
    if headers is None:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [v.encode() if isinstance(v, str) else v for k, v in items if k.lower() == name]


def _check_version(obj: Any, headers: HeadersIn) -> None:
    v = obj.get("schema_version") if isinstance(obj, dict) else None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and v > SCHEMA_VERSION:
        raise ContractError(C.UNSUPPORTED_SCHEMA_VERSION,
                            f"schema_version {v} is newer than {SCHEMA_VERSION}, the version "
                            "this consumer reads", "$.schema_version")
    for h in _header_values(headers, SCHEMA_VERSION_HEADER):  # each one, when repeated
        text = h.strip() if h is not None else b""
        if not (text.isdigit() and len(text) <= 9):  # b"abc", b"", b"-1", b"1.0", a null value
            raise ContractError(C.UNSUPPORTED_SCHEMA_VERSION,
                                "header schema-version is not a decimal integer")
        if not 1 <= int(text) <= SCHEMA_VERSION:
            raise ContractError(C.UNSUPPORTED_SCHEMA_VERSION,
                                f"header schema-version {int(text)} is not one this consumer "
                                f"reads (1..{SCHEMA_VERSION})")


def validate_obj(kind: str, obj: Any, headers: HeadersIn = None) -> BaseModel:
    """Validate a parsed JSON value as ``kind`` against the JSON Schema, then pydantic.

    Returns:
        the typed event (:class:`UploadEvent`, :class:`VerificationResult` or :class:`DeadLetter`).

    Raises:
        ContractError: ``UNSUPPORTED_SCHEMA_VERSION`` or ``SCHEMA_INVALID`` with the JSON path.
    """
    _check_version(obj, headers)
    err = best_match(validator(kind).iter_errors(obj))
    if err is not None:
        msg, path = _schema_message(err)
        raise ContractError(C.SCHEMA_INVALID, msg, json_path(path))
    try:
        return EVENTS[kind][1].model_validate(obj)
    except ModelError as e:
        first = field_errors(e)[0]
        raise ContractError(C.SCHEMA_INVALID, first.msg, json_path(first.loc)) from None


def _decode(kind: str, model: type[M], value: Any, headers: HeadersIn = None) -> M:
    ev = validate_obj(kind, loads(value), headers)
    assert isinstance(ev, model)
    return ev


def _encode(m: UploadEvent | VerificationResult | DeadLetter | ShadowDiff,
            key: bytes | None) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    return key, dumps(m.canonical()), [(CONTENT_TYPE_HEADER, HEADERS_CONTENT_TYPE.encode()),
                                       (SCHEMA_VERSION_HEADER, str(SCHEMA_VERSION).encode())]


# ---------------------------------------------------------------------------------------------
# UploadEvent


def _by_upload_id(m: UploadEvent | VerificationResult | ShadowDiff) -> Record:
    """``(key, value, headers)`` of a record keyed by its ``upload_id``: key = ``upload_id``
    UTF-8, value = compact canonical JSON, headers ``content-type``/``schema-version``."""
    k, v, h = _encode(m, m.upload_id.encode())
    assert k is not None
    return k, v, h


def encode_upload(ev: UploadEvent) -> Record:
    """``(key, value, headers)`` of an upload record (:func:`_by_upload_id`)."""
    return _by_upload_id(ev)


def _b64_decoded_len(s: str) -> int:
    return len(s) // 4 * 3 - s[-2:].count("=") if len(s) % 4 == 0 else (len(s) * 3) // 4


def decode_upload(key: bytes | None, value: bytes | None, headers: HeadersIn = None, *,
                  allowed_buckets: Collection[str] = ("uploads",),
                  inline_max_bytes: int = INLINE_MAX_BYTES) -> UploadEvent:
    """Decode and check one uploads-topic record.

    Args:
        key: the record key (``None`` if the producer set none).
        value: the record value (``None`` for a tombstone).
        headers: the record headers (list of ``(name, bytes)`` or a mapping), optional.
        allowed_buckets: buckets an image ``ref`` may name.
        inline_max_bytes: largest inline image in bytes after base64 decoding.

    Returns:
        the :class:`UploadEvent`.

    Raises:
        ContractError: code from :class:`~schemas.reasons.DeadLetterCode` (``NOT_JSON``,
            ``UNSUPPORTED_SCHEMA_VERSION``, ``SCHEMA_INVALID``, ``KEY_MISMATCH``,
            ``BUCKET_NOT_ALLOWED``, ``INLINE_TOO_LARGE``, ``BAD_BASE64``) and the JSON path.
    """
    ev = _decode("UploadEvent", UploadEvent, value, headers)
    if key is not None and bytes(key) != ev.upload_id.encode():
        raise ContractError(C.KEY_MISMATCH, "record key is not the upload_id", "$.upload_id")
    ref, inline = ev.image.ref, ev.image.inline_b64
    if ref is not None and ref.bucket not in allowed_buckets:
        raise ContractError(C.BUCKET_NOT_ALLOWED, "bucket is not one this consumer reads from",
                            "$.image.ref.bucket")
    if inline is not None:
        n = _b64_decoded_len(inline)
        if n > inline_max_bytes:
            raise ContractError(C.INLINE_TOO_LARGE,
                                f"inline image is {n} bytes, above the {inline_max_bytes}-byte "
                                "limit: put it in the object store and send a ref",
                                "$.image.inline_b64")
        try:
            base64.b64decode(inline, validate=True)
        except (binascii.Error, ValueError):
            raise ContractError(C.BAD_BASE64, "inline_b64 is not padded RFC 4648 base64",
                                "$.image.inline_b64") from None
    return ev


def inline_bytes(ev: UploadEvent) -> bytes | None:
    """The decoded inline image of ``ev``, or ``None`` when the image is a ``ref``.

    Raises:
        ContractError: ``BAD_BASE64`` (only for events not obtained from :func:`decode_upload`).
    """
    if ev.image.inline_b64 is None:
        return None
    try:
        return base64.b64decode(ev.image.inline_b64, validate=True)
    except (binascii.Error, ValueError):
        raise ContractError(C.BAD_BASE64, "inline_b64 is not padded RFC 4648 base64",
                            "$.image.inline_b64") from None


# ---------------------------------------------------------------------------------------------
# VerificationResult


def encode_result(r: VerificationResult) -> Record:
    """``(key, value, headers)`` of a result record (:func:`_by_upload_id`)."""
    return _by_upload_id(r)


def decode_result(value: bytes | None, headers: HeadersIn = None) -> VerificationResult:
    """Decode a results-topic value.

    Raises:
        ContractError: ``NOT_JSON``, ``UNSUPPORTED_SCHEMA_VERSION`` or ``SCHEMA_INVALID``.
    """
    return _decode("VerificationResult", VerificationResult, value, headers)


# ---------------------------------------------------------------------------------------------
# ShadowDiff


def encode_shadow_diff(d: ShadowDiff) -> Record:
    """``(key, value, headers)`` of a shadow-diff record (:func:`_by_upload_id`)."""
    return _by_upload_id(d)


def decode_shadow_diff(value: bytes | None, headers: HeadersIn = None) -> ShadowDiff:
    """Decode a shadow-topic value.

    Raises:
        ContractError: ``NOT_JSON``, ``UNSUPPORTED_SCHEMA_VERSION`` or ``SCHEMA_INVALID``.
    """
    return _decode("ShadowDiff", ShadowDiff, value, headers)


# ---------------------------------------------------------------------------------------------
# DeadLetter


def one_line(text: str, limit: int = ERROR_MAX_CHARS) -> str:
    """``text`` on one line (control characters and runs of whitespace -> one space), cut to
    ``limit`` characters with a trailing ``…`` when cut."""
    s = " ".join(re.sub(r"[\x00-\x1f\x7f\u2028\u2029\x85]", " ", text).split())
    s = s.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> '?'
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _kept_headers(headers: HeadersIn, budget: int) -> tuple[list[dict[str, Any]], bool, int]:
    """The headers to keep in a dead letter: in order while their names (UTF-8) and values fit
    ``budget`` bytes, the first that does not cut to what is left (dropped when its name does
    not fit), the rest dropped. Returns ``(headers as Header dicts, truncated, original bytes)``."""
    items = [] if headers is None else list(headers.items() if isinstance(headers, Mapping)
                                            else headers)
    out: list[dict[str, Any]] = []
    used, cut, total = 0, False, 0
    for k, v in items:
        raw = v.encode() if isinstance(v, str) else v
        name = k.encode("utf-8", "replace")
        total += len(name) + (0 if raw is None else len(raw))
        if cut:
            continue
        need = len(name) + (0 if raw is None else len(raw))
        if used + need <= budget:
            out.append({"key": k, "value_b64": _b64(raw)})
            used += need
            continue
        cut = True
        room = budget - used - len(name)
        if room >= 0:
            out.append({"key": k, "value_b64": _b64(None if raw is None else raw[:room])})
    return out, cut, total


def dead_letter_record_size(d: DeadLetter) -> int:
    """Bytes of the record :func:`encode_dead_letter` makes of ``d``: key + value + headers
    (names and values), what librdkafka checks against ``message.max.bytes``."""
    key, value, headers = encode_dead_letter(d)
    return (0 if key is None else len(key)) + len(value) + sum(
        len(k.encode()) + len(v) for k, v in headers)


def make_dead_letter(*, key: bytes | None, value: bytes | None, headers: HeadersIn,
                     topic: str, partition: int, offset: int, code: str, error: str,
                     max_value_bytes: int = DLQ_VALUE_MAX_BYTES, upload_id: str | None = None,
                     failed_at: str | None = None,
                     quarantine: QuarantineRef | None = None,
                     max_record_bytes: int = DLQ_RECORD_MAX_BYTES) -> DeadLetter:
    """Build the dead letter of one record that produced no result, within a size budget.

    The dead-letter record (key + value + headers, as :func:`encode_dead_letter` makes it) is
    at most ``max_record_bytes``, whatever the original record held: the original key and the
    original headers get an eighth of the budget each (beyond it the key is cut,
    ``key_truncated`` with the original ``key_size``; headers are kept in order while they fit,
    ``headers_truncated``), the value what is left, at most ``max_value_bytes``
    (``value_truncated`` with the original ``value_size``). The dead letter's record key is the
    kept key.

    Args:
        key, value, headers: the original record.
        topic, partition, offset: where the record was read.
        code: a :class:`~schemas.reasons.DeadLetterCode` (e.g. ``ContractError.code``).
        error: what went wrong; made one line and cut to 500 characters. Must not hold
            personal data (ContractError messages never do).
        max_value_bytes: original value bytes kept at most (bytes).
        upload_id: the upload id if known; dropped if it is not a valid upload id.
        failed_at: RFC 3339 time; default now (UTC, ms).
        quarantine: where the value was stored instead (``streams.quarantine``): the dead
            letter then keeps none of its bytes (``value_b64`` ``""``, ``value_truncated`` true
            unless the value was empty), only its size and this reference.
        max_record_bytes: size budget of the dead-letter record (bytes, at least
            :data:`DLQ_RECORD_MIN_BYTES`).

    Raises:
        ContractError: ``SCHEMA_INVALID`` if the arguments cannot form a valid dead letter
            (negative offset, a code that is not UPPER_SNAKE, ...).
        ValueError: ``max_record_bytes`` below :data:`DLQ_RECORD_MIN_BYTES`.
    """
    if max_record_bytes < DLQ_RECORD_MIN_BYTES:
        raise ValueError(f"max_record_bytes {max_record_bytes} is below {DLQ_RECORD_MIN_BYTES}")
    share = max_record_bytes // 8
    if upload_id is not None and not F.matches(F.UPLOAD_ID_PATTERN, upload_id):
        upload_id = None
    kraw = None if key is None else bytes(key)
    raw = None if value is None else bytes(value)
    if quarantine is not None:
        max_value_bytes = 0
    hdrs, hdrs_cut, _ = _kept_headers(headers, share)
    key_cut = kraw is not None and len(kraw) > share
    base = {
        "key_b64": _b64(None if kraw is None else kraw[:share]),
        "value_b64": None,
        "value_truncated": False,
        "value_size": 0 if raw is None else len(raw),
        "headers": hdrs,
        "source": {"topic": topic, "partition": partition, "offset": offset},
        "error_code": str(code),
        "error": one_line(error),
        "failed_at": failed_at or F.utc_now_rfc3339(),
        "upload_id": upload_id,
        "key_truncated": True if key_cut else None,
        "key_size": len(kraw) if key_cut and kraw is not None else None,
        "headers_truncated": True if hdrs_cut else None,
    }
    if quarantine is not None:
        base["quarantine"] = quarantine.canonical()

    def build(n: int) -> DeadLetter:
        obj = {**base, "value_b64": _b64(None if raw is None else raw[:n]),
               "value_truncated": raw is not None and len(raw) > n}
        d = validate_obj("DeadLetter", obj)
        assert isinstance(d, DeadLetter)
        return d

    n = 0 if raw is None else min(len(raw), max_value_bytes)
    d = build(n)
    while (excess := dead_letter_record_size(d) - max_record_bytes) > 0 and n > 0:
        n = max(0, n - (excess * 3 + 3) // 4 - 3)  # 4 base64 characters per 3 bytes
        d = build(n)
    return d


def minimal_dead_letter(d: DeadLetter, why: str) -> DeadLetter:
    """The smallest form of dead letter ``d``, for when the full one cannot be produced (e.g.
    the broker refuses it as too large, ``MSG_SIZE_TOO_LARGE``): its ``error_code``, ``source``
    (topic, partition, offset), ``upload_id``, ``failed_at``, ``value_size`` and ``quarantine``
    reference are kept; the key, the value bytes and the headers are dropped (``key_b64`` null,
    ``value_b64`` null, ``headers`` empty, ``key_truncated`` / ``value_truncated`` /
    ``headers_truncated`` true where something was dropped; the record key is then null). Its
    ``error`` starts with ``minimal dead letter (why):``. At most about 1.5 KB whatever ``d``
    held.

    Args:
        d: the full dead letter.
        why: why the full one could not be produced (one line, no personal data), e.g.
            ``"MSG_SIZE_TOO_LARGE"``.
    """
    key = None if d.key_b64 is None else base64.b64decode(d.key_b64)
    obj = d.model_dump(mode="json", exclude_none=True)
    obj.update({
        "key_b64": None, "value_b64": None, "headers": [],
        "value_truncated": d.value_size > 0,
        "error": one_line(f"minimal dead letter ({why}): {d.error}"),
    })
    if key:
        obj.update({"key_truncated": True, "key_size": d.key_size or len(key)})
    if d.headers:
        obj["headers_truncated"] = True
    m = validate_obj("DeadLetter", obj)
    assert isinstance(m, DeadLetter)
    return m


def encode_dead_letter(d: DeadLetter) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    """``(key, value, headers)`` of a dead-letter record: key = the original key (so it lands
    with its upload's partition order), value = compact canonical JSON."""
    return _encode(d, None if d.key_b64 is None else base64.b64decode(d.key_b64))


def decode_dead_letter(value: bytes | None, headers: HeadersIn = None) -> DeadLetter:
    """Decode a dead-letter-topic value.

    Raises:
        ContractError: ``NOT_JSON``, ``UNSUPPORTED_SCHEMA_VERSION`` or ``SCHEMA_INVALID``.
    """
    return _decode("DeadLetter", DeadLetter, value, headers)


# ---------------------------------------------------------------------------------------------
# any event


def detect_kind(obj: Any) -> Kind:
    """Which event a parsed JSON object claims to be, from its required properties:
    ``error_code`` -> DeadLetter, ``live``/``shadow`` -> ShadowDiff, ``status``/``processed_at``
    -> VerificationResult, otherwise UploadEvent."""
    if isinstance(obj, dict):
        if "error_code" in obj or "failed_at" in obj:
            return "DeadLetter"
        if "live" in obj or "shadow" in obj:
            return "ShadowDiff"
        if "status" in obj or "processed_at" in obj:
            return "VerificationResult"
    return "UploadEvent"


def decode_any(value: bytes | None, *, key: bytes | None = None, headers: HeadersIn = None,
               allowed_buckets: Collection[str] = ("uploads",),
               inline_max_bytes: int = INLINE_MAX_BYTES) -> BaseModel:
    """Decode a value of any of the four events (kind from :func:`detect_kind`); uploads get
    the upload policy checks of :func:`decode_upload`.

    Raises:
        ContractError: as the decoder of the detected kind.
    """
    kind = detect_kind(loads(value))
    if kind == "UploadEvent":
        return decode_upload(key, value, headers, allowed_buckets=allowed_buckets,
                             inline_max_bytes=inline_max_bytes)
    return _decode(kind, EVENTS[kind][1], value, headers)
