"""The ``id_photo`` task: a standard ID photo from a selfie (see :mod:`processors.task`).

``id_photo`` is the task's name on the wire (the contract's value); ``idphoto`` names it
everywhere else (this package, the settings section ``CARDSTREAM_IDPHOTO__*``, the command
``cardstream idphoto``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processors.base import Item, Processor
from processors.decode import DecodeSettings
from processors.errors import ProcessorError
from processors.idphoto.settings import IdPhotoSettings
from processors.runtime import RuntimeSettings
from processors.task import TaskSpec
from schemas.models import V1_TASKS, IdPhotoPayload
from schemas.reasons import Task

_DEFAULTS = IdPhotoSettings()
"""The section's defaults, for the stand-in's payload (it has no settings)."""


class IdPhotoTask(TaskSpec):
    """ID photos: the person framed for a standard size on a plain background, the ``photo``.

    An upload that leaves ``size`` or ``background`` out gets the settings section's
    (``CARDSTREAM_IDPHOTO__DEFAULT_SIZE``, ``__DEFAULT_BACKGROUND``: the processor's
    :func:`~processors.idphoto.processor.parse_options`), and ``alpha_matting`` the size's.
    """

    contract = V1_TASKS[Task.ID_PHOTO]
    main_artifact = "photo"
    settings_key, settings_model = "idphoto", IdPhotoSettings
    payload_defaults = {"face_box": None}
    measures = ("face_iou",)

    def build(self, settings: IdPhotoSettings, runtime: RuntimeSettings,
              decode: DecodeSettings | None = None, model_file: Path | None = None) -> Processor:
        """The ID-photo processor (imported here: ONNX Runtime loads on use).

        Raises:
            ProcessorError: ``model_file`` given: the matting model is chosen by name
                (``CARDSTREAM_IDPHOTO__MODEL``), each pinned.
        """
        from processors.idphoto.processor import IdPhotoProcessor

        if model_file is not None:
            raise ProcessorError("the id_photo task takes no model file; choose its matting "
                                 "model with CARDSTREAM_IDPHOTO__MODEL")
        return IdPhotoProcessor(settings, runtime, decode)

    def stand_in(self, item: Item) -> dict[str, Any]:
        """The sleep processor's ID-photo payload: the section's default size and background,
        no face box, 32 x 32 px."""
        return {"size": str(_DEFAULTS.default_size), "background": _DEFAULTS.default_background,
                "face_box": None, "width": 32, "height": 32}

    def stand_in_extras(self, item: Item) -> tuple[str, ...]:
        """``sheet`` when the upload asks for a print sheet (``print_sheet: true``), as the
        processor stores one."""
        return ("sheet",) if item.options.get("print_sheet") is True else ()

    def effective_options(self, options: Mapping[str, Any],
                          section: IdPhotoSettings) -> dict[str, Any]:
        """``size``, ``background`` (normalised), ``alpha_matting``, ``mode``, ``dpi``,
        ``target_kb`` and ``print_sheet`` as the processor reads them
        (:func:`~processors.idphoto.processor.parse_options`: the section's defaults, the
        size's alpha matting and dpi).

        Raises:
            InvalidOptionError: an option the processor refuses.
        """
        from processors.idphoto.processor import parse_options

        req = parse_options(options, section)
        return {"size": req.size.name, "background": req.background,
                "alpha_matting": req.alpha_matting, "mode": req.mode, "dpi": req.size.dpi,
                "target_kb": req.target_kb, "print_sheet": req.print_sheet}

    def compare(self, before: IdPhotoPayload, after: IdPhotoPayload) -> dict[str, float]:
        """``face_iou``: the IoU (0..1) of the two face boxes, where both found one face."""
        from processors.idphoto.faces import FaceBox

        if before.face_box is None or after.face_box is None:
            return {}
        return {"face_iou": FaceBox(*before.face_box).iou(FaceBox(*after.face_box))}


SPEC = IdPhotoTask()
"""The ID-photo task's spec."""
