"""The HTTP gateway's pieces without a server (issue 41): API keys, rate limits, upload ids,
request checks, the result cache and waits, the answers' JSON Schemas."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest

from processors.decode import DecodeSettings
from schemas.gateway import HTTP_STATUS, IMAGE_CODES, GatewayCode, GatewayError, UploadAccepted
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


@pytest.mark.parametrize("text, says", [
    ("kiosk kiosk-key-0123456789ab\n", "line 1: expected 'client:key'"),
    ("Kiosk:kiosk-key-0123456789ab\n", "line 1: expected"),
    ("kiosk:short\n", "line 1: the key of kiosk"),
    ("kiosk:has space 0123456789abc\n", "line 1: the key of kiosk"),
    ("a:same-key-0123456789abc\nb:same-key-0123456789abc\n", "line 2: this key is also given to a"),
    ("# nothing\n\n", "no 'client:key' line"),
])
def test_bad_keys_files_are_refused_without_echoing_a_key(text: str, says: str) -> None:
    with pytest.raises(ApiKeysError, match=says) as e:
        parse_keys(text)
    assert "0123456789" not in str(e.value)


def test_keys_reload_on_change_and_keep_old_keys_on_a_bad_file(tmp_path: Path) -> None:
    import os

    f = tmp_path / "keys"
    f.write_text("kiosk:kiosk-key-0123456789ab\n")
    now = [0.0]
    keys = ApiKeys(f, reload_s=10, clock=lambda: now[0])
    f.write_text("kiosk:kiosk-key-rotated-01234\n")
    os.utime(f, (1e9, 1e9))
    assert keys.client_of("Bearer kiosk-key-0123456789ab") == "kiosk"  # not checked yet
    now[0] = 11.0
    assert keys.client_of("Bearer kiosk-key-0123456789ab") is None
    assert keys.client_of("Bearer kiosk-key-rotated-01234") == "kiosk"
    f.write_text("broken line\n")
    os.utime(f, (2e9, 2e9))
    now[0] = 22.0
    assert keys.client_of("Bearer kiosk-key-rotated-01234") == "kiosk"
    assert keys.error is not None and "line 1" in keys.error


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
    assert upload_id_for("other", None, "order 4711/front")[0].startswith("other.k-")
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
        lag.lag = 3
        lag.produced += 2
        assert lag.estimate() == 5
    finally:
        lag.close()


def test_a_probe_code_added_later_is_a_422_not_a_crash() -> None:
    assert Refused("IMAGE_TOO_COMPLEX", "x").status == 422
    assert Refused("SOME_FUTURE_PROBE_RULE", "x").status == 422
    assert Refused(GatewayCode.RATE_LIMITED, "x", retry_after_s=1).status == 429
