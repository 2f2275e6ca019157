"""A processor whose compute is a fixed sleep: for worker tests and partition-scaling benchmarks.

It exercises the whole pipeline (decode, one "inference call" per chunk, an artifact to store)
without a model, so throughput is bounded by the sleep, not by this machine's cores.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import cv2

from processors.base import Artifact, Item, ModelInfo, Outcome
from processors.decode import DecodeSettings, decode_probed
from processors.errors import DecodeError
from processors.runtime import BatchStats
from schemas.reasons import ReasonCode, Status


class SleepProcessor:
    """Accepts every item after sleeping ``call_ms + item_ms * n`` per call of up to ``bucket`` items.

    Args:
        task: the task it serves (``card`` or ``id_photo``).
        call_ms: fixed cost of one batched call (ms), like a GPU kernel launch + transfer.
        item_ms: marginal cost per item in a call (ms).
        bucket: largest batch per call; a batch of N makes ``ceil(N / bucket)`` calls.

    Each outcome carries the task's main artifact (``rectified.png`` for cards, ``photo.png`` for
    ID photos): a ``(32, 32, 3) uint8`` PNG thumbnail of the image, and a payload of the task's
    shape (card: the full frame as quad, confidence 1; id_photo: ``one_inch`` on white). Items
    are probed uploads: each is decoded at full resolution (``decode_probed``), as the worker
    decoded them before processors took bytes, so the load table keeps the decode in the
    pipeline; pixel data that fails to decode is ``rejected`` with the decoder's reason.
    """

    def __init__(self, task: str, call_ms: float = 20.0, item_ms: float = 2.0,
                 bucket: int = 32) -> None:
        self.task = task
        self.call_ms = call_ms
        self.item_ms = item_ms
        self.chosen_bucket = bucket
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

    def _payload(self, h: int, w: int) -> dict:
        if self.task == "card":
            quad = [[0.0, 0.0], [float(w), 0.0], [float(w), float(h)], [0.0, float(h)]]
            return {"quad": quad, "confidence": 1.0, "doc_type": "id_card"}
        return {"size": "one_inch", "background": "white", "face_box": None, "width": 32, "height": 32}

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """Sleep per chunk, then return one accepted outcome with a thumbnail per item."""
        out: list[Outcome] = []
        for i in range(0, len(items), self.chosen_bucket):
            chunk = items[i : i + self.chosen_bucket]
            t0 = time.perf_counter()
            time.sleep((self.call_ms + self.item_ms * len(chunk)) / 1000.0)
            ms = (time.perf_counter() - t0) * 1000.0
            self.stats.calls += 1
            self.stats.images += len(chunk)
            for it in chunk:
                try:
                    image, _ = decode_probed(it.image, self.decode)
                except DecodeError as e:
                    out.append(Outcome(it.upload_id, Status.REJECTED, (ReasonCode(e.reason),)))
                    continue
                thumb = cv2.resize(image, (32, 32), interpolation=cv2.INTER_AREA)
                ok, png = cv2.imencode(".png", thumb)
                name = "rectified" if self.task == "card" else "photo"
                art = Artifact(name, "png", "image/png", png.tobytes(), 32, 32)
                out.append(Outcome(it.upload_id, Status.ACCEPTED, (),
                                   self._payload(*image.shape[:2]), (art,), ms))
        return out
