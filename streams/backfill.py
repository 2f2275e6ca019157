"""A backfill (replay) that yields to live traffic.

While a replay runs beside the live workers it competes with them for the same GPU (or CPU). The
:class:`YieldGate` pauses it before each of its batches while the live consumer group is busy:
its lag on the uploads topic (high watermark minus committed offset, summed over partitions) is
above ``yield_lag``. It resumes once the lag has stayed at or below the bound for ``quiet_s``
(so a rush that comes in waves is not fought batch by batch). The replay report says how long it
yielded (``yielded_s``) and how often (``yields``).

The live group's committed offsets are read with an OffsetFetch on a consumer that never
subscribes (it does not join the live group), the high watermarks with ListOffsets; both at most
every ``check_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from streams.kafka import consumer
from streams.logs import log
from streams.settings import BackfillSettings, KafkaSettings


class LiveLag:
    """The live consumer group's lag on a topic.

    Args:
        kafka: Kafka settings.
        group: the live consumer group (``kafka.group_id``).
        topic: the uploads topic.
        timeout_s: bound on each broker request (s).
    """

    def __init__(self, kafka: KafkaSettings, group: str, topic: str,
                 timeout_s: float = 5.0) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self._c: Any = consumer(kafka, group)
        md = self._c.list_topics(topic, timeout=timeout_s)
        self._parts = [TopicPartition(topic, p) for p in sorted(md.topics[topic].partitions)]

    def __call__(self) -> int:
        """Uploads not yet committed by the live group, summed over the partitions it has
        committed before (a partition it never committed has no live worker to yield to: a
        replay beside no live group at all never waits).

        Raises:
            KafkaException: a request failed.
        """
        committed = self._c.committed(self._parts, timeout=self.timeout_s)
        lag = 0
        for tp in committed:
            if tp.offset < 0:
                continue
            _, high = self._c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                    timeout=self.timeout_s)
            lag += max(high - tp.offset, 0)
        return lag

    def close(self) -> None:
        self._c.close()


class YieldGate:
    """Pauses a backfill while the live group's lag is over a bound (module doc).

    Args:
        lag: the live lag (:class:`LiveLag`, or any callable returning uploads).
        settings: ``yield_lag``, ``quiet_s``, ``check_s``.
        clock / sleep: time (tests may pass their own).

    Attributes:
        yielded_s: seconds spent paused so far.
        yields: times it paused.
    """

    def __init__(self, lag: Callable[[], int], settings: BackfillSettings,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.lag = lag
        self.max_lag = settings.yield_lag
        self.quiet_s = settings.quiet_s
        self.check_s = settings.check_s
        self.clock, self.sleep = clock, sleep
        self.yielded_s = 0.0
        self.yields = 0
        self._checked_at = float("-inf")
        self._busy = False

    def _over(self) -> bool:
        """The live lag is over the bound (a failed read counts as over: the live side may be
        in trouble, and the backfill can wait)."""
        try:
            n = self.lag()
        except KafkaException as e:
            log.warning("backfill_lag_unknown", error=str(e.args[0]) if e.args else str(e))
            return True
        return n > self.max_lag

    def busy(self) -> bool:
        """Whether the live group's lag is over the bound: read at most every ``check_s``, the
        last reading otherwise (cheap enough to ask before every batch)."""
        now = self.clock()
        if now - self._checked_at >= self.check_s:
            self._checked_at = now
            self._busy = self._over()
        return self._busy

    def wait(self, stop: Callable[[], bool] = lambda: False) -> float:
        """Before a backfill batch: return at once when the live group is not :meth:`busy`;
        else wait until its lag has stayed within the bound for ``quiet_s``, or ``stop()``.

        Returns:
            Seconds waited now.
        """
        if not self.busy():
            return 0.0
        t0, quiet_since = self.clock(), None
        self.yields += 1
        log.info("backfill_yielding", max_lag=self.max_lag)
        while not stop():
            self.sleep(self.check_s)
            t = self.clock()
            if self._over():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = t
            if quiet_since is not None and t - quiet_since >= self.quiet_s:
                break
        waited = self.clock() - t0
        self.yielded_s += waited
        self._checked_at, self._busy = self.clock(), False
        log.info("backfill_resumed", waited_s=round(waited, 2))
        return waited
