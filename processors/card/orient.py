"""The upright decision: a small CNN reads a grey thumbnail of the rectified card, batched.

The card is warped to landscape first (its long side horizontal), which leaves two readings:
as warped, or turned by a half turn. ``card_orient.onnx`` (trained by this project,
``processors/card/training/orient.py``; figures in ``MODEL.md``) gives the probability of the
second from the layout and the direction of the print, so cards without a portrait are turned
too; one ONNX call per batch replaces the Haar face cascades of ``geo6`` and earlier. Its second
output pair is the probability that the card is an ID-3 passport page rather than an ID-1 card,
from its print (a TD3 machine-readable zone), used where the measured aspect ratio cannot tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from processors.errors import ModelError
from processors.models import pinned_model
from processors.pixels import shrink
from processors.runtime import BatchedModel, RuntimeSettings

ORIENT_W, ORIENT_H = 256, 160
"""Thumbnail the classifier reads (px): an 85.6 mm card at 3 px/mm, so 2 mm text is 6 px tall."""

MODEL_FILE = "card_orient"
"""Entry in ``processors/models.json``."""


def thumb_input(cards: Sequence[np.ndarray]) -> np.ndarray:
    """Classifier input from rectified landscape cards (``(h, w, 3) uint8`` BGR, any size):
    ``(N, 1, ORIENT_H, ORIENT_W) float32`` grey levels 0..255 (grey, then
    :func:`processors.pixels.shrink`; the graph standardises each image itself)."""
    xs = [shrink(cv2.cvtColor(c, cv2.COLOR_BGR2GRAY), (ORIENT_W, ORIENT_H)) for c in cards]
    return np.stack(xs)[:, None].astype(np.float32)


class Orienter:
    """The batched upright classifier.

    Args:
        runtime: ONNX Runtime settings (device, buckets).
        model_file: another ONNX file (tests, a new training run; not checked against a
            SHA-256); None uses the pinned ``card_orient`` file shipped in the package.

    Raises:
        ModelError: the model file is missing or fails its pin.
        ProviderError: CUDA requested but not active.
    """

    def __init__(self, runtime: RuntimeSettings, model_file: Path | None = None) -> None:
        path, sha = pinned_model(MODEL_FILE, model_file)
        self.model = BatchedModel.shared(path, sha, runtime, "card-orient",
                                          input_shape=(1, ORIENT_H, ORIENT_W))
        self.sha256 = sha

    def warm_up(self) -> None:
        """Run every batch bucket once and choose one."""
        self.model.warm_up()

    def classify(self, cards: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Probability that each card reads upright only after a half turn, and that it is an
        ID-3 passport page rather than an ID-1 card.

        Args:
            cards: rectified landscape cards, ``(h, w, 3) uint8`` BGR host arrays.

        Returns:
            ``(turned, passport)``: two ``(N,) float64`` arrays in [0, 1] (softmax of each pair
            of logits).

        Raises:
            ModelError: ONNX Runtime failed on the batch.
        """
        if not cards:
            return np.zeros(0), np.zeros(0)
        try:
            logits = self.model.run(thumb_input(cards))[0].astype(np.float64)
        except Exception as e:  # onnxruntime raises untyped errors
            raise ModelError(f"orientation model failed: {e}") from e
        return _softmax1(logits[:, :2]), _softmax1(logits[:, 2:4])


def _softmax1(logits: np.ndarray) -> np.ndarray:
    """Softmax probability of the second of two logits per row: ``(N, 2)`` -> ``(N,)``."""
    return 1.0 / (1.0 + np.exp(np.clip(logits[:, 0] - logits[:, 1], -60.0, 60.0)))
