"""Uploads drawn for the scan path's tests (:mod:`processors.card.scan`): a face on a scanner
lid, a document's outlined figure, security print over a page, and the shared cases' portrait
photo."""

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


def outlined_figure(seed: int, fmt: str = "TD2", print_inside: bool = True,
                    random_zone: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A figure of a document on a white page, as ICAO Doc 9303 draws its specimens: the
    document's face in black on white, inside a thin black rounded outline, with a caption above
    and a note below it. Returns ``(page BGR uint8, the outline's corners (4, 2) px TL, TR, BR,
    BL)``. Without ``print_inside`` the outline holds nothing (a drawn box); with
    ``random_zone`` the zone's lines are random letters, digits and fillers of the format's
    shape (no check digit holds)."""
    import datetime as dt

    from processors.card.mrz.icao import Format, compose
    from processors.card.training import documents

    rng = np.random.default_rng(seed)
    lines = compose(Format[fmt], **documents.random_fields(rng, Format[fmt], dt.date(2026, 1, 1),
                                                            0.0))
    if random_zone:
        chars = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<<<<"))
        lines = tuple("".join(rng.choice(chars, len(x))) for x in lines)
    face, alpha, _, _ = documents.render_document(rng, Format[fmt], lines, px_per_mm=6.0)
    grey = cv2.cvtColor(face, cv2.COLOR_BGR2GRAY)
    face = cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR)  # printed in black, as the standard's figures
    face[(grey > 110) | (alpha < 0.5)] = 255
    if not print_inside:
        face[:] = 255
    fh, fw = face.shape[:2]
    x0, y0 = 40, 90
    page = np.full((fh + 2 * y0, fw + 2 * x0, 3), 255, np.uint8)
    page[y0:y0 + fh, x0:x0 + fw] = face
    r = 20  # a rounded outline, 2 px of black
    for a, b in (((x0 + r, y0), (x0 + fw - r, y0)), ((x0 + r, y0 + fh), (x0 + fw - r, y0 + fh)),
                 ((x0, y0 + r), (x0, y0 + fh - r)), ((x0 + fw, y0 + r), (x0 + fw, y0 + fh - r))):
        cv2.line(page, a, b, (0, 0, 0), 2)
    for cx, cy, ang in ((x0 + r, y0 + r, 180), (x0 + fw - r, y0 + r, 270),
                        (x0 + fw - r, y0 + fh - r, 0), (x0 + r, y0 + fh - r, 90)):
        cv2.ellipse(page, (cx, cy), (r, r), ang, 0, 90, (0, 0, 0), 2)
    cv2.putText(page, "Figure 9. Typical layout", (x0 + 60, 55), cv2.FONT_HERSHEY_SIMPLEX,
                1.0, (0, 0, 0), 2)
    cv2.putText(page, "Not to scale", (x0 + fw - 260, y0 + fh + 60), cv2.FONT_HERSHEY_SIMPLEX,
                1.0, (0, 0, 0), 2)
    quad = np.array([[x0, y0], [x0 + fw, y0], [x0 + fw, y0 + fh], [x0, y0 + fh]], np.float64)
    return page, quad


def guilloche(image: np.ndarray, period: float = 14.0, depth: float = 30.0) -> np.ndarray:
    """``image`` (BGR ``uint8``) printed over with a wavy line pattern (security print's
    guilloche): darkened by up to ``depth`` levels along waves ``period`` px apart."""
    h, w = image.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    wave = np.abs(np.sin(2 * np.pi * (xx + 25 * np.sin(2 * np.pi * yy / 180)) / period))
    return np.clip(image.astype(np.float32) - depth * wave[..., None], 0, 255).astype(np.uint8)
