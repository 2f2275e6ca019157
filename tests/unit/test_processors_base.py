"""processors.base helpers (no model needed)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from processors.base import Item, Outcome, map_in_threads, outcomes_per_item, process_in_buckets
from schemas.reasons import ReasonCode, Status


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
def test_process_in_buckets_calls_once_per_bucket_and_keeps_order(n, batch, calls):
    items = [Item.from_array(f"u{i}", np.zeros((32, 32, 3), np.uint8)) for i in range(n)]
    rec = _Recorder()
    out = list(process_in_buckets(rec, items, batch))
    assert rec.calls == calls
    assert [o.upload_id for o in out] == [f"u{i}" for i in range(n)]


@pytest.mark.parametrize("threads", [1, 3])
def test_one_failing_item_is_failed_and_the_others_are_not(threads):
    """The one rule every processor follows after its batched model call: an item whose
    post-processing raises gets a ``failed`` INTERNAL_ERROR outcome; the rest are unaffected."""
    items = [Item.from_array(f"u{i}", np.zeros((32, 32, 3), np.uint8)) for i in range(5)]

    def one(k: int) -> Outcome:
        if k == 2:
            raise ZeroDivisionError("a poison item")
        return Outcome(upload_id=items[k].upload_id, status=Status.ACCEPTED, inference_ms=7.0)

    out = outcomes_per_item(one, items, threads, task="card", inference_ms=7.0)
    assert [o.upload_id for o in out] == [f"u{i}" for i in range(5)]
    assert [str(o.status) for o in out] == ["accepted", "accepted", "failed", "accepted",
                                            "accepted"]
    assert out[2].reasons == (ReasonCode.INTERNAL_ERROR,) and out[2].inference_ms == 7.0


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
