"""Committed results for the gateway: a read_committed tail of the results topic on a thread,
a bounded cache of the latest result per upload, and the requests waiting for one.

Why the results topic and not the status app: a wait (``?wait_ms=N``) must end as soon as the
worker's transaction commits, and the topic is where that shows first: the tail is *assigned*
every partition (no group, nothing committed, :func:`streams.kafka.read_topic`) with
``fetch.wait.max.ms`` 10, so a committed result reaches the waiting request within
milliseconds; the status app sees it at the same moment but would add a poll or a proxy hop, and
its table keeps a summary, not the result record the API answers with. Every instance reads
every partition, so any instance answers any GET and any wait, whichever instance took the POST.

What a restart loses: the requests waiting at that moment (their clients see the connection
close and GET the upload, or repeat the POST with its idempotency key: nothing is stored or
produced twice) and the cache. At start the tail reads back ``results_lookback_s`` (15 min by
default), so uploads of the last minutes are answered again at once; an older result is found
through the status app when ``CARDSTREAM_GATEWAY__STATUS_URL`` is set (its verdict table keeps
the result's partition and offset for 7 days, and the gateway reads that one record), else it is
404 on the restarted instance, as before the first result.

Thread model: the tail thread only reads; every change of the cache and every waiter is handled
on the event loop (``call_soon_threadsafe``), so neither needs a lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, Message

from streams.errors import BrokerUnavailable
from streams.kafka import read_topic
from streams.logs import log
from streams.settings import KafkaSettings


def owner_of(upload_id: str) -> str:
    """The client of a gateway upload id ``{client}.{id}`` (the part before the first dot)."""
    return upload_id.split(".", 1)[0]


class ResultCache:
    """The latest result record per upload id, at most ``size`` of them (least recently stored
    dropped first), and the futures waiting for one. Event-loop thread only.

    Args:
        size: how many results to keep.
        keep: which upload ids to keep (e.g. those of a known client); default all.
    """

    def __init__(self, size: int, keep: Callable[[str], bool] = lambda _uid: True) -> None:
        self.size = size
        self.keep = keep
        self._results: OrderedDict[str, bytes] = OrderedDict()
        self._waiters: dict[str, set[asyncio.Future[bytes]]] = {}
        self.waiting = 0
        """Requests waiting for a result now."""

    def __len__(self) -> int:
        return len(self._results)

    def get(self, upload_id: str) -> bytes | None:
        """The latest result value of ``upload_id`` (JSON bytes as on the topic), or None."""
        return self._results.get(upload_id)

    def put(self, upload_id: str, value: bytes) -> None:
        """Store a result (the latest one wins) and wake the requests waiting for it."""
        for f in self._waiters.pop(upload_id, ()):
            if not f.done():
                f.set_result(value)
        if not self.keep(upload_id):
            return
        self._results[upload_id] = value
        self._results.move_to_end(upload_id)
        while len(self._results) > self.size:
            self._results.popitem(last=False)

    def put_many(self, records: Iterable[tuple[str, bytes]]) -> None:
        """:meth:`put` each ``(upload_id, value)`` in order."""
        for uid, value in records:
            self.put(uid, value)

    async def wait(self, upload_id: str, timeout_s: float) -> bytes | None:
        """The result of ``upload_id`` once it is committed, or None after ``timeout_s``."""
        have = self._results.get(upload_id)
        if have is not None or timeout_s <= 0:
            return have
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(upload_id, set()).add(fut)
        self.waiting += 1
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return None
        finally:
            self.waiting -= 1
            left = self._waiters.get(upload_id)
            if left is not None:
                left.discard(fut)
                if not left:
                    del self._waiters[upload_id]


class ResultsTail:
    """Reads the results topic (read_committed) from ``lookback_s`` ago on a daemon thread and
    hands each batch of records to ``cache`` on ``loop``.

    No broker answering at start (:class:`~streams.errors.BrokerUnavailable`) is waited out:
    the tail asks again every ``retry_s`` and stays alive meanwhile (before, its thread ended,
    so ``/live`` failed and the gateway was restarted however soon the broker came back).

    Args:
        k: Kafka settings (the results topic).
        cache: where results go (its methods run on ``loop``).
        loop: the event loop of the HTTP server.
        lookback_s: read back this long at start (s).
        error_cb: the consumer's ``error_cb`` (the gateway's broker watch,
            :mod:`streams.reach`); None: none.
        retry_s: wait between two starts while no broker answers (s).

    Attributes:
        caught_up: set once the tail has read everything there was at start (the first poll
            that returns nothing); ``/ready`` waits for it.
        records: result records read so far.
    """

    def __init__(self, k: KafkaSettings, cache: ResultCache, loop: asyncio.AbstractEventLoop,
                 lookback_s: float, error_cb: Callable[[KafkaError], None] | None = None,
                 retry_s: float = 1.0) -> None:
        self.k = k
        self.cache = cache
        self.loop = loop
        self.lookback_s = lookback_s
        self.error_cb = error_cb
        self.retry_s = retry_s
        self.caught_up = threading.Event()
        self.records = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="gateway-results", daemon=True)

    def start(self) -> ResultsTail:
        """Start the thread (returns self)."""
        self._t.start()
        return self

    def close(self) -> None:
        """Stop reading (within ~0.1 s) and wait for the thread."""
        self._stop.set()
        self._t.join(10)

    def _run(self) -> None:
        since = int((time.time() - self.lookback_s) * 1000)
        config: dict[str, Any] = {"fetch.wait.max.ms": 10, "fetch.min.bytes": 1}
        if self.error_cb is not None:
            config["error_cb"] = self.error_cb
        waiting = False
        try:
            while not self._stop.is_set():
                try:
                    self._read(since, config)
                    return
                except BrokerUnavailable as e:  # raised before anything was read
                    if not waiting:
                        log.warning("gateway_results_tail_waiting", error=str(e),
                                    hint="not ready until a broker answers")
                    waiting = True
                    self._stop.wait(self.retry_s)
        except Exception as e:  # noqa: BLE001 (say it; /ready and /live fail)
            self.error = f"{type(e).__name__}: {e}"
            log.error("gateway_results_tail_failed", error=self.error)

    def _read(self, since_ms: int, config: dict[str, Any]) -> None:
        """Read the results topic from ``since_ms`` on until :meth:`close`.

        Raises:
            KafkaSetupError: what :func:`streams.kafka.read_topic` raises at its start.
        """
        reader = read_topic(self.k, self.k.results_topic, since_ms=since_ms, follow=True,
                            poll_s=0.05, wait_topics_s=60.0, config=config)
        for msgs in reader:
            if self._stop.is_set():
                reader.close()
                return
            if not msgs:
                self.caught_up.set()
                continue
            batch = list(_records(msgs))
            self.records += len(batch)
            if batch:
                self.loop.call_soon_threadsafe(self.cache.put_many, batch)

    @property
    def alive(self) -> bool:
        """True while the thread reads."""
        return self._t.is_alive()


def _records(msgs: Iterable[Message]) -> Iterable[tuple[str, bytes]]:
    for m in msgs:
        key, value = m.key(), m.value()
        if key and value:
            try:
                yield key.decode("ascii"), value
            except UnicodeDecodeError:
                continue  # not an upload id the gateway made




class StatusLookup:
    """Finds a result older than the tail's look-back through the status app: its verdict
    table keeps, for 7 days and across restarts, the partition and offset of each upload's
    latest result, and the gateway then reads that one record from the results topic (so the
    answer is the record itself, as for any other GET).

    Args:
        url: the status app's base URL (``http://status:6066``).
        token: its bearer token (``CARDSTREAM_STATUS__API_TOKEN``), or None.
        k: Kafka settings (the results topic).
        timeout_s: bound on the status app's answer and on the read (s).
    """

    def __init__(self, url: str, token: str | None, k: KafkaSettings,
                 timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.k = k
        self.timeout_s = timeout_s

    async def find(self, upload_id: str) -> bytes | None:
        """The latest result record of ``upload_id``, or None (no verdict, or the status app
        or Kafka did not answer in time: the caller answers 404 as for any missing result)."""
        import aiohttp

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with aiohttp.ClientSession(timeout=timeout) as s, \
                    s.get(f"{self.url}/uploads/{upload_id}", headers=headers) as r:
                if r.status != 200:
                    return None
                where = (await r.json()).get("result") or {}
            p, off = int(where["partition"]), int(where["offset"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as e:
            log.warning("gateway_status_lookup_failed", error=type(e).__name__)
            return None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._read, upload_id, p, off)

    def _read(self, upload_id: str, partition: int, offset: int) -> bytes | None:
        from confluent_kafka import TopicPartition

        from streams.kafka import consumer

        c = consumer(self.k, "cardstream-gateway-lookup")
        try:
            c.assign([TopicPartition(self.k.results_topic, partition, offset)])
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None or m.error() is not None:
                    continue
                if m.offset() == offset and m.key() == upload_id.encode():
                    return m.value()
                return None
            return None
        finally:
            c.close()


__all__ = ["ResultCache", "ResultsTail", "StatusLookup", "owner_of"]
