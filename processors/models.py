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
from processors.runtime import RuntimeSettings, model_precision, verify_sha256

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


def pinned_model(name: str, override: Path | None = None,
                 runtime: RuntimeSettings | None = None) -> tuple[Path, str | None]:
    """The file of model ``name`` and the SHA-256 to check it against when it is loaded: the
    pinned file (:func:`model_path`, not read here) with its pinned digest, or ``override`` (a
    test's file, a new training run, a processor command's ``--model``) with None: not
    checked.

    With ``runtime``, the pinned file is the one for its precision
    (:func:`processors.runtime.model_precision`): where that is ``int8`` and ``models.json``
    pins an int8 build of ``name`` (``{name}.int8``, made by :mod:`processors.quantise`), that
    build; under ``precision: auto`` only when its entry does not say ``"auto": false`` (a
    build that has not passed ``python -m benchmarks.precision_gate``). Otherwise ``name``'s own.

    Raises:
        ModelError: ``override`` is None and ``name`` is not in ``models.json``.
        ProviderError: ``runtime`` asks for int8 on a GPU.
    """
    if override is not None:
        return Path(override), None
    if runtime is not None:
        int8 = manifest().get(f"{name}.int8")
        if int8 is not None and model_precision(runtime) == "int8" and (
                runtime.precision == "int8" or int8.get("auto", True)):
            name = f"{name}.int8"
    if name not in manifest():
        raise ModelError(f"unknown model {name!r}; known: {sorted(manifest())}")
    return model_path(name, verify=False), manifest()[name]["sha256"]


def file_precision(path: Path, runtime: RuntimeSettings) -> str:
    """The precision a session of ``runtime`` on model file ``path`` computes in: ``int8``
    for a file pinned with ``precision: int8`` (:func:`pinned_model` chose it), else
    ``runtime``'s (:func:`processors.runtime.model_precision`), where ``int8`` means ``fp32``
    (a float file: a model without an int8 build, one that did not pass the gate under
    ``auto``, a ``--model`` file)."""
    if any(e["file"] == Path(path).name and e.get("precision") == "int8"
           for e in manifest().values()):
        return "int8"
    p = model_precision(runtime)
    return "fp32" if p == "int8" else p
