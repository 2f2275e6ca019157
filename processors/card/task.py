"""The ``card`` task: find an ID card or passport page, rectify it (see :mod:`processors.task`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processors.base import Item, Processor
from processors.card.metrics import quad_iou
from processors.card.settings import CardSettings
from processors.decode import DecodeSettings
from processors.runtime import RuntimeSettings
from processors.task import TaskSpec
from schemas.models import V1_TASKS, CardPayload
from schemas.reasons import Task


class CardTask(TaskSpec):
    """Cards and passport pages: a quad, a verdict and the ``rectified`` image."""

    contract = V1_TASKS[Task.CARD]
    main_artifact = "rectified"
    settings_key, settings_model = "card", CardSettings
    # a photo nothing was measured of: doc_type as the results topic says it
    payload_defaults = {"quad": None, "confidence": 0.0, "doc_type": "unknown"}
    measures = ("quad_iou",)

    def build(self, settings: CardSettings, runtime: RuntimeSettings,
              decode: DecodeSettings | None = None, model_file: Path | None = None) -> Processor:
        """The card processor with the pinned localisation model, or ``model_file`` (imported
        here: ONNX Runtime loads on use)."""
        from processors.card.processor import CardProcessor

        return CardProcessor(settings, runtime, model_file=model_file, decode=decode)

    def stand_in(self, item: Item) -> dict[str, Any]:
        """The sleep processor's card payload: the whole frame as the quad, confidence 1."""
        h, w = item.image.height, item.image.width
        quad = [[0.0, 0.0], [float(w), 0.0], [float(w), float(h)], [0.0, float(h)]]
        return {"quad": quad, "confidence": 1.0, "doc_type": "id_card"}

    def effective_options(self, options: Mapping[str, Any],
                          section: CardSettings) -> dict[str, Any]:
        """``doc_type`` as the processor reads it: the upload's, else ``section.doc_type``."""
        return {**options, "doc_type": options.get("doc_type") or section.doc_type}

    def compare(self, before: CardPayload, after: CardPayload) -> dict[str, float]:
        """``quad_iou``: the IoU (0..1, :func:`processors.card.metrics.quad_iou`) of the two
        quads, where both found a card."""
        if before.quad and after.quad:
            return {"quad_iou": quad_iou(before.quad, after.quad)}
        return {}


SPEC = CardTask()
"""The card task's spec."""
