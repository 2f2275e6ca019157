"""ID photos: batched rembg/U2-Net person matte, batched MTCNN faces, framing, standard sizes,
colours.

Entry point: ``processors.idphoto.processor.IdPhotoProcessor`` (``task = "id_photo"``), also
reachable as ``processors.idphoto.IdPhotoProcessor`` (imported lazily so that importing the
settings does not load ONNX Runtime). See ``README.md`` in this folder.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IdPhotoProcessor", "IdPhotoSettings"]


def __getattr__(name: str) -> Any:
    if name == "IdPhotoProcessor":
        from processors.idphoto.processor import IdPhotoProcessor

        return IdPhotoProcessor
    if name == "IdPhotoSettings":
        from processors.idphoto.settings import IdPhotoSettings

        return IdPhotoSettings
    raise AttributeError(name)
