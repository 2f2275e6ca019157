"""Replay helpers (unit tier): window times and the verdict diff (its table:
test_tables.py)."""

from __future__ import annotations

import pytest

from schemas.models import VerificationResult
from streams.replay import TimeArgError, diff_results, parse_time_ms


@pytest.mark.parametrize(("text", "ms"), [
    ("2026-11-29T17:00:00Z", 1795971600000),
    ("2026-11-29T17:00:00", 1795971600000),
    ("2026-11-29T18:00:00+01:00", 1795971600000),
    ("1795971600000", 1795971600000),
])
def test_parse_time_ms(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize("bad", ["1795971600", "yesterday", "2026-13-01"])
def test_parse_time_ms_refuses_seconds_and_junk(bad: str) -> None:
    with pytest.raises(TimeArgError):
        parse_time_ms(bad)


def _result(uid: str, status: str, reasons: list[str], quad: list | None,
            at: str) -> VerificationResult:
    return VerificationResult.model_validate({
        "upload_id": uid, "task": "card", "status": status, "reasons": reasons,
        "card": {"quad": quad, "confidence": 0.9, "doc_type": "id_card", "rectified": None},
        "model": {"name": "m", "version": "1", "provider": "CPUExecutionProvider"},
        "timings": {"queue_ms": 1.0, "batch_size": 1, "inference_ms": 1.0, "total_ms": 2.0},
        "source": {"topic": "t", "partition": 0, "offset": 0}, "processed_at": at})


def test_diff_results_counts_changes_and_iou() -> None:
    sq = [[0, 0], [100, 0], [100, 50], [0, 50]]
    half = [[0, 0], [50, 0], [50, 50], [0, 50]]
    before = [_result("a", "accepted", [], sq, "2026-01-01T00:00:00Z"),
              _result("b", "accepted", [], sq, "2026-01-01T00:00:00Z"),
              _result("b", "rejected", ["BLURRY"], sq, "2025-01-01T00:00:00Z")]  # older: ignored
    after = [_result("a", "accepted", [], sq, "2026-02-01T00:00:00Z"),
             _result("b", "rejected", ["GLARE"], half, "2026-02-01T00:00:00Z"),
             _result("c", "accepted", [], sq, "2026-02-01T00:00:00Z")]
    d = diff_results(before, after)
    s = d.summary()
    assert (d.compared, s["verdicts_changed"], s["reasons_changed"],
            s["missing_original"]) == (2, 1, 1, 1)
    assert d.measures["quad_iou"]["a"] == pytest.approx(1.0, abs=1e-6)
    assert d.measures["quad_iou"]["b"] == pytest.approx(0.5, abs=1e-6)


def test_an_original_answered_stale_is_not_a_verdict_change() -> None:
    """A STALE original never ran the model and a replay applies no deadline: the upload is
    counted as ``stale_original``, not compared (a trial read STALE -> accepted as a change)."""
    sq = [[0, 0], [100, 0], [100, 50], [0, 50]]
    before = [_result("s", "rejected", ["STALE"], None, "2026-01-01T00:00:00Z"),
              _result("a", "accepted", [], sq, "2026-01-01T00:00:00Z")]
    after = [_result("s", "accepted", [], sq, "2026-02-01T00:00:00Z"),
             _result("a", "accepted", [], sq, "2026-02-01T00:00:00Z")]
    s = diff_results(before, after).summary()
    assert (s["compared"], s["stale_original"], s["verdicts_changed"], s["changed"]) == \
        (1, 1, 0, [])


def _photo(uid: str, face_box: list | None, at: str) -> VerificationResult:
    return VerificationResult.model_validate({
        "upload_id": uid, "task": "id_photo", "status": "accepted", "reasons": [],
        "id_photo": {"photo": None, "size": "one_inch", "background": "white",
                     "face_box": face_box, "width": 295, "height": 413},
        "model": {"name": "m", "version": "1", "provider": "CPUExecutionProvider"},
        "timings": {"queue_ms": 1.0, "batch_size": 1, "inference_ms": 1.0, "total_ms": 2.0},
        "source": {"topic": "t", "partition": 0, "offset": 0}, "processed_at": at})


def test_diff_compares_any_task_by_its_spec() -> None:
    """Replay's diff asks each task's spec what changed (``TaskSpec.compare``): an ID photo's
    face box too, not only a card's quad; the report names every task's measures."""
    t0, t1 = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
    before = [_photo("p", [10, 10, 40, 40], t0), _photo("q", None, t0),
              _result("c", "accepted", [], [[0, 0], [100, 0], [100, 50], [0, 50]], t0)]
    after = [_photo("p", [30, 10, 40, 40], t1), _photo("q", [0, 0, 9, 9], t1),
             _result("c", "accepted", [], [[0, 0], [100, 0], [100, 50], [0, 50]], t1)]
    s = diff_results(before, after).summary()
    assert s["face_iou_mean"] == s["face_iou_min"] == pytest.approx(1 / 3, abs=1e-4)
    assert s["quad_iou_min"] == pytest.approx(1.0) and s["compared"] == 3
    assert diff_results([], []).summary()["face_iou_mean"] is None

