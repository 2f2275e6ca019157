"""Issue 43, item 1: a record's parts read once, defensively (streams/worker/record.py)."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME

from streams.worker.record import Record


class _Msg:
    """A confluent-kafka ``Message`` as a record with a header name that is not UTF-8 behaves:
    ``headers()`` raises ``SystemError`` (every call), the other parts read."""

    def __init__(self) -> None:
        self.header_calls = 0

    def error(self):
        return None

    def topic(self):
        return "t.uploads"

    def partition(self):
        return 2

    def offset(self):
        return 41

    def key(self):
        return b"\xff\xfe"

    def value(self):
        return b'{"upload_id":"u1"}'

    def timestamp(self):
        return (TIMESTAMP_CREATE_TIME, 1_796_000_000_000)

    def headers(self):
        self.header_calls += 1
        raise SystemError("<method 'headers' of 'cimpl.Message' objects> returned a result "
                          "with an exception set")


def test_an_unreadable_part_is_named_and_read_only_once() -> None:
    m = _Msg()
    r = Record.of(m)
    assert isinstance(r, Record) and m.header_calls == 1
    assert (r.topic(), r.partition(), r.offset(), r.key(), r.value(), r.timestamp()) == (
        "t.uploads", 2, 41, b"\xff\xfe", b'{"upload_id":"u1"}', (TIMESTAMP_CREATE_TIME,
                                                                  1_796_000_000_000))
    assert (r.headers(), r.unreadable, r.error(),
            len(r)) == (None, "headers: SystemError", None, 18)
    r.headers()
    assert m.header_calls == 1  # the dead letter reads the snapshot, not the client


def test_a_readable_record_keeps_its_headers_and_error_events_pass_through() -> None:
    class Ok(_Msg):
        def headers(self):
            return [("content-type", b"application/json"), ("x-null", None)]

    r = Record.of(Ok())
    assert (r.headers(), r.unreadable) == ([("content-type", b"application/json"),
                                            ("x-null", None)], None)

    class Err(_Msg):
        def error(self):
            return "partition EOF"

    e = Err()
    assert Record.of(e) is e
