"""Fixtures shared by every module of both tiers."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from processors.runtime import BatchedModel


@pytest.fixture(autouse=True, scope="module")
def _release_model_sessions() -> Iterator[None]:
    """Free the ONNX Runtime sessions a module built once it ends: :meth:`BatchedModel.shared`
    keeps one per model file and settings for the life of the process, and with the CPU arena
    kept (``CARDSTREAM_RUNTIME__CPU_ARENA``, issue 40) each holds its peak working memory, so one
    pytest process over the unit tier grew to 18 GB and was killed (2026-12-05); `make test`
    runs both tiers in one process."""
    yield
    BatchedModel.drop_shared()
    gc.collect()
