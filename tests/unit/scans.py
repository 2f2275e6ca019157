"""Uploads drawn for the scan path's tests (:mod:`processors.card.scan`): a face on a scanner
lid, and the shared cases' portrait photo."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

PORTRAIT_CASE = (Path(__file__).resolve().parents[2].parent / "shared" / "cases" / "images"
                 / "portrait.jpg")


def portrait(size: tuple[int, int]) -> np.ndarray:
    """The shared cases' portrait (BGR) resized to ``size`` ``(width, height)`` px; the test is
    skipped where ``../shared/cases`` is not present."""
    if not PORTRAIT_CASE.exists():
        pytest.skip(f"{PORTRAIT_CASE} absent: ../shared/cases is not here")
    return cv2.resize(cv2.imread(str(PORTRAIT_CASE)), size)


def on_lid(face: np.ndarray, level: int, margin: int = 30, blur: float = 0.7) -> np.ndarray:
    """``face`` (BGR) square on a plain scanner lid of grey ``level`` with ``margin`` px on
    every side, softened as a scanner's optics do (Gaussian sigma ``blur`` px; 0: sharp, as a
    drawn file is)."""
    h, w = face.shape[:2]
    img = np.full((h + 2 * margin, w + 2 * margin, 3), level, np.uint8)
    img[margin:margin + h, margin:margin + w] = face
    return cv2.GaussianBlur(img, (0, 0), blur) if blur > 0 else img
