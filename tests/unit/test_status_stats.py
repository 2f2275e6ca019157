"""Status app computations: partitioner, histogram percentiles, window aggregates, summaries."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from jsonschema import Draft202012Validator, FormatChecker

from schemas import codec
from streams import status_stats as S

ROOT = Path(__file__).resolve().parents[2]


def _validator(name: str, definition: str | None = None) -> Draft202012Validator:
    """Validator of ``schemas/status_{name}.v1.schema.json`` (or of one of its ``$defs``)."""
    schema = json.loads((ROOT / "schemas" / f"status_{name}.v1.schema.json").read_text())
    if definition:
        schema = {"$schema": schema["$schema"], **schema["$defs"][definition],
                  "$defs": schema["$defs"]}
    return Draft202012Validator(schema, format_checker=FormatChecker())


def _nearest_rank(xs: list[float], p: float) -> float:
    ys = sorted(xs)
    return ys[max(1, math.ceil(p / 100 * len(ys))) - 1]


def test_crc32_is_the_ieee_crc_librdkafka_uses() -> None:
    # CRC-32/ISO-HDLC check value (the "123456789" vector of the CRC catalogue): 0xCBF43926
    assert S.crc32_partition(b"123456789", 1 << 32) == 0xCBF43926
    assert S.crc32_partition(b"123456789", 6) == 0xCBF43926 % 6
    assert S.crc32_partitioner(b"123456789", [0, 1, 2, 3, 4, 5], [0, 1]) == 0xCBF43926 % 6


def test_partitioner_without_key_picks_an_available_partition() -> None:
    picks = {S.crc32_partitioner(None, [0, 1, 2, 3], [1, 3]) for _ in range(200)}
    assert picks == {1, 3}


@pytest.mark.parametrize("ms",
                         [0.0, 0.05, 0.1, 0.1000001, 1.0, 20.0, 123.456, 2626.0, 60_000.0, 3.6e6])
def test_bucket_edges_hold_the_value(ms: float) -> None:
    i = S.bucket_of(ms)
    assert ms <= S.bucket_upper_ms(i) * (1 + 1e-12)
    if i > 0:
        assert ms > S.bucket_upper_ms(i - 1) * (1 - 1e-12)
        assert S.bucket_upper_ms(i) / S.bucket_upper_ms(i - 1) == pytest.approx(S.HIST_GROWTH)


def test_percentiles_within_bucket_resolution_of_nearest_rank() -> None:
    rng = np.random.default_rng(7)
    xs = [float(x) for x in rng.lognormal(mean=4.0, sigma=1.0, size=3000)]
    agg = S.new_window(0, 60)
    for x in xs:
        agg = S.add_result(agg, "accepted", [], x, 8)
    t = agg["total_ms"]
    for p in (1, 50, 90, 95, 99, 100):
        true = _nearest_rank(xs, p)
        est = S.hist_percentile(t["hist"], p, t["min"], t["max"])
        assert true <= est <= true * S.HIST_GROWTH * (1 + 1e-12), p
    assert S.hist_percentile({}, 50, 0.0, 0.0) is None


def test_percentile_clamped_to_observed_range() -> None:
    agg = S.add_result(S.new_window(0, 60), "accepted", [], 100.0, 1)
    t = agg["total_ms"]
    assert S.hist_percentile(t["hist"], 50, t["min"], t["max"]) == 100.0


def _records(n: int, seed: int = 1) -> list[tuple[int, int, str, list[str], float, int]]:
    """(partition, timestamp_ms, status, reasons, total_ms, batch_size) rows."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        st = str(rng.choice(["accepted", "rejected", "failed"], p=[0.7, 0.2, 0.1]))
        reasons = [] if st == "accepted" else [str(rng.choice(["NO_CARD", "BLURRY", "GLARE"]))]
        out.append((int(rng.integers(0, 3)), 1_800_000_000_000 + int(rng.integers(0, 300_000)), st,
                    reasons,
                    float(rng.uniform(5, 500)), int(rng.integers(1, 33))))
    return out


def test_per_partition_windows_merge_to_the_direct_count() -> None:
    rows = _records(1000)
    size = 60
    tables: dict[bytes, dict] = {}
    for off, (p, ts, st, rs, ms, bs) in enumerate(rows):
        start = S.window_start_ms(ts, size)
        k = S.stats_key("card", p, start)
        tables[k] = S.add_result(tables.get(k) or S.new_window(start, size), st, rs, ms, bs, off)
    merged = S.regroup(tables.values(), size)
    direct: dict[int, list] = {}
    for row in rows:
        direct.setdefault(S.window_start_ms(row[1], size), []).append(row)
    assert [w["start_ms"] for w in merged] == sorted(direct)
    for w in merged:
        rs = direct[w["start_ms"]]
        assert w["count"] == len(rs)
        assert w["by_status"] == dict(Counter(r[2] for r in rs))
        assert w["by_reason"] == dict(Counter(x for r in rs for x in r[3]))
        assert w["batch_size_sum"] == sum(r[5] for r in rs)
        assert w["total_ms"]["sum"] == pytest.approx(sum(r[4] for r in rs))
        assert sum(w["total_ms"]["hist"].values()) == len(rs)
        view = S.summarize(w)
        assert view["end"] - view["start"] == size * 1000
        assert view["results_per_s"] == pytest.approx(len(rs) / size)
        assert view["batch_size_avg"] == pytest.approx(sum(r[5] for r in rs) / len(rs))
        assert view["total_ms"]["max"] == max(r[4] for r in rs)
        p95 = _nearest_rank([r[4] for r in rs], 95)
        assert p95 <= view["total_ms"]["p95"] <= p95 * S.HIST_GROWTH * (1 + 1e-12)
    # coarser windows (5 min) are exact sums of the 1-minute ones
    five = S.regroup(merged, 300)
    assert sum(w["count"] for w in five) == len(rows)
    assert all(w["start_ms"] % 300_000 == 0 for w in five)


def test_summary_of_empty_window_and_schema() -> None:
    v = _validator("stats", "window")
    empty = S.summarize(S.new_window(60_000, 60))
    v.validate(empty)
    assert (empty["count"] == 0 and empty["total_ms"]["p50"] is None
            and empty["batch_size_avg"] is None)
    full = S.summarize(S.add_result(S.new_window(60_000, 60), "rejected", ["BLURRY"], 12.5, 4),
                       end_ms=90_000)
    v.validate(full)
    assert full["size_s"] == 30.0 and full["results_per_s"] == pytest.approx(1 / 30)
    assert full["by_reason"] == {"BLURRY": 1} and full["total_ms"]["mean"] == 12.5


def test_applied_tracks_last_offset() -> None:
    agg = S.new_window(0, 60)
    assert not S.applied(None, 0) and not S.applied(agg, 0)
    agg = S.add_result(agg, "accepted", [], 1.0, 1, offset=41)
    assert S.applied(agg, 41) and S.applied(agg, 3) and not S.applied(agg, 42)


def test_stats_key_round_trip() -> None:
    k = S.stats_key("id_photo", 5, 1_800_000_040_000)
    assert k == b"id_photo|5|1800000040000"
    assert S.parse_stats_key(k) == ("id_photo", 5, 1_800_000_040_000)
    with pytest.raises(ValueError):
        S.parse_stats_key(b"nonsense")


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "schemas" / "examples").glob(
    "verification_result.valid*.json")))
def test_verdict_summary_matches_upload_schema(example: str) -> None:
    r = codec.decode_result((ROOT / "schemas" / "examples" / example).read_bytes())
    s = S.verdict_summary(r, 2, 17, 1_800_000_000_123)
    _validator("upload").validate({"schema_version": 1, **s})
    assert s["status"] == r.status and s["reasons"] == list(r.reasons)
    assert s["result"] == {"partition": 2, "offset": 17, "timestamp_ms": 1_800_000_000_123}
    refs = [x.rectified for x in [r.card] if x] + [x.photo for x in [r.id_photo] if x]
    assert [o["key"] for o in s["objects"]] == [ref.key for ref in refs if ref is not None]
    assert S.expired(s, 1_800_000_000_123 + 1000, retention_s=0.5)
    assert not S.expired(s, 1_800_000_000_123 + 1000, retention_s=2.0)
