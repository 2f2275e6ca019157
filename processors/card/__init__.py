"""Card and passport localisation + perspective rectification (task ``card``).

``CardProcessor`` is imported lazily so that importing ``processors.card.settings`` (done by the
app settings) does not load ONNX Runtime.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CardProcessor"]


def __getattr__(name: str) -> Any:
    if name == "CardProcessor":
        from processors.card.processor import CardProcessor

        return CardProcessor
    raise AttributeError(name)
