"""JSON-lines logging (structlog), the one set-up of every process: the ``cardstream`` commands
and services (through :mod:`streams.logs`, which adds the Kafka and key-tag parts) and the
``python -m processors...`` scripts, whose ``__main__`` calls :func:`configure_logging` first.
It sits here, below ``streams``, because ``processors`` imports nothing from ``streams``.

Never log image bytes or personal fields: log ids, codes, sizes."""

from __future__ import annotations

import logging
import sys
import warnings

import structlog


def configure_logging(level: str = "INFO") -> None:
    """Route structlog and stdlib logging to JSON lines on stderr at ``level`` (a level name in
    any case; an unknown name is INFO): each line an object with ``event``, ``level`` and
    ``timestamp`` (ISO 8601, UTC); events below ``level`` are dropped. A library's stdlib
    record (Pillow's chunk trace at DEBUG, ``STREAM b'IHDR' 16 13``) becomes one
    ``library_log`` line (:class:`_LibraryRecordAsJson`), never raw text, and a Python warning
    one ``python_warning`` line. Call it once, at the start of a process, before anything logs:
    structlog's loggers keep the configuration of their first use."""
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
