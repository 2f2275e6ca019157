"""Property tests (hypothesis) for the event contracts.

- generated valid events round-trip byte for byte through the codec and are accepted by the
  JSON Schema file as well as by pydantic;
- generated invalid events (one targeted defect each) are refused with the expected code;
- random edits of valid events never make the JSON Schema and pydantic disagree.
"""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from schemas import codec, formats
from schemas import models as m
from schemas.errors import ContractError
from schemas.reasons import DeadLetterCode, ReasonCode, Status, Task

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---------------------------------------------------------------------------------------------
# strategies for valid values

upload_ids = st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True).filter(
    lambda s: s not in (".", ".."))
buckets = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", fullmatch=True)
_key_chars = st.characters(blacklist_categories=("Cs", "Cc"))
object_keys = st.text(_key_chars, min_size=1, max_size=40).filter(
    lambda s: formats.matches(formats.OBJECT_KEY_PATTERN, s))
sha256s = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)
opaques = st.from_regex(r"[A-Za-z0-9._:-]{1,128}", fullmatch=True)
media_types = st.sampled_from(["image/jpeg", "image/png", "image/heic", "image/webp",
                               "application/octet-stream", "IMAGE/JPEG"])
codes = st.from_regex(r"[A-Z][A-Z0-9_]{0,20}", fullmatch=True)


@st.composite
def rfc3339s(draw: st.DrawFn) -> str:
    t = draw(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2199, 12, 31)))
    frac = draw(st.sampled_from(["", ".1", ".123", ".123456", ".123456789"]))
    zone = draw(st.sampled_from(["Z", "z", "+00:00", "-05:30", "+14:00"]))
    sep = draw(st.sampled_from(["T", "t"]))
    return t.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + frac + zone


finite = st.floats(allow_nan=False, allow_infinity=False)
nonneg = st.floats(min_value=0, allow_nan=False, allow_infinity=False)
nonneg_ints = st.integers(min_value=0, max_value=2**63 - 1)
pos_ints = st.integers(min_value=1, max_value=100_000)
b64s = st.binary(max_size=48).map(lambda b: base64.b64encode(b).decode())


def opt(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | s


image_refs = st.builds(m.ImageRef, bucket=buckets, key=object_keys, size_bytes=opt(nonneg_ints),
                       sha256=opt(sha256s))
images = (st.builds(m.ImageSource, ref=image_refs)
          | st.builds(m.ImageSource, inline_b64=st.binary(min_size=1, max_size=64).map(
              lambda b: base64.b64encode(b).decode())))
card_options = st.builds(m.CardOptions, doc_type=opt(st.sampled_from(m.DocTypeHint)))
backgrounds = st.sampled_from(["white", "blue", "red"]) | st.from_regex(
    r"#[0-9A-Fa-f]{6}", fullmatch=True)
id_photo_options = st.builds(m.IdPhotoOptions, size=opt(st.sampled_from(m.PhotoSize)),
                             background=opt(backgrounds), alpha_matting=opt(st.booleans()))


@st.composite
def upload_events(draw: st.DrawFn) -> m.UploadEvent:
    task = draw(st.sampled_from(Task))
    options = draw(opt(card_options if task == Task.CARD else id_photo_options))
    return m.UploadEvent(
        upload_id=draw(upload_ids), task=task, image=draw(images),
        content_type=draw(opt(media_types)), submitted_at=draw(opt(rfc3339s())),
        options=options, trace_id=draw(opt(opaques)), subject_ref=draw(opt(opaques)))


object_refs = st.builds(m.ObjectRef, bucket=buckets, key=object_keys, size_bytes=nonneg_ints,
                        sha256=sha256s, content_type=media_types, width=pos_ints, height=pos_ints)
points = st.tuples(finite, finite)
card_payloads = st.builds(
    m.CardPayload, quad=opt(st.tuples(points, points, points, points)),
    confidence=st.floats(min_value=0, max_value=1), doc_type=st.sampled_from(m.DocType),
    rectified=opt(object_refs))
id_photo_payloads = st.builds(
    m.IdPhotoPayload, photo=opt(object_refs), size=st.sampled_from(m.PhotoSize),
    background=backgrounds, face_box=opt(st.tuples(nonneg, nonneg, nonneg, nonneg)),
    width=pos_ints, height=pos_ints)
names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
source_refs = st.builds(m.SourceRef, topic=names, partition=st.integers(0, 10_000),
                        offset=nonneg_ints)


@st.composite
def results(draw: st.DrawFn) -> m.VerificationResult:
    task = draw(st.sampled_from(Task))
    reasons = draw(st.lists(st.sampled_from(list(ReasonCode)) | codes, unique=True, max_size=4))
    return m.VerificationResult(
        upload_id=draw(upload_ids), task=task, status=draw(st.sampled_from(Status)),
        reasons=tuple(reasons),
        card=draw(opt(card_payloads)) if task == Task.CARD else None,
        id_photo=draw(opt(id_photo_payloads)) if task == Task.ID_PHOTO else None,
        model=draw(opt(st.builds(m.ModelRef, name=names, version=names, provider=names))),
        timings=draw(st.builds(m.Timings, queue_ms=nonneg, batch_size=st.integers(0, 4096),
                               inference_ms=nonneg, total_ms=nonneg)),
        source=draw(source_refs), processed_at=draw(rfc3339s()),
        submitted_at=draw(opt(rfc3339s())), trace_id=draw(opt(opaques)))


@st.composite
def dead_letters(draw: st.DrawFn) -> m.DeadLetter:
    src = draw(source_refs)
    return codec.make_dead_letter(
        key=draw(opt(st.binary(max_size=40))), value=draw(opt(st.binary(max_size=300))),
        headers=draw(st.lists(st.tuples(names, opt(st.binary(max_size=20))), max_size=3)),
        topic=src.topic, partition=src.partition, offset=src.offset,
        code=draw(st.sampled_from(list(DeadLetterCode)) | codes),
        error=draw(st.text(max_size=700)), max_value_bytes=draw(st.integers(0, 400)),
        upload_id=draw(opt(upload_ids)), failed_at=draw(opt(rfc3339s())))


def _decode(kind: str, raw: bytes) -> BaseModel:
    if kind == "UploadEvent":
        return codec.decode_upload(None, raw, allowed_buckets=_ANY_BUCKET)
    if kind == "VerificationResult":
        return codec.decode_result(raw)
    return codec.decode_dead_letter(raw)


class _AnyBucket:
    def __contains__(self, item: object) -> bool:
        return True


_ANY_BUCKET: Any = _AnyBucket()


def _check_round_trip(kind: str, ev: BaseModel) -> None:
    raw = codec.dumps(ev.canonical())
    assert codec.validator(kind).is_valid(ev.canonical())
    back = _decode(kind, raw)
    assert back == ev
    assert codec.dumps(back.canonical()) == raw


# ---------------------------------------------------------------------------------------------
# valid events round-trip


@SETTINGS
@given(upload_events())
def test_generated_uploads_round_trip(ev: m.UploadEvent) -> None:
    _check_round_trip("UploadEvent", ev)
    key, value, headers = codec.encode_upload(ev)
    assert codec.decode_upload(key, value, headers, allowed_buckets=_ANY_BUCKET) == ev
    assert key == ev.upload_id.encode()
    if ev.image.inline_b64 is not None:
        assert base64.b64encode(codec.inline_bytes(ev) or b"").decode() == ev.image.inline_b64


@SETTINGS
@given(results())
def test_generated_results_round_trip(r: m.VerificationResult) -> None:
    _check_round_trip("VerificationResult", r)


@SETTINGS
@given(dead_letters())
def test_generated_dead_letters_round_trip(d: m.DeadLetter) -> None:
    _check_round_trip("DeadLetter", d)
    assert len(d.error) <= 500 and "\n" not in d.error and "\r" not in d.error


@SETTINGS
@given(key=st.integers(0, 300_000), value=st.integers(0, 1_200_000),
       headers=st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 40_000)), max_size=12),
       error=st.text(max_size=700), budget=st.integers(codec.DLQ_RECORD_MIN_BYTES, 300_000),
       max_value=st.integers(0, 1_500_000))
def test_dead_letter_record_fits_its_budget(key: int, value: int, headers: list[tuple[int, int]],
                                            error: str, budget: int, max_value: int) -> None:
    """Whatever the original record holds, the dead-letter record (key + value + headers as
    produced) is within the budget, says what it cut, and keeps the start of each part."""
    k, v = b"k" * key, bytes(range(256)) * (value // 256) + b"v" * (value % 256)
    hs = [("h" * a, b"x" * b) for a, b in headers]
    d = codec.make_dead_letter(key=k, value=v, headers=hs, topic="t", partition=0, offset=1,
                               code="NOT_JSON", error=error, max_value_bytes=max_value,
                               max_record_bytes=budget)
    assert codec.dead_letter_record_size(d) <= budget
    kept_key = base64.b64decode(d.key_b64 or "")
    assert k.startswith(kept_key) and (d.key_truncated is True) == (len(kept_key) < key)
    assert d.key_size == (key if d.key_truncated else None)
    kept = base64.b64decode(d.value_b64 or "")
    assert v.startswith(kept) and d.value_truncated == (len(kept) < value) and d.value_size == value
    assert len(kept) == min(value, max_value) or codec.dead_letter_record_size(d) > budget - 4096
    assert [h.key for h in d.headers] == [a for a, _ in hs][: len(d.headers)]
    assert (d.headers_truncated is True) == (
        [(h.key, base64.b64decode(h.value_b64 or "")) for h in d.headers] != hs)
    _check_round_trip("DeadLetter", d)


# ---------------------------------------------------------------------------------------------
# invalid events are refused

_not_upload_id = st.one_of(
    st.text(max_size=140).filter(lambda s: not formats.matches(formats.UPLOAD_ID_PATTERN, s)),
    st.sampled_from([".", "..", "../x", "a/b", "a\n", "", "a" * 129, "ü"]))
_not_a_string = st.one_of(st.none(), st.booleans(), st.integers(), finite,
                          st.lists(st.integers(), max_size=2))


@st.composite
def broken_uploads(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid upload dict with one defect, and the code it must get."""
    obj = draw(upload_events()).canonical()
    defect = draw(st.sampled_from(["id", "id_type", "drop", "task", "version", "both", "bucket",
                                   "key", "date", "options", "subject"]))
    if defect == "id":
        obj["upload_id"] = draw(_not_upload_id)
    elif defect == "id_type":
        obj["upload_id"] = draw(_not_a_string)
    elif defect == "drop":
        del obj[draw(st.sampled_from(["upload_id", "task", "image"]))]
    elif defect == "task":
        obj["task"] = draw(st.text(max_size=12).filter(lambda s: s not in ("card", "id_photo")))
    elif defect == "version":
        obj["schema_version"] = draw(st.integers(min_value=2)
                                     | st.floats(2, 1e9).map(float.__ceil__))
        return obj, "UNSUPPORTED_SCHEMA_VERSION"
    elif defect == "both":
        obj["image"] = {"ref": {"bucket": "uploads", "key": "a"}, "inline_b64": "AAAA"}
    elif defect == "bucket":
        obj["image"] = {"ref": {"bucket": draw(st.text(max_size=70).filter(
            lambda s: not formats.matches(formats.BUCKET_PATTERN, s))), "key": "a"}}
    elif defect == "key":
        obj["image"] = {"ref": {"bucket": "uploads", "key": draw(st.sampled_from(
            ["", "/a", "..", "a/../b", "a/./b", "a\nb", "a\x00", "k" * 1025]))}}
    elif defect == "date":
        obj["submitted_at"] = draw(st.text(max_size=30).filter(lambda s: not formats.is_rfc3339(s)))
    elif defect == "options":
        wrong = {"card": {"size": "one_inch"}, "id_photo": {"doc_type": "auto"}}[obj["task"]]
        obj["options"] = draw(st.sampled_from([wrong, {"unknown": 1}, [], "auto", 3]))
    else:
        obj["subject_ref"] = draw(st.text(max_size=140).filter(
            lambda s: not formats.matches(formats.OPAQUE_PATTERN, s)))
    return obj, "SCHEMA_INVALID"


@SETTINGS
@given(broken_uploads())
def test_broken_uploads_are_refused(case: tuple[dict[str, Any], str]) -> None:
    obj, code = case
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, codec.dumps(obj), allowed_buckets=_ANY_BUCKET)
    assert ei.value.code == code
    if code == "SCHEMA_INVALID":
        assert not codec.validator("UploadEvent").is_valid(obj)
        with pytest.raises(ValidationError):
            m.UploadEvent.model_validate(obj)


@SETTINGS
@given(upload_events(), st.binary(min_size=1, max_size=200), st.integers(0, 200))
def test_inline_limit_property(ev: m.UploadEvent, data: bytes, limit: int) -> None:
    obj = {**ev.canonical(), "image": {"inline_b64": base64.b64encode(data).decode()}}
    raw = codec.dumps(obj)
    if len(data) > limit:
        with pytest.raises(ContractError) as ei:
            codec.decode_upload(None, raw, inline_max_bytes=limit)
        assert ei.value.code == "INLINE_TOO_LARGE"
    else:
        assert codec.inline_bytes(codec.decode_upload(None, raw, inline_max_bytes=limit)) == data


@SETTINGS
@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_decoder(raw: bytes) -> None:
    try:
        codec.decode_upload(None, raw)
    except ContractError as e:
        assert e.code in set(DeadLetterCode)


# ---------------------------------------------------------------------------------------------
# JSON Schema and pydantic agree under random edits

_interesting = st.sampled_from([
    None, True, False, 0, 1, 1.0, -1, 2, 1.5, 2**70, "", "1", "card", "id_photo", "accepted",
    "NO_CARD", "no_card", "uploads", "a.jpg", "white", "#00ff00", "auto", "one_inch", [], {},
    [1.0, 2.0], [[0.0, 0.0]] * 4, {"ref": {"bucket": "uploads", "key": "a"}},
    {"inline_b64": "AAAA"}, "2026-11-29T16:20:05Z", "AAAA", "0" * 64])
# integers within the double range: the codec refuses larger numbers as NOT_JSON before any model
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**1000), 2**1000) | finite | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


_GEN: dict[str, Any] = {"UploadEvent": upload_events(), "VerificationResult": results(),
                        "DeadLetter": dead_letters()}


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node[p]
    return node


@st.composite
def edited(draw: st.DrawFn) -> tuple[str, Any]:
    """A generated event with one or two random edits: a value from another event of the same
    kind at the same place (often still valid), an interesting or random JSON value, or a
    deleted property."""
    kind = draw(st.sampled_from(sorted(_GEN)))
    obj = copy.deepcopy(draw(_GEN[kind]).canonical())
    donor = draw(_GEN[kind]).canonical()
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(_paths(obj)))
        how = draw(st.sampled_from(["donor", "donor", "interesting", "json", "delete"]))
        try:
            value = copy.deepcopy(_get(donor, path)) if how == "donor" else None
        except (KeyError, IndexError, TypeError):
            how = "interesting"
        if how == "interesting":
            value = copy.deepcopy(draw(_interesting))
        elif how == "json":
            value = draw(_json)
        if not path:
            obj = value
            break
        parent = _get(obj, path[:-1])
        if how == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    return kind, obj


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(edited())
def test_json_schema_and_pydantic_agree_on_random_edits(case: tuple[str, Any]) -> None:
    kind, obj = case
    schema_ok = codec.validator(kind).is_valid(obj)
    try:
        codec.EVENTS[kind][1].model_validate(obj)
        model_ok = True
    except ValidationError:
        model_ok = False
    event(f"{kind} valid={schema_ok}")
    assert schema_ok == model_ok, (kind, obj)


def test_utc_now_is_utc() -> None:
    t = formats.parse_rfc3339(formats.utc_now_rfc3339())
    assert abs((t - datetime.now(UTC)).total_seconds()) < 5
