"""The OCR-B font the synthetic machine-readable zones are rendered in.

ICAO Doc 9303 part 3 prints the MRZ in OCR-B (ISO 1073-2), size 1, at 10 characters per inch
(2.54 mm pitch). The font file is Matthew Skala's public-domain OCR-B as packaged by Debian
(``fonts-ocr-b`` 0.3~dfsg1-1, ``OCRB.otf``); ``scripts/fonts`` (run by ``make models``) puts it
in the user cache, pinned by SHA-256.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from processors.errors import ModelError
from processors.runtime import sha256_file

OCRB_SHA256 = "84558d47dbc19bb5887cc7b72ed62c64534fd00f0b569d28e6dc63b71fe27707"
"""SHA-256 of ``OCRB.otf`` in Debian's ``fonts-ocr-b`` 0.3~dfsg1-1 (also in ``scripts/fonts``)."""
SYSTEM_PATH = Path("/usr/share/fonts/opentype/ocr-b/OCRB.otf")
"""Where the Debian package installs it."""


def cache_path() -> Path:
    """``$XDG_CACHE_HOME/cardstream/fonts/OCRB.otf`` (``~/.cache`` when unset), where
    ``scripts/fonts`` puts the font."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cardstream" / "fonts" / "OCRB.otf"


@cache
def ocrb_path() -> Path:
    """The verified OCR-B font file (the cache's, else the system's).

    Raises:
        ModelError: neither is there with the pinned SHA-256 (run ``make models``, which runs
            ``scripts/fonts``).
    """
    for p in (cache_path(), SYSTEM_PATH):
        if p.is_file() and sha256_file(p) == OCRB_SHA256:
            return p
    raise ModelError(f"OCR-B font missing at {cache_path()} (run `make models` or scripts/fonts)")
