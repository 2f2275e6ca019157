"""processors.base helpers (no model needed)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from processors.base import Item, Outcome, map_in_threads, process_in_chunks
from processors.cascades import cascade
from processors.errors import ModelError
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
    items = [Item.from_array(f"u{i}", np.zeros((32, 32, 3), np.uint8)) for i in range(n)]
    rec = _Recorder()
    out = list(process_in_chunks(rec, items, batch))
    assert rec.calls == calls
    assert [o.upload_id for o in out] == [f"u{i}" for i in range(n)]


def test_map_in_threads_keeps_order_and_uses_several_threads():
    names: set[str] = set()
    barrier = threading.Barrier(3, timeout=5)

    def f(x: int) -> int:
        names.add(threading.current_thread().name)
        if x < 3:
            barrier.wait()  # only passes when 3 calls run at the same time
        time.sleep(0.001 * (10 - x))  # later items finish first
        return x * x

    assert map_in_threads(f, range(10), 3) == [x * x for x in range(10)]
    assert len(names) == 3 and all(n.startswith("postprocess3") for n in names)


def test_map_in_threads_with_one_thread_runs_inline_and_raises_the_first_error():
    caller = threading.current_thread().name
    assert map_in_threads(lambda _x: threading.current_thread().name, [1, 2], 1) == [caller] * 2

    def f(x: int) -> int:
        if x in (2, 4):
            raise ValueError(f"item {x}")
        return x

    for threads in (1, 4):
        with pytest.raises(ValueError, match="item 2"):
            map_in_threads(f, range(6), threads)


def test_cascade_is_one_instance_per_thread_and_file():
    file = "haarcascade_frontalface_default.xml"
    mine = cascade(file)
    assert cascade(file) is mine and not mine.empty()
    assert cascade("haarcascade_frontalface_alt2.xml") is not mine
    other: list = []
    t = threading.Thread(target=lambda: other.append(cascade(file)))
    t.start()
    t.join()
    assert other[0] is not mine and not other[0].empty()
    with pytest.raises(ModelError, match="nope.xml"):
        cascade("nope.xml")
