"""The demo's and the benchmarks' sample uploads, made by the project's own code (nothing copied
from elsewhere), as JPEG files: one function per task that has samples, written by one
:func:`write_samples`, and what the demo's table says of each task's output (:data:`KIND`). A
task without an entry here has no samples (the demo skips it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from processors.registry import names

CARD_SEED = 20261201
"""Seed of the synthetic card scenes (:func:`card_scenes`)."""
JPEG_QUALITY = 92
"""JPEG quality of the sample files."""


def card_scenes() -> dict[str, np.ndarray]:
    """The card samples, ``(H, W, 3) uint8`` BGR by name: synthetic scenes from
    :mod:`processors.card.training.synth` (seed :data:`CARD_SEED`), including a passport, an
    upside-down card, a small card and a scene without a card."""
    from processors.card.training.synth import sample

    rng = np.random.default_rng(CARD_SEED)
    scenes: list[tuple[str, dict[str, Any]]] = [
        ("id_card_tilted", {"doc_type": "id_card", "rotation_deg": 12.0}),
        ("id_card_skewed", {"doc_type": "id_card", "rotation_deg": -18.0}),
        ("id_card_upside_down", {"doc_type": "id_card", "rotation_deg": 178.0,
                                 "portrait": "photo"}),
        ("passport_page", {"doc_type": "passport", "rotation_deg": 6.0}),
        ("id_card_small", {"doc_type": "id_card", "rotation_deg": 3.0, "size": (1280, 960)}),
        ("no_card", {"negative": True}),
    ]
    return {name: sample(rng, **kw).image for name, kw in scenes}


def portraits() -> dict[str, np.ndarray]:
    """The ID-photo samples, ``(H, W, 3) uint8`` BGR by name: scikit-image's bundled
    public-domain ``astronaut`` portrait (a real photograph), the same portrait twice side by
    side (two people), and scikit-image's ``coffee`` (no face)."""
    import cv2
    from skimage import data

    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    return {"portrait_astronaut": astro, "two_people": np.hstack([astro, astro]),
            "no_face_coffee": cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR)}


SAMPLES: dict[str, Callable[[], dict[str, np.ndarray]]] = {
    "card": card_scenes,
    "id_photo": portraits,
}
"""Task -> its samples."""

KIND: dict[str, str] = {"card": "doc_type", "id_photo": "size"}
"""Task -> the payload field that says what kind of output it made, the demo table's ``kind``
column with the output's px: ``id_card 1011x637``, ``one_inch 295x413``."""


def write_samples(out: Path) -> dict[str, list[Path]]:
    """Write the samples of every registered task that has some as ``out/<task>/<name>.jpg``
    (JPEG quality :data:`JPEG_QUALITY`); returns task -> files, in registry order."""
    import cv2

    written: dict[str, list[Path]] = {}
    for task in names():
        if task not in SAMPLES:
            continue
        folder = out / task
        folder.mkdir(parents=True, exist_ok=True)
        written[task] = []
        for name, image in SAMPLES[task]().items():
            path = folder / f"{name}.jpg"
            cv2.imwrite(str(path), image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            written[task].append(path)
    return written
