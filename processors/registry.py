"""Processor factory: one name -> one adapter class; unknown names fail loudly."""

from __future__ import annotations

from processors.base import Processor
from processors.card.settings import CardSettings
from processors.decode import DecodeSettings
from processors.errors import ProcessorError
from processors.idphoto.settings import IdPhotoSettings
from processors.runtime import RuntimeSettings

PROCESSORS = ("card", "id_photo", "sleep")


def build_processor(name: str, task: str, *, card: CardSettings, idphoto: IdPhotoSettings,
                    runtime: RuntimeSettings, sleep_ms: float = 20.0,
                    decode: DecodeSettings | None = None) -> Processor:
    """Build the processor ``name`` serving ``task``.

    Args:
        name: ``card``, ``id_photo`` or ``sleep`` (fixed-latency test processor).
        task: the task it will serve (``sleep`` may serve either).
        card / idphoto / runtime: their settings.
        sleep_ms: per-call latency of the ``sleep`` processor (ms).
        decode: the decode limits the uploads are probed with (None: the defaults); the
            processors decode the pixels with them.

    Raises:
        ProcessorError: unknown name, or a real processor asked to serve another task.
    """
    if name == "sleep":
        from processors.sleep import SleepProcessor

        return SleepProcessor(task, call_ms=sleep_ms)
    if name != task:
        raise ProcessorError(f"processor {name!r} cannot serve task {task!r}")
    if name == "card":
        from processors.card import CardProcessor

        return CardProcessor(card, runtime, decode=decode)
    if name == "id_photo":
        from processors.idphoto import IdPhotoProcessor

        return IdPhotoProcessor(idphoto, runtime, decode)
    raise ProcessorError(f"unknown processor {name!r}; known: {', '.join(PROCESSORS)}")
