"""The HTTP load table's arithmetic (benchmarks/gateway.py)."""

from __future__ import annotations

from benchmarks.gateway import _row, own_ms, table


def test_gateway_own_time_is_post_time_less_waiting_over_both_instances() -> None:
    req, n, wait = ("cardstream_gateway_request_seconds_sum{route=/v1/uploads}",
                    "cardstream_gateway_request_seconds_count{route=/v1/uploads}",
                    "cardstream_gateway_wait_seconds_sum{outcome=result,request=post}")
    before = [{req: 5.0, n: 10, wait: 4.0}, {}]
    after = [{req: 10.0, n: 20, wait: 8.5},
             {req: 3.0, n: 10, wait: 2.0,
              "cardstream_gateway_wait_seconds_sum{outcome=timeout,request=post}": 0.5,
              "cardstream_gateway_wait_seconds_sum{outcome=result,request=get}": 9.0}]
    # (5 + 3) s of POSTs less (4.5 + 2.5) s their waits, over 20 uploads (GETs' waits apart)
    assert own_ms(before, after) == 50.0
    assert own_ms([{}], [{}]) is None


def test_rows_count_errors_and_backpressure_apart() -> None:
    recs = [(0.0, 100.0, "accepted"), (1.0, 300.0, "rejected"), (2.0, None, "error")]
    r = _row("http", 10, recs, backpressure=4, duration_s=2.0)
    assert (r["requests"], r["qps"], r["errors"], r["backpressure"],
            r["rejected"]) == (3, 1.0, 1, 4, 1)
    slow = _row("http", 2, [(0.0, 40_000.0, "accepted"), (5.0, 60_000.0, "accepted")], 0, 30.0)
    assert slow["qps"] == round(2 / 60.005, 2)  # verdicts over first start -> last verdict
    assert r["avg_ms"] == 200.0 and r["max_ms"] == 300.0
    md = table([r, {**_row("kafka", 10, recs[:1], 0, 2.0)}])
    lines = md.splitlines()
    assert lines[0].startswith("| clients | path | qps") and "| 10 | kafka |" in lines[2]
    assert "| 10 | http | 1.0 | 200.0 |" in lines[3]
