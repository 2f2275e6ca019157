"""Event contracts: JSON Schema files vs pydantic mirrors, codec, examples, the CLI."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from schemas import codec, formats
from schemas import models as m
from schemas.errors import ContractError
from schemas.reasons import DeadLetterCode, ReasonCode, Status, Task
from streams.cli.schemas import register

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "schemas" / "examples"
CASES = ROOT.parent / "shared" / "cases" / "manifest.json"
KIND_OF_PREFIX = {"upload_event": "UploadEvent", "verification_result": "VerificationResult",
                  "dead_letter": "DeadLetter", "shadow_diff": "ShadowDiff"}


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.json"))


def _parse_name(p: Path) -> tuple[str, str, str | None]:
    """``upload_event.invalid.SCHEMA_INVALID.x.json`` -> (kind, "invalid", "SCHEMA_INVALID")."""
    parts = p.name.split(".")
    kind = KIND_OF_PREFIX[parts[0]]
    validity = parts[1]
    return kind, validity, parts[2] if validity == "invalid" else None


def _decode(kind: str, raw: bytes) -> BaseModel:
    if kind == "UploadEvent":
        return codec.decode_upload(None, raw)
    if kind == "VerificationResult":
        return codec.decode_result(raw)
    if kind == "ShadowDiff":
        return codec.decode_shadow_diff(raw)
    return codec.decode_dead_letter(raw)


def _pydantic_ok(kind: str, obj: Any) -> bool:
    try:
        codec.EVENTS[kind][1].model_validate(obj)
    except ValidationError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# the example corpus


def test_corpus_covers_every_event_and_code() -> None:
    names = [_parse_name(p) for p in _examples()]
    for kind in KIND_OF_PREFIX.values():
        assert (kind, "valid", None) in names
        assert any(n[0] == kind and n[1] == "invalid" for n in names)
    codes = {n[2] for n in names if n[2]}
    # INLINE_TOO_LARGE needs > 512 KiB, KEY_MISMATCH needs a record key: tested below instead;
    # PROCESSING_ERROR and POISON are the worker's verdicts on valid events, UNREADABLE_RECORD
    # its verdict on a record the Kafka client cannot read (tests/integration/test_hostile.py)
    want = set(DeadLetterCode) - {DeadLetterCode.INLINE_TOO_LARGE, DeadLetterCode.KEY_MISMATCH,
                                  DeadLetterCode.PROCESSING_ERROR, DeadLetterCode.POISON,
                                  DeadLetterCode.UNREADABLE_RECORD}
    assert want <= codes


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_example_gives_the_code_in_its_name(path: Path) -> None:
    kind, validity, code = _parse_name(path)
    raw = path.read_bytes()
    if validity == "invalid":
        with pytest.raises(ContractError) as ei:
            _decode(kind, raw)
        assert ei.value.code == code
        assert ei.value.path.startswith("$")
        assert "\n" not in str(ei.value)
        return
    ev = _decode(kind, raw)
    assert type(ev).__name__ == kind
    out = codec.dumps(ev.canonical())
    if validity == "valid":
        assert out == raw, "a canonical example must round-trip byte for byte"
    else:
        assert validity == "valid-noncanonical"
        assert out != raw
        assert codec.dumps(_decode(kind, out).canonical()) == out


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_json_schema_and_pydantic_agree_on_example(path: Path) -> None:
    kind, validity, code = _parse_name(path)
    try:
        obj = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        assert code == "NOT_JSON"
        return
    if code == "NOT_JSON":  # NaN / repeated keys: Python's json reads them, the codec must not
        return
    schema_ok = codec.validator(kind).is_valid(obj)
    assert schema_ok == _pydantic_ok(kind, obj)
    # policy codes are about the consumer's configuration, not the contract
    assert schema_ok == (validity != "invalid" or code in {
        "BUCKET_NOT_ALLOWED", "INLINE_TOO_LARGE", "BAD_BASE64", "KEY_MISMATCH"})


# ---------------------------------------------------------------------------------------------
# the schema files mirror the models


def _defs(kind: str) -> dict[str, tuple[dict[str, Any], type[BaseModel]]]:
    schema = codec.load_schema(kind)
    out = {kind: (schema, codec.EVENTS[kind][1])}
    for name, sub in schema.get("$defs", {}).items():
        out[name] = (sub, getattr(m, name))
    return out


@pytest.mark.parametrize("kind", list(KIND_OF_PREFIX.values()))
def test_schema_objects_have_the_models_fields_in_order(kind: str) -> None:
    for name, (sub, model) in _defs(kind).items():
        fields = model.model_fields
        assert list(sub["properties"]) == list(fields), name
        assert set(sub.get("required", [])) == {k for k, f in fields.items() if f.is_required()}
        closed = sub.get("additionalProperties", True) is False
        assert closed == (model.model_config.get("extra") == "forbid"), name


def test_schema_patterns_are_the_shared_constants() -> None:
    constants = {v for k, v in vars(formats).items() if k.endswith("_PATTERN")}
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for kind in KIND_OF_PREFIX.values():
        walk(codec.load_schema(kind))
    assert found <= constants
    assert formats.UPLOAD_ID_PATTERN in found and formats.RFC3339_PATTERN in found
    assert formats.MEASURE_PATTERN in found


@pytest.mark.parametrize(("task", "defs"), [("card", "CardOptions"),
                                             ("id_photo", "IdPhotoOptions")])
def test_the_published_options_schema_keeps_the_contracts_bounds_and_patterns(
        task: str, defs: str) -> None:
    """``GET /v1/tasks`` publishes each task's options model as JSON Schema. A fresh user's
    trial (session 67) found dpi's bounds there as ``ge`` / ``le``, which JSON Schema does not
    know, and a background as any string: a validator or the page took both as unbounded.
    Each bound and pattern of the contract's definition is now in it, and a value out of them
    fails it."""
    import jsonschema

    published = m.TASKS[task].options.model_json_schema()
    contract = codec.load_schema("UploadEvent")["$defs"][defs]["properties"]
    text = json.dumps(published)
    assert not re.search(r'"(ge|le|gt|lt)":', text), text
    for name, want in contract.items():
        got = next(b for b in published["properties"][name].get("anyOf", [
            published["properties"][name]]) if b.get("type") != "null")
        for key in ("minimum", "maximum", "pattern"):
            assert got.get(key) == want.get(key), (name, key, got)
    check = jsonschema.Draft202012Validator(published)
    if task == "id_photo":
        assert check.is_valid({"dpi": 300, "background": "#00ff00"})
        for bad in ({"dpi": 71}, {"dpi": 1201}, {"background": "purple"},
                    {"background": "#12345"}, {"target_kb": 4}):
            assert not check.is_valid(bad), bad


def test_schema_enums_are_the_python_enums() -> None:
    up = codec.load_schema("UploadEvent")
    res = codec.load_schema("VerificationResult")
    assert up["properties"]["task"]["enum"] == [t.value for t in Task]
    assert up["$defs"]["CardOptions"]["properties"]["doc_type"]["enum"] == [
        *(d.value for d in m.DocTypeHint), None]
    assert up["$defs"]["IdPhotoOptions"]["properties"]["size"]["enum"] == [
        *(s.value for s in m.PhotoSize), None]
    assert res["properties"]["status"]["enum"] == [s.value for s in Status]
    assert res["$defs"]["CardPayload"]["properties"]["doc_type"]["enum"] == [
        d.value for d in m.DocType]
    assert res["properties"]["reasons"]["items"]["examples"] == [r.value for r in ReasonCode]
    assert all(formats.matches(formats.CODE_PATTERN, c) for c in [*ReasonCode, *DeadLetterCode])


def test_ecma_dollar_does_not_match_before_a_final_newline() -> None:
    assert formats.matches(formats.UPLOAD_ID_PATTERN, "u1")
    assert not formats.matches(formats.UPLOAD_ID_PATTERN, "u1\n")
    assert not codec.validator("UploadEvent").is_valid(
        {"upload_id": "u1\n", "task": "card", "image": {"inline_b64": "AAAA"}})
    assert formats.ecma_regex(r"^[$]a$").pattern == r"^[$]a\Z"


@pytest.mark.parametrize(("text", "ok"), [
    ("2026-11-29T16:20:05Z", True), ("2026-11-29t16:20:05.123456789+05:30", True),
    ("2024-02-29T23:59:60Z", True), ("2025-02-29T00:00:00Z", False),
    ("2026-11-29 16:20:05Z",
     False), ("2026-11-29T16:20:05", False), ("2026-13-01T00:00:00Z", False),
])
def test_rfc3339(text: str, ok: bool) -> None:
    assert formats.is_rfc3339(text) is ok
    if ok:
        assert formats.parse_rfc3339(text).utcoffset() is not None


def test_utc_now_rfc3339_is_valid_and_millisecond() -> None:
    s = formats.utc_now_rfc3339()
    assert formats.is_rfc3339(s) and s.endswith("Z") and len(s) == len("2026-11-29T16:20:05.123Z")


# ---------------------------------------------------------------------------------------------
# the external cases


def test_every_manifest_event_is_refused_with_a_stable_code() -> None:
    if not CASES.exists():
        pytest.skip(f"{CASES} is absent (external test cases not checked out next to the repo)")
    events = json.loads(CASES.read_text())["events"]
    assert events
    want = {"missing_upload_id": {"SCHEMA_INVALID"}, "path_traversal_id": {"SCHEMA_INVALID"},
            "unknown_task": {"SCHEMA_INVALID"}, "bad_base64": {"BAD_BASE64", "SCHEMA_INVALID"},
            "not_json": {"NOT_JSON"}}
    for e in events:
        raw = base64.b64decode(e["raw"]) if "raw" in e else json.dumps(e["value"]).encode()
        if e["name"] == "missing_object":  # schema-valid; the worker answers OBJECT_NOT_FOUND
            ev = codec.decode_upload(None, raw)
            assert (ev.image.ref is not None and ev.image.ref.key
                    == e["value"]["image"]["ref"]["key"])
            continue
        codes = []
        for _ in range(2):  # stable: the same code every time
            with pytest.raises(ContractError) as ei:
                codec.decode_upload(None, raw)
            codes.append((ei.value.code, ei.value.path))
        assert codes[0] == codes[1]
        assert codes[0][0] in want[e["name"]], e["name"]
        if e["name"] == "path_traversal_id":
            assert codes[0][1] == "$.upload_id"


# ---------------------------------------------------------------------------------------------
# codec: upload policy

_MIN = {"schema_version": 1, "upload_id": "u1", "task": "card",
        "image": {"ref": {"bucket": "uploads", "key": "a.jpg"}}}


def _inline(n: int) -> bytes:
    return codec.dumps({**_MIN, "image": {"inline_b64": base64.b64encode(bytes(n)).decode()}})


def test_encode_upload_record_layout() -> None:
    ev = codec.decode_upload(b"u1", codec.dumps(_MIN))
    key, value, headers = codec.encode_upload(ev)
    assert key == b"u1"
    assert value == b'{"schema_version":1,"upload_id":"u1","task":"card","image":{"ref":' \
                    b'{"bucket":"uploads","key":"a.jpg"}}}'
    assert headers == [("content-type", b"application/json"), ("schema-version", b"1")]


def test_key_must_equal_upload_id_when_present() -> None:
    raw = codec.dumps(_MIN)
    assert codec.decode_upload(None, raw).upload_id == "u1"
    assert codec.decode_upload(b"u1", raw).upload_id == "u1"
    for key in (b"u2", b"", b"u1 "):
        with pytest.raises(ContractError) as ei:
            codec.decode_upload(key, raw)
        assert ei.value.code == "KEY_MISMATCH"


def test_bucket_allow_list() -> None:
    raw = codec.dumps({**_MIN, "image": {"ref": {"bucket": "other", "key": "a.jpg"}}})
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, raw)
    assert (ei.value.code, ei.value.path) == ("BUCKET_NOT_ALLOWED", "$.image.ref.bucket")
    assert codec.decode_upload(None, raw, allowed_buckets={"other"}).image.ref.bucket == "other"


@pytest.mark.parametrize("n", [1, 2, 3, 100, 101, 102])
def test_inline_limit_is_exact_in_decoded_bytes(n: int) -> None:
    ev = codec.decode_upload(None, _inline(n), inline_max_bytes=n)
    assert codec.inline_bytes(ev) == bytes(n)
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, _inline(n + 1), inline_max_bytes=n)
    assert ei.value.code == "INLINE_TOO_LARGE" and str(n) in str(ei.value)


def test_default_inline_limit_is_512_kib() -> None:
    assert len(codec.inline_bytes(codec.decode_upload(None, _inline(512 * 1024)))) == 524288
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, _inline(512 * 1024 + 1))
    assert ei.value.code == "INLINE_TOO_LARGE"


def test_inline_bytes_of_a_ref_is_none() -> None:
    assert codec.inline_bytes(codec.decode_upload(None, codec.dumps(_MIN))) is None


_REF = b'{"upload_id":"u1","task":"card","image":{"ref":{"bucket":"uploads","key":"a"}}'


@pytest.mark.parametrize(("value", "message"), [
    (None, "value is null (tombstone)"), (b"", "value is empty"),
    (b" \r\n\t", "value is empty (whitespace only)"), (b"{", "value is not JSON: Expecting"),
    (b"[" * 5000 + b"]" * 5000, "value is not JSON: arrays or objects nested too deeply"),
    (b'{"options":{"size":"one_inch","size":"two_inch"}}',
     'value is not JSON: an object repeats a key'),
    (b'{"upload_id":"a\x01"}', "value is not JSON: Invalid control character at char 15"),
    (b'{"n":' + b"9" * 5000 + b"}",
     "value is not JSON: a number is out of the IEEE 754 double range"),
])
def test_not_json_says_why(value: bytes | None, message: str) -> None:
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, value)
    assert ei.value.code == "NOT_JSON" and str(ei.value).startswith(message)


def test_a_repeated_key_is_not_named_in_a_dead_letter() -> None:
    """A record's keys are whatever its producer wrote (a name, say): the NOT_JSON reason a dead
    letter carries does not repeat it; the gateway, answering the sender, does."""
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, b'{"options":{"Jane Roe":1,"Jane Roe":2}}')
    assert ei.value.code == "NOT_JSON" and "Jane" not in str(ei.value)


@pytest.mark.parametrize(("value", "code"), [
    (None, "NOT_JSON"), (b"\xff\xfe{}", "NOT_JSON"), (b"", "NOT_JSON"), (b"[" * 100000, "NOT_JSON"),
    (_REF + b',"schema_version":1e3}', "UNSUPPORTED_SCHEMA_VERSION"),
    (_REF + b',"x":1e400}', "NOT_JSON"), (_REF + b',"x":' + b"9" * 400 + b"}", "NOT_JSON"),
    (_REF + b',"x":1e308}', None), (_REF + b',"trace_id":"\\ud83d\\ude00"}', "SCHEMA_INVALID"),
    (_REF + b',"x":"\\udc00"}', "NOT_JSON"), (_REF + b',"x":"\\\\udc00"}', None),
    (_REF + b',"schema_version":"2"}', "SCHEMA_INVALID"),
    (_REF + b',"schema_version":1.0}', None),
])
def test_decode_edge_values(value: bytes | None, code: str | None) -> None:
    if code is None:
        assert codec.decode_upload(None, value).schema_version == 1
        return
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, value)
    assert ei.value.code == code


def test_lone_surrogate_cannot_be_encoded() -> None:
    ev = m.UploadEvent(upload_id="u1", task=Task.CARD,
                       image=m.ImageSource(ref=m.ImageRef(bucket="uploads", key="a\ud800")))
    with pytest.raises(ContractError) as ei:
        codec.encode_upload(ev)
    assert ei.value.code == "SCHEMA_INVALID"


def test_schema_version_header_newer_is_refused() -> None:
    raw = codec.dumps(_MIN)
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, raw, [("schema-version", b"2")])
    assert ei.value.code == "UNSUPPORTED_SCHEMA_VERSION"
    assert codec.decode_upload(None, raw, {"schema-version": b"1"}).upload_id == "u1"


@pytest.mark.parametrize("value", [b"abc", b"", b" ", b"0", b"-1", b"1.0", b"+1", b"01x",
                                   b"\xd9\xa1", b"9" * 40, None])
def test_schema_version_header_that_is_not_a_version_is_refused(value: bytes | None) -> None:
    """A hostile or broken header is refused with the version code, not ignored (an absent
    header means 1; ``2`` is refused, so ``abc`` or a null value must not pass as 1)."""
    raw = codec.dumps(_MIN)
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, raw, [("schema-version", value)])
    assert ei.value.code == "UNSUPPORTED_SCHEMA_VERSION"


def test_schema_version_header_repeated_is_checked_each_time() -> None:
    raw = codec.dumps(_MIN)
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, raw, [("schema-version", b"1"), ("Schema-Version", b"2")])
    assert ei.value.code == "UNSUPPORTED_SCHEMA_VERSION"
    assert codec.decode_upload(None, raw,
                               [("schema-version", b" 1"), ("x", None)]).upload_id == "u1"
    assert codec.decode_upload(None, raw, [("SCHEMA-VERSION", "1")]).upload_id == "u1"


def test_messages_do_not_echo_values() -> None:
    secret = "Jane Doe 110101199003070000"
    for field in ("upload_id", "subject_ref", "trace_id"):
        with pytest.raises(ContractError) as ei:
            codec.decode_upload(None, codec.dumps({**_MIN, field: secret}))
        assert ei.value.code == "SCHEMA_INVALID" and ei.value.path == f"$.{field}"
        assert "Jane" not in str(ei.value)


def test_models_are_frozen() -> None:
    ev = m.UploadEvent.model_validate(_MIN)
    with pytest.raises(ValidationError):
        ev.upload_id = "u2"  # type: ignore[misc]  # frozen: the assignment must raise


# ---------------------------------------------------------------------------------------------
# codec: results and dead letters


def _result() -> m.VerificationResult:
    return codec.decode_result((EXAMPLES / "verification_result.valid.card_accepted.json")
                               .read_bytes())


def test_result_record_round_trip() -> None:
    r = _result()
    key, value, headers = codec.encode_result(r)
    assert key == r.upload_id.encode()
    assert dict(headers)["schema-version"] == b"1"
    back = codec.decode_result(value, headers)
    assert back == r and back.card is not None and back.card.quad is not None
    assert back.card.quad[0] == (112.5, 80.25)
    assert back.reasons == ()


def test_unknown_reason_code_is_kept_as_text() -> None:
    r = codec.decode_result((EXAMPLES / "verification_result.valid.unknown_reason_code.json")
                            .read_bytes())
    assert r.reasons == (ReasonCode.NO_CARD, "LOW_LIGHT")
    assert isinstance(r.reasons[0], ReasonCode) and not isinstance(r.reasons[1], ReasonCode)


def test_dead_letter_truncates_and_keeps_the_record() -> None:
    value = bytes(range(256)) * 300  # 76800 bytes
    d = codec.make_dead_letter(key=b"u9", value=value, headers=[("trace", b"x"), ("n", None)],
                               topic="cardstream.uploads.v1", partition=2, offset=77,
                               code=DeadLetterCode.NOT_JSON, error="line one\r\n\tline two " * 40,
                               upload_id="u9")
    assert d.value_truncated and d.value_size == 76800
    assert base64.b64decode(d.value_b64 or "") == value[:65536]
    assert d.error.startswith("line one line two line one") and len(d.error) == 500
    assert d.error.endswith("…") and "\n" not in d.error
    assert [(h.key, h.value_b64) for h in d.headers] == [("trace", "eA=="), ("n", None)]
    assert (d.source.topic, d.source.partition, d.source.offset) == ("cardstream.uploads.v1", 2, 77)
    assert formats.is_rfc3339(d.failed_at) and d.upload_id == "u9"
    key, out, headers = codec.encode_dead_letter(d)
    assert key == b"u9"
    assert codec.decode_dead_letter(out, headers) == d
    assert codec.dumps(codec.decode_dead_letter(out).canonical()) == out


def test_dead_letter_small_null_and_bad_upload_id() -> None:
    d = codec.make_dead_letter(key=None, value=None, headers=None, topic="t", partition=0,
                               offset=0, code="NOT_JSON", error="value is null (tombstone)",
                               upload_id="../x", max_value_bytes=10)
    assert (d.key_b64, d.value_b64, d.value_truncated, d.value_size, d.upload_id) == (
        None, None, False, 0, None)
    assert codec.encode_dead_letter(d)[0] is None
    small = codec.make_dead_letter(key=b"k", value=b"0123456789", headers={}, topic="t",
                                   partition=0, offset=1, code="SCHEMA_INVALID", error="x",
                                   max_value_bytes=10)
    assert not small.value_truncated and base64.b64decode(small.value_b64 or "") == b"0123456789"
    with pytest.raises(ContractError):
        codec.make_dead_letter(key=None, value=b"", headers=None, topic="t", partition=0,
                               offset=-1, code="NOT_JSON", error="x")


def test_dead_letter_of_a_700_kb_key_fits_and_says_so() -> None:
    """Issue 31: the broker took a record with a 700 000-byte key; its dead letter copied the key
    and was over librdkafka's 1 000 000-byte message limit (MSG_SIZE_TOO_LARGE)."""
    value = b'{"upload_id":"u1"}'
    d = codec.make_dead_letter(key=b"k" * 700_000, value=value, headers=[("trace", b"t1")],
                               topic="cardstream.uploads.v1", partition=0, offset=3,
                               code=DeadLetterCode.KEY_MISMATCH, error="record key is not the "
                               "upload_id at $.upload_id", upload_id="u1")
    key, out, headers = codec.encode_dead_letter(d)
    assert codec.dead_letter_record_size(d) == len(key) + len(out) + sum(
        len(k) + len(v) for k, v in headers) <= codec.DLQ_RECORD_MAX_BYTES == 256 * 1024
    assert (d.key_truncated, d.key_size) == (True, 700_000)
    assert key == b"k" * (codec.DLQ_RECORD_MAX_BYTES // 8)  # the record key is the kept part
    assert base64.b64decode(d.value_b64 or "") == value and not d.value_truncated
    assert d.headers_truncated is None and [h.key for h in d.headers] == ["trace"]
    assert codec.decode_dead_letter(out, headers) == d


def test_dead_letter_budget_cuts_headers_in_order_and_the_value_last() -> None:
    hs = [("a", b"1" * 10), ("b", b"2" * 40_000), ("c", b"3")]
    d = codec.make_dead_letter(key=b"u1", value=b"v" * 300_000, headers=hs, topic="t",
                               partition=0, offset=0, code="NOT_JSON", error="x",
                               max_value_bytes=10**6, max_record_bytes=codec.DLQ_RECORD_MIN_BYTES)
    # an eighth of 16 KiB (2048 bytes) for the headers: "a" whole, "b" cut, "c" dropped
    assert [(h.key, len(base64.b64decode(h.value_b64 or ""))) for h in d.headers] == [
        ("a", 10), ("b", 2048 - 11 - 1)]
    assert d.headers_truncated is True and d.key_truncated is None
    assert d.value_truncated and d.value_size == 300_000
    assert codec.DLQ_RECORD_MIN_BYTES - 8 <= codec.dead_letter_record_size(d) <= (
        codec.DLQ_RECORD_MIN_BYTES)
    with pytest.raises(ValueError, match="below"):
        codec.make_dead_letter(key=None, value=None, headers=None, topic="t", partition=0,
                               offset=0, code="NOT_JSON", error="x", max_record_bytes=1000)


def test_dead_letter_topic_takes_the_largest_dead_letter() -> None:
    from streams.kafka import topic_specs
    from streams.settings import KafkaSettings

    k = KafkaSettings()
    (dlq,) = [t for t in topic_specs(k) if t.topic == k.dlq_topic]
    # with room for the record batch's own overhead (61 bytes + a record header per record)
    assert int(dlq.config["max.message.bytes"]) >= codec.DLQ_RECORD_MAX_BYTES + 1024


def test_contract_error_becomes_a_dead_letter() -> None:
    raw = (EXAMPLES / "upload_event.invalid.SCHEMA_INVALID.path_traversal_id.json").read_bytes()
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, raw)
    e = ei.value
    d = codec.make_dead_letter(key=None, value=raw, headers=None, topic="cardstream.uploads.v1",
                               partition=0, offset=5, code=e.code, error=f"{e.path}: {e}")
    assert d.error_code == DeadLetterCode.SCHEMA_INVALID
    assert d.error == "$.upload_id: does not match the required pattern"


def test_readme_examples_are_valid_events() -> None:
    text = (ROOT / "schemas" / "README.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.DOTALL)
    kinds = [type(codec.decode_any(b.encode())).__name__ for b in blocks]
    assert kinds == ["UploadEvent", "VerificationResult", "DeadLetter", "DeadLetter", "ShadowDiff"]
    quarantined = codec.decode_dead_letter(blocks[3].encode())
    assert quarantined.quarantine is not None and quarantined.value_b64 == ""


def test_detect_kind() -> None:
    for p in _examples():
        kind, validity, _ = _parse_name(p)
        if validity != "invalid":
            assert codec.detect_kind(json.loads(p.read_bytes())) == kind


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_validate(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # keep "schemas" as a sub-command
        pass

    good = EXAMPLES / "upload_event.valid.minimal.json"
    res_ok = EXAMPLES / "verification_result.valid.card_accepted.json"
    bad = EXAMPLES / "upload_event.invalid.SCHEMA_INVALID.path_traversal_id.json"
    runner = CliRunner()
    r = runner.invoke(app, ["schemas", "validate", str(good), str(res_ok)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [f"{good}: ok (UploadEvent)",
                                     f"{res_ok}: ok (VerificationResult)"]
    r = runner.invoke(app, ["schemas", "validate", str(good), str(bad)])
    assert r.exit_code == 1
    assert r.output.splitlines()[1] == (
        f"{bad}: SCHEMA_INVALID at $.upload_id: does not match the required pattern")
    other = EXAMPLES / "upload_event.invalid.BUCKET_NOT_ALLOWED.results_bucket.json"
    assert runner.invoke(app, ["schemas", "validate", str(other)]).exit_code == 1
    assert runner.invoke(app, ["schemas", "validate", "--bucket", "results",
                               str(other)]).exit_code == 0
    missing = tmp_path / "nope.json"
    r = runner.invoke(app, ["schemas", "validate", str(missing)])
    assert r.exit_code == 1 and "UNREADABLE" in r.output


def test_minimal_dead_letter_keeps_code_source_and_sizes_only() -> None:
    d = codec.make_dead_letter(key=b"k" * 5000, value=b"v" * 100, headers=[("trace", b"t" * 900)],
                               topic="up", partition=3, offset=41, code="SCHEMA_INVALID",
                               error="required property 'task' is missing", upload_id="u-1",
                               max_value_bytes=100)
    m = codec.minimal_dead_letter(d, "MSG_SIZE_TOO_LARGE")
    assert (m.key_b64, m.value_b64, tuple(m.headers)) == (None, None, ())
    assert (m.key_truncated, m.key_size, m.value_truncated, m.value_size, m.headers_truncated) == (
        True, 5000, True, 100, True)
    assert (str(m.error_code), m.upload_id, m.failed_at) == ("SCHEMA_INVALID", "u-1", d.failed_at)
    assert (m.source.topic, m.source.partition, m.source.offset) == ("up", 3, 41)
    assert (m.error
            == "minimal dead letter (MSG_SIZE_TOO_LARGE): required property 'task' is missing")
    key, _, _ = codec.encode_dead_letter(m)
    assert key is None and codec.dead_letter_record_size(m) < 1500


def test_a_validators_own_message_comes_without_pydantics_value_error_prefix() -> None:
    """A validator's ``ValueError`` is its message alone (pydantic's ``Value error, `` reached
    the CLI's and the settings' lines); pydantic's own messages are kept as they are."""
    from pydantic import BaseModel, ValidationError, field_validator

    from schemas.errors import validation_message

    class Odd(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def _even(cls, n: int) -> int:
            if n % 2:
                raise ValueError(f"{n} is odd")
            return n

    with pytest.raises(ValidationError) as own:
        Odd(n=3)
    assert validation_message(own.value) == "n: 3 is odd"
    with pytest.raises(ValidationError) as typed:
        Odd.model_validate({"n": "three"})
    assert validation_message(typed.value, paths=False) == (
        "Input should be a valid integer, unable to parse string as an integer")
