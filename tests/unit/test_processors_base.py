"""processors.base helpers (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest

from processors.base import Item, Outcome, process_in_chunks
from schemas.reasons import Status


class _Recorder:
    """A processor double that records the size of each ``process_batch`` call."""

    task = "card"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def process_batch(self, items):
        self.calls.append(len(items))
        return [Outcome(upload_id=it.upload_id, status=Status.ACCEPTED) for it in items]


@pytest.mark.parametrize(("n", "batch", "calls"), [(0, 4, []), (3, 4, [3]), (9, 4, [4, 4, 1]),
                                                   (2, 0, [1, 1])])
def test_process_in_chunks_calls_once_per_chunk_and_keeps_order(n, batch, calls):
    items = [Item(f"u{i}", np.zeros((4, 4, 3), np.uint8)) for i in range(n)]
    rec = _Recorder()
    out = list(process_in_chunks(rec, items, batch))
    assert rec.calls == calls
    assert [o.upload_id for o in out] == [f"u{i}" for i in range(n)]
