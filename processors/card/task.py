"""The ``card`` task: find an ID card or passport page, rectify it (see :mod:`processors.task`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processors.base import Artifact, Item, Outcome, Processor
from processors.card.settings import CardSettings
from processors.decode import DecodeSettings
from processors.runtime import RuntimeSettings
from processors.task import TaskSpec
from schemas.models import V1_TASKS, CardPayload, DocTypeHint
from schemas.reasons import Task

SAMPLE_SEED = 20261201
"""Seed of the synthetic scenes of :meth:`CardTask.samples`."""


class CardTask(TaskSpec):
    """Cards and passport pages: a quad, a verdict and the ``rectified`` image."""

    contract = V1_TASKS[Task.CARD]
    main_artifact = "rectified"
    settings_key, settings_model = "card", CardSettings
    option_defaults = {"doc_type": DocTypeHint.AUTO.value}
    # a photo nothing was measured of: doc_type as the results topic says it
    payload_defaults = {"quad": None, "confidence": 0.0, "doc_type": "unknown"}
    cli_blank = {"quad": None, "confidence": None, "doc_type": "unknown", "rectified": None}

    def build(self, settings: CardSettings, runtime: RuntimeSettings,
              decode: DecodeSettings | None = None) -> Processor:
        """The card processor with the pinned model (imported here: ONNX Runtime loads on use)."""
        from processors.card.processor import CardProcessor

        return CardProcessor(settings, runtime, decode=decode)

    def stand_in(self, item: Item) -> dict[str, Any]:
        """The sleep processor's card payload: the whole frame as the quad, confidence 1."""
        h, w = item.image.height, item.image.width
        quad = [[0.0, 0.0], [float(w), 0.0], [float(w), float(h)], [0.0, float(h)]]
        return {"quad": quad, "confidence": 1.0, "doc_type": "id_card"}

    def describe(self, payload: CardPayload) -> str:
        """``"id_card 1011x637"``: the document type and the rectified size (px); ``""`` when no
        card was rectified."""
        ref = payload.rectified
        return f"{payload.doc_type} {ref.width}x{ref.height}" if ref is not None else ""

    def samples(self, folder: Path) -> list[Path]:
        """The demo's card uploads, as JPEG files in ``folder``: synthetic scenes from
        :mod:`processors.card.training.synth` (fixed seed), including a passport, an upside-down
        card, a small card and a scene without a card."""
        import cv2
        import numpy as np

        from processors.card.training.synth import sample

        rng = np.random.default_rng(SAMPLE_SEED)
        folder.mkdir(parents=True, exist_ok=True)
        scenes = [
            ("id_card_tilted", {"doc_type": "id_card", "rotation_deg": 12.0}),
            ("id_card_skewed", {"doc_type": "id_card", "rotation_deg": -18.0}),
            ("id_card_upside_down", {"doc_type": "id_card", "rotation_deg": 178.0,
                                     "portrait": "photo"}),
            ("passport_page", {"doc_type": "passport", "rotation_deg": 6.0}),
            ("id_card_small", {"doc_type": "id_card", "rotation_deg": 3.0, "size": (1280, 960)}),
            ("no_card", {"negative": True}),
        ]
        files = []
        for name, kw in scenes:
            p = folder / f"{name}.jpg"
            cv2.imwrite(str(p), sample(rng, **kw).image, [cv2.IMWRITE_JPEG_QUALITY, 92])
            files.append(p)
        return files

    def cli_columns(self, outcome: Outcome, artifact: Artifact | None,
                    written: str | None) -> dict[str, Any]:
        """``quad``, ``confidence``, ``doc_type`` and the ``rectified`` file written."""
        p = outcome.payload
        return {"quad": p.get("quad"), "confidence": p.get("confidence"),
                "doc_type": p.get("doc_type") or "unknown", "rectified": written}

    def cli_text(self, row: Mapping[str, Any]) -> str:
        """`` doc_type=id_card conf=0.97 -> FILE``."""
        conf = "-" if row["confidence"] is None else row["confidence"]
        done = f" -> {row['rectified']}" if row["rectified"] else ""
        return f" doc_type={row['doc_type']} conf={conf}{done}"


SPEC = CardTask()
"""The card task's spec."""
