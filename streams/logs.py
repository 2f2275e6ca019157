"""JSON-lines logging (structlog). Never log image bytes or personal fields: log ids, codes,
sizes."""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable

import structlog


def configure_logging(level: str = "INFO") -> None:
    """Route structlog and stdlib logging to JSON lines on stderr at ``level``: a library's
    stdlib record (Pillow's chunk trace at DEBUG, ``STREAM b'IHDR' 16 13``) becomes one
    ``library_log`` line (:class:`_LibraryRecordAsJson`), never raw text."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=lvl, handlers=[_LibraryRecordAsJson()])
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=_StderrLoggerFactory(),
        cache_logger_on_first_use=True,
    )
    warnings.showwarning = _warning_as_json


def _warning_as_json(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: object = None, line: str | None = None) -> None:
    """A Python warning (e.g. Pillow's ``Corrupt EXIF data`` for a hostile upload) as one JSON
    line ``{"event": "python_warning", "category", "message", "where"}`` instead of the raw
    two-line text that breaks line-by-line log parsing; the message is cut to 300 characters."""
    log.warning("python_warning", category=category.__name__,
                message=" ".join(str(message).split())[:300],
                where=f"{filename.rsplit('/', 1)[-1]}:{lineno}")


CLIENT_ERRORS = frozenset({"RequestPayloadError"})
"""Exception classes a library logs that a client's request caused and that carry no HTTP
status: aiohttp's ``RequestPayloadError`` (a body its parser cannot read as framed,
such as a gzip body while aiohttp inflated bodies; the gateway answers it 400 BAD_REQUEST)."""


class _LibraryRecordAsJson(logging.Handler):
    """A library's stdlib log record as one JSON line (``library_log``): its logger, level,
    the place in the library's code, and the exception's class and HTTP status when it has
    them; never the record's message nor a traceback (aiohttp's say what a request held: the
    bytes of an image past its ``Content-Length``, a header's value). A record above warning
    whose exception is the client's (:data:`CLIENT_ERRORS`, or an HTTP status 400-499) is
    written at warning: a client sending a request that does not parse, or a body that does not
    inflate, is no error of the service's, and must not page whoever alerts on errors."""

    def emit(self, record: logging.LogRecord) -> None:
        extra: dict[str, object] = {}
        level = record.levelno
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            extra["error"] = type(exc).__name__
            status = getattr(exc, "status", None) or getattr(exc, "code", None)
            if isinstance(status, int):
                extra["status"] = status
            clients = (isinstance(status, int) and 400 <= status < 500
                       or type(exc).__name__ in CLIENT_ERRORS)
            if clients and level > logging.WARNING:
                level = logging.WARNING
        log.log(level, "library_log", logger=record.name,
                where=f"{record.module}:{record.lineno}", **extra)


def library_logs_as_json(*names: str) -> None:
    """Route the stdlib loggers ``names`` (and their children: ``aiohttp`` covers
    ``aiohttp.server``, ``aiohttp.web``, ...) to :class:`_LibraryRecordAsJson` only."""
    handler = _LibraryRecordAsJson()
    for name in names:
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.propagate = False


class _StderrLogger:
    """Writes each JSON line to the *current* ``sys.stderr`` (not the one seen at configuration,
    which test runners and CLIs may swap and close)."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


class _StderrLoggerFactory:
    def __call__(self, *args: object) -> _StderrLogger:
        return _StderrLogger()


log = structlog.get_logger("cardstream")


def key_tag(key: str) -> str:
    """An object key as it may appear in logs and error messages: ``key:<12 hex>/<n>B``, the
    first 12 hex digits of the key's UTF-8 sha256 and its length in bytes.

    Claim-check keys are chosen by the producer and may carry personal text (a name, a document
    number); the tag still tells two keys apart and matches ``key_tag`` of a key an operator
    holds, without writing the key itself.
    """
    raw = key.encode("utf-8", "surrogatepass")
    return f"key:{hashlib.sha256(raw).hexdigest()[:12]}/{len(raw)}B"


class LibrdkafkaLog:
    """librdkafka's own log lines as JSON lines (the ``logger`` client property of confluent-kafka,
    set by :func:`streams.kafka.base_config`), instead of raw ``%6|…|BGQUEUE|…`` lines on stderr.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client_name, message)`` with the
    syslog level mapped to a :mod:`logging` level, on the thread that polls the client.
    Each becomes ``{"event": "librdkafka", "facility", "client", "message", "level"}``.

    Repeats are rate-limited: a line whose client, facility and message (digits ignored) match
    one emitted less than ``repeat_s`` seconds ago is counted, not written, and the next line
    written for it carries ``"suppressed": N``. With the broker down, each client logged a
    "Connect to … failed: Connection refused" line about 15 times a second (880 lines per worker
    in a minute).

    Args:
        repeat_s: the window in seconds (default 10 s).
        clock: monotonic time in seconds (tests pass their own).
    """

    def __init__(self, repeat_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.repeat_s = repeat_s
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka logs from each client's polling thread
        self._seen: dict[tuple[str, str, str], tuple[float,
                                                     int]] = {}  # key -> (written at, suppressed)

    def log(self, level: int, fmt: str, *args: object) -> None:
        """Emit one librdkafka line at ``level`` (a :mod:`logging` level), unless a repeat."""
        fac, client, message = ([str(a) for a in args] + ["", "", ""])[:3]
        key = (client, fac, _DIGITS.sub("#", message))
        now = self._clock()
        with self._lock:
            written_at, suppressed = self._seen.get(key, (-float("inf"), 0))
            if now - written_at < self.repeat_s:
                self._seen[key] = (written_at, suppressed + 1)
                return
            if len(self._seen) > 1000:  # bounded: messages with varying words
                self._seen.clear()
            self._seen[key] = (now, 0)
        extra = {"suppressed": suppressed} if suppressed else {}
        log.log(level, "librdkafka", facility=fac, client=client, message=message, **extra)


_DIGITS = re.compile(r"\d+")

