"""The gateway's HTTP server (aiohttp): the API, the page, and the admin endpoints.

Why aiohttp: it is already installed (faust-streaming, the status app, runs on it), and it
gives what a front door over a stream needs: the request body as a stream (read in chunks under
a byte cap and a deadline, so a 100 MB or a slow body never sits in memory or holds a slot
for ever), the headers before the body (``Content-Length`` and the key are checked before a byte
of the body is read, and an ``Expect: 100-continue`` sender is refused before it sends one), and
waits that cost a future each, not a thread (hundreds of ``wait_ms`` requests at once).

Routes (API on ``gateway.port``; every ``/v1/uploads`` route needs ``Authorization: Bearer
<key>``):

=========================================  =======================================================
``GET /``                                  the page (``static/index.html``), which uses the same
                                           API
``GET /v1/tasks``                          each task's options as JSON Schema (the page's choices)
``POST /v1/uploads``                       an image (raw body, or multipart with an ``image``
                                           part) with ``task``, ``options`` (JSON),
                                           ``upload_id`` (query or form fields) and
                                           ``Idempotency-Key``; ``?wait_ms=N``
``GET /v1/uploads/{id}``                   the verdict, as on the results topic (``?wait_ms=N``)
``GET /v1/uploads/{id}/output``            the output image, streamed from the object store
``GET /v1/uploads/{id}/artifacts/{name}``  the result's artifact ``name`` (a payload field
                                           holding an object ref: ``rectified``, ``photo``,
                                           the ID photo's print ``sheet``), the same way
=========================================  =======================================================

Admin (``gateway.admin_port``): ``/metrics``, ``/live`` (the results tail runs), ``/ready``
(the tail has read back its look-back window, a broker answers: :mod:`streams.reach`, and a
client has a key).

Every error is the HTTP status with :class:`schemas.gateway.GatewayError` as body; 429 and 503
carry ``Retry-After``. One JSON log line per upload and per refusal (``gateway_request``):
method, route template, status, code, ms, client name and upload id; never a key, a body, an
option value or a file name.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import traceback
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from aiohttp import BodyPartReader, MultipartReader, StreamReader, web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, PayloadEncodingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from multidict import MultiMapping
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processors import registry
from schemas import codec
from schemas import formats as F
from schemas.gateway import HTTP_STATUS, GatewayCode, GatewayError, UploadAccepted
from schemas.models import TASKS, ObjectRef, VerificationResult
from schemas.reasons import ReasonCode
from streams.errors import ObjectNotFound, StorageError
from streams.gateway.errors import PortUnavailable, Refused, store_unavailable
from streams.gateway.keys import ApiKeys
from streams.gateway.limits import RateLimiter, UploadsLag
from streams.gateway.metrics import GatewayMetrics
from streams.gateway.results import ResultCache, ResultsTail, StatusLookup, owner_of
from streams.gateway.uploads import Intake, check_request, parse_options, upload_id_for
from streams.logs import library_logs_as_json, log
from streams.reach import BrokerReach
from streams.settings import Settings
from streams.storage import Storage

PAGE = Path(__file__).with_name("static") / "index.html"
#: form fields of a POST besides the image (each at most 64 KiB)
FIELDS = ("task", "options", "upload_id")
FIELD_MAX_BYTES = 64 * 1024
CHUNK = 64 * 1024
#: the one answer for an id without a result: another client's, nobody's, or not committed yet
UNKNOWN = "no committed result for this upload id (yet)"
_UPLOAD_ID = re.compile(F.UPLOAD_ID_PATTERN.replace("$", r"\Z"))
#: the page's Content-Security-Policy: nothing from elsewhere, images from the API as blobs
PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "img-src blob: data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; "
            "base-uri 'none'")


@dataclass
class Gateway:
    """What the handlers share (one per process).

    Attributes:
        settings: app settings (``settings.gateway``: :class:`~streams.gateway.settings.
            GatewaySettings`).
        keys: the clients' API keys.
        intake: stores and produces uploads.
        storage: the object store (outputs are streamed from it).
        cache: committed results and the requests waiting for them.
        limiter: per-client rate limits.
        lag: the workers' lag on the uploads topic (None: not measured).
        lookup: the status app, for results older than the cache (None: not configured).
        tail: the results tail (started with the server).
        broker: whether a broker answers (started with the server; the tail reports to it).
        in_flight: uploads being received, stored or produced now.
        ports: the ports the servers listen on (API, then admin when it has one), once started.
    """

    settings: Settings
    keys: ApiKeys
    intake: Intake
    storage: Storage
    cache: ResultCache
    limiter: RateLimiter
    lag: UploadsLag | None = None
    tail: ResultsTail | None = None
    broker: BrokerReach | None = None
    lookup: StatusLookup | None = None
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    in_flight: int = 0
    ports: list[int] = field(default_factory=list)

    # ---- access -------------------------------------------------------------------------------

    def client(self, request: web.Request) -> str:
        """The calling client, after its key and its rate limit.

        Raises:
            Refused: ``UNAUTHORIZED`` (no or unknown key), ``AMBIGUOUS_FIELD`` (two
                ``Authorization`` headers), ``RATE_LIMITED``.
        """
        if "client" in request:  # checked already (Expect: 100-continue)
            return str(request["client"])
        # two keys are refused, not read as the first (a trial's valid key followed by another
        # client's was accepted as the first client)
        client = self.keys.client_of(_one(request.headers, "Authorization", "in the headers"))
        if client is None:
            raise Refused(GatewayCode.UNAUTHORIZED, "send 'Authorization: Bearer <API key>'")
        request["client"] = client
        retry = self.limiter.take(client)
        if retry is not None:
            raise Refused(GatewayCode.RATE_LIMITED, "too many requests for this client",
                          retry_after_s=retry)
        return client

    def wait_s(self, request: web.Request) -> float:
        """``?wait_ms=N`` in seconds, clamped to ``max_wait_ms`` (0 when absent).

        Raises:
            Refused: ``INVALID_PARAMETER`` (not a whole number >= 0); ``OVERLOADED`` (as many
                requests wait already as ``max_waiting`` allows).
        """
        raw = _one(request.query, "wait_ms", "in the query")
        if raw is None:
            return 0.0
        g = self.settings.gateway
        ms = wait_ms(raw, g.max_wait_ms)
        if ms and self.cache.waiting >= g.max_waiting:
            raise Refused(GatewayCode.OVERLOADED, "too many requests are waiting for a verdict",
                          retry_after_s=g.retry_after_s)
        return ms / 1000.0

    def admit_upload(self, request: web.Request) -> None:
        """Refuse a POST before its body is read: the body limit by ``Content-Length``, this
        instance's in-flight uploads and the workers' backlog (the lag as last read, plus what
        this instance produced since and what it is receiving now, against ``max_lag``).

        Raises:
            Refused: ``BODY_TOO_LARGE``, ``OVERLOADED``, ``BACKLOG``.
        """
        g = self.settings.gateway
        n = request.content_length
        if n is not None and n > g.max_body_bytes:
            raise Refused(GatewayCode.BODY_TOO_LARGE, f"the body is {n} bytes; the limit is "
                          f"{g.max_body_bytes}")
        if self.in_flight >= g.max_in_flight:
            raise Refused(GatewayCode.OVERLOADED, "this gateway is receiving as many uploads as "
                          "it may", retry_after_s=g.retry_after_s)
        lag = self.lag.estimate() if self.lag is not None else None
        if lag is not None and lag + self.in_flight >= g.max_lag:
            raise Refused(GatewayCode.BACKLOG, f"the workers are {lag} uploads behind and "
                          f"{self.in_flight} are on their way (limit {g.max_lag})",
                          retry_after_s=g.retry_after_s)

    # ---- the body -----------------------------------------------------------------------------

    async def read_body(self, request: web.Request,
                        query: dict[str, str]) -> tuple[dict[str, str], bytes]:
        """The fields (``query``, the fields of the query, with the form's) and the image of a
        POST, read under the byte cap, the part limit and the deadline.

        Raises:
            Refused: ``BODY_TOO_LARGE``, ``BODY_TIMEOUT``, ``BODY_INCOMPLETE`` (the sender
                closed before ``Content-Length`` bytes), ``BAD_REQUEST`` (a body that does not
                inflate as its ``Content-Encoding`` says), ``BAD_MULTIPART``,
                ``TOO_MANY_PARTS`` (more than ``max_parts``: refused at the first part past
                it), ``AMBIGUOUS_FIELD`` (a part twice, or a form field that the query gives
                otherwise).
        """
        g = self.settings.gateway
        try:
            return await asyncio.wait_for(self._read_body(request, query, g.max_body_bytes),
                                          g.body_timeout_s)
        except TimeoutError:
            raise Refused(GatewayCode.BODY_TIMEOUT, f"the body did not arrive within "
                          f"{g.body_timeout_s:g} s") from None
        except web.RequestPayloadError:
            # aiohttp's parser could not read the body's bytes as its headers frame them (it
            # answered 500 INTERNAL_ERROR and logged two errors before)
            raise Refused(GatewayCode.BAD_REQUEST, "the body cannot be read as its headers "
                          "frame it") from None
        except (HttpProcessingError, ConnectionError, asyncio.IncompleteReadError):
            raise Refused(GatewayCode.BODY_INCOMPLETE, "the body ended before its "
                          "Content-Length") from None

    async def _read_body(self, request: web.Request, query: dict[str, str],
                         cap: int) -> tuple[dict[str, str], bytes]:
        multipart = request.content_type.startswith("multipart/")
        # header lines given more than once are one list (RFC 9110 5.3): all of them count
        coding = content_coding(", ".join(request.headers.getall("Content-Encoding", [])))
        content = request.content
        if coding or not multipart:
            body = await _read_capped(content.readany, cap)
            body = _inflate_capped(body, coding, cap) if coding else body
            if not multipart:
                return query, body
            # a coded form, inflated under the cap: its parts are read from memory, from a
            # buffer whose limit holds it all (past twice its limit a reader pauses the
            # connection's transport, and aiohttp's parser asserted: 500 for a coded form over
            # 128 KiB, a second fresh user's trial)
            content = StreamReader(request.protocol, len(body) + 1,
                                   loop=asyncio.get_running_loop())
            content.feed_data(body)
            content.feed_eof()
        max_parts = self.settings.gateway.max_parts
        form: dict[str, str] = {}
        image: bytes | None = None
        try:
            reader = MultipartReader(request.headers, content)
            left, parts = cap, 0
            while (part := await reader.next()) is not None:
                parts += 1
                if parts > max_parts:
                    raise Refused(GatewayCode.TOO_MANY_PARTS, f"the multipart body has more "
                                  f"than {max_parts} parts")
                if not isinstance(part, BodyPartReader):
                    raise ValueError("nested multipart")
                name = part.name
                if name in form or (name == "image" and image is not None):
                    raise Refused(GatewayCode.AMBIGUOUS_FIELD, f"the form has more than one "
                                  f"'{name}' part")
                limit = left if name == "image" else min(left, FIELD_MAX_BYTES)
                data = await _read_capped(
                    lambda p=part: p.read_chunk(CHUNK), limit,
                    "the body" if limit == left else
                    f"the form's {repr(name) if name in FIELDS else 'extra'} field")
                left -= len(data)
                if name == "image":
                    image = data
                elif name in FIELDS:  # other fields: read past, counted, not kept
                    form[name] = data.decode("utf-8", "replace")
        except PayloadEncodingError:
            raise  # the HTTP body itself ended early or broke its framing: BODY_INCOMPLETE
        except (ValueError, AssertionError, UnicodeDecodeError, KeyError, BadHttpMessage) as e:
            # BadHttpMessage: a part's own headers refused by the part parser (too many, a line
            # too long, a bad header line)
            raise Refused(GatewayCode.BAD_MULTIPART, f"the multipart body is malformed "
                          f"({type(e).__name__})") from None
        if image is None:
            raise Refused(GatewayCode.BAD_MULTIPART, "the multipart body has no 'image' part")
        for name, value in form.items():
            if query.get(name, value) != value:
                raise Refused(GatewayCode.AMBIGUOUS_FIELD, f"'{name}' is in the query and in "
                              "the form, with different values")
        return {**query, **form}, image

    # ---- results ------------------------------------------------------------------------------

    def own(self, client: str, upload_id: str) -> str:
        """``upload_id`` when it is a valid id of ``client``'s.

        Raises:
            Refused: ``UNKNOWN_UPLOAD`` (another client's, or not an upload id): 404, the same
                answer as for an id nobody used, so ids of others are not confirmed.
        """
        if not _UPLOAD_ID.match(upload_id):
            raise Refused(GatewayCode.UNKNOWN_UPLOAD, UNKNOWN)
        if owner_of(upload_id) != client:
            raise Refused(GatewayCode.UNKNOWN_UPLOAD, UNKNOWN, upload_id=upload_id)
        return upload_id

    async def result(self, upload_id: str, wait_s: float, request: str = "get") -> bytes:
        """The latest committed result of ``upload_id``, waiting up to ``wait_s`` (``request``:
        ``post`` or ``get``, the wait metric's label).

        Raises:
            Refused: ``UNKNOWN_UPLOAD`` when there is none (yet).
        """
        t0 = time.monotonic()
        value = self.cache.get(upload_id)
        if value is None and self.lookup is not None:
            value = await self.lookup.find(upload_id)
            if value is not None:
                self.cache.put(upload_id, value)
        if value is None and wait_s > 0:
            value = await self.cache.wait(upload_id, wait_s)
            self.metrics.wait.labels(request, "result" if value else "timeout").observe(
                time.monotonic() - t0)
        if value is None:
            raise Refused(GatewayCode.UNKNOWN_UPLOAD, UNKNOWN, upload_id=upload_id)
        return value


def wait_ms(raw: str, max_wait_ms: int) -> int:
    """The ms a ``?wait_ms=`` value asks to wait, clamped to ``max_wait_ms``: ASCII digits only,
    any number of them (a value too long to be a number of ms waits ``max_wait_ms``, as every
    value above it does).

    Raises:
        Refused: ``INVALID_PARAMETER``: empty, a sign, a point, or a digit outside ASCII (``²``
            is a digit to ``str.isdigit`` but no number to ``int``).
    """
    if not (raw.isascii() and raw.isdigit()):
        raise Refused(GatewayCode.INVALID_PARAMETER,
                      "wait_ms must be a whole number of ms, 0 or more (ASCII digits)")
    return max_wait_ms if len(raw) > 9 else min(int(raw), max_wait_ms)


def _one(values: MultiMapping[str], name: str, where: str) -> str | None:
    """The one value of ``name`` in ``values`` (a query or the headers), None when absent.

    Raises:
        Refused: ``AMBIGUOUS_FIELD`` when it is there more than once.
    """
    got = values.getall(name, [])
    if len(got) > 1:
        raise Refused(GatewayCode.AMBIGUOUS_FIELD, f"'{name}' is more than once {where}")
    return got[0] if got else None


def query_fields(request: web.Request) -> dict[str, str]:
    """The upload's fields (:data:`FIELDS`) in the query of ``request``.

    Raises:
        Refused: ``AMBIGUOUS_FIELD`` for a field given twice.
    """
    return {k: v for k in FIELDS if (v := _one(request.query, k, "in the query")) is not None}


async def _read_capped(read: Any, cap: int, what: str = "the body") -> bytes:
    """Chunks from ``read()`` until it returns b"", at most ``cap`` bytes (``what``: the thing
    read, as the refusal names it).

    Raises:
        Refused: ``BODY_TOO_LARGE`` past ``cap``.
    """
    buf = bytearray()
    while chunk := await read():
        buf += chunk
        if len(buf) > cap:
            raise Refused(GatewayCode.BODY_TOO_LARGE, f"{what} is larger than {cap} bytes")
    return bytes(buf)


CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
"""The content codings the gateway inflates (RFC 9110 8.4.1: ``x-gzip`` is ``gzip``), to the
zlib format each is: aiohttp's own inflating is off (``auto_decompress=False``, :func:`serve`),
for it took a gzip body cut short as whole."""


def content_coding(header: str) -> str | None:
    """The coding (a value of :data:`CODINGS`) a ``Content-Encoding`` header puts on the body,
    None for none.

    A list of codings (RFC 9110 8.4) is taken with ``identity`` left out (a sender that names
    it means no coding).

    Raises:
        Refused: ``UNSUPPORTED_FORMAT`` (415, RFC 9110 8.4: a coding the server does not
            accept) for any other coding (br, zstd, compress) or more than one.
    """
    codings = [c.strip().lower() for c in header.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in CODINGS:
        return CODINGS[codings[0]]
    shown = "".join(c if c.isascii() and c.isprintable() else "?" for c in header.strip()[:60])
    raise Refused(ReasonCode.UNSUPPORTED_FORMAT, f"the body's Content-Encoding "
                  f"{shown!r} is not one this gateway decodes: send the image as "
                  "is, or with gzip, x-gzip or deflate alone")


def _inflate_capped(data: bytes, coding: str, cap: int) -> bytes:
    """``data`` inflated, at most ``cap`` bytes: for ``gzip`` its members (RFC 1952), for
    ``deflate`` one zlib stream (RFC 1950; a raw deflate stream, RFC 1951, as some senders
    send, is taken too).

    Raises:
        Refused: ``BODY_TOO_LARGE`` past ``cap`` (a small body may inflate a thousandfold),
            ``BAD_REQUEST`` where ``data`` is not whole members or streams of its coding
            (one cut short, bytes after a deflate stream).
    """
    out = bytearray()
    try:
        while True:
            if coding == "gzip":
                wbits = 16 + zlib.MAX_WBITS  # a gzip header and trailer
            else:  # RFC 1950's header has CM = 8 in its low nibble; else raw deflate
                wbits = zlib.MAX_WBITS if data[:1] and data[0] & 0xF == 8 else -zlib.MAX_WBITS
            d = zlib.decompressobj(wbits)
            out += d.decompress(data, cap + 1 - len(out))
            if len(out) > cap:
                raise Refused(GatewayCode.BODY_TOO_LARGE,
                              f"the body inflates to more than {cap} bytes")
            if not d.eof:
                raise zlib.error("the stream ends early")
            data = d.unused_data
            if not data:
                return bytes(out)
            if coding != "gzip":
                raise zlib.error("bytes after the stream")
    except zlib.error:
        raise Refused(GatewayCode.BAD_REQUEST, "the body does not decode as its "
                      "Content-Encoding says") from None


def error_response(e: Refused) -> web.Response:
    """The JSON answer of a refusal (``Retry-After`` for 429 and 503)."""
    body = GatewayError(error=e.code, message=" ".join(str(e).split())[:500],
                        retry_after_s=e.retry_after_s, upload_id=e.upload_id)
    headers = {"Retry-After": str(e.retry_after_s)} if e.retry_after_s else {}
    if e.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="cardstream"'
    return web.Response(status=e.status, headers=headers, content_type="application/json",
                        text=body.model_dump_json(exclude_none=True))


def result_response(value: bytes) -> web.Response:
    """A committed result as the results topic has it."""
    return web.Response(status=200, body=value, content_type="application/json")


_GW = web.AppKey("gateway", Gateway)


def _route(request: web.Request) -> str:
    info = request.match_info
    resource = info.route.resource if info.http_exception is None else None
    return resource.canonical if resource is not None else "other"


#: the code of an error aiohttp raises or answers itself, by its HTTP status (others: 400
#: ``BAD_REQUEST``, 5xx ``INTERNAL_ERROR``)
_STATUS_CODES = {404: GatewayCode.NOT_FOUND, 405: GatewayCode.METHOD_NOT_ALLOWED,
                 413: GatewayCode.BODY_TOO_LARGE}


def _code_of(status: int) -> GatewayCode:
    return _STATUS_CODES.get(status, GatewayCode.BAD_REQUEST if status < 500
                             else GatewayCode.INTERNAL_ERROR)


def _account(request: web.Request, status: int, code: str | None, t0: float) -> None:
    """Metrics of an answered request, and its ``gateway_request`` log line (every POST and
    every refusal)."""
    gw = request.app[_GW]
    route = _route(request)
    ms = (time.monotonic() - t0) * 1000.0
    method = request.method if request.method in ("GET", "POST") else "other"
    gw.metrics.requests.labels(route, method, str(status)).inc()
    gw.metrics.latency.labels(route).observe(ms / 1000.0)
    if code is not None:
        gw.metrics.refusals.labels(code).inc()
    if code is not None or request.method == "POST":
        log.info("gateway_request", method=request.method, route=route, status=status,
                 code=code, ms=round(ms, 1), client=request.get("client"),
                 upload_id=request.get("upload_id"))


@web.middleware
async def _observe(request: web.Request, handler: Any) -> web.StreamResponse:
    """Errors as JSON answers; metrics and a log line per upload and per refusal."""
    t0 = time.monotonic()
    code = None
    try:
        resp = await handler(request)
    except Refused as e:
        resp, code = error_response(e), e.code
        if request.method == "POST" and not request.content.is_eof():
            resp.force_close()  # the unread body is not read to keep the connection
    except web.HTTPException as e:  # the router's 404 / 405
        c = _code_of(e.status)
        resp, code = error_response(Refused(c, e.reason)), str(c)
        if "Allow" in e.headers:  # a 405 says which methods the route takes (RFC 9110 15.5.6)
            resp.headers["Allow"] = e.headers["Allow"]
    except Exception as e:  # noqa: BLE001 (a bug: answer 500, log the class only)
        tb = traceback.extract_tb(e.__traceback__)[-1]
        log.error("gateway_internal_error", error=type(e).__name__, route=_route(request),
                  where=f"{Path(tb.filename).name}:{tb.lineno}")
        resp, code = error_response(Refused(GatewayCode.INTERNAL_ERROR,
                                            "internal error")), "INTERNAL_ERROR"
    _account(request, resp.status, code, t0)
    return resp


async def _expect(request: web.Request) -> web.Response | None:
    """``Expect: 100-continue``: refuse by the headers alone (key, rate, body size,
    backpressure) before the sender sends its body; otherwise tell it to go on."""
    gw = request.app[_GW]
    t0 = time.monotonic()
    try:
        if request.headers.get("Expect", "").lower() != "100-continue":
            raise Refused(GatewayCode.INVALID_PARAMETER, "unknown Expect header")
        gw.client(request)
        gw.admit_upload(request)
    except Refused as e:  # answered here, not by the middleware: logged and counted here
        _account(request, e.status, e.code, t0)
        resp = error_response(e)
        resp.force_close()
        return resp
    if request.version == (1, 1):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    return None


async def post_upload(request: web.Request) -> web.Response:
    """``POST /v1/uploads``: 202 with :class:`~schemas.gateway.UploadAccepted`, or 200 with the
    VerificationResult when ``wait_ms`` is given and it is committed in time."""
    gw = request.app[_GW]
    client = gw.client(request)
    wait_s = gw.wait_s(request)
    gw.admit_upload(request)
    query = query_fields(request)
    idempotency_key = _one(request.headers, "Idempotency-Key", "in the headers")
    raw = not request.content_type.startswith("multipart/")
    if raw:  # everything but the image is in the query: refuse before reading the body
        task = check_request(query.get("task"), parse_options(query.get("options")),
                             gw.intake.tasks)
    gw.in_flight += 1
    gw.metrics.in_flight.set(gw.in_flight)
    try:
        fields, body = await gw.read_body(request, query)
        options = parse_options(fields.get("options"))
        task = check_request(fields.get("task"), options, gw.intake.tasks)
        uid, deterministic = upload_id_for(client, fields.get("upload_id"), idempotency_key)
        request["upload_id"] = uid
        sub = await gw.intake.submit(client, task, options, body, uid, deterministic,
                                     has_result=gw.cache.get(uid) is not None)
    finally:
        gw.in_flight -= 1
        gw.metrics.in_flight.set(gw.in_flight)
    gw.metrics.uploads.labels("reproduced" if sub.replayed and sub.produced
                              else "replayed" if sub.replayed else "produced").inc()
    if sub.at is not None and gw.lag is not None:
        gw.lag.note(*sub.at)
    if wait_s > 0 or (sub.replayed and gw.cache.get(uid) is not None):
        try:
            return result_response(await gw.result(uid, wait_s, "post"))
        except Refused:
            pass  # not committed within wait_ms: 202
    path = f"/v1/uploads/{uid}"
    accepted = UploadAccepted(upload_id=uid, task=task, replayed=sub.replayed, result=path)
    return web.Response(status=202, headers={"Location": path}, content_type="application/json",
                        text=accepted.model_dump_json())


async def get_upload(request: web.Request) -> web.Response:
    """``GET /v1/uploads/{id}``: the latest committed result (200) or 404 ``UNKNOWN_UPLOAD``."""
    gw = request.app[_GW]
    uid = gw.own(gw.client(request), request.match_info["id"])
    request["upload_id"] = uid
    return result_response(await gw.result(uid, gw.wait_s(request)))


def artifact_name(raw: str | None) -> str | None:
    """The artifact a request names (``{name}`` of ``/artifacts/{name}``; None: ``/output``,
    the task's main one), checked against the names a result can hold
    (:func:`processors.registry.artifact_names`), so no key or field is ever read by a name
    the client made up.

    Raises:
        Refused: ``UNKNOWN_ARTIFACT`` for any other name (the message lists the known ones,
            never the name sent).
    """
    known = registry.artifact_names()
    if raw is None or raw in known:
        return raw
    raise Refused(GatewayCode.UNKNOWN_ARTIFACT, f"not an artifact name; a result can name "
                  f"{', '.join(known)} (each task its own)")


def output_ref(result: VerificationResult, name: str | None, upload_id: str) -> ObjectRef:
    """The object ref of ``result``'s artifact ``name`` (a name :func:`artifact_name` passed;
    None: the task's main one, ``rectified`` / ``photo``).

    Raises:
        Refused: ``NO_OUTPUT`` where the result names none: not produced (a rejected card, a
            photo without a face, a failed upload), not asked for (a ``sheet`` without
            ``print_sheet``), or not one of its task's (a card's ``sheet``).
    """
    task = str(result.task)
    spec = registry.spec(task) if task in registry.names() else None
    ref = (None if spec is None else spec.main_ref(result.payload) if name is None
           else spec.artifact_ref(result.payload, name))
    if ref is None:
        what = "no output image" if name is None else f"no {name!r} artifact"
        raise Refused(GatewayCode.NO_OUTPUT, f"this {task} upload's result has {what} "
                      f"(status {result.status})", upload_id=upload_id)
    return ref


async def get_output(request: web.Request) -> web.StreamResponse:
    """``GET /v1/uploads/{id}/output`` (the task's main output image) and
    ``GET /v1/uploads/{id}/artifacts/{name}`` (the artifact ``name``: :func:`artifact_name`,
    :func:`output_ref`), streamed from the store: one path for both, so their access, status
    codes and errors are the same."""
    gw = request.app[_GW]
    uid = gw.own(gw.client(request), request.match_info["id"])
    request["upload_id"] = uid
    name = artifact_name(request.match_info.get("name"))
    ref = output_ref(codec.decode_result(await gw.result(uid, 0.0)), name, uid)
    loop = asyncio.get_running_loop()
    st = gw.storage
    try:
        obj = await loop.run_in_executor(None, lambda: st.retry(
            f"GET {ref.bucket}", lambda: st.client.get_object(ref.bucket, ref.key)))
    except ObjectNotFound:  # expired (the results bucket's lifecycle rule) or removed
        raise Refused(GatewayCode.NO_OUTPUT, f"the {name or 'output image'} is no longer "
                      "stored", upload_id=uid) from None
    except StorageError as e:
        raise store_unavailable(e, gw.settings.gateway.retry_after_s, uid) from None
    resp = web.StreamResponse(headers={"Content-Type": (ref.content_type
                                                        or "application/octet-stream"),
                                       "Content-Length": str(ref.size_bytes),
                                       "Cache-Control": "private, max-age=3600"})
    try:
        await resp.prepare(request)
        while chunk := await loop.run_in_executor(None, obj.read, CHUNK):
            await resp.write(chunk)
        await resp.write_eof()
    finally:
        obj.close()
        obj.release_conn()
    return resp


async def get_tasks(request: web.Request) -> web.Response:
    """``GET /v1/tasks``: ``{task: options JSON Schema}`` for the tasks this gateway accepts."""
    gw = request.app[_GW]
    return web.json_response({t: TASKS[t].options.model_json_schema()
                              for t in gw.intake.tasks if t in TASKS})


async def get_page(request: web.Request) -> web.Response:
    """``GET /``: the page."""
    return web.Response(body=PAGE.read_bytes(), content_type="text/html", charset="utf-8",
                        headers={"Content-Security-Policy": PAGE_CSP,
                                 "X-Content-Type-Options": "nosniff",
                                 "Referrer-Policy": "no-referrer"})


_PARSER_ERRORS = {
    "LineTooLong": "a request line or header is longer than the parser's limit (8 KB)",
    "BadHttpMethod": "the request's method is not a valid HTTP method",
    "BadStatusLine": "the request line is not valid HTTP",
    "InvalidHeader": "a header is not valid HTTP",
    "InvalidURLError": "the request's URL is not valid",
    "ContentLengthError": "the body does not match its Content-Length",
    "TransferEncodingError": "the body's chunked Transfer-Encoding is broken",
}
"""Plain words for the errors aiohttp's parser raises (``aiohttp.http_exceptions``), by class
name: the answer names no class (the ``gateway_request`` log line does)."""


class _Connection(RequestHandler):
    """aiohttp's connection handler, whose own error answers (a request it cannot parse: a
    request or header line over 8 KB, bytes past a body's ``Content-Length`` read as the next
    request, a bad method or header) are the gateway's: the JSON error body, code
    ``BAD_REQUEST`` (``INTERNAL_ERROR`` for a 500), counted and logged as one ``gateway_request``
    line with the error's class. aiohttp's own answer is text/plain with the parser's message,
    which quotes the offending bytes (an image's, a header value's), and it logs that message
    with a traceback. Installed by :func:`_answer_own_errors`."""

    __slots__ = ()

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        error = type(exc).__name__ if exc is not None else None
        code = _code_of(status)
        gw = getattr(self._manager, "gateway", None)
        if gw is not None:
            gw.metrics.requests.labels("other", "other", str(HTTP_STATUS[code])).inc()
            gw.metrics.refusals.labels(str(code)).inc()
        log.info("gateway_request", method="other", route="other", status=HTTP_STATUS[code],
                 code=str(code), error=error)
        if request.writer.output_size > 0:  # an answer has begun: the connection is broken
            raise ConnectionError("an answer was being sent: the error cannot be")
        what = _PARSER_ERRORS.get(error or "", "the request is not well-formed HTTP")
        if str(getattr(exc, "message", "")).startswith("Too many headers"):  # BadHttpMessage
            what = "the request has more header lines than the parser's limit (128)"
        resp = error_response(Refused(code, f"{what}; the connection is closed"
                                      if code == "BAD_REQUEST" else "internal error"))
        resp.force_close()
        return resp


class _Server(web.Server):
    """aiohttp's server, whose connections are :class:`_Connection` s."""

    gateway: Gateway

    def __call__(self) -> RequestHandler:
        conn = super().__call__()
        conn.__class__ = _Connection  # the same slots: only handle_error differs
        return conn


def _answer_own_errors(runner: web.AppRunner, gw: Gateway) -> None:
    """Make the errors aiohttp answers itself the gateway's (:class:`_Connection`), on a runner
    set up but not yet serving. aiohttp has no public hook for them: the test of this is
    ``tests/integration/test_gateway.py::test_errors_aiohttp_answers_itself_are_json``."""
    server = runner.server
    assert server is not None, "set the runner up first"
    server.__class__ = _Server
    cast(_Server, server).gateway = gw


async def _server_header(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = "cardstream"  # not the framework's name and version


def build_app(gw: Gateway) -> web.Application:
    """The API and page application over ``gw``."""
    app = web.Application(middlewares=[_observe],
                          client_max_size=gw.settings.gateway.max_body_bytes)
    app[_GW] = gw
    app.on_response_prepare.append(_server_header)
    app.router.add_get("/", get_page)
    app.router.add_get("/v1/tasks", get_tasks)
    app.router.add_post("/v1/uploads", post_upload, expect_handler=_expect)
    app.router.add_get("/v1/uploads/{id}", get_upload)
    app.router.add_get("/v1/uploads/{id}/output", get_output)
    app.router.add_get("/v1/uploads/{id}/artifacts/{name}", get_output)
    return app


def build_admin(gw: Gateway) -> web.Application:
    """``/metrics``, ``/live``, ``/ready`` over ``gw``."""
    async def metrics(_r: web.Request) -> web.Response:
        gw.metrics.cached.set(len(gw.cache))
        gw.metrics.waiting.set(gw.cache.waiting)
        if gw.lag is not None and gw.lag.lag is not None:
            gw.metrics.lag.set(gw.lag.lag)
        return web.Response(body=generate_latest(gw.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    def state(ok: bool, **extra: Any) -> web.Response:
        return web.json_response({"ok": ok, **extra}, status=200 if ok else 503)

    async def live(_r: web.Request) -> web.Response:
        return state(gw.tail is not None and gw.tail.alive)

    async def ready(_r: web.Request) -> web.Response:
        # not ready without a client key (an emptied or unreadable keys file: every request
        # would be 401); skipped lines leave the valid ones serving, and are reported here
        # nor while no broker answers (streams.reach): the tail stays alive meanwhile, so a
        # broker outage fails readiness, never liveness
        t = gw.tail
        clients = len(gw.keys.clients)
        reachable = gw.broker is None or gw.broker.reachable
        return state(t is not None and t.alive and t.caught_up.is_set() and clients > 0
                     and reachable, results_read=t.records if t else 0, clients=clients,
                     keys_error=gw.keys.error, broker_reachable=reachable)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/live", live)
    app.router.add_get("/ready", ready)
    return app


def make_gateway(settings: Settings) -> Gateway:
    """The gateway of ``settings``: keys loaded, object store and Kafka producer built (the
    results tail and the lag reader start with the server, :func:`serve`).

    Raises:
        ApiKeysError: no ``api_keys_file`` set, or it cannot be read or has no valid line.
        StorageError: no S3 credentials.
        KafkaSetupError: the uploads bucket is not one the workers read (every event would be
            a dead letter).
    """
    from streams.errors import KafkaSetupError
    from streams.gateway.errors import ApiKeysError

    g = settings.gateway
    if g.api_keys_file is None:
        raise ApiKeysError("set CARDSTREAM_GATEWAY__API_KEYS_FILE (a file of 'client:key' lines)")
    if settings.s3.uploads_bucket not in settings.s3.allowed_buckets:
        raise KafkaSetupError(f"the uploads bucket {settings.s3.uploads_bucket} is not in "
                              "CARDSTREAM_S3__ALLOWED_BUCKETS: the workers would refuse every "
                              "upload")
    keys = ApiKeys(g.api_keys_file, g.api_keys_reload_s)
    storage = Storage(settings.s3)
    token = settings.status.api_token
    lookup = (StatusLookup(g.status_url, token.get_secret_value() if token else None,
                           settings.kafka)
              if g.status_url else None)
    return Gateway(settings=settings, keys=keys, intake=Intake(settings, storage), storage=storage,
                   cache=ResultCache(g.results_cache, keep=lambda u: keys.known(owner_of(u))),
                   limiter=RateLimiter(g.rate_per_s, g.burst), lookup=lookup)


PORT_OPTIONS = ("--port / CARDSTREAM_GATEWAY__PORT",
                "--admin-port / CARDSTREAM_GATEWAY__ADMIN_PORT")
"""The options that choose the API's and the admin server's ports, as errors name them."""


async def serve(gw: Gateway, stop: asyncio.Event, started: asyncio.Event | None = None) -> None:
    """Run the API and admin servers until ``stop`` is set, then stop accepting, let the
    requests in flight finish (up to 10 s) and close the Kafka clients.

    Args:
        started: set once both servers listen (their ports then in ``gw.ports``).

    Raises:
        PortUnavailable: a port could not be bound (in use); what was started is closed.
    """
    g = gw.settings.gateway
    library_logs_as_json("aiohttp")  # never its messages: they quote requests' bytes
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(g.io_threads, thread_name_prefix="gateway-io"))
    gw.broker = BrokerReach(gw.settings.kafka).start()
    gw.tail = ResultsTail(gw.settings.kafka, gw.cache, loop, g.results_lookback_s,
                          error_cb=gw.broker.error_cb).start()
    gw.lag = UploadsLag(gw.settings.kafka, g.lag_interval_s).start()
    # auto_decompress off: the gateway inflates a coded body itself, under its cap, and refuses
    # one cut short (aiohttp took a truncated gzip body as whole; _inflate_capped)
    runners = [web.AppRunner(build_app(gw), access_log=None, shutdown_timeout=10.0,
                             auto_decompress=False)]
    if g.admin_port:
        runners.append(web.AppRunner(build_admin(gw), access_log=None))
    ports = []
    try:
        for r, port, option in zip(runners, (g.port, g.admin_port), PORT_OPTIONS, strict=False):
            await r.setup()
            _answer_own_errors(r, gw)
            site = web.TCPSite(r, g.bind, port, reuse_address=True)
            try:
                await site.start()
            except OSError as e:  # another server on the port (the worker's answer too)
                raise PortUnavailable(option, f"cannot listen on {g.bind}:{port}: "
                                              f"{e.strerror or e}") from e
            ports.append(r.addresses[0][1])  # port 0: the one chosen
        gw.ports = ports
        log.info("gateway_start", port=ports[0], admin_port=ports[1] if len(ports) > 1 else 0,
                 clients=len(gw.keys.clients), uploads_topic=gw.settings.kafka.uploads_topic,
                 results_topic=gw.settings.kafka.results_topic)
        if started is not None:
            started.set()
        await stop.wait()
    finally:
        for r in runners:
            await r.cleanup()
        gw.tail.close()
        gw.lag.close()
        gw.broker.close()
        await loop.run_in_executor(None, gw.intake.close)
        log.info("gateway_stopped")


def run(settings: Settings) -> None:
    """``cardstream gateway``: serve until SIGTERM or SIGINT."""
    gw = make_gateway(settings)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(gw, stop)

    asyncio.run(main())


__all__ = ["Gateway", "build_admin", "build_app", "make_gateway", "run", "serve"]
