"""A processor whose compute is a fixed sleep: for worker tests and partition-scaling benchmarks.

It exercises the whole pipeline (decode, one "inference call" per chunk, an artifact to store)
without a model, so throughput is bounded by the sleep, not by this machine's cores.

It also plays the failures of a real model runtime on marked inputs (:data:`POISON_SIZES`), so
the fault suite (``benchmarks/faults``) and the poison tests can send a record that crashes,
raises in or hangs the processor through the real worker process.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cv2

from processors.base import Artifact, Item, ModelInfo, Outcome
from processors.decode import DecodeSettings, decode_probed
from processors.errors import DecodeError
from processors.runtime import BatchStats, bucket_slices
from schemas.reasons import Status

POISON_SIZES: dict[tuple[int, int], str] = {(61, 67): "crash", (67, 61): "raise",
                                            (71, 73): "hang"}
"""Test poison: an image of exactly these ``(height, width)`` px makes :class:`SleepProcessor`
fail as a model runtime can: ``crash`` sends SIGSEGV to its own process (a native crash in ONNX
Runtime or a decoder: the whole process dies), ``raise`` raises ``RuntimeError`` for the call (a
processor exception), ``hang`` blocks the call for ``hang_s`` (a stuck CUDA call or a
pathological decode). Odd prime sizes that no camera or sample produces."""


class SleepProcessor:
    """Accepts every item after sleeping ``call_ms + item_ms * n`` per call of up to ``bucket``
    items.

    Args:
        task: the task it serves.
        call_ms: fixed cost of one batched call (ms), like a GPU kernel launch + transfer.
        item_ms: marginal cost per item in a call (ms).
        bucket: largest batch per call; a batch of N makes ``ceil(N / bucket)`` calls.
        artifact: name of the artifact each outcome carries (the task's main artifact,
            ``TaskSpec.main_artifact``).
        payload: item -> the outcome's payload (``TaskSpec.stand_in``: a payload of the task's
            shape). :func:`processors.registry.stand_in` builds one for a registered task.
        extras: item -> the names of the artifacts it carries besides ``artifact``
            (``TaskSpec.stand_in_extras``: the ID photo's ``sheet`` with ``print_sheet``);
            None: none.
        hang_s: how long a call holding a ``hang`` poison image blocks (s, default 1 h).

    Each outcome carries the artifact ``<artifact>.png``: a ``(32, 32, 3) uint8`` PNG thumbnail
    of the image, and each extra one ``<name>.png``: a ``(32, 48, 3) uint8`` PNG of it (other
    bytes than the main one's, 6 x 4 like a print sheet). Items are probed uploads: each is
    decoded at full resolution (``decode_probed``), as the worker decoded them before
    processors took bytes, so the load keeps the decode in the pipeline; pixel data that fails
    to decode is ``rejected`` with the decoder's reason.
    """

    def __init__(self, task: str, *, artifact: str, payload: Callable[[Item], Mapping[str, Any]],
                 extras: Callable[[Item], Sequence[str]] | None = None,
                 call_ms: float = 20.0, item_ms: float = 2.0, bucket: int = 32,
                 hang_s: float = 3600.0) -> None:
        self.task = task
        self.hang_s = hang_s
        self.call_ms = call_ms
        self.item_ms = item_ms
        self.chosen_bucket = bucket
        self.artifact = artifact
        self.payload = payload
        self.extras = extras
        self.stats = BatchStats()
        self._model = ModelInfo(name="sleep", version="sleep-1", provider="none")
        self.decode = DecodeSettings()

    @property
    def bucket(self) -> int:
        """Largest batch per call."""
        return self.chosen_bucket

    @property
    def model(self) -> ModelInfo:
        """Model identity: ``sleep`` / ``sleep-1`` / provider ``none``."""
        return self._model

    def warm_up(self) -> None:
        """Nothing to load."""

    def _poison(self, chunk: Sequence[Item]) -> None:
        """Fail as :data:`POISON_SIZES` says for the first marked item of ``chunk``, if any."""
        for it in chunk:
            what = POISON_SIZES.get((it.image.height, it.image.width))
            if what == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif what == "raise":
                raise RuntimeError("sleep processor: poison item (test input)")
            elif what == "hang":
                time.sleep(self.hang_s)

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """Sleep per chunk, then return one accepted outcome with a thumbnail per item (a
        ``rejected`` one with the decoder's reason for pixel data that does not decode).

        Raises:
            RuntimeError: a chunk holds a ``raise`` poison image (:data:`POISON_SIZES`); a
                ``crash`` one kills the process, a ``hang`` one blocks for ``hang_s``.
        """
        out: list[Outcome] = []
        for part in bucket_slices(len(items), self.chosen_bucket):
            chunk = items[part]
            self._poison(chunk)
            t0 = time.perf_counter()
            time.sleep((self.call_ms + self.item_ms * len(chunk)) / 1000.0)
            ms = (time.perf_counter() - t0) * 1000.0
            self.stats.calls += 1
            self.stats.images += len(chunk)
            for it in chunk:
                try:
                    image, _ = decode_probed(it.image, self.decode)
                except DecodeError as e:
                    out.append(Outcome.undecodable(it.upload_id, e))
                    continue
                names = (self.artifact, *(self.extras(it) if self.extras else ()))
                arts = tuple(_thumbnail(image, name, 32 if name == self.artifact else 48)
                             for name in names)
                out.append(Outcome(it.upload_id, Status.ACCEPTED, (), dict(self.payload(it)),
                                   arts, ms))
        return out


def _thumbnail(image: Any, name: str, width: int) -> Artifact:
    """The artifact ``<name>.png``: ``image`` (decoded pixels) resized to 32 px high and
    ``width`` px wide."""
    ok, png = cv2.imencode(".png", cv2.resize(image, (width, 32), interpolation=cv2.INTER_AREA))
    return Artifact(name, "png", "image/png", png.tobytes(), width, 32)
