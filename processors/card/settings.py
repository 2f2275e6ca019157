"""Card processor settings (``CARDSTREAM_CARD__*``). Thresholds documented per field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class CardSettings(BaseModel):
    """Settings of the card processor (frozen; part of the app settings)."""

    model_config = ConfigDict(frozen=True)
