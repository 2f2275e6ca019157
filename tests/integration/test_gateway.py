"""The HTTP gateway (issue 41) against the real stack: two ``cardstream gateway`` processes and a
sleep-processor worker on fresh topics and buckets; every bad input answered with its status and
code, with nothing stored and nothing produced; the page in a real headless Chromium."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import socket
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from schemas import codec
from streams import procs
from streams.gateway.settings import GatewaySettings
from streams.kafka import read_to_end
from streams.settings import Settings
from streams.storage import Storage
from tests.integration.conftest import fresh_settings
from tests.integration.helpers import ROOT, write_images

KEYS = {"alice": "alice-key-0123456789abcdef", "bob": "bob-key-0123456789abcdef0"}
BODY_TIMEOUT_S = 3.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(port: int, method: str, path: str, body: bytes | None = None, client: str | None = "alice",
         headers: dict[str, str] | None = None) -> Answer:
    """One HTTP request to the gateway on ``port`` as ``client`` (None: no key)."""
    h = dict(headers or {})
    if client is not None:
        h["Authorization"] = f"Bearer {KEYS[client]}"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        c.close()


def multipart(fields: dict[str, str], image: bytes) -> tuple[bytes, dict[str, str]]:
    b = "----cardstream-test-boundary"
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{b}\r\nContent-Disposition: form-data; name="image"; filename="x.jpg"\r\n'
                 f"Content-Type: image/jpeg\r\n\r\n".encode() + image + b"\r\n")
    return (b"".join(parts) + f"--{b}--\r\n".encode(),
            {"Content-Type": f"multipart/form-data; boundary={b}"})


@dataclass
class Stack:
    settings: Settings
    gateways: list[procs.GatewayProc]
    images: list[bytes]
    logs: Path

    @property
    def port(self) -> int:
        return self.gateways[0].port

    def objects(self) -> list[str]:
        st = Storage(self.settings.s3)
        return sorted(o.object_name for o in st.client.list_objects(self.settings.s3.uploads_bucket,
                                                                    recursive=True))

    def events(self) -> list[Any]:
        return [codec.decode_upload(m.key(), m.value(), m.headers(),
                                    allowed_buckets=self.settings.s3.allowed_buckets)
                for m in read_to_end(self.settings.kafka, self.settings.kafka.uploads_topic)]


def gateway_settings(s: Settings, keys: Path, **over: Any) -> Settings:
    return s.model_copy(update={"gateway": GatewaySettings(
        api_keys_file=keys, body_timeout_s=BODY_TIMEOUT_S, lag_interval_s=0.2, **over)})


@pytest.fixture(scope="module")
def stack(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A sleep worker and two gateway instances on fresh topics and buckets (module-wide)."""
    tmp = tmp_path_factory.mktemp("gateway")
    keys = tmp / "keys"
    keys.write_text("".join(f"{c}:{k}\n" for c, k in KEYS.items()))
    images = [p.read_bytes() for p in write_images(tmp / "img", 3)]
    import uuid

    with fresh_settings(base_settings, uuid.uuid4().hex[:12]) as s:
        gs = gateway_settings(s, keys)
        w = procs.start_worker(s, 0, tmp / "worker.log",
                               ["--processor", "card=sleep,id_photo=sleep", "--sleep-ms", "20"])
        gws: list[procs.GatewayProc] = []
        try:
            for i in range(2):
                gws.append(procs.start_gateway(gs, tmp / f"gateway-{i}.log", free_port(),
                                               free_port()))
            yield Stack(gs, gws, images, tmp)
        finally:
            procs.stop_workers([w, *[procs.WorkerProc(g.proc, 0, g.log) for g in gws]],
                               timeout_s=30)


@contextmanager
def store_down_gateway(stack: Stack, log: Path) -> Iterator[procs.GatewayProc]:
    """A gateway of ``stack``'s settings whose object store is a closed port (two quick tries
    per call), stopped after the block."""
    down = stack.settings.model_copy(update={
        "s3": stack.settings.s3.model_copy(update={
            "endpoint": f"127.0.0.1:{free_port()}",
            "retry": stack.settings.s3.retry.model_copy(update={"first_s": 0.05,
                                                                 "attempts": 2})})})
    g = procs.start_gateway(down, log, free_port(), free_port())
    try:
        yield g
    finally:
        procs.stop_workers([procs.WorkerProc(g.proc, 0, g.log)], timeout_s=20)


def test_upload_with_wait_gives_the_committed_result_and_either_instance_answers(
        stack: Stack) -> None:
    a, b = stack.gateways
    img = stack.images[0]
    r = call(a.port, "POST", "/v1/uploads?task=card&wait_ms=20000", img)
    assert r.status == 200, r.body
    res = r.json()
    uid = res["upload_id"]
    assert uid.startswith("alice.") and res["task"] == "card" and res["status"] == "accepted"
    assert res["source"]["topic"] == stack.settings.kafka.uploads_topic
    # the other instance answers the same GET with the same bytes, and streams the output;
    # each instance reads the results topic at its own pace, so the GET waits for it (without
    # wait_ms the other instance answered 404 for a moment twice in CI beside other load)
    for g in (a, b):
        got = call(g.port, "GET", f"/v1/uploads/{uid}?wait_ms=10000")
        assert got.status == 200 and got.body == r.body
    out = call(b.port, "GET", f"/v1/uploads/{uid}/output")
    ref = res["card"]["rectified"]
    assert out.status == 200 and out.headers["content-type"] == ref["content_type"]
    assert (hashlib.sha256(out.body).hexdigest() == ref["sha256"]
            and len(out.body) == ref["size_bytes"])
    # the claim check is the image, under the usual key, and the event names it
    key = f"card/{uid}/upload"
    assert key in stack.objects()
    (ev,) = [e for e in stack.events() if e.upload_id == uid]
    assert ev.image.ref.key == key and ev.image.ref.sha256 == hashlib.sha256(img).hexdigest()
    # an output that is no longer stored (expired) is 404 NO_OUTPUT, not an outage
    Storage(stack.settings.s3).client.remove_object(ref["bucket"], ref["key"])
    gone = call(a.port, "GET", f"/v1/uploads/{uid}/output")
    assert (gone.status, gone.json()["error"]) == (404, "NO_OUTPUT")


def test_an_id_photo_print_sheet_is_downloaded_over_http(stack: Stack, tmp_path: Path) -> None:
    """The print sheet an ``id_photo`` upload asks for (``print_sheet: true``) is served at
    ``/artifacts/sheet`` by either instance, the stored object's bytes; the same access and
    answers as ``/output``: another client's id is UNKNOWN_UPLOAD, an unknown name
    UNKNOWN_ARTIFACT, no sheet (not asked for, a card's) or an expired one NO_OUTPUT, the
    store down UNAVAILABLE with Retry-After."""
    a, b = stack.gateways
    st = Storage(stack.settings.s3)
    body, headers = multipart({"task": "id_photo", "options": '{"print_sheet":true}'},
                              stack.images[2])
    r = call(a.port, "POST", "/v1/uploads?wait_ms=20000", body, headers=headers)
    assert r.status == 200, r.body
    uid, res = r.json()["upload_id"], r.json()["id_photo"]
    sheet, photo = res["sheet"], res["photo"]
    assert sheet["key"].startswith(f"id_photo/sleep-1/{uid}/")
    assert sheet["key"].endswith("/sheet.png") and (sheet["width"], sheet["height"]) == (48, 32)
    stored = st.get(sheet["bucket"], sheet["key"])
    assert hashlib.sha256(stored).hexdigest() == sheet["sha256"] != photo["sha256"]
    for g in (a, b):
        got = call(g.port, "GET", f"/v1/uploads/{uid}/artifacts/sheet")
        assert got.status == 200, got.body
        assert got.headers["content-type"] == sheet["content_type"] == "image/png"
        assert int(got.headers["content-length"]) == sheet["size_bytes"] == len(got.body)
        assert hashlib.sha256(got.body).hexdigest() == hashlib.sha256(stored).hexdigest()
    # the main artifact by its name is /output's answer
    main = call(b.port, "GET", f"/v1/uploads/{uid}/output")
    assert main.status == 200 and hashlib.sha256(main.body).hexdigest() == photo["sha256"]
    assert call(a.port, "GET", f"/v1/uploads/{uid}/artifacts/photo").body == main.body
    # refusals: another client's id (before the name is looked at), an unknown name, no key
    for name in ("sheet", "nonsense"):
        theirs = call(a.port, "GET", f"/v1/uploads/{uid}/artifacts/{name}", client="bob")
        assert (theirs.status, theirs.json()["error"]) == (404, "UNKNOWN_UPLOAD")
    for name in ("nonsense", "face_box", "sheet.png"):
        bad = call(a.port, "GET", f"/v1/uploads/{uid}/artifacts/{name}")
        assert (bad.status, bad.json()["error"]) == (404, "UNKNOWN_ARTIFACT"), name
        assert "rectified, photo, sheet" in bad.json()["message"]
    assert call(a.port, "GET", f"/v1/uploads/{uid}/artifacts/sheet", client=None).status == 401
    # no sheet: an ID photo that did not ask for one, and a card
    body, headers = multipart({"task": "id_photo", "options": "{}"}, stack.images[2])
    plain = call(a.port, "POST", "/v1/uploads?wait_ms=20000", body, headers=headers)
    card = call(a.port, "POST", "/v1/uploads?task=card&wait_ms=20000", stack.images[2])
    assert plain.status == card.status == 200
    assert plain.json()["id_photo"].get("sheet") is None and plain.json()["id_photo"]["photo"]
    for other in (plain.json()["upload_id"], card.json()["upload_id"]):
        none = call(b.port, "GET", f"/v1/uploads/{other}/artifacts/sheet")
        assert (none.status, none.json()["error"], none.json()["upload_id"]) == (
            404, "NO_OUTPUT", other)
        assert "no 'sheet' artifact (status accepted)" in none.json()["message"]
        assert call(b.port, "GET", f"/v1/uploads/{other}/output").status == 200
    # the store down: 503 UNAVAILABLE with Retry-After (a gateway whose store is a closed port)
    with store_down_gateway(stack, tmp_path / "down.log") as g:
        for path in (f"/v1/uploads/{uid}/artifacts/sheet", f"/v1/uploads/{uid}/output"):
            out = call(g.port, "GET", f"{path}")
            assert (out.status, out.json()["error"], out.headers.get("retry-after")) == (
                503, "UNAVAILABLE", str(stack.settings.gateway.retry_after_s)), out.body
    # expired (the results bucket's lifecycle rule): 404 NO_OUTPUT, and the photo still served
    st.client.remove_object(sheet["bucket"], sheet["key"])
    gone = call(a.port, "GET", f"/v1/uploads/{uid}/artifacts/sheet")
    assert (gone.status, gone.json()["error"]) == (404, "NO_OUTPUT")
    assert gone.json()["message"] == "the sheet is no longer stored"
    assert call(a.port, "GET", f"/v1/uploads/{uid}/output").body == main.body


def test_a_post_with_the_store_down_is_503_with_retry_after_with_or_without_a_key(
        stack: Stack, tmp_path: Path) -> None:
    """A fresh user's trial: with MinIO down, a POST with ``upload_id`` or an
    ``Idempotency-Key`` (the retry-safe ones) answered 500 INTERNAL_ERROR without Retry-After,
    while the same POST without either got 503. Each is 503 UNAVAILABLE with Retry-After, and
    nothing is produced."""
    img = stack.images[1]
    before = len(stack.events())
    with store_down_gateway(stack, tmp_path / "down.log") as g:
        for how, path, headers in (
                ("no key", "/v1/uploads?task=card", {}),
                ("upload_id", "/v1/uploads?task=card&upload_id=down-1", {}),
                ("Idempotency-Key", "/v1/uploads?task=id_photo", {"Idempotency-Key": "down-2"})):
            r = call(g.port, "POST", path, img, headers=headers)
            assert (r.status, r.json()["error"], r.headers.get("retry-after")) == (
                503, "UNAVAILABLE", str(stack.settings.gateway.retry_after_s)), (how, r.body)
            assert r.json()["retry_after_s"] == stack.settings.gateway.retry_after_s
        assert "gateway_internal_error" not in g.log.read_text()
    assert len(stack.events()) == before


def test_202_then_a_get_with_wait_on_the_other_instance(stack: Stack) -> None:
    a, b = stack.gateways
    body, headers = multipart({"task": "id_photo",
                               "options": '{"size":"two_inch","background":"blue"}'},
                              stack.images[1])
    r = call(a.port, "POST", "/v1/uploads", body, headers=headers)
    assert r.status == 202, r.body
    acc = r.json()
    assert acc["status"] == "pending" and acc["replayed"] is False
    assert r.headers["location"] == acc["result"] == f"/v1/uploads/{acc['upload_id']}"
    got = call(b.port, "GET", f"{acc['result']}?wait_ms=20000")
    assert got.status == 200, got.body
    assert got.json()["upload_id"] == acc["upload_id"] and got.json()["task"] == "id_photo"
    (ev,) = [e for e in stack.events() if e.upload_id == acc["upload_id"]]
    assert ev.options.model_dump(exclude_none=True) == {"size": "two_inch", "background": "blue"}


def test_a_coded_body_is_the_image_it_inflates_to(stack: Stack) -> None:
    """RFC 9110 8.4.1: gzip, x-gzip (8.4.1.3; answered 415 UNSUPPORTED_FORMAT before, still
    compressed at the header probe) and deflate, on a plain body and on a coded form; the
    claim check is the inflated image. A gzip body cut short was stored cut short (aiohttp's
    inflating, session 66's note): it is 400 now, nothing stored."""
    a, _ = stack.gateways
    img = stack.images[0]
    form, form_headers = multipart({"task": "card"}, img)
    # a form that inflates past 128 KiB (fields the gateway reads past): it was 500
    # INTERNAL_ERROR, the in-memory reader pausing the connection (a second trial, session 67)
    big, big_headers = multipart({"task": "card", **{f"pad{i}": "p" * 60_000 for i in range(4)}},
                                 img)
    assert len(big) > 3 * 65_536
    sent = [("x-gzip", gzip.compress(img), {}), ("x-gzip, identity", gzip.compress(img), {}),
            ("gzip, identity", gzip.compress(img), {}), ("deflate", zlib.compress(img), {}),
            ("gzip", gzip.compress(form), form_headers),
            ("x-gzip", gzip.compress(form), form_headers),
            ("gzip", gzip.compress(big), big_headers), ("deflate", zlib.compress(big), big_headers)]
    for coding, body, headers in sent:
        r = call(a.port, "POST", "/v1/uploads" + ("" if headers else "?task=card"), body,
                 headers={"Content-Encoding": coding, **headers})
        assert r.status == 202, (coding, r.body)
        (ev,) = [e for e in stack.events() if e.upload_id == r.json()["upload_id"]]
        assert ev.image.ref.sha256 == hashlib.sha256(img).hexdigest()
    before_objects, before_events = stack.objects(), len(stack.events())
    for coding, body, headers in [("gzip", gzip.compress(img)[:-200], {}),
                                  ("gzip", gzip.compress(img)[:-4], {}),
                                  ("deflate", zlib.compress(img)[:-200], {}),
                                  ("gzip", gzip.compress(form)[:-200], form_headers)]:
        r = call(a.port, "POST", "/v1/uploads" + ("" if headers else "?task=card"), body,
                 headers={"Content-Encoding": coding, **headers})
        assert (r.status, r.json()["error"]) == (400, "BAD_REQUEST"), (coding, r.body)
        assert r.json()["message"] == "the body does not decode as its Content-Encoding says"
    # br and zstd: aiohttp's parser answered 400 while it inflated; a coding not decoded here
    r = call(a.port, "POST", "/v1/uploads?task=card", img, headers={"Content-Encoding": "br"})
    assert (r.status, r.json()["error"]) == (415, "UNSUPPORTED_FORMAT"), r.body
    assert r.json()["message"].startswith("the body's Content-Encoding 'br' is not one")
    # the header given twice is one list (RFC 9110 5.3): only its first line counted, so a gzip
    # body marked "gzip" then "br" was taken as gzip alone (a fresh user's trial, session 67)
    body = gzip.compress(img)
    head = _head(len(body)).replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n"
                                    b"Content-Encoding: br\r\nConnection: close\r\n\r\n")
    status, answer = _raw_exchange(a.port, head, [body])
    assert (status, answer and answer["error"]) == (415, "UNSUPPORTED_FORMAT"), answer
    assert answer is not None and "'gzip, br'" in answer["message"]
    # a form field over its cap is named, not taken for the body
    form, form_headers = multipart({"task": "card", "options": "x" * 70_000}, img)
    for body, coding in ((form, "identity"), (gzip.compress(form), "gzip")):
        r = call(a.port, "POST", "/v1/uploads", body,
                 headers={**form_headers, "Content-Encoding": coding})
        assert (r.status, r.json()["message"]) == (
            413, "the form's 'options' field is larger than 65536 bytes"), (coding, r.body)
    assert stack.objects() == before_objects and len(stack.events()) == before_events


def test_idempotency_key_replay_and_reuse_with_another_image(stack: Stack) -> None:
    a, b = stack.gateways
    key = {"Idempotency-Key": "order-4711-front"}
    first = call(a.port, "POST", "/v1/uploads?task=card&wait_ms=20000", stack.images[0],
                 headers=key)
    assert first.status == 200, first.body
    uid = first.json()["upload_id"]
    before_objects, before_events = stack.objects(), len(stack.events())
    again = call(b.port, "POST", "/v1/uploads?task=card", stack.images[0], headers=key)
    # its result, from either instance
    assert again.status == 200 and again.json()["upload_id"] == uid
    other = call(b.port, "POST", "/v1/uploads?task=card", stack.images[1], headers=key)
    assert other.status == 409 and other.json()["error"] == "IDEMPOTENCY_KEY_REUSED"
    other_task = call(a.port, "POST", "/v1/uploads?task=id_photo", stack.images[0], headers=key)
    assert other_task.status == 409 and other_task.json()["error"] == "IDEMPOTENCY_KEY_REUSED"
    assert stack.objects() == before_objects and len(stack.events()) == before_events
    obj = Storage(stack.settings.s3).get(stack.settings.s3.uploads_bucket, f"card/{uid}/upload")
    assert obj == stack.images[0]  # the stored image is still the first one
    # a client-chosen upload_id works the same way, inside the client's namespace
    mine = call(a.port, "POST", "/v1/uploads?task=card&upload_id=ticket-12", stack.images[2])
    assert mine.status == 202 and mine.json()["upload_id"] == "alice.ticket-12"
    bobs = call(a.port, "POST", "/v1/uploads?task=card&upload_id=ticket-12", stack.images[1],
                client="bob")
    assert bobs.status == 202 and bobs.json()["upload_id"] == "bob.ticket-12"


def _raw_exchange(port: int, head: bytes, chunks: list[bytes], pause_s: float = 0.0,
                  half_close: bool = False) -> tuple[int | None, dict[str, Any] | None]:
    """Send ``head`` and ``chunks`` by hand (``pause_s`` between chunks; ``half_close``: shut
    the sending side afterwards) and read the status line and JSON body of the answer
    (``(None, None)`` when the connection closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        for c in chunks:
            try:
                sock.sendall(c)
            except OSError:
                break  # the gateway answered and closed: read its answer
            time.sleep(pause_s)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    if not data:
        return None, None
    head_, _, body = data.partition(b"\r\n\r\n")
    return int(head_.split()[1]), json.loads(body)


def _head(n: int, client: str = "alice") -> bytes:
    return ("POST /v1/uploads?task=card HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{KEYS[client]}\r\n"
            f"Content-Type: image/jpeg\r\nContent-Length: {n}\r\n\r\n").encode()


BAD = {
    # name: (method, path, body, client, headers, status, code)
    "zero_bytes": ("POST", "/v1/uploads?task=card", b"", "alice", {}, 400, "EMPTY_BODY"),
    "not_an_image": ("POST", "/v1/uploads?task=card", b"%PDF-1.7 hello", "alice", {}, 415,
                     "UNSUPPORTED_FORMAT"),
    "truncated_header": ("POST", "/v1/uploads?task=card", "IMG[:300]", "alice", {}, 422,
                         "CORRUPT_IMAGE"),
    "body_100_mb": ("POST", "/v1/uploads?task=card", "ZEROS_100MB", "alice", {}, 413,
                    "BODY_TOO_LARGE"),
    "missing_key": ("POST", "/v1/uploads?task=card", "IMG", None, {}, 401, "UNAUTHORIZED"),
    "wrong_key": ("POST", "/v1/uploads?task=card", "IMG", None,
                  {"Authorization": "Bearer alice-key-0123456789abcdeX"}, 401, "UNAUTHORIZED"),
    "unknown_task": ("POST", "/v1/uploads?task=passport", "IMG", "alice", {}, 400, "UNKNOWN_TASK"),
    "options_refused": ("POST", '/v1/uploads?task=id_photo&options={"size":"huge"}', "IMG", "alice",
                        {}, 422, "OPTIONS_INVALID"),
    "card_option_on_id_photo": ("POST", '/v1/uploads?task=id_photo&options={"doc_type":"passport"}',
                                "IMG", "alice", {}, 422, "OPTIONS_INVALID"),
    "options_not_json": ("POST", "/v1/uploads?task=card&options=[1]", "IMG", "alice", {}, 422,
                         "OPTIONS_INVALID"),
    "bad_upload_id": ("POST", "/v1/uploads?task=card&upload_id=../x", "IMG", "alice", {}, 400,
                      "INVALID_UPLOAD_ID"),
    "multipart_without_image": ("POST", "/v1/uploads", "MULTIPART_NO_IMAGE", "alice", {}, 400,
                                "BAD_MULTIPART"),
    # a part with thousands of headers: aiohttp's part parser refuses it (BadHttpMessage), which
    # was read as a body that ended early (BODY_INCOMPLETE) before
    "multipart_part_header_flood": ("POST", "/v1/uploads", "MULTIPART_HEADER_FLOOD", "alice", {},
                                    400, "BAD_MULTIPART"),
    # a body marked compressed that is not: aiohttp's decompressor raised RequestPayloadError,
    # answered 500 INTERNAL_ERROR with two error log lines (a fresh user's trial, session 63)
    "gzip_body_not_gzip": ("POST", "/v1/uploads?task=card", "IMG", "alice",
                           {"Content-Encoding": "gzip"}, 400, "BAD_REQUEST"),
    "deflate_body_not_deflate": ("POST", "/v1/uploads?task=card", "IMG", "alice",
                                 {"Content-Encoding": "deflate"}, 400, "BAD_REQUEST"),
    "x_gzip_body_not_gzip": ("POST", "/v1/uploads?task=card", "IMG", "alice",
                             {"Content-Encoding": "x-gzip"}, 400, "BAD_REQUEST"),
    # a coding the gateway does not decode: taken for none before (session 66's trial)
    "unknown_coding": ("POST", "/v1/uploads?task=card", "IMG", "alice",
                       {"Content-Encoding": "compress"}, 415, "UNSUPPORTED_FORMAT"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_refused_with_nothing_stored_or_produced(stack: Stack, name: str) -> None:
    method, path, body, client, headers, status, code = BAD[name]
    img = stack.images[0]
    headers = dict(headers)
    if body == "IMG":
        body = img
    elif body == "IMG[:300]":
        body = img[:300]
    elif body == "ZEROS_100MB":
        body = b"\0" * (100 * 1024 * 1024)
    elif body == "MULTIPART_NO_IMAGE":
        body, headers = multipart({"task": "card"}, b"")
        body = body.replace(b'name="image"; filename="x.jpg"', b'name="photo"')
    elif body == "MULTIPART_HEADER_FLOOD":
        body, headers = multipart({"task": "card"}, img)
        flood = "".join(f"X-Pad-{i}: v\r\n" for i in range(3000)).encode()
        body = body.replace(b'name="image"; filename="x.jpg"\r\n',
                            b'name="image"; filename="x.jpg"\r\n' + flood)
    before_objects, before_events = stack.objects(), len(stack.events())
    r = call(stack.port, method, path.replace('"', "%22").replace("{", "%7B").replace("}", "%7D"),
             body, client=client, headers=headers)
    assert (r.status, r.json()["error"]) == (status, code), r.body
    assert r.json()["schema_version"] == 1 and r.json()["message"]
    if status == 401:
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert stack.objects() == before_objects
    assert len(stack.events()) == before_events


def test_slow_and_truncated_bodies_are_dropped(stack: Stack) -> None:
    img = stack.images[0]
    before_objects, before_events = stack.objects(), len(stack.events())
    t0 = time.monotonic()
    status, body = _raw_exchange(stack.port, _head(len(img)),
                                 [img[i:i + 200] for i in range(0, len(img), 200)],
                                 pause_s=1.0)
    assert (status, body["error"]) == (408, "BODY_TIMEOUT")
    assert time.monotonic() - t0 < BODY_TIMEOUT_S + 5
    # a sender that stops 1000 bytes short and closes: the gateway cannot answer a closed
    # connection; it drops the body (its log and metrics say BODY_INCOMPLETE)
    assert _raw_exchange(stack.port, _head(len(img) + 1000), [img], half_close=True) == (None, None)
    metrics = call(stack.gateways[0].admin_port, "GET", "/metrics", client=None).body.decode()
    assert 'cardstream_gateway_refusals_total{code="BODY_INCOMPLETE"} 1.0' in metrics
    assert stack.objects() == before_objects and len(stack.events()) == before_events


def test_another_clients_upload_is_not_found_on_either_instance(stack: Stack) -> None:
    r = call(stack.port, "POST", "/v1/uploads?task=card&wait_ms=20000", stack.images[2])
    assert r.status == 200
    uid = r.json()["upload_id"]
    for g in stack.gateways:
        for path in (f"/v1/uploads/{uid}", f"/v1/uploads/{uid}/output",
                     f"/v1/uploads/{uid}/artifacts/sheet"):
            theirs = call(g.port, "GET", path, client="bob")
            assert (theirs.status, theirs.json()["error"]) == (404, "UNKNOWN_UPLOAD")
            nobody = call(g.port, "GET", path.replace(uid, "bob.never-used"), client="bob")
            # the same answer as for an id nobody used (each echoes its own id)
            assert theirs.body.replace(uid.encode(),
                                       b"ID") == nobody.body.replace(b"bob.never-used", b"ID")
    assert call(stack.port, "GET", f"/v1/uploads/{uid}", client=None).status == 401


def test_backpressure_backlog_and_rate_limit(base_settings: Settings, tmp_path: Path) -> None:
    """No worker consumes: once the uploads topic's lag passes max_lag a POST is 503 BACKLOG;
    past the burst a request is 429; both with Retry-After and nothing produced."""
    import uuid

    keys = tmp_path / "keys"
    keys.write_text(f"alice:{KEYS['alice']}\n")
    img = write_images(tmp_path, 1)[0].read_bytes()
    with fresh_settings(base_settings, uuid.uuid4().hex[:12]) as s:
        gs = gateway_settings(s, keys, max_lag=3, rate_per_s=0.02, burst=7, retry_after_s=3)
        g = procs.start_gateway(gs, tmp_path / "gw.log", free_port(), free_port())
        try:
            codes = [call(g.port, "POST", "/v1/uploads?task=card", img).status for _ in range(3)]
            assert codes == [202, 202, 202]
            # at once: what this instance produced counts before the next read of the lag
            r = call(g.port, "POST", "/v1/uploads?task=card", img)
            assert (r.status, r.json()["error"], r.headers["retry-after"]) == (503, "BACKLOG", "3")
            time.sleep(1.0)  # the lag is read every 0.2 s: 3 uploads, nobody consumes them
            r = call(g.port, "POST", "/v1/uploads?task=card", img)
            assert (r.status, r.json()["error"]) == (503, "BACKLOG")
            assert len(list(read_to_end(s.kafka, s.kafka.uploads_topic))) == 3
            statuses = [call(g.port, "GET", "/v1/uploads/alice.x").status for _ in range(3)]
            assert statuses[:2] == [404, 404] and statuses[2] == 429
            r = call(g.port, "GET", "/v1/uploads/alice.x")
            assert r.json()["error"] == "RATE_LIMITED" and int(r.headers["retry-after"]) >= 1
            metrics = call(g.admin_port, "GET", "/metrics", client=None).body.decode()
            assert 'cardstream_gateway_refusals_total{code="BACKLOG"} 2.0' in metrics
            assert 'cardstream_gateway_uploads_total{outcome="produced"} 3.0' in metrics
        finally:
            procs.stop_workers([procs.WorkerProc(g.proc, 0, g.log)], timeout_s=20)
    log = (tmp_path / "gw.log").read_text()
    assert KEYS["alice"] not in log  # no key in the logs
    assert all(json.loads(line) for line in log.splitlines() if line.strip())  # JSON lines only


def _until(page, expression: str, timeout_s: float = 15.0) -> None:  # noqa: ANN001
    """Poll the JavaScript ``expression`` in ``page`` until it is truthy. Each poll is a fresh
    evaluation from the test, which the page's Content-Security-Policy (no ``unsafe-eval``)
    allows; Playwright's ``wait_for_function`` re-evaluates a string with ``eval`` inside the
    page after its first poll, which that policy refuses (the test failed whenever the output
    image had not loaded by the first poll).

    Raises:
        AssertionError: still falsy after ``timeout_s`` seconds.
    """
    import time

    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s: {expression}")
        page.wait_for_timeout(100)


def test_page_in_headless_chromium(stack: Stack, tmp_path: Path) -> None:
    """The page loads, a card photo goes through to a shown verdict with its output image, an
    ID photo with a print sheet offers the sheet as a download (the stored object's bytes), and
    a file that is not an image shows the gateway's code; phone-sized screenshots are kept."""
    import subprocess

    from playwright.sync_api import sync_playwright

    chromium = subprocess.run([str(ROOT / "scripts" / "browser")], check=True, capture_output=True,
                              text=True).stdout.strip()
    photo, text = tmp_path / "card.jpg", tmp_path / "notes.txt"
    photo.write_bytes(stack.images[0])
    text.write_bytes(b"not an image at all")
    shots = ROOT / "out" / "gateway"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
            page.goto(stack.gateways[1].url + "/")
            assert page.title().startswith("cardstream")
            page.fill("#key", KEYS["alice"])
            _until(page, "document.querySelector('#size').options.length >= 5")
            page.set_input_files("#file", str(photo))
            page.click("#send")
            page.wait_for_selector("#status.verdict", timeout=30_000)
            assert page.inner_text("#status") == "accepted"
            assert "alice." in page.inner_text("#values")
            # the verification in words, from the contract's own examples (the sleep worker's
            # results carry none): a passport's zone, a visa's, and an ID photo's compliance
            said = {name: page.evaluate("(r) => Object.fromEntries(describe(r))", json.loads(
                (ROOT / "schemas" / "examples" / f"verification_result.valid.{name}.json")
                .read_text())) for name in ("card_passport_mrz_values", "card_visa_mrva",
                                            "card_passport_mrz_values_withheld",
                                            "id_photo_validate_rejected", "card_rejected_no_card",
                                            "card_cache_hit")}
            assert said["card_passport_mrz_values"]["machine-readable zone"] == (
                "TD3, every check digit valid")
            assert said["card_passport_mrz_values"]["capture"].startswith("225 dpi, tilt 6°")
            assert said["card_passport_mrz_values_withheld"]["machine-readable zone"] == (
                "TD3, every check digit valid; its values withheld by the worker's setting")
            assert said["card_visa_mrva"]["machine-readable zone"] == (
                "MRVA, every check digit valid")
            assert said["id_photo_validate_rejected"]["compliance"].startswith("fails the ")
            assert said["card_rejected_no_card"]["machine-readable zone"] is None
            assert "result cache" in said["card_cache_hit"]["time in the stream"]
            assert "batch of" in said["card_passport_mrz_values"]["time in the stream"]
            _until(page, "document.querySelector('#output').naturalWidth > 0")
            page.screenshot(path=str(shots / "page-card-accepted.png"), full_page=True)
            assert not page.is_visible("#sheet")  # a card has no print sheet
            page.check("input[value=id_photo]")
            assert page.is_visible("#size") and not page.is_visible("#doc_type")
            # an ID photo with its print sheet: the page offers the sheet as a download, the
            # stored object's bytes
            page.check("#print_sheet")
            page.click("#send")
            _until(page, "document.querySelector('#sheet').href.startsWith('blob:')", 30.0)
            assert page.inner_text("#status") == "accepted" and page.is_visible("#sheet")
            uid = page.evaluate("[...document.querySelectorAll('#values tr')].find((t) => "
                                "t.cells[0].textContent === 'upload id').cells[1].textContent")
            ref = call(stack.port, "GET", f"/v1/uploads/{uid}").json()["id_photo"]["sheet"]
            assert page.get_attribute("#sheet", "download") == f"{uid}.sheet.png"
            with page.expect_download() as got:
                page.click("#sheet")
            data = Path(got.value.path()).read_bytes()
            stored = Storage(stack.settings.s3).get(ref["bucket"], ref["key"])
            assert hashlib.sha256(data).hexdigest() == hashlib.sha256(stored).hexdigest()
            assert "48 × 32 px" in page.inner_text("#values")  # the print sheet's row
            page.screenshot(path=str(shots / "page-id-photo-sheet.png"), full_page=True)
            page.uncheck("#print_sheet")
            page.set_input_files("#file", str(text))
            page.click("#send")
            page.wait_for_selector("#status.error", timeout=15_000)
            assert "UNSUPPORTED_FORMAT" in page.inner_text("#status")
            page.screenshot(path=str(shots / "page-bad-file.png"), full_page=True)
        finally:
            browser.close()
    assert (shots / "page-card-accepted.png").stat().st_size > 10_000


def test_a_restarted_gateway_finds_older_results_through_the_status_app(stack: Stack,
                                                                        tmp_path: Path) -> None:
    """A gateway that starts after a result and reads nothing back (look-back 0) still answers
    its GET, with the record itself, by asking the status app where it is; without the status
    app it answers 404 like for any unknown id."""
    import subprocess
    import urllib.request

    r = call(stack.port, "POST", "/v1/uploads?task=card&wait_ms=20000", stack.images[1])
    assert r.status == 200
    uid = r.json()["upload_id"]
    port = free_port()
    env = procs.settings_env(stack.settings)
    env.update({"CARDSTREAM_STATUS__APP_ID": f"st-{stack.settings.kafka.group_id}",
                "CARDSTREAM_STATUS__DATA_DIR": str(tmp_path / "status"),
                "CARDSTREAM_STATUS__API_TOKEN": "status-token-for-the-test"})
    status = subprocess.Popen([str(ROOT / ".venv" / "bin" / "cardstream"), "status", "--web-port",
                               str(port)],
                              env=env, stdout=open(tmp_path / "status.log", "ab"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    late: list[procs.GatewayProc] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the status app has read the result
            req = urllib.request.Request(f"http://127.0.0.1:{port}/uploads/{uid}",
                                         headers={"Authorization": "Bearer "
                                                                   "status-token-for-the-test"})
            try:
                with urllib.request.urlopen(req, timeout=3) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("status app never had the verdict: "
                        f"{(tmp_path / 'status.log').read_text()[-2000:]}")
        keys = stack.settings.gateway.api_keys_file
        base = {"api_keys_file": keys, "results_lookback_s": 0.0}
        with_status = stack.settings.model_copy(update={
            "gateway": GatewaySettings(**base, status_url=f"http://127.0.0.1:{port}"),
            "status": stack.settings.status.model_copy(
                update={"api_token": SecretStr("status-token-for-the-test")})})
        without = stack.settings.model_copy(update={"gateway": GatewaySettings(**base)})
        for i, s in enumerate((with_status, without)):
            late.append(procs.start_gateway(s, tmp_path / f"late-{i}.log", free_port(),
                                            free_port()))
        got = call(late[0].port, "GET", f"/v1/uploads/{uid}")
        assert got.status == 200 and got.body == r.body
        out = call(late[0].port, "GET", f"/v1/uploads/{uid}/output")
        assert (out.status == 200 and hashlib.sha256(out.body).hexdigest()
                == r.json()["card"]["rectified"]["sha256"])
        miss = call(late[1].port, "GET", f"/v1/uploads/{uid}")
        assert (miss.status, miss.json()["error"]) == (404, "UNKNOWN_UPLOAD")
        assert call(late[0].port, "GET", f"/v1/uploads/{uid}", client="bob").status == 404
    finally:
        procs.stop_workers([procs.WorkerProc(status, 0, tmp_path),
                            *[procs.WorkerProc(g.proc, 0, g.log) for g in late]],
                           timeout_s=30)


def test_expect_100_continue_is_answered_before_the_body(stack: Stack) -> None:
    """A sender that asks first (``Expect: 100-continue``, as curl does for large bodies) gets
    ``100 Continue`` and then its answer, or its refusal before it sends a byte of the body."""
    img = stack.images[0]
    log_before = len(_log_lines(stack.gateways[0].log))
    head = _head(len(img)).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as sock:
        sock.sendall(head)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(img)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            data += sock.recv(65536)
    assert data.split()[1] == b"202" and b'"status":"pending"' in data
    big = ("POST /v1/uploads?task=card HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
           f"{KEYS['alice']}\r\n"
           f"Content-Length: {200 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n").encode()
    status, body = _raw_exchange(stack.port, big, [])
    assert (status, body["error"]) == (413, "BODY_TOO_LARGE")
    nokey = big.replace(f"Authorization: Bearer {KEYS['alice']}\r\n".encode(), b"")
    status, body = _raw_exchange(stack.port, nokey, [])
    assert (status, body["error"]) == (401, "UNAUTHORIZED")
    # refused at this stage, they are logged like every other refusal (issue 41's trial: only
    # counted)
    logged = [json.loads(x) for x in _log_lines(stack.gateways[0].log)[log_before:]
              if '"gateway_request"' in x]
    assert [(x["route"], x["status"], x["code"]) for x in logged] == [
        ("/v1/uploads", 202, None), ("/v1/uploads", 413, "BODY_TOO_LARGE"),
        ("/v1/uploads", 401, "UNAUTHORIZED")]


def _log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_a_key_rotation_that_leaves_a_malformed_line_fails_closed(base_settings: Settings,
                                                                  tmp_path: Path) -> None:
    """Issue 41's trial: alice's line removed and a malformed line left in the keys file; the
    reload kept the old keys (alice still got in), an emptied file too, /ready said ok and
    nothing was logged. Now the reload applies the valid lines, logs the skipped one, and an
    empty file refuses everyone and makes the instance not ready."""
    import uuid

    keys = tmp_path / "keys"
    keys.write_text("".join(f"{c}:{k}\n" for c, k in KEYS.items()))
    with fresh_settings(base_settings, uuid.uuid4().hex[:12]) as s:
        g = procs.start_gateway(gateway_settings(s, keys, api_keys_reload_s=0.2),
                                tmp_path / "gw.log", free_port(), free_port())
        try:
            def status_of(client: str) -> int:
                return call(g.port, "GET", f"/v1/uploads/{client}.x", client=client).status

            def after_reload(client: str, want: int) -> None:
                deadline = time.monotonic() + 10
                while status_of(client) != want and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert status_of(client) == want

            assert status_of("alice") == 404 and status_of("bob") == 404  # both have keys
            keys.write_text(f"bob:{KEYS['bob']}\nalice {KEYS['alice']}\n")
            after_reload("alice", 401)
            assert status_of("bob") == 404
            ready = call(g.admin_port, "GET", "/ready", client=None)
            assert ready.status == 200 and ready.json()["clients"] == 1
            assert "line 2" in ready.json()["keys_error"]
            keys.write_text("")
            after_reload("bob", 401)
            ready = call(g.admin_port, "GET", "/ready", client=None)
            assert ready.status == 503 and ready.json()["clients"] == 0
            assert "no valid" in ready.json()["keys_error"]
            keys.write_text(f"alice:{KEYS['alice']}\n")
            after_reload("alice", 404)
            assert call(g.admin_port, "GET", "/ready", client=None).json()["keys_error"] is None
        finally:
            procs.stop_workers([procs.WorkerProc(g.proc, 0, g.log)], timeout_s=20)
    lines = [json.loads(x) for x in _log_lines(tmp_path / "gw.log") if x.strip()]
    (skipped,) = [x for x in lines if x["event"] == "gateway_keys_line_skipped"]
    assert skipped["line"] == 2 and skipped["level"] == "error"
    text = (tmp_path / "gw.log").read_text()
    assert KEYS["alice"] not in text and KEYS["bob"] not in text


def multipart_parts(parts: list[tuple[str, bytes]]) -> tuple[bytes, dict[str, str]]:
    """A multipart/form-data body of ``(name, value)`` parts in this order (``image`` parts
    with a file name and an image content type)."""
    b = "----cardstream-test-boundary"
    out = []
    for name, value in parts:
        extra = '; filename="x.jpg"\r\nContent-Type: image/jpeg' if name == "image" else ""
        out.append(f'--{b}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'
                   .encode() + value + b"\r\n")
    return (b"".join(out) + f"--{b}--\r\n".encode(),
            {"Content-Type": f"multipart/form-data; boundary={b}"})


FORMS = {
    # name: (query, parts as (name, "IMG" or text), status, code, field the message names)
    "twenty_thousand_unknown_fields": ("", [("task", "card"), ("image", "IMG")]
                                       + [(f"f{i}", "") for i in range(20_000)],
                                       400, "TOO_MANY_PARTS", None),
    "seventeen_parts": ("", [("task", "card"), ("image", "IMG")]
                        + [(f"note{i}", "x") for i in range(15)], 400, "TOO_MANY_PARTS", None),
    "two_images": ("", [("task", "card"), ("image", "IMG"), ("image", "IMG")], 400,
                   "AMBIGUOUS_FIELD", "image"),
    "task_twice": ("", [("task", "card"), ("task", "id_photo"), ("image", "IMG")], 400,
                   "AMBIGUOUS_FIELD", "task"),
    "options_twice": ("", [("task", "card"), ("options", "{}"), ("options", "{}"),
                           ("image", "IMG")], 400, "AMBIGUOUS_FIELD", "options"),
    "query_task_differs_from_the_form": ("?task=card", [("task", "id_photo"), ("image", "IMG")],
                                         400, "AMBIGUOUS_FIELD", "task"),
    "query_task_twice": ("?task=card&task=id_photo", [("image", "IMG")], 400, "AMBIGUOUS_FIELD",
                         "task"),
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_ambiguous_and_oversized_forms_are_refused(stack: Stack, name: str) -> None:
    query, parts, status, code, field_named = FORMS[name]
    img = stack.images[0]
    parts = [(n, img if v == "IMG" else v.encode()) for n, v in parts]
    body, headers = multipart_parts(parts)
    before_objects, before_events = stack.objects(), len(stack.events())
    r = call(stack.port, "POST", f"/v1/uploads{query}", body, headers=headers)
    assert (r.status, r.json()["error"]) == (status, code), r.body
    if field_named is not None:
        assert f"'{field_named}'" in r.json()["message"]
    assert stack.objects() == before_objects and len(stack.events()) == before_events
    # a raw body with the same field twice in the query is refused before it is read
    if query.count("task=") > 1:
        r = call(stack.port, "POST", f"/v1/uploads{query}", img)
        assert (r.status, r.json()["error"]) == (400, "AMBIGUOUS_FIELD")


def test_a_form_with_a_few_unknown_fields_and_the_same_task_twice_is_accepted(
        stack: Stack) -> None:
    """Unknown fields are read past (they count toward max_parts); the query and the form
    may both give a field when they agree."""
    body, headers = multipart_parts([("task", b"card"), ("note", b"from the kiosk"),
                                     ("image", stack.images[2]), ("source", b"x")])
    r = call(stack.port, "POST", "/v1/uploads?task=card", body, headers=headers)
    assert r.status == 202, r.body
    assert r.json()["task"] == "card"


def test_a_second_idempotency_key_header_is_ambiguous(stack: Stack) -> None:
    img = stack.images[0]
    head = _head(len(img)).replace(b"\r\n\r\n", b"\r\nIdempotency-Key: a-1\r\n"
                                                b"Idempotency-Key: a-2\r\n"
                                                b"Connection: close\r\n\r\n")
    status, body = _raw_exchange(stack.port, head, [img])
    assert (status, body["error"]) == (400, "AMBIGUOUS_FIELD") and "Idempotency-Key" in body[
        "message"]
    # two keys, even both valid, are not read as the first one's client
    for second in (KEYS["bob"], "wrong-key"):
        head = _head(len(img)).replace(b"\r\n\r\n", f"\r\nAuthorization: Bearer {second}\r\n"
                                                     "Connection: close\r\n\r\n".encode())
        status, body = _raw_exchange(stack.port, head, [img])
        assert (status, body["error"]) == (400, "AMBIGUOUS_FIELD"), second
        assert "Authorization" in body["message"] and KEYS["alice"] not in body["message"]


def _answers(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP answers (status, headers, body) in ``data``, read off one connection."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        n = int(headers.get("content-length", len(rest)))
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def test_errors_aiohttp_answers_itself_are_json(stack: Stack) -> None:
    """Issue 41's trial: a body longer than its Content-Length (the rest parsed as the next
    request) and an Authorization header over 8 KB were answered by aiohttp in text/plain
    quoting the bytes, and logged as a multi-line traceback with them. Now each is the
    gateway's JSON error and one JSON log line without them."""
    g = stack.gateways[1]
    img = stack.images[0]
    log_before = len(_log_lines(g.log))
    marker = "SECRET-HEADER-MARKER-"
    cases = {
        "body_past_content_length": _head(10).replace(f"Content-Length: {len(img)}".encode(),
                                                      b"Content-Length: 10") + img,
        "authorization_over_8_kb": ("GET /v1/uploads/alice.x HTTP/1.1\r\nHost: x\r\n"
                                    f"Authorization: Bearer {marker}{'y' * 9000}\r\n\r\n").encode(),
        # "not well-formed HTTP" before (a fresh user's trial, session 67): now what broke
        "200_header_lines": ("GET /v1/uploads/alice.x HTTP/1.1\r\nHost: x\r\n"
                             + "".join(f"X-Pad-{i}: v\r\n" for i in range(200))
                             + "\r\n").encode(),
    }
    said = {"200_header_lines": "the request has more header lines than the parser's limit"}
    for name, raw in cases.items():
        with socket.create_connection(("127.0.0.1", g.port), timeout=30) as sock:
            sock.sendall(raw)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        answers = _answers(data)
        assert answers, name
        for _status, headers, body in answers:
            assert headers["content-type"].startswith("application/json"), (name, data[:300])
            assert json.loads(body)["schema_version"] == 1
        status, _, body = answers[-1]
        assert (status, json.loads(body)["error"]) == (400, "BAD_REQUEST"), name
        assert json.loads(body)["message"].startswith(said.get(name, "")), body
        assert b"\\xff" not in data and b"\xff" not in data and marker.encode() not in data
    new = _log_lines(g.log)[log_before:]
    assert all(json.loads(x) for x in new if x.strip()), new  # JSON lines only, no traceback
    text = "\n".join(new)
    assert "Traceback" not in text and "\\xff" not in text and marker not in text
    bad = [json.loads(x) for x in new if '"BAD_REQUEST"' in x]
    assert len(bad) == 3 and all(x["event"] == "gateway_request" and x["status"] == 400
                                 and x["error"] for x in bad)
