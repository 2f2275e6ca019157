"""The demo's sample uploads, made by the project's own code (nothing copied from elsewhere).

Cards: synthetic scenes from :mod:`processors.card.training.synth` (fixed seed), including a
passport, an upside-down card and a scene without a card. ID photos: scikit-image's bundled
public-domain ``astronaut`` portrait (a real photograph), the same portrait twice side by side
(two people), and scikit-image's ``coffee`` (no face).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

SEED = 20261201


def write_samples(out: Path) -> dict[str, list[Path]]:
    """Write the samples as JPEG under ``out/card`` and ``out/id_photo``; returns task -> files."""
    from skimage import data

    from processors.card.training.synth import sample

    rng = np.random.default_rng(SEED)
    files: dict[str, list[Path]] = {"card": [], "id_photo": []}
    (out / "card").mkdir(parents=True, exist_ok=True)
    (out / "id_photo").mkdir(parents=True, exist_ok=True)
    cards = [
        ("id_card_tilted", {"doc_type": "id_card", "rotation_deg": 12.0}),
        ("id_card_skewed", {"doc_type": "id_card", "rotation_deg": -18.0}),
        ("id_card_upside_down", {"doc_type": "id_card", "rotation_deg": 178.0, "portrait": "photo"}),
        ("passport_page", {"doc_type": "passport", "rotation_deg": 6.0}),
        ("id_card_small", {"doc_type": "id_card", "rotation_deg": 3.0, "size": (1280, 960)}),
        ("no_card", {"negative": True}),
    ]
    for name, kw in cards:
        s = sample(rng, **kw)
        p = out / "card" / f"{name}.jpg"
        cv2.imwrite(str(p), s.image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        files["card"].append(p)
    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    portraits = {
        "portrait_astronaut": astro,
        "two_people": np.hstack([astro, astro]),
        "no_face_coffee": cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR),
    }
    for name, img in portraits.items():
        p = out / "id_photo" / f"{name}.jpg"
        cv2.imwrite(str(p), img, [cv2.IMWRITE_JPEG_QUALITY, 92])
        files["id_photo"].append(p)
    return files
