"""The fault suite's accounting (benchmarks/faults/ledger.py): lost, duplicates, stalls."""

from __future__ import annotations

from benchmarks.faults.ledger import Output, Produced, max_stall, tally


def _p(part: int, off: int, t: float, kind: str = "good") -> Produced:
    return Produced(part, off, t, kind)


def _o(part: int, off: int, t: float, kind: str = "result", code: str = "accepted") -> Output:
    return Output(part, off, t, kind, code)


def test_tally_counts_lost_duplicates_and_outcomes_by_kind() -> None:
    produced = [_p(0, 0, 1.0), _p(0, 1, 1.1, "big_key"), _p(1, 0, 1.2), _p(1, 1, 1.3)]
    outputs = [_o(0, 0, 2.0), _o(0, 1, 2.1, "dead_letter", "KEY_MISMATCH"), _o(1, 0, 2.2),
               _o(1, 0, 9.0),  # the same record committed twice
               _o(5, 7, 2.3)]  # not a record of this run: left out
    row = tally(produced, outputs, since=1.5, until=10.0)
    assert (row["uploads"], row["results"], row["dead_letters"], row["lost"],
            row["duplicates"]) == (4, 3, 1, 1, 1)
    assert row["outcomes"] == {"big_key": {"KEY_MISMATCH": 1},
                               "good": {"accepted": 2, "lost": 1}}
    # partition 1 holds (1, 1) from 1.5 (its (1, 0) came at 2.2) to the end: 10.0 - 2.2
    assert (row["max_stall_s"], row["stalled_partition"]) == (7.8, 1)


def test_stall_runs_from_the_fault_end_while_work_waits() -> None:
    # partition 0: records at 0..4 s, the fault ends at 5 s, outputs at 6, 20 and 21 s
    produced = [_p(0, i, float(i)) for i in range(3)]
    outputs = [_o(0, 0, 6.0), _o(0, 1, 20.0), _o(0, 2, 21.0)]
    assert max_stall(produced, outputs, since=5.0, until=30.0) == (14.0, 0)
    # before the fault ended nothing counts: the same outputs seen from 19 s on
    assert max_stall(produced, outputs, since=19.0, until=30.0) == (1.0, 0)


def test_an_idle_partition_does_not_stall_until_work_arrives() -> None:
    produced = [_p(0, 0, 50.0)]
    outputs = [_o(0, 0, 51.5)]
    # idle from the fault's end (10 s) to 50 s: only the 1.5 s the record waited counts
    assert max_stall(produced, outputs, since=10.0, until=60.0) == (1.5, 0)
    # a record never answered stalls its partition to the end of the observation
    assert max_stall([_p(2, 0, 12.0)], [], since=10.0, until=60.0) == (48.0, 2)
    assert max_stall([], [], since=0.0, until=1.0) == (0.0, None)


def test_a_duplicate_output_is_not_progress() -> None:
    produced = [_p(0, 0, 0.0), _p(0, 1, 0.0)]
    outputs = [_o(0, 0, 2.0), _o(0, 0, 10.0), _o(0, 1, 30.0)]
    assert max_stall(produced, outputs, since=1.0, until=40.0) == (28.0, 0)
