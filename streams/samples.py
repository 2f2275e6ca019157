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
SPECIMEN_FIELDS = {"document_code": "P", "issuing_state": "UTO", "document_number": "L898902C3",
                   "nationality": "UTO", "birth_date": "740812", "sex": "F",
                   "expiry_date": "340415", "primary_name": "ERIKSSON",
                   "secondary_name": "ANNA MARIA", "optional_data": "ZE184226B"}
"""The printed fields of the samples' travel documents: ICAO Doc 9303's fictional specimen
holder of the TD3 specimen zone in part 4 (Utopia, ``L898902C3``, Anna Maria Eriksson), with an
expiry in 2034 so that the demo's documents stay valid. The ID card's back carries the same
holder with the document code and number of part 5's TD1 specimen (``I``, ``D23145890``) and
no optional data."""
DOCUMENT_DRAWS = {"passport_page": ("TD3", 4), "id_card_back": ("TD1", 0)}
"""Sample name -> (MRZ format, draw) of the photographed travel documents
(:func:`processors.card.training.documents.document` with ``default_rng([CARD_SEED, draw])``,
no glare, grey copy or hand): draws whose zone reads with every check digit valid, chosen
among the first 12 of each format (2026-12-05)."""
JPEG_QUALITY = 92
"""JPEG quality of the sample files."""


def card_scenes() -> dict[str, np.ndarray]:
    """The card samples, ``(H, W, 3) uint8`` BGR by name: synthetic scenes from
    :mod:`processors.card.training.synth` (seed :data:`CARD_SEED`): tilted, upside-down and
    small ID cards and a scene without a card; and two photographed travel documents with a
    real ICAO 9303 machine-readable zone (:data:`DOCUMENT_DRAWS`): a passport data page (TD3)
    and the back of an ID card (TD1)."""
    from processors.card.mrz.icao import Format
    from processors.card.training.documents import document
    from processors.card.training.synth import sample

    rng = np.random.default_rng(CARD_SEED)
    scenes: list[tuple[str, dict[str, Any]]] = [
        ("id_card_tilted", {"doc_type": "id_card", "rotation_deg": 12.0}),
        ("id_card_skewed", {"doc_type": "id_card", "rotation_deg": -18.0}),
        ("id_card_upside_down", {"doc_type": "id_card", "rotation_deg": 178.0,
                                 "portrait": "photo"}),
        ("passport_page", {"doc_type": "passport", "rotation_deg": 6.0}),
        ("id_card_back", {}),
        ("id_card_small", {"doc_type": "id_card", "rotation_deg": 3.0, "size": (1280, 960)}),
        ("no_card", {"negative": True}),
    ]
    out = {}
    for name, kw in scenes:
        if kw:  # the synthetic passport scene's draw is still taken (replaced since
            # 2026-12-05: its zone was random letters), so the scenes after it stay the same
            scene = sample(rng, **kw).image
        if name in DOCUMENT_DRAWS:
            fmt, draw = DOCUMENT_DRAWS[name]
            fields = dict(SPECIMEN_FIELDS)
            if fmt == "TD1":
                fields.update(document_code="I", document_number="D23145890", optional_data="")
            out[name], _ = document(np.random.default_rng([CARD_SEED, draw]), Format(fmt),
                                    invalid_share=0.0, size=(1600, 1200), glare_share=0.0,
                                    grey_share=0.0, hand_share=0.0, fields=fields)
        else:
            out[name] = scene
    return out


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
row with the output's px: ``id_card 1011x637``, ``one_inch 295x413``."""


def _mrz_verdict(payload: Any) -> str:
    mrz = getattr(payload, "mrz", None)
    if mrz is None:  # no card judged
        return ""
    if not mrz.found:
        return "no MRZ"
    if not mrz.readable:
        return f"MRZ {mrz.format} unreadable" if mrz.format else "MRZ unreadable"
    state = "valid" if mrz.valid else "check digit"
    return f"MRZ {mrz.format} {state}" + (", expired" if mrz.expired else "")


def _compliance_verdict(payload: Any) -> str:
    c = getattr(payload, "compliance", None)
    if c is None:
        return ""
    failed = [x.name for x in c.checks if x.passed is False]
    return f"{c.spec} compliant" if c.compliant else f"{c.spec}: {len(failed)} checks failed"


VERIFIED: dict[str, Callable[[Any], str]] = {"card": _mrz_verdict,
                                              "id_photo": _compliance_verdict}
"""Task -> what the demo's ``verified`` row says of a result's payload: the card's
machine-readable zone (``MRZ TD3 valid``, ``MRZ TD1 check digit``, ``no MRZ``; empty where no
card was judged), the ID photo's compliance with its size's rules (``one_inch compliant``,
``one_inch: 2 checks failed``)."""


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
