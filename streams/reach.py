"""Whether this process reaches a Kafka broker: what ``/ready`` of the worker and of the gateway
says during a broker outage.

librdkafka tells a client's ``error_cb`` when every broker connection of that client is down
(``_ALL_BROKERS_DOWN``: at once when the broker is killed, then about every 10 s while none
answers; measured with librdkafka 2.16), and tells nothing when one answers again. So such a
report is a suspicion, and a metadata request with a short timeout decides
(:meth:`BrokerReach.check`, on the watch's own thread and its own client: never on the caller's
loop, and never on a client the caller may close meanwhile). The request fails: the process
counts as not reaching a broker (``broker_unreachable`` logged once) and asks again every
``every_s`` until one answers (``broker_back``, with the seconds it was down). A report the
request contradicts (a connection closed while idle) changes nothing, so readiness does not
flap. ``_TRANSPORT`` (one connection failed: about 20 a second per client while the broker is
down, and on every restart of one broker of several) is no suspicion.

A client reports through ``error_cb`` only while it is polled: register :meth:`error_cb` on the
process's constantly polled client (the worker's consumer, the gateway's results tail).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streams.kafka import base_config
from streams.logs import log
from streams.settings import KafkaSettings


class BrokerReach:
    """Whether a broker answers this process (module doc).

    Args:
        k: Kafka settings (bootstrap servers, TLS/SASL) of the probe's own client.
        probe_timeout_s: bound of one metadata request (s).
        every_s: wait between two requests while none answers (s).
        probe: ``probe(timeout_s)`` makes one request and raises ``KafkaException`` when no
            broker answered (default: ``list_topics`` of an AdminClient built at the first
            suspicion, with ``reconnect.backoff.max.ms`` 1000 so that a broker back is seen
            within about a second; tests pass their own).

    Attributes:
        down_since: monotonic time of the request that first failed (None: reachable).
        probes: requests made so far.
    """

    PROBE_TIMEOUT_S = 2.0
    EVERY_S = 1.0

    def __init__(self, k: KafkaSettings, probe_timeout_s: float = PROBE_TIMEOUT_S,
                 every_s: float = EVERY_S,
                 probe: Callable[[float], Any] | None = None) -> None:
        self.k = k
        self.probe_timeout_s = probe_timeout_s
        self.every_s = every_s
        self.down_since: float | None = None
        self.probes = 0
        self._probe = probe or self._list_topics
        self._client: AdminClient | None = None
        self._suspect = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-reach", daemon=True)

    @property
    def reachable(self) -> bool:
        """False from a failed request until one succeeds (True before any report)."""
        return self.down_since is None

    def error_cb(self, err: KafkaError) -> None:
        """A client's ``error_cb`` (librdkafka's poll thread; returns at once):
        ``_ALL_BROKERS_DOWN`` wakes the watch's thread, which asks a broker."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._suspect.set()

    def start(self) -> BrokerReach:
        """Start the watch's thread, which asks a broker once at once (returns self): started
        with no broker answering, the process is unreachable within one request's bound, not
        at librdkafka's first report (about 12 s after a gateway's start, where its ``/ready``
        said ``broker_reachable: true`` meanwhile: a fresh user's trial)."""
        self._suspect.set()
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread (within one request's bound)."""
        self._stop.set()
        self._suspect.set()
        if self._thread.ident is not None:
            self._thread.join(self.probe_timeout_s + 1.0)

    def check(self) -> bool:
        """Make one request now and record its outcome; whether a broker answered."""
        self.probes += 1
        try:
            self._probe(self.probe_timeout_s)
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            detail = f"{err.name()}: {err.str()}" if err is not None else str(e)
            if self.down_since is None:
                self.down_since = time.monotonic()
                log.warning("broker_unreachable", bootstrap=self.k.bootstrap_servers,
                            error=" ".join(detail.split()),
                            hint="readiness fails until a broker answers again")
            return False
        if self.down_since is not None:
            down_s = time.monotonic() - self.down_since
            self.down_since = None
            log.info("broker_back", bootstrap=self.k.bootstrap_servers, down_s=round(down_s, 1))
        return True

    def _run(self) -> None:
        while True:
            self._suspect.wait()
            if self._stop.is_set():
                return
            self._suspect.clear()
            while not self.check() and not self._stop.wait(self.every_s):
                pass

    def _list_topics(self, timeout_s: float) -> None:
        if self._client is None:
            self._client = AdminClient({**base_config(self.k), "reconnect.backoff.max.ms": 1000})
        self._client.list_topics(timeout=timeout_s)


__all__ = ["BrokerReach"]
