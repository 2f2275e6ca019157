"""The demo's and the benchmarks' sample uploads, made by the project's own code (nothing copied
from elsewhere): each registered task's ``samples`` (``TaskSpec.samples``)."""

from __future__ import annotations

from pathlib import Path

from processors.registry import specs


def write_samples(out: Path) -> dict[str, list[Path]]:
    """Write every task's samples under ``out/<task>``; returns task -> files."""
    return {t.name: files for t in specs() if (files := t.samples(out / t.name))}
