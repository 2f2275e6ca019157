"""An HTTP reverse proxy in front of MinIO that can answer like a failing load balancer.

Why not toxiproxy: toxiproxy is a TCP proxy; its toxics (latency, bandwidth, slow_close,
timeout, reset_peer, slicer, limit_data, and ``enabled: false`` for "down") act on bytes and
connections and none answers an HTTP request with a status code. Protocol-aware (HTTP) toxics
are an open request there (Shopify/toxiproxy #50; #160 asked for 4xx/5xx answers and was closed
in its favour; in #404 a maintainer answers that toxiproxy "is only TCP proxy"). The fault the
worker must survive is an HTTP answer: a proxy or load balancer in front of the store answering
``503 Service Unavailable`` (or 502) with an HTML or empty body, which the minio client raises
as ``InvalidResponseError`` / ``ServerError`` rather than ``S3Error``. So this module is a small
real reverse proxy: a threaded HTTP/1.1 server that forwards each request byte for byte (the
``Host`` header kept, so AWS Signature V4 still verifies) to the upstream MinIO and relays the
answer, or, in a fault mode, answers the fault itself.

Modes (:attr:`FaultProxy.mode`, switchable at any time from another thread):

* ``pass``: forward.
* ``503`` / ``502``: answer that status with ``Content-Type: text/html`` and a one-line HTML
  body (what nginx or an ELB sends), without contacting the upstream.
* ``503-empty``: 503 with no body and no content type.
* ``500-xml-cut``: 500 with ``Content-Type: application/xml`` and an XML error document cut
  short (a truncated answer: the minio client's XML parser raises ``ParseError``).
* ``reset``: close the client connection without answering (a connection reset / bad status
  line for the client).
* ``slow_put``: forward, but hold each PUT for :attr:`FaultProxy.put_delay_s` first (a slow
  store: a batch's PUTs still in flight while the next batch computes).

TLS: the local stack's MinIO serves TLS only, so :meth:`FaultProxy.for_store` makes a proxy
that speaks TLS on both sides: it serves the stack's own server certificate (issued to
127.0.0.1, so a client checking it against the stack's CA accepts the proxy's port as well) and
connects to MinIO over TLS, checking MinIO's certificate against that CA. A fault answer is then
a TLS-wrapped HTTP answer, as a load balancer terminating TLS in front of the store sends.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from streams.settings import S3Settings

MODES = ("pass", "503", "502", "503-empty", "500-xml-cut", "reset", "slow_put")

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
               "trailer", "upgrade"}
_PAGES = {"502": ("text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>\n"),
          "503": ("text/html", b"<html><body><h1>503 Service Unavailable</h1></body></html>\n"),
          "503-empty": (None, b""),
          "500-xml-cut": ("application/xml", b'<?xml version="1.0" encoding="UTF-8"?>\n'
                                             b"<Error><Code>InternalError</Code><Mess")}


class FaultProxy:
    """A reverse proxy on ``127.0.0.1:port`` forwarding to ``upstream`` (``host:port``).

    Use as a context manager, or call :meth:`start` / :meth:`close`. ``counts`` holds how many
    requests each mode has answered (``pass`` counts forwarded ones).

    Args:
        upstream: ``host:port`` of the real server (MinIO).
        port: port to listen on (0: a free one; read it back from :attr:`port`).
        timeout_s: connect/read timeout towards the upstream (s); an upstream that does not
            answer in time is relayed as a closed connection.
        serve_tls: ``(certificate file, key file)`` (PEM) to serve TLS with; None: plain HTTP.
        upstream_ca: CA file (PEM) to check the upstream's certificate with when it is reached
            over TLS; None: the upstream is plain HTTP.

    Raises:
        ValueError: ``mode`` set to something not in :data:`MODES`.
    """

    def __init__(self, upstream: str, port: int = 0, timeout_s: float = 30.0, *,
                 serve_tls: tuple[str, str] | None = None, upstream_ca: str | None = None) -> None:
        host, _, p = upstream.rpartition(":")
        self.upstream = (host, int(p))
        self.timeout_s = timeout_s
        self.put_delay_s = 3.0  # how long ``slow_put`` holds a PUT (s)
        self._mode = "pass"
        self._lock = threading.Lock()
        self.counts: dict[str, int] = dict.fromkeys(MODES, 0)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # a client gone mid-handshake
        if serve_tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*serve_tls)
            # the handshake runs on the handler's thread, not on the accepting one
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True,
                                                  do_handshake_on_connect=False)
        self._upstream_tls = (None if upstream_ca is None
                              else ssl.create_default_context(cafile=upstream_ca))
        self._thread: threading.Thread | None = None

    @classmethod
    def for_store(cls, s3: S3Settings, keys: Path | None = None, port: int = 0) -> FaultProxy:
        """A proxy in front of ``s3.endpoint`` that a client with ``s3``'s settings (only the
        endpoint changed to :attr:`endpoint`) reaches as it reaches the store: plain when
        ``s3.secure`` is false, else TLS on both sides with the local stack's certificate.

        Args:
            s3: the store's settings (``endpoint``, ``secure``, ``ca_file``).
            keys: the stack's key folder holding ``server.crt`` and ``server.key``
                (``scripts/stack``); default: the folder of ``s3.ca_file``.
            port: port to listen on (0: a free one).

        Raises:
            ValueError: ``s3.secure`` without ``s3.ca_file`` (the proxy has no certificate
                to serve).
        """
        if not s3.secure:
            return cls(s3.endpoint, port)
        if s3.ca_file is None:
            raise ValueError("a TLS store needs S3Settings.ca_file (the stack's CA) for the proxy")
        folder = keys or Path(s3.ca_file).parent
        return cls(s3.endpoint, port, serve_tls=(str(folder / "server.crt"),
                                                 str(folder / "server.key")),
                   upstream_ca=str(s3.ca_file))

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:port``, for ``S3Settings.endpoint``."""
        return f"127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        """The current mode (one of :data:`MODES`)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"mode {value!r} is not one of {MODES}")
        self._mode = value

    def start(self) -> FaultProxy:
        """Serve on a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _count(self, mode: str) -> None:
        with self._lock:
            self.counts[mode] += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                if isinstance(self.request, ssl.SSLSocket):  # the TLS handshake, on this thread
                    self.request.settimeout(proxy.timeout_s)
                    self.request.do_handshake()
                super().setup()

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                mode = proxy.mode
                proxy._count(mode)
                if mode == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "slow_put" and self.command == "PUT":
                    time.sleep(proxy.put_delay_s)
                if mode not in ("pass", "slow_put"):
                    ctype, page = _PAGES[mode]
                    self.send_response(int(mode.split("-")[0]))
                    if ctype:
                        self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(page)
                    return
                self._forward(body)

            def _forward(self, body: bytes) -> None:
                host, port = proxy.upstream
                conn = (http.client.HTTPConnection(host, port, timeout=proxy.timeout_s)
                        if proxy._upstream_tls is None else
                        http.client.HTTPSConnection(host, port, timeout=proxy.timeout_s,
                                                    context=proxy._upstream_tls))
                try:
                    conn.putrequest(self.command, self.path, skip_host=True,
                                    skip_accept_encoding=True)
                    for k, v in self.headers.items():
                        if k.lower() not in _HOP_BY_HOP:
                            conn.putheader(k, v)
                    conn.endheaders(body if body or "Content-Length" in self.headers else None)
                    r = conn.getresponse()
                    data = r.read()
                    self.send_response_only(r.status, r.reason)
                    for k, v in r.getheaders():
                        if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    length = r.getheader("Content-Length") if self.command == "HEAD" else None
                    self.send_header("Content-Length", length or str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except OSError:  # upstream down or too slow: the client sees a dropped connection
                    self.close_connection = True
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any  # noqa: N815 (http.server API)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
