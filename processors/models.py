"""Pinned model files: where they live and their SHA-256 (``processors/models.json``).

The model home is rembg's (``U2NET_HOME``, default ``~/.u2net``) so rembg sessions find the
same verified files and never download them.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from processors.errors import ModelError
from processors.runtime import verify_sha256

_MANIFEST = Path(__file__).with_name("models.json")


@cache
def manifest() -> dict[str, dict[str, Any]]:
    """Model name -> entry (``file``, ``sha256``, ``source``...) from ``models.json``."""
    data = json.loads(_MANIFEST.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def model_home() -> Path:
    """Folder holding model files: ``$U2NET_HOME`` or ``~/.u2net`` (rembg's convention)."""
    return Path(os.environ.get("U2NET_HOME", Path.home() / ".u2net")).expanduser()


def model_path(name: str, verify: bool = True) -> Path:
    """Path of model ``name``'s file, verified against its pinned SHA-256.

    Files with a ``packaged`` entry (trained by this project) live inside the ``processors``
    package; the others in :func:`model_home`.

    Raises:
        ModelError: unknown name, file missing (names the file and ``make models``), or a hash
            mismatch.
    """
    entry = manifest().get(name)
    if entry is None:
        raise ModelError(f"unknown model {name!r}; known: {sorted(manifest())}")
    if "packaged" in entry:  # weights trained by this project ship in the package
        path = Path(__file__).parent / entry["packaged"]
    else:
        path = model_home() / entry["file"]
    if verify:
        verify_sha256(path, entry["sha256"])
    return path


def pinned_model(name: str, override: Path | None = None) -> tuple[Path, str | None]:
    """The file of model ``name`` and the SHA-256 to check it against when it is loaded: the
    pinned file (:func:`model_path`, not read here) with its pinned digest, or ``override`` (a
    test's file, a new training run, a processor command's ``--model``) with None: not
    checked.

    Raises:
        ModelError: ``override`` is None and ``name`` is not in ``models.json``.
    """
    if override is not None:
        return Path(override), None
    return model_path(name, verify=False), manifest()[name]["sha256"]
