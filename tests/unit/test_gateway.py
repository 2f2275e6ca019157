"""The HTTP gateway's pieces without a server (issue 41): API keys, rate limits, upload ids,
request checks, the result cache and waits, the answers' JSON Schemas."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from processors.decode import DecodeSettings
from schemas import codec
from schemas.gateway import HTTP_STATUS, IMAGE_CODES, GatewayCode, GatewayError, UploadAccepted
from streams.gateway.app import artifact_name, output_ref
from streams.gateway.errors import ApiKeysError, Refused
from streams.gateway.keys import ApiKeys, parse_keys
from streams.gateway.limits import RateLimiter
from streams.gateway.results import ResultCache, owner_of
from streams.gateway.settings import GatewaySettings
from streams.gateway.uploads import (
    canonical_options,
    check_request,
    parse_options,
    probe,
    upload_id_for,
)
from streams.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("card", "id_photo")


# ---- API keys ----------------------------------------------------------------------------------

def test_keys_file_is_parsed_and_only_digests_are_kept(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_text("# clients\nkiosk:kiosk-key-0123456789ab\n\nhr-tool:hr-key-0123456789abcd\n"
                 "kiosk:kiosk-new-key-0123456789\n")
    keys = ApiKeys(f)
    assert keys.clients == ["hr-tool", "kiosk"]
    assert keys.client_of("Bearer kiosk-key-0123456789ab") == "kiosk"
    assert keys.client_of("bearer kiosk-new-key-0123456789") == "kiosk"  # rotation: two keys
    assert keys.client_of("Bearer hr-key-0123456789abcd") == "hr-tool"
    for bad in (None, "", "Bearer", "Bearer ", "Basic kiosk-key-0123456789ab",
                "Bearer kiosk-key-0123456789aX", "kiosk-key-0123456789ab"):
        assert keys.client_of(bad) is None, bad
    assert "kiosk-key" not in repr(keys._keys)  # digests only


@pytest.mark.parametrize("text, line, says", [
    ("kiosk kiosk-key-0123456789ab\n", 1, "expected 'client:key'"),
    ("Kiosk:kiosk-key-0123456789ab\n", 1, "expected"),
    ("ok:good-key-0123456789abcd\nkiosk:short\n", 2, "the key of kiosk"),
    ("kiosk:has space 0123456789abc\n", 1, "the key of kiosk"),
    ("a:same-key-0123456789abc\nb:same-key-0123456789abc\n", 2, "this key is also given to a"),
])
def test_bad_key_lines_are_skipped_without_echoing_a_key(text: str, line: int, says: str) -> None:
    parsed = parse_keys(text)
    ((n, why),) = parsed.skipped
    assert n == line and says in why and "0123456789" not in why
    # the valid lines still count (of two lines giving one key, the first keeps it)
    valid = [ln for i, ln in enumerate(text.splitlines(), 1) if i != line]
    assert sorted(set(parsed.keys.values())) == sorted({v.split(":")[0] for v in valid})


def test_keys_reload_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41's trial: a reload of a file with a malformed line kept the OLD keys (a revoked
    key still got in), an empty file too. Now each reload applies the file's valid lines, logs
    each skipped line as a JSON error line (its number, never the key), and an empty or
    vanished file leaves no key at all."""
    import os

    from streams.logs import configure_logging

    configure_logging()
    f = tmp_path / "keys"
    old, new, other = ("kiosk-key-0123456789ab", "kiosk-key-rotated-01234",
                       "hr-key-0123456789abcdef")
    f.write_text(f"kiosk:{old}\nhr:{other}\n")
    now = [0.0]
    keys = ApiKeys(f, reload_s=10, clock=lambda: now[0])
    assert keys.error is None and keys.clients == ["hr", "kiosk"]

    def rewrite(text: str) -> None:
        f.write_text(text)
        now[0] += 11.0

    # kiosk's old key removed, one malformed line left in: the revoked key is refused
    rewrite(f"kiosk:{new}\nkiosk {old}-broken\nhr:{other}\n")
    capsys.readouterr()
    assert keys.client_of(f"Bearer {old}") is None
    assert keys.client_of(f"Bearer {new}") == "kiosk" and keys.client_of(f"Bearer {other}") == "hr"
    assert keys.error is not None and "line 2" in keys.error and old not in keys.error
    err = capsys.readouterr().err
    lines = [json.loads(x) for x in err.splitlines()]
    (skip,) = [x for x in lines if x["event"] == "gateway_keys_line_skipped"]
    assert skip["line"] == 2 and skip["level"] == "error" and old not in err
    # an empty file means no keys; so does a file that is gone
    rewrite("")
    assert keys.client_of(f"Bearer {new}") is None and keys.clients == []
    assert keys.error is not None and "no valid" in keys.error
    rewrite(f"kiosk:{new}\n")
    assert keys.client_of(f"Bearer {new}") == "kiosk" and keys.error is None
    os.remove(f)
    now[0] += 11.0
    assert keys.client_of(f"Bearer {new}") is None
    assert keys.error is not None and "cannot read" in keys.error
    f.write_text(f"kiosk:{new}\n")
    now[0] += 11.0
    assert keys.client_of(f"Bearer {new}") == "kiosk"


def test_a_keys_file_without_a_valid_line_does_not_start(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    for text in ("", "# nothing\n\n", "kiosk:short\n"):
        f.write_text(text)
        with pytest.raises(ApiKeysError, match="no valid 'client:key' line"):
            ApiKeys(f)


def test_missing_keys_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ApiKeysError, match="cannot read the API keys file"):
        ApiKeys(tmp_path / "none")


# ---- limits ------------------------------------------------------------------------------------

def test_token_bucket_refuses_past_the_burst_and_says_when_to_retry() -> None:
    now = [0.0]
    rl = RateLimiter(rate_per_s=2.0, burst=3, clock=lambda: now[0])
    assert [rl.take("a") for _ in range(3)] == [None, None, None]
    assert rl.take("a") == 1  # 0.5 s to the next token -> 1 whole second
    assert rl.take("b") is None  # per client
    now[0] = 0.5
    assert rl.take("a") is None
    assert rl.take("a") == 1
    slow = RateLimiter(rate_per_s=0.1, burst=1, clock=lambda: now[0])
    assert slow.take("a") is None and slow.take("a") == 10


# ---- upload ids, options, tasks, images ---------------------------------------------------------

def test_upload_ids_are_namespaced_by_client_and_deterministic_for_keys() -> None:
    assert upload_id_for("kiosk", "ticket-12", None) == ("kiosk.ticket-12", True)
    a, det = upload_id_for("kiosk", None, "order 4711/front")
    assert det and a.startswith("kiosk.k-") and len(a) == len("kiosk.k-") + 32
    assert upload_id_for("kiosk", None, "order 4711/front")[0] == a
    theirs = upload_id_for("other", None, "order 4711/front")[0]
    # the client is in the digest: one key gives two clients unrelated ids (issue 41's trial:
    # the same suffix told that two clients used the same key)
    assert theirs.startswith("other.k-") and theirs.split(".k-")[1] != a.split(".k-")[1]
    assert a.split(".k-")[1] == hashlib.sha256(b"kiosk\0order 4711/front").hexdigest()[:32]
    r1, r2 = upload_id_for("kiosk", None, None), upload_id_for("kiosk", None, None)
    assert r1[0] != r2[0] and not r1[1]
    assert owner_of(a) == "kiosk" and owner_of("kiosk.a.b") == "kiosk"


@pytest.mark.parametrize("uid, key, code", [
    ("../x", None, GatewayCode.INVALID_UPLOAD_ID), ("..", None, GatewayCode.INVALID_UPLOAD_ID),
    ("a b", None, GatewayCode.INVALID_UPLOAD_ID), ("x" * 96, None, GatewayCode.INVALID_UPLOAD_ID),
    ("ok", "k", GatewayCode.INVALID_PARAMETER), (None, "", GatewayCode.INVALID_PARAMETER),
    (None, "x" * 256,
     GatewayCode.INVALID_PARAMETER), (None, "caf\u00e9", GatewayCode.INVALID_PARAMETER),
])
def test_bad_ids_and_keys_are_refused(uid: str | None, key: str | None, code: str) -> None:
    with pytest.raises(Refused) as e:
        upload_id_for("kiosk", uid, key)
    assert e.value.code == code and e.value.status == 400


def test_the_longest_client_and_id_fit_the_contract() -> None:
    from schemas import formats as F

    uid, _ = upload_id_for("k" * 32, "x" * 95, None)
    assert len(uid) == 128 and F.matches(F.UPLOAD_ID_PATTERN, uid)


def test_options_and_tasks_are_checked_by_the_contract() -> None:
    assert parse_options(None) is None and parse_options("  ") is None
    assert parse_options('{"size": "two_inch"}') == {"size": "two_inch"}
    for bad in ("[1]", "1", "{", '"x"'):
        with pytest.raises(Refused) as e:
            parse_options(bad)
        assert e.value.code == "OPTIONS_INVALID" and e.value.status == 422
    assert check_request("id_photo", {"size": "two_inch", "background": "#00ff00"},
                         TASKS) == "id_photo"
    assert check_request("card", None, TASKS) == "card"
    with pytest.raises(Refused) as e:
        check_request("id_photo", {"background": "Jane Doe"}, TASKS)
    assert e.value.code == "OPTIONS_INVALID" and "Jane" not in str(e.value)
    assert str(e.value).startswith("options.background:")
    for task in (None, "", "passport", "card "):
        with pytest.raises(Refused) as e:
            check_request(task, None, TASKS)
        assert e.value.code == "UNKNOWN_TASK"
    with pytest.raises(Refused):
        check_request("id_photo", None, ("card",))  # a task this gateway does not serve
    assert canonical_options({"b": 1,
                              "a": 2}) == '{"a":2,"b":1}' == canonical_options({"a": 2, "b": 1})


def test_images_are_probed_as_the_worker_probes_them() -> None:
    import cv2
    import numpy as np

    ok, jpg = cv2.imencode(".jpg", np.full((64, 96, 3), 128, np.uint8))
    assert ok and probe(jpg.tobytes(), DecodeSettings()) == "jpeg"
    cases = {b"": (GatewayCode.EMPTY_BODY, 400), b"hello": ("UNSUPPORTED_FORMAT", 415),
             jpg.tobytes()[:200]: ("CORRUPT_IMAGE", 422)}
    for body, (code, status) in cases.items():
        with pytest.raises(Refused) as e:
            probe(body, DecodeSettings())
        assert (e.value.code, e.value.status) == (code, status)
    with pytest.raises(Refused) as e:
        probe(jpg.tobytes(), DecodeSettings(max_pixels=1000))
    assert (e.value.code, e.value.status) == ("IMAGE_TOO_LARGE", 413)
    with pytest.raises(Refused) as e:
        probe(jpg.tobytes(), DecodeSettings(min_side=100))
    assert (e.value.code, e.value.status) == ("IMAGE_TOO_SMALL", 422)


# ---- results -----------------------------------------------------------------------------------

def test_cache_keeps_the_latest_bounded_and_wakes_waiters() -> None:
    async def scenario() -> None:
        c = ResultCache(size=2, keep=lambda u: owner_of(u) == "kiosk")
        waiter = asyncio.ensure_future(c.wait("kiosk.a", 5.0))
        await asyncio.sleep(0)
        assert c.waiting == 1
        c.put("kiosk.a", b"1")
        assert await waiter == b"1" and c.waiting == 0
        c.put_many([("kiosk.a", b"2"), ("kiosk.b", b"3"), ("other.c", b"4")])
        assert c.get("kiosk.a") == b"2" and c.get("other.c") is None  # not a client's
        c.put("kiosk.d", b"5")
        assert c.get("kiosk.a") is None and len(c) == 2  # least recently stored dropped
        assert await c.wait("kiosk.zzz", 0.05) is None and c.waiting == 0
        assert await c.wait("kiosk.d", 0) == b"5"

    asyncio.run(scenario())


# ---- outputs -------------------------------------------------------------------------------------

def _example(name: str):  # noqa: ANN202
    return codec.decode_result((ROOT / "schemas" / "examples" /
                                f"verification_result.valid.{name}.json").read_bytes())


def test_an_artifact_is_named_by_a_payload_field_that_holds_an_object_ref() -> None:
    """``/artifacts/{name}`` takes only the names a result's payload can hold an object ref in;
    any other name, payload fields of other kinds included, is 404 UNKNOWN_ARTIFACT, whose
    message lists the known names and never echoes the one sent."""
    from processors import registry

    assert registry.artifact_names() == ("rectified", "photo", "sheet")
    assert artifact_name(None) is None  # /output: the task's main artifact
    for name in registry.artifact_names():
        assert artifact_name(name) == name
    for bad in ("thumb", "quad", "face_box", "compliance", "Sheet", "sheet.jpg", "..", "x" * 300):
        with pytest.raises(Refused) as ei:
            artifact_name(bad)
        assert (ei.value.code, ei.value.status) == ("UNKNOWN_ARTIFACT", 404), bad
        assert "rectified, photo, sheet" in str(ei.value) and bad not in str(ei.value)


def test_the_output_ref_is_the_results_own_or_no_output() -> None:
    """The ref served is the result's own field: the main one for ``/output``, the named one
    otherwise; a result without it (a photo without a print sheet, a card's sheet, a rejected
    or failed upload) is 404 NO_OUTPUT with the upload's id."""
    with_sheet = _example("id_photo_validate_rejected")  # rejected for compliance: keeps both
    assert output_ref(with_sheet, "sheet", "k.u") == with_sheet.payload.sheet
    assert output_ref(with_sheet, "sheet", "k.u").key.endswith("/sheet.jpg")
    assert output_ref(with_sheet, None, "k.u") == with_sheet.payload.photo
    assert output_ref(with_sheet, "photo", "k.u") == with_sheet.payload.photo
    card = _example("card_accepted")
    assert output_ref(card, None, "k.u") == output_ref(card, "rectified", "k.u")
    assert output_ref(card, None, "k.u").key.endswith("/rectified.jpg")
    for result, name, says in [
            (_example("id_photo_accepted"), "sheet", "id_photo upload's result has no 'sheet'"),
            (card, "sheet", "card upload's result has no 'sheet' artifact"),
            (card, "photo", "no 'photo' artifact (status accepted)"),
            (_example("card_rejected_no_card"), None, "no output image (status rejected)"),
            (_example("failed_object_not_found"), None, "no output image (status failed)"),
            (_example("failed_object_not_found"), "sheet", "(status failed)")]:
        with pytest.raises(Refused) as ei:
            output_ref(result, name, "k.u")
        assert (ei.value.code, ei.value.status, ei.value.upload_id) == ("NO_OUTPUT", 404, "k.u")
        assert says in str(ei.value), str(ei.value)


# ---- answers and settings ------------------------------------------------------------------------

def test_every_code_has_a_status_and_the_schema_lists_them() -> None:
    schema = json.loads((ROOT / "schemas" / "gateway_error.v1.schema.json").read_text())
    listed = schema["properties"]["error"]["examples"]
    assert listed == [c.value for c in GatewayCode] + [c.value for c in IMAGE_CODES]
    assert set(HTTP_STATUS) == set(listed)
    assert HTTP_STATUS["UNKNOWN_UPLOAD"] == 404  # not 403 for another client's upload
    readme = (ROOT / "schemas" / "README.md").read_text()
    for code in listed:
        assert f"| `{code}` | {HTTP_STATUS[code]} |" in readme, code


def test_answers_validate_against_their_schemas() -> None:
    err_schema = json.loads((ROOT / "schemas" / "gateway_error.v1.schema.json").read_text())
    up_schema = json.loads((ROOT / "schemas" / "gateway_upload.v1.schema.json").read_text())
    e = GatewayError(error="RATE_LIMITED", message="too many", retry_after_s=2, upload_id="kiosk.a")
    jsonschema.validate(json.loads(e.model_dump_json(exclude_none=True)), err_schema)
    jsonschema.validate(json.loads(GatewayError(error="X",
                                                message="m").model_dump_json(exclude_none=True)),
                        err_schema)
    u = UploadAccepted(upload_id="kiosk.a", task="card", result="/v1/uploads/kiosk.a")
    jsonschema.validate(json.loads(u.model_dump_json()), up_schema)
    assert list(up_schema["properties"]) == list(UploadAccepted.model_fields)
    assert list(err_schema["properties"]) == list(GatewayError.model_fields)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**json.loads(u.model_dump_json()), "status": "done"}, up_schema)


def test_gateway_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("CARDSTREAM_GATEWAY__API_KEYS_FILE", str(tmp_path / "k"))
    monkeypatch.setenv("CARDSTREAM_GATEWAY__MAX_WAIT_MS", "5000")
    s = load_settings()
    assert s.gateway.api_keys_file == tmp_path / "k" and s.gateway.max_wait_ms == 5000
    assert GatewaySettings().max_body_bytes > DecodeSettings().max_bytes
    monkeypatch.setenv("CARDSTREAM_GATEWAY__MAX_WAIT_MS", "-1")
    with pytest.raises(ValueError):
        load_settings()


def test_lag_reader_closes_whether_or_not_it_started() -> None:
    from streams.gateway.limits import UploadsLag
    from streams.settings import KafkaSettings

    lag = UploadsLag(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    assert lag.lag is None
    lag.close()  # never started (a benchmark that failed before its first level)


def test_lag_estimate_counts_what_this_instance_produced_since_the_read() -> None:
    from streams.gateway.limits import UploadsLag
    from streams.settings import KafkaSettings

    lag = UploadsLag(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    try:
        assert lag.estimate() is None  # not measured: uploads are not refused for it
        lag.seen(3, {0: 10, 1: 4})
        lag.note(0, 10)  # delivered after the read: not in its lag
        lag.note(1, 4)
        assert lag.estimate() == 5
        lag.note(0, 9)  # delivered before the read, noted after it: in its lag already
        assert lag.estimate() == 5
        lag.seen(4, {0: 11, 1: 4})  # the next read holds partition 0's upload
        assert (lag.estimate(), lag.produced) == (5, 1)
    finally:
        lag.close()


def test_a_probe_code_added_later_is_a_422_not_a_crash() -> None:
    assert Refused("IMAGE_TOO_COMPLEX", "x").status == 422
    assert Refused("SOME_FUTURE_PROBE_RULE", "x").status == 422
    assert Refused(GatewayCode.RATE_LIMITED, "x", retry_after_s=1).status == 429


@pytest.fixture
def aiohttp_json_logs(capsys: pytest.CaptureFixture[str]):
    """aiohttp's loggers routed through ``library_logs_as_json`` for one test (restored after
    it); yields the ``aiohttp.server`` logger, with stderr read so far discarded."""
    import logging

    from streams.logs import configure_logging, library_logs_as_json

    configure_logging()
    lg = logging.getLogger("aiohttp")
    kept = lg.handlers[:], lg.propagate
    library_logs_as_json("aiohttp")
    capsys.readouterr()
    try:
        yield logging.getLogger("aiohttp.server")
    finally:
        lg.handlers[:], lg.propagate = kept


def test_aiohttp_log_records_become_one_json_line_without_their_message(
        aiohttp_json_logs, capsys: pytest.CaptureFixture[str]) -> None:
    """aiohttp logs a parse error's message (which quotes the request's bytes) with a
    traceback; routed through library_logs_as_json it is one JSON line: logger, place, error
    class and status, at warning (the client's error, not the service's: a second fresh user's
    trial found every refused compressed body writing an error line)."""
    from aiohttp.http_exceptions import BadHttpMethod

    try:
        raise BadHttpMethod(b"\xff\xd8\xff\xe0JFIF secret-bytes".decode("latin-1"))
    except BadHttpMethod:
        aiohttp_json_logs.exception("Error handling request from %s", "10.0.0.7")
    (line,) = capsys.readouterr().err.splitlines()
    got = json.loads(line)
    assert (got["event"], got["logger"], got["error"], got["status"], got["level"]) == (
        "library_log", "aiohttp.server", "BadHttpMethod", 400, "warning")
    assert "secret" not in line and "10.0.0.7" not in line and "xff" not in line


def test_a_library_error_the_client_caused_is_a_warning_and_the_service_s_an_error(
        aiohttp_json_logs, capsys: pytest.CaptureFixture[str]) -> None:
    """aiohttp's RequestPayloadError (a body its parser cannot read; no status) is
    written at warning; an exception of the service's own stays an error."""
    from aiohttp.web import RequestPayloadError

    for exc in (RequestPayloadError("bad gzip"), RuntimeError("a bug")):
        try:
            raise exc
        except Exception:
            aiohttp_json_logs.exception("Error handling request")
    got = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(g["error"], g["level"]) for g in got] == [("RequestPayloadError", "warning"),
                                                        ("RuntimeError", "error")]


@pytest.mark.parametrize(("raw", "ms"), [
    ("0", 0), ("250", 250), ("30000", 30_000), ("60001", 30_000), ("999999999", 30_000),
    # longer than any wait: clamped as every value above the bound (a fresh user's trial:
    # 2147483648 and 99999999999 were refused as "not a whole number")
    ("2147483648", 30_000), ("99999999999", 30_000), ("0" * 40 + "5", 30_000)])
def test_wait_ms_is_clamped_to_the_bound_however_long(raw: str, ms: int) -> None:
    from streams.gateway.app import wait_ms

    assert wait_ms(raw, 30_000) == ms


@pytest.mark.parametrize("raw", ["", "-1", "+5", "1.5", "1e3", " 5", "\u00b2", "\u0661\u0662"])
def test_wait_ms_that_is_no_ascii_number_is_refused(raw: str) -> None:
    """A sign, a point, an exponent, a space, and digits outside ASCII (``²`` and Arabic-Indic
    digits pass ``str.isdigit``; ``int`` refuses the first and reads the second, so both would
    have been a 500 or a surprise) are INVALID_PARAMETER."""
    from streams.gateway.app import wait_ms

    with pytest.raises(Refused) as got:
        wait_ms(raw, 30_000)
    assert got.value.code == GatewayCode.INVALID_PARAMETER and got.value.status == 400


def test_a_coded_body_inflates_under_the_cap_and_whole_or_not_at_all() -> None:
    """RFC 9110 8.4.1: gzip (x-gzip too) and deflate. Two gzip members concatenate; a bomb is
    BODY_TOO_LARGE at the cap; a body that is not of its coding, a member cut short, or bytes
    after a deflate stream are BAD_REQUEST. aiohttp's own inflating took a gzip body cut short
    as whole (session 66's note): it is off, and this is the one path."""
    import gzip
    import zlib

    from streams.gateway.app import _inflate_capped

    image = bytes(range(256)) * 40  # 10240 bytes
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = raw.compress(image) + raw.flush()
    assert _inflate_capped(gzip.compress(image), "gzip", 10_240) == image
    assert _inflate_capped(gzip.compress(image[:100]) + gzip.compress(image[100:]), "gzip",
                           10_240) == image
    assert _inflate_capped(zlib.compress(image), "deflate", 10_240) == image
    assert _inflate_capped(raw_deflate, "deflate", 10_240) == image  # RFC 1951, as sent too
    for coding, bomb in (("gzip", gzip.compress(b"\0" * 10_000_000)),
                         ("deflate", zlib.compress(b"\0" * 10_000_000))):
        with pytest.raises(Refused) as big:
            _inflate_capped(bomb, coding, 10_240)
        assert big.value.code == GatewayCode.BODY_TOO_LARGE and len(bomb) < 20_000
    for coding, bad in (("gzip", image), ("gzip", gzip.compress(image)[:-12]),
                        ("gzip", gzip.compress(image)[:-1]), ("gzip", zlib.compress(image)),
                        ("deflate", zlib.compress(image)[:-5]),
                        ("deflate", zlib.compress(image) + b"more"), ("deflate", b""),
                        ("gzip", b"")):
        with pytest.raises(Refused) as err:
            _inflate_capped(bad, coding, 10_240)
        assert (err.value.code, err.value.status) == (GatewayCode.BAD_REQUEST, 400), (coding,
                                                                                      bad[:8])


@pytest.mark.parametrize(("header", "coding"), [
    ("", None), ("identity", None), ("identity, identity", None),
    ("gzip", "gzip"), ("GZIP", "gzip"), ("x-gzip", "gzip"), ("X-GZIP", "gzip"),
    (" x-gzip ", "gzip"), ("x-gzip, identity", "gzip"), ("identity, x-gzip", "gzip"),
    ("gzip, identity", "gzip"), ("deflate", "deflate"), ("Deflate, identity", "deflate"),
    ("compress", ""), ("br", ""), ("zstd", ""), ("utf-8", ""), ("x-gzip, x-gzip", ""),
    ("gzip, deflate", "")])
def test_which_content_encodings_the_gateway_inflates_and_which_it_refuses(
        header: str, coding: str | None) -> None:
    """A fresh user's trial (session 66): ``x-gzip, identity`` reached the header probe still
    compressed (415 "unknown magic bytes"), and an unknown coding on a plain image was taken
    as no coding. RFC 9110 8.4: a list of codings, ``identity`` meaning none; a coding the
    server does not decode is refused with 415 (``""`` here), which says which header it was.
    br and zstd are among them (aiohttp's parser answered 400 while it inflated)."""
    from streams.gateway.app import content_coding

    if coding != "":
        assert content_coding(header) == coding
        return
    with pytest.raises(Refused) as err:
        content_coding(header)
    assert (err.value.code, err.value.status) == ("UNSUPPORTED_FORMAT", 415)
    assert f"Content-Encoding {header.strip()!r} is not one this gateway decodes" in str(err.value)


def test_a_refused_content_encoding_is_shown_in_printable_ascii() -> None:
    """A second fresh user's trial: a latin-1 byte in the header came back as a surrogate
    escape (``'gzip\udcff'``) in the 415 message; the header is shown cut to 60 characters,
    anything but printable ASCII as ``?``."""
    from streams.gateway.app import content_coding

    with pytest.raises(Refused) as err:
        content_coding("gzip\udcff")
    assert "Content-Encoding 'gzip?' is not one" in str(err.value)
    with pytest.raises(Refused) as err:
        content_coding("x" * 5000)
    assert f"Content-Encoding '{'x' * 60}' is not one" in str(err.value)


# ---- the app over fakes (no stack): answers the trial found wrong -----------------------------

class _FakeStore:
    """A :class:`~streams.storage.Storage` whose every call fails with ``error`` (None: the
    PUT stores, every HEAD says there is no object; ``put_error``: the PUT fails with it)."""

    def __init__(self, error: Exception | None = None, put_error: Exception | None = None) -> None:
        self.error, self.put_error, self.calls = error, put_error, []

    def retry(self, what: str, fn):  # noqa: ANN001, ANN201
        from streams.errors import ObjectNotFound

        self.calls.append(what)
        if self.error is not None:
            raise self.error
        raise ObjectNotFound(f"{what}: NoSuchKey")

    def put(self, *args, **kw):  # noqa: ANN002, ANN003, ANN201
        self.calls.append("PUT")
        if self.put_error is not None:
            raise self.put_error
        if self.error is not None:
            raise self.error


class _FakeProducer:
    def poll(self, _t: float) -> int:
        return 0

    def flush(self, _t: float) -> int:
        return 0


def _intake(store: _FakeStore):  # noqa: ANN202
    from streams.gateway.uploads import Intake

    return Intake(load_settings(), store, producer=_FakeProducer())  # type: ignore[arg-type]


def _jpeg() -> bytes:
    import cv2
    import numpy as np

    ok, buf = cv2.imencode(".jpg", np.full((64, 96, 3), 128, np.uint8))
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("where", ["every call", "the HEAD after a 412"])
def test_a_store_that_does_not_answer_is_503_with_retry_after_whatever_the_id(
        deterministic: bool, where: str) -> None:
    """A fresh user's trial: a POST with ``upload_id`` or an ``Idempotency-Key`` while MinIO
    was down answered 500 INTERNAL_ERROR (the HEAD of the other tasks' keys ran outside the
    try that maps an outage to 503), and the retry-safe POST is the one a client retries."""
    from streams.errors import ObjectRefused, StorageError

    down = StorageError("HEAD uploads at 127.0.0.1:1 failed after 2 attempts")
    store = (_FakeStore(down) if where == "every call" else
             _FakeStore(down, put_error=ObjectRefused("exists", "PreconditionFailed", 412)))
    intake = _intake(store)
    try:
        ev, _ = intake.event("alice.x1", "card", _jpeg(), "jpeg", None)
        with pytest.raises(Refused) as e:
            intake.store("alice", ev, _jpeg(), deterministic)
        assert (e.value.code, e.value.status, e.value.retry_after_s, e.value.upload_id) == (
            "UNAVAILABLE", 503, load_settings().gateway.retry_after_s, "alice.x1")
    finally:
        intake.close()


def test_a_store_that_refuses_a_head_is_the_same_503_as_a_refused_put() -> None:
    """An ``ObjectRefused`` (the store answered, but not with the object: 403, say) on the
    HEAD of an idempotent POST is what a refused PUT is: 503 UNAVAILABLE naming the store's
    code, with Retry-After (every 503 carries one, schemas/README.md)."""
    from streams.errors import ObjectRefused

    for store in (_FakeStore(ObjectRefused("refused", "AccessDenied", 403)),
                  _FakeStore(put_error=ObjectRefused("refused", "AccessDenied", 403))):
        intake = _intake(store)
        try:
            ev, _ = intake.event("alice.x1", "card", _jpeg(), "jpeg", None)
            with pytest.raises(Refused) as e:
                intake.store("alice", ev, _jpeg(), True)
            assert (e.value.code, e.value.retry_after_s) == (
                "UNAVAILABLE", load_settings().gateway.retry_after_s)
            assert "AccessDenied" in str(e.value)
        finally:
            intake.close()


def test_a_store_that_rejects_the_gateways_credentials_is_unavailable_with_its_cause_logged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway with a wrong MinIO secret answered "the object store does not answer" and
    logged nothing else (a second fresh user's trial): the store did answer, refusing the
    gateway itself, which ``classify`` counts as an outage (the upload is not at fault). The
    client is told the store is unavailable; the cause goes to the log, not to the client."""
    from streams.errors import StorageError
    from streams.gateway import errors

    logs: list[dict] = []
    monkeypatch.setattr(errors.log, "warning", lambda event, **kw: logs.append(
        {"event": event, **kw}))

    cause = StorageError("HEAD uploads at 127.0.0.1:9000 failed after 4 attempts: "
                         "S3Error SignatureDoesNotMatch (403)")
    intake = _intake(_FakeStore(cause))
    try:
        ev, _ = intake.event("alice.x1", "card", _jpeg(), "jpeg", None)
        with pytest.raises(Refused) as e:
            intake.store("alice", ev, _jpeg(), True)
    finally:
        intake.close()
    assert (e.value.code, str(e.value)) == ("UNAVAILABLE", "the object store is unavailable")
    assert "SignatureDoesNotMatch" not in str(e.value)
    [line] = [x for x in logs if x["event"] == "gateway_store_unavailable"]
    assert "SignatureDoesNotMatch (403)" in line["cause"] and line["upload_id"] == "alice.x1"


NESTED = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(("text", "says"), [
    (NESTED, "nested too deeply"),
    ('{"print_sheet":' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
    ('{"size":"one_inch","size":"two_inch"}', 'repeats the key "size"'),
    ('{"a":{"b":1,"b":2}}', 'repeats the key "b"'),
    ('{"size":NaN}', "NaN is not JSON"),
])
def test_options_json_is_read_as_strictly_as_the_contract_reads_it(text: str, says: str) -> None:
    """A fresh user's trial: 5,000 nested ``[`` in ``options`` answered 500 (RecursionError),
    and a repeated key was taken silently (the last one) while a repeated form field is
    AMBIGUOUS_FIELD. Options are read by the contract's own strict parser
    (:func:`schemas.codec.loads`, which dead-letters such records on the topic as NOT_JSON)."""
    with pytest.raises(Refused) as e:
        parse_options(text)
    assert (e.value.code, e.value.status) == ("OPTIONS_INVALID", 422)
    assert says in str(e.value) and "two_inch" not in str(e.value)


def _app_call(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
              tmp: Path | None = None):  # noqa: ANN202
    """One request to :func:`streams.gateway.app.build_app` over fakes (no store, no Kafka):
    (status, headers, JSON body)."""
    from aiohttp.test_utils import TestClient, TestServer

    from streams.gateway.app import Gateway, build_app

    assert tmp is not None
    keys = tmp / "keys"
    keys.write_text("alice:alice-key-0123456789abcdef\n")
    intake = _intake(_FakeStore())
    gw = Gateway(settings=load_settings(), keys=ApiKeys(keys), intake=intake,
                 storage=None,  # type: ignore[arg-type]
                 cache=ResultCache(10), limiter=RateLimiter(1000.0, 1000))

    async def go():  # noqa: ANN202
        async with TestClient(TestServer(build_app(gw))) as c:
            r = await c.request(method, path, data=body, headers={
                "Authorization": "Bearer alice-key-0123456789abcdef", **(headers or {})})
            return r.status, dict(r.headers), await r.json()

    try:
        return asyncio.run(go())
    finally:
        intake.close()


@pytest.mark.parametrize("options", [NESTED, '{"size":"one_inch","size":"two_inch"}'])
def test_bad_options_in_a_form_are_422_not_500(tmp_path: Path, options: str) -> None:
    b = "----cardstream-unit"
    body = (f'--{b}\r\nContent-Disposition: form-data; name="task"\r\n\r\nid_photo\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="options"\r\n\r\n{options}\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="image"; filename="x.jpg"\r\n'
            f"Content-Type: image/jpeg\r\n\r\n").encode() + _jpeg() + f"\r\n--{b}--\r\n".encode()
    status, _, got = _app_call("POST", "/v1/uploads", body, {
        "Content-Type": f"multipart/form-data; boundary={b}"}, tmp=tmp_path)
    assert (status, got["error"]) == (422, "OPTIONS_INVALID"), got


def test_a_repeated_key_in_options_in_the_query_is_422(tmp_path: Path) -> None:
    from urllib.parse import quote

    status, _, got = _app_call("POST", "/v1/uploads?task=id_photo&options="
                               + quote('{"size":"one_inch","size":"two_inch"}'), _jpeg(),
                               {"Content-Type": "image/jpeg"}, tmp=tmp_path)
    assert (status, got["error"]) == (422, "OPTIONS_INVALID"), got
    assert 'repeats the key "size"' in got["message"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_a_405_says_which_methods_the_route_takes(tmp_path: Path, method: str) -> None:
    """RFC 9110 15.5.6: a 405 carries ``Allow`` (a fresh user's trial found none), with the
    gateway's JSON body."""
    status, headers, got = _app_call(method, "/v1/uploads/alice.x/artifacts/sheet",
                                     tmp=tmp_path)
    assert (status, got["error"]) == (405, "METHOD_NOT_ALLOWED")
    assert headers.get("Allow") == "GET,HEAD", headers
    status, headers, got = _app_call("DELETE", "/v1/uploads", tmp=tmp_path)
    assert (status, got["error"], headers.get("Allow")) == (405, "METHOD_NOT_ALLOWED", "POST")


def test_admin_ready_fails_while_no_broker_answers_and_live_does_not(tmp_path: Path) -> None:
    """The trial: with the broker killed after the start the gateway's admin ``/ready`` stayed
    200. Now it is 503 with ``broker_reachable: false`` while no broker answers
    (:mod:`streams.reach`) and 200 again once one does; ``/live`` (the tail runs) stays 200."""
    import threading
    import types

    from aiohttp.test_utils import TestClient, TestServer
    from confluent_kafka import KafkaError, KafkaException

    from streams.gateway.app import Gateway, build_admin
    from streams.reach import BrokerReach

    up = [False]

    def probe(_timeout_s: float) -> None:
        if not up[0]:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))

    keys = tmp_path / "keys"
    keys.write_text("alice:alice-key-0123456789abcdef\n")
    caught_up = threading.Event()
    caught_up.set()
    tail = types.SimpleNamespace(alive=True, caught_up=caught_up, records=3)
    intake = _intake(_FakeStore())
    gw = Gateway(settings=load_settings(), keys=ApiKeys(keys), intake=intake,
                 storage=None,  # type: ignore[arg-type]
                 cache=ResultCache(10), limiter=RateLimiter(1000.0, 1000),
                 tail=tail,  # type: ignore[arg-type]
                 broker=BrokerReach(load_settings().kafka, probe=probe))

    async def get() -> list[tuple[int, dict]]:
        async with TestClient(TestServer(build_admin(gw))) as c:
            out = []
            for path in ("/ready", "/live"):
                r = await c.get(path)
                out.append((r.status, await r.json()))
            return out

    try:
        assert [s for s, _ in asyncio.run(get())] == [200, 200]
        assert gw.broker is not None and gw.broker.check() is False
        (ready, body), (live, _) = asyncio.run(get())
        assert (ready, body["ok"], body["broker_reachable"], live) == (503, False, False, 200)
        up[0] = True
        assert gw.broker.check() is True
        (ready, body), (live, _) = asyncio.run(get())
        assert (ready, body["broker_reachable"], body["results_read"], live) == (
            200, True, 3, 200)
    finally:
        intake.close()


def test_the_results_tail_waits_for_a_broker_at_start_alive_and_not_caught_up(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A gateway started while no broker answered: the tail's thread ended on the first
    ``BrokerUnavailable`` (10 s in), so ``/live`` failed and the pod was restarted however
    soon the broker came back (measured: ``/live`` 503 from 14 s on, and still after the broker
    was back). Now it logs ``gateway_results_tail_waiting`` once, asks again every
    ``retry_s``, stays alive meanwhile, and reads once a broker answers."""
    import threading
    import time

    from confluent_kafka import KafkaError

    import streams.gateway.results as results_mod
    from streams.errors import BrokerUnavailable
    from streams.gateway.results import ResultsTail
    from streams.logs import configure_logging

    configure_logging("INFO")
    tries: list[dict] = []
    stop = threading.Event()

    def read_topic(k, topic, **kw):  # noqa: ANN001, ANN003, ANN202
        tries.append(kw["config"])
        if len(tries) < 3:
            raise BrokerUnavailable("reading r: no answer from 127.0.0.1:1 (_TRANSPORT: ...)")
        while not stop.is_set():
            yield []

    monkeypatch.setattr(results_mod, "read_topic", read_topic)
    errors: list[KafkaError] = []
    loop = asyncio.new_event_loop()
    tail = ResultsTail(load_settings().kafka, ResultCache(10), loop, 60.0,
                       error_cb=errors.append, retry_s=0.05).start()
    try:
        time.sleep(0.02)
        assert tail.alive and not tail.caught_up.is_set()
        assert tail.caught_up.wait(5.0) and tail.alive
        assert len(tries) == 3 and all(c["error_cb"] == errors.append for c in tries)
    finally:
        stop.set()
        tail.close()
        loop.close()
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    assert [x["event"] for x in lines if x["event"].startswith("gateway_results")] == [
        "gateway_results_tail_waiting"]
