"""JSON-lines logging (structlog). Never log image bytes or personal fields: log ids, codes, sizes."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "INFO") -> None:
    """Route structlog and stdlib logging to JSON lines on stderr at ``level``."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
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


class LibrdkafkaLog:
    """librdkafka's own log lines as JSON lines (the ``logger`` client property of confluent-kafka,
    set by :func:`streams.kafka.base_config`), instead of raw ``%6|…|BGQUEUE|…`` lines on stderr.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client_name, message)`` with the
    syslog level mapped to a :mod:`logging` level, on the thread that polls the client.
    Each becomes ``{"event": "librdkafka", "facility", "client", "message", "level"}``.
    """

    def log(self, level: int, fmt: str, *args: object) -> None:
        """Emit one librdkafka line at ``level`` (a :mod:`logging` level)."""
        fac, client, message = ([str(a) for a in args] + ["", "", ""])[:3]
        log.log(level, "librdkafka", facility=fac, client=client, message=message)

