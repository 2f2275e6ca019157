"""A consumed record with every part read once, defensively (issue 43).

confluent-kafka's ``Message`` builds Python objects each time a part is asked for, and some of
those calls fail on bytes any non-Python producer may send: ``headers()`` raises ``SystemError``
for a header name that is not UTF-8 (it decodes names strictly). A worker that called it in
``parse`` died there, and again in the ``POISON`` dead letter, which read the headers once more:
the partition crash-looped. :meth:`Record.of` reads topic, partition, offset, key, value,
headers and timestamp once, when the record is fetched; a part that cannot be read is kept as
``None`` and named in :attr:`Record.unreadable`, and the record becomes an
``UNREADABLE_RECORD`` dead letter (its value quarantined as usual). Everything downstream
(intake, compute, the committer, the attempt marks) sees the same values through the methods
``Message`` has, so a ``Record`` stands in for it.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, Message

Headers = list[tuple[str, bytes | None]]


class Record:
    """One record's parts, read once (module docstring). Methods as ``confluent_kafka.Message``.

    Attributes:
        unreadable: ``"headers: SystemError"``-style names of the parts the client could not
            read (their values are None here), or None when every part was read.
    """

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_timestamp",
                 "unreadable")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, headers: Headers | None, timestamp: tuple[int, int],
                 unreadable: str | None = None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers = key, value, headers
        self._timestamp, self.unreadable = timestamp, unreadable

    @classmethod
    def of(cls, m: Message) -> Record | Message:
        """``m``'s parts read once; an error event (``m.error()`` set) is returned as it is."""
        topic, partition, offset = m.topic(), m.partition(), m.offset()
        if m.error() is not None or topic is None or partition is None or offset is None:
            return m  # librdkafka sets topic, partition and offset on every fetched record
        failed: list[str] = []

        def read(name: str, default: Any) -> Any:
            try:
                return getattr(m, name)()
            except Exception as e:  # noqa: BLE001 - any part's failure makes the record unreadable
                failed.append(f"{name}: {type(e).__name__}")
                return default

        headers = read("headers", None)
        return cls(topic, partition, offset, read("key", None), read("value", None),
                   None if headers is None else list(headers),
                   read("timestamp", (TIMESTAMP_NOT_AVAILABLE, 0)), ", ".join(failed) or None)

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def error(self) -> KafkaError | None:
        return None

    def __len__(self) -> int:
        return len(self._value or b"")
