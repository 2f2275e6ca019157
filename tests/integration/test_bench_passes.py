"""The benchmark's end-to-end passes against the real stack (``benchmarks.e2e``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.e2e import run_batching
from processors.registry import stand_in
from streams.settings import Settings


def test_the_batching_pass_runs_every_repeat_through_the_processor(base_settings: Settings,
                                                                   tmp_path: Path) -> None:
    """The compare section cycles a few files; a repeat answered by the result cache (batch
    size 0) would measure the cache, not the batching, so the pass runs with it off."""
    f = tmp_path / "one.jpg"
    f.write_bytes(_tiny_jpeg())
    r = run_batching(base_settings, "card", stand_in("card", call_ms=5.0, item_ms=1.0), [f], 6,
                     timeout_s=120.0)
    assert r["results"] == 6 and r["errors"] == 0
    assert r["mean_batch_size"] >= 1.0  # every upload went through a processor batch


def _tiny_jpeg() -> bytes:
    import cv2
    import numpy as np

    ok, buf = cv2.imencode(".jpg", np.full((64, 96, 3), 128, np.uint8))
    assert ok
    return buf.tobytes()
