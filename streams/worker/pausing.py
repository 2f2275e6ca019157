"""Pausing: the one way the worker stops fetching for a while and goes on later.

Two conditions stop a batch without a verdict: the object store not answering (a GET or a
PUT out of its retries, :class:`~streams.errors.StorageUnavailable`) and the processor breaker
(:class:`~streams.errors.ProcessorUnavailable`). Both take the same path, as quix-streams'
``PausingManager`` is the one place its application pauses and resumes partitions:

1. the batch goes back in front of the carry list (:meth:`Intake.redo
   <streams.worker.intake.Intake.redo>`: nothing of it is committed, nothing is skipped);
2. fetching pauses (:meth:`Intake.pause <streams.worker.intake.Intake.pause>`);
3. the loop keeps polling (heartbeats, rebalance callbacks, prefetching up to the carry list's
   cap) until the condition clears, asked after each wait of a
   :class:`~streams.retry.RetryPolicy`'s delays, or until the worker stops;
4. the next batch resumes fetching (:meth:`Intake.resume_if_room
   <streams.worker.intake.Intake.resume_if_room>`, from the loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from streams.worker.intake import Intake
from streams.worker.record import Record


class PausingManager:
    """Steps 1-3 of the module doc for the worker's loop.

    Args:
        intake: the worker's intake (carry list, pause, polling).
        stop: whether the worker is stopping (SIGTERM): a hold ends at once.
    """

    def __init__(self, intake: Intake, stop: Callable[[], bool]) -> None:
        self.intake = intake
        self.stop = stop

    def hold(self, msgs: Sequence[Record], ready: Callable[[], bool],
             waits: Iterable[float]) -> float:
        """Put ``msgs`` back, pause fetching, and poll until ``ready()`` (:meth:`poll_until`).

        Returns:
            Seconds waited (0.0 when ready at once).
        """
        self.intake.redo(msgs)
        self.intake.pause()
        return self.poll_until(ready, waits)

    def poll_until(self, ready: Callable[[], bool], waits: Iterable[float]) -> float:
        """Keep polling (:meth:`Intake.prefetch`, 0.1 s at a time) until ``ready()``: asked at
        once, then after each wait of ``waits`` (s); the worker stopping, or ``waits`` running
        out, ends it too.

        Returns:
            Seconds waited (0.0 when ready at once).
        """
        t0, waited = time.monotonic(), False
        left = iter(waits)
        while not self.stop() and not ready():
            delay = next(left, None)
            if delay is None:
                break
            waited = True
            t_end = time.monotonic() + delay
            while time.monotonic() < t_end:
                self.intake.prefetch(0.1)
        return time.monotonic() - t0 if waited else 0.0
