"""Safe decoding of untrusted upload bytes into ``(H, W, 3) uint8`` BGR arrays."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DecodeSettings(BaseModel):
    """Input limits for safe decoding (``CARDSTREAM_DECODE__*``)."""

    model_config = ConfigDict(frozen=True)
