"""ID-photo processor settings (``CARDSTREAM_IDPHOTO__*``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class IdPhotoSettings(BaseModel):
    """Settings of the id_photo processor (frozen; part of the app settings)."""

    model_config = ConfigDict(frozen=True)
