"""JSON-lines logging for ``streams``: the one set-up is :mod:`processors.logs` (``processors``
imports nothing from ``streams``, so the set-up its scripts share sits there; its public names
are this module's too), and this module adds what only ``streams`` logs: a claim-check key's tag
and librdkafka's lines. Never log image bytes or personal fields: log ids, codes, sizes."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable

from processors.logs import CLIENT_ERRORS, configure_logging, library_logs_as_json, log

__all__ = ["CLIENT_ERRORS", "LibrdkafkaLog", "configure_logging", "key_tag",
           "library_logs_as_json", "log"]


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

