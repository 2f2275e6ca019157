"""Retry and backoff: the one policy of every loop that waits and tries again.

A :class:`RetryPolicy` says how long to wait between tries: ``first_s``, doubled after each try
up to ``cap_s``, each wait stretched by a random share of up to ``jitter`` (so that workers
that failed together do not retry in step), and at most ``attempts`` calls (None: until the
condition holds or the caller stops). Its values are settings, one field per use, each in the
section of the part that uses it:

================================  =========================================  =====================
setting (``CARDSTREAM_...``)      what waits                                 default
================================  =========================================  =====================
``S3__RETRY__*``                  a GET/PUT/HEAD the store answered with     0.2 s -> 5 s,
                                  an outage (:meth:`streams.storage.         jitter 0.1,
                                  Storage.retry`)                            4 attempts
``KAFKA__COMMIT_RETRY__*``        ``commit_transaction`` failing with a      0.2 s -> 0.8 s,
                                  retriable error (:mod:`streams.worker.     5 attempts
                                  committer`, step 4)
``KAFKA__PRODUCER_WAIT__*``       a worker without a transactional           0.5 s -> 5 s,
                                  producer asking the broker again           jitter 0.1
                                  (``init_transactions``, :mod:`streams.
                                  worker.loop`)
``WORKER__STORE_WAIT__*``         a paused worker asking whether the store   0.5 s -> 5 s
                                  answers again, and redoing a batch the
                                  store failed, longer per outage in a row
                                  (:mod:`streams.worker.loop`)
``WORKER__BREAKER__*``            the processor breaker's pause, longer per  1 s -> 30 s
                                  failure in a row (:mod:`streams.worker.
                                  loop`)
================================  =========================================  =====================

e.g. ``CARDSTREAM_S3__RETRY__ATTEMPTS=6``, ``CARDSTREAM_WORKER__BREAKER__CAP_S=60``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from itertools import count
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """How one loop waits between tries (module doc).

    Attributes:
        first_s: the first wait (s).
        cap_s: the longest wait before jitter (s); the waits double up to it.
        jitter: each wait is stretched by a random share in ``[0, jitter)`` of itself (0: none):
            the longest wait is ``cap_s * (1 + jitter)``, the shortest ``first_s``.
        attempts: calls at most, the first one included (None: no limit).

    Raises:
        pydantic.ValidationError: ``cap_s`` below ``first_s``, or a value out of its range.
    """

    model_config = ConfigDict(frozen=True)

    first_s: float = Field(ge=0.0, le=3600.0)
    cap_s: float = Field(ge=0.0, le=3600.0)
    jitter: float = Field(0.0, ge=0.0, le=1.0)
    attempts: int | None = Field(None, ge=1, le=1000)

    @model_validator(mode="after")
    def _cap_above_first(self) -> RetryPolicy:
        if self.cap_s < self.first_s:
            raise ValueError(f"cap_s {self.cap_s} is below first_s {self.first_s}")
        return self

    def delays(self, rng: Callable[[], float] = random.random) -> Iterator[float]:
        """The waits (s) between tries: ``attempts - 1`` of them, or endless without a limit.

        Args:
            rng: uniform random numbers in ``[0, 1)`` for the jitter.
        """
        base = self.first_s
        for _ in count() if self.attempts is None else range(self.attempts - 1):
            yield base * (1.0 + self.jitter * rng())
            base = min(base * 2.0, self.cap_s)


class Backoff:
    """The waits of ``policy`` one at a time, across calls, from the first again after
    :meth:`reset`: for a loop whose failures in a row each wait longer (the processor breaker).

    Args:
        policy: the policy (its ``attempts`` limit, if any, ends at ``cap_s`` waits).
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self._delays = policy.delays()

    def next(self) -> float:
        """The next wait (s)."""
        return next(self._delays, self.policy.cap_s)

    def reset(self) -> None:
        """A success: the next wait is ``first_s`` again."""
        self._delays = self.policy.delays()


def call(fn: Callable[[], T], policy: RetryPolicy, retriable: Callable[[Exception], bool],
         sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, called again after each wait of ``policy`` while it raises an exception that
    ``retriable`` accepts.

    Returns:
        What ``fn`` returned.

    Raises:
        Exception: what ``fn`` raised last: one ``retriable`` refuses, or any once the
            policy's attempts are spent.
    """
    delays = policy.delays()
    while True:
        try:
            return fn()
        except Exception as e:
            if not retriable(e):
                raise
            delay = next(delays, None)
            if delay is None:
                raise
        sleep(delay)
