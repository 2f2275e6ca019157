"""Per-client rate limits and the backlog the gateway refuses to add to.

* :class:`RateLimiter`: a token bucket per client (``rate_per_s``, ``burst``); an empty bucket is
  429 with the seconds until the next token as ``Retry-After``. Clients come from the keys
  file, so the table is bounded by it.
* :class:`UploadsLag`: the workers' consumer-group lag on the uploads topic (the sum over
  partitions of high watermark - committed offset), read on a thread every ``lag_interval_s``
  with an offset fetch that never joins the group (what KEDA reads to scale the workers). A POST
  arriving while it is above ``max_lag`` is 503 ``BACKLOG``: more uploads would only queue.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from confluent_kafka import TopicPartition

from streams.kafka import consumer
from streams.logs import log
from streams.settings import KafkaSettings


class RateLimiter:
    """Token buckets, one per client.

    Args:
        rate_per_s: tokens added per second.
        burst: bucket size (and the tokens a new client starts with).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, rate_per_s: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate_per_s
        self.burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, client: str) -> int | None:
        """Take one token of ``client``'s bucket.

        Returns:
            None when a token was taken; else the whole seconds (at least 1) until one is
            back, for ``Retry-After``.
        """
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[client] = (tokens - 1.0, now)
                return None
            self._buckets[client] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) / self.rate))


class UploadsLag:
    """The workers' lag on the uploads topic, refreshed on a daemon thread.

    Args:
        k: Kafka settings (uploads topic, the workers' ``group_id``).
        interval_s: seconds between two reads.

    Attributes:
        lag: the last sum of (high watermark - committed offset) over the partitions (a
            partition without a committed offset counts from its low watermark); None until
            the first read, and after a read that failed (the gateway does not refuse uploads
            because it cannot measure the backlog; producing then says whether Kafka is up).

    Uploads this instance produced are counted exactly once: :meth:`note` records each one's
    partition and offset from its delivery report, and :attr:`produced` counts those at or past
    the high watermark the last read saw (a read that already includes an upload does not count
    it again, whichever of the two came first; the count it replaced, "produced since the read
    began", counted an upload twice when its delivery landed before the read and its count
    after it).
    """

    def __init__(self, k: KafkaSettings, interval_s: float = 1.0) -> None:
        self.k = k
        self.interval_s = interval_s
        self.lag: int | None = None
        self._high: dict[int, int] = {}  # partition -> high watermark at the last read
        self._own: list[tuple[int, int]] = []  # (partition, offset) this instance produced
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # group.id = the workers' group, to fetch its committed offsets; it never subscribes,
        # so it never joins the group nor commits anything
        self._c = consumer(k, k.group_id)
        self._t = threading.Thread(target=self._loop, name="gateway-lag", daemon=True)

    def start(self) -> UploadsLag:
        """Start the thread (returns self)."""
        self._t.start()
        return self

    def close(self) -> None:
        """Stop the thread (when started) and close the consumer."""
        self._stop.set()
        if self._t.ident is not None:
            self._t.join(10)
        self._c.close()

    def estimate(self) -> int | None:
        """The lag now as this instance knows it: the last read plus what it produced since.

        Between two reads (``interval_s``) a burst of admitted uploads would not show in
        :attr:`lag`: measured with the card model at 0.3 uploads/s, clients waiting out a
        ``Retry-After`` all got in during the next second and queued 50 uploads (2.5 min)
        behind a ``max_lag`` of 8. Other instances' uploads still show only at the next read,
        so N instances may overshoot by up to N - 1 bursts."""
        lag = self.lag
        return None if lag is None else lag + self.produced

    def note(self, partition: int, offset: int) -> None:
        """One upload this instance produced, at ``offset`` of ``partition`` (its delivery
        report's)."""
        with self._lock:
            self._own.append((partition, offset))

    @property
    def produced(self) -> int:
        """Uploads this instance produced that the last read did not see (offset at or past
        that read's high watermark of their partition)."""
        with self._lock:
            return sum(1 for p, o in self._own if o >= self._high.get(p, 0))

    def seen(self, lag: int, high: dict[int, int]) -> None:
        """Take one read's ``lag`` and the ``high`` watermark per partition it was computed
        from; the uploads noted below those watermarks are forgotten (the lag holds them)."""
        with self._lock:
            self._high = dict(high)
            self._own = [(p, o) for p, o in self._own if o >= self._high.get(p, 0)]
            self.lag = lag

    def read_high(self, timeout_s: float = 5.0) -> tuple[int, dict[int, int]]:
        """One read of the lag (records) and the high watermark per partition it used.

        Raises:
            KafkaException: metadata or offsets could not be fetched.
        """
        md = self._c.list_topics(self.k.uploads_topic,
                                 timeout=timeout_s).topics.get(self.k.uploads_topic)
        if md is None or md.error is not None:
            return 0, {}
        tps = [TopicPartition(self.k.uploads_topic, p) for p in sorted(md.partitions)]
        committed = self._c.committed(tps, timeout=timeout_s)
        total, high = 0, {}
        for tp in committed:
            lo, hi = self._c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                   timeout=timeout_s)
            high[tp.partition] = hi
            total += max(0, hi - (tp.offset if tp.offset >= 0 else lo))
        return total, high

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.seen(*self.read_high())
            except Exception as e:  # noqa: BLE001 (a broker outage: measured again next time)
                self.lag = None
                log.warning("gateway_lag_unknown", error=type(e).__name__)
            self._stop.wait(self.interval_s)


__all__ = ["RateLimiter", "UploadsLag"]
