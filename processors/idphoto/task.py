"""The ``id_photo`` task: a standard ID photo from a selfie (see :mod:`processors.task`).

``id_photo`` is the task's name on the wire (the contract's value); ``idphoto`` names it
everywhere else (this package, the settings section ``CARDSTREAM_IDPHOTO__*``, the command
``cardstream idphoto``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processors.base import Artifact, Item, Outcome, Processor
from processors.decode import DecodeSettings
from processors.idphoto.settings import IdPhotoSettings
from processors.runtime import RuntimeSettings
from processors.task import TaskSpec
from schemas.models import V1_TASKS, IdPhotoPayload, PhotoSize
from schemas.reasons import Task


class IdPhotoTask(TaskSpec):
    """ID photos: the person framed for a standard size on a plain background, the ``photo``."""

    contract = V1_TASKS[Task.ID_PHOTO]
    main_artifact = "photo"
    settings_key, settings_model = "idphoto", IdPhotoSettings
    # alpha_matting None: the size specification's default
    option_defaults = {"size": PhotoSize.ONE_INCH.value, "background": "white",
                       "alpha_matting": None}
    payload_defaults = {"face_box": None}
    cli_blank = {"photo": None, "width": None, "height": None, "face_box": None}

    def build(self, settings: IdPhotoSettings, runtime: RuntimeSettings,
              decode: DecodeSettings | None = None) -> Processor:
        """The ID-photo processor (imported here: ONNX Runtime loads on use)."""
        from processors.idphoto.processor import IdPhotoProcessor

        return IdPhotoProcessor(settings, runtime, decode)

    def stand_in(self, item: Item) -> dict[str, Any]:
        """The sleep processor's ID-photo payload: ``one_inch`` on white, no face box."""
        return {"size": "one_inch", "background": "white", "face_box": None, "width": 32,
                "height": 32}

    def describe(self, payload: IdPhotoPayload) -> str:
        """``"one_inch 295x413"``: the size and its pixel size; ``""`` when no photo was made."""
        if payload.photo is None:
            return ""
        return f"{payload.size} {payload.width}x{payload.height}"

    def samples(self, folder: Path) -> list[Path]:
        """The demo's ID-photo uploads, as JPEG files in ``folder``: scikit-image's bundled
        public-domain ``astronaut`` portrait (a real photograph), the same portrait twice side
        by side (two people), and scikit-image's ``coffee`` (no face)."""
        import cv2
        import numpy as np
        from skimage import data

        folder.mkdir(parents=True, exist_ok=True)
        astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
        portraits = {
            "portrait_astronaut": astro,
            "two_people": np.hstack([astro, astro]),
            "no_face_coffee": cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR),
        }
        files = []
        for name, img in portraits.items():
            p = folder / f"{name}.jpg"
            cv2.imwrite(str(p), img, [cv2.IMWRITE_JPEG_QUALITY, 92])
            files.append(p)
        return files

    def cli_columns(self, outcome: Outcome, artifact: Artifact | None,
                    written: str | None) -> dict[str, Any]:
        """The ``photo`` file written with its ``width`` and ``height`` (px), the ``face_box``."""
        columns: dict[str, Any] = {**self.cli_blank, "face_box": outcome.payload.get("face_box")}
        if artifact is not None and written is not None:
            columns.update(photo=written, width=artifact.width, height=artifact.height)
        return columns

    def cli_text(self, row: Mapping[str, Any]) -> str:
        """`` -> FILE (WxH)`` for a photo written."""
        return f" -> {row['photo']} ({row['width']}x{row['height']})" if row["photo"] else ""

    def cli_file_tail(self, options: Mapping[str, Any], artifact: Artifact) -> str:
        """``<size>.<ext>`` (``one_inch.jpg``)."""
        return f"{options['size']}.{artifact.ext}"


SPEC = IdPhotoTask()
"""The ID-photo task's spec."""
