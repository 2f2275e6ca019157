"""The result cache: a repeat upload (the same image bytes, task, options and model version) is
answered from an earlier upload's outcome without running the models.

Where it lives: in the worker process's memory, a least-recently-used map bounded in bytes
(``CacheSettings.max_bytes``, the outcomes' artifact bytes) and entries. A restarted worker
starts empty; a second worker has a cache of its own, so a repeat whose upload lands on another
worker's partition (partitions follow ``upload_id``, and a repeat has an id of its own) is
computed there the first time. Repeats within one batch are computed once.

The key is the task, the model version and the upload's input digest
(:func:`streams.worker.compute.input_digest`: the SHA-256 the worker computed itself over the
bytes it loaded, never the event's ``image.ref.sha256``, with the options as the processor gets
them): two different images claiming one digest have two keys (the claim is only checked,
``CHECKSUM_MISMATCH``). Only a processor's verdicts are kept (``accepted`` and ``rejected``): a
``failed`` outcome or a load rejection (a missing object) says nothing about the bytes. A hit
carries the cached artifacts' bytes, which the worker PUTs under the new upload's own keys, so
its result's refs are valid and its own.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass

from processors.base import Outcome
from schemas.reasons import Status

#: bytes counted per entry on top of its artifacts (the outcome, its payload, the key)
ENTRY_OVERHEAD_BYTES = 2048


@dataclass(frozen=True, slots=True)
class CacheKey:
    """What makes two uploads give the same result: the ``task``, the ``model_version`` labelling
    its outputs and the upload's ``input_digest`` (bytes and options)."""

    task: str
    model_version: str
    input_digest: str


def cacheable(o: Outcome) -> bool:
    """Whether ``o`` is a verdict on the bytes (``accepted``/``rejected``), not a failure."""
    return o.status in (Status.ACCEPTED, Status.REJECTED)


def size_of(o: Outcome) -> int:
    """Bytes an outcome counts against the cache's bound: its artifacts' plus
    :data:`ENTRY_OVERHEAD_BYTES`."""
    return sum(len(a.data) for a in o.artifacts) + ENTRY_OVERHEAD_BYTES


def as_upload(o: Outcome, upload_id: str) -> Outcome:
    """A cached outcome as ``upload_id``'s (no model time: none ran for it)."""
    return dataclasses.replace(o, upload_id=upload_id, inference_ms=0.0)


class ResultCache:
    """A least-recently-used map :class:`CacheKey` -> :class:`~processors.base.Outcome`, bounded
    in bytes (:func:`size_of`) and entries; safe to use from several threads.

    Args:
        max_bytes: bound on the entries' sizes together (bytes); an entry larger than this is
            not kept.
        max_entries: bound on the number of entries.

    Attributes:
        bytes: what the entries take now (bytes).
    """

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self._entries: OrderedDict[CacheKey, Outcome] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> Outcome | None:
        """The outcome of ``key`` (now the most recently used), None on a miss."""
        with self._lock:
            got = self._entries.get(key)
            if got is not None:
                self._entries.move_to_end(key)
            return got

    def put(self, key: CacheKey, outcome: Outcome) -> None:
        """Keep ``outcome`` under ``key`` when :func:`cacheable` (others are ignored), evicting
        the least recently used entries beyond the bounds."""
        size = size_of(outcome)
        if not cacheable(outcome) or size > self.max_bytes or self.max_entries < 1:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= size_of(old)
            self._entries[key] = outcome
            self.bytes += size
            while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
                _, gone = self._entries.popitem(last=False)
                self.bytes -= size_of(gone)
