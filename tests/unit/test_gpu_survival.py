"""What lets a GPU run keep what it measured (``benchmarks/gpu_journal.py``): journal lines that
survive their writer, steps in processes of their own, a start barrier that a dying or hanging
child cannot hold up; and ``benchmarks.gpu_sweep`` going on past a task whose process dies.

The children's targets live in this module, which imports little: a spawned child imports it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from benchmarks.gpu_journal import Journal, gather, run_isolated


def _returns(i: int, ready, value: int) -> dict:
    ready()
    return {"child": i, "value": value * (i + 1)}


def _one_dies(i: int, ready, code: int) -> dict:
    if i == 1:
        os._exit(code)  # a crash or the out-of-memory killer: no report, no exception
    ready()
    return {"child": i}


def _one_hangs(i: int, ready, _: int) -> dict:
    if i == 1:
        time.sleep(600)  # never reaches the start line
    ready()
    return {"child": i}


def _exits(code: int) -> None:
    os._exit(code)


def _sleeps(seconds: float) -> None:
    time.sleep(seconds)


def _task(task: str, precision: str, a, deadline: float) -> None:
    """A sweep task whose fp32 process dies and whose fp16 process measures one point."""
    if precision == "fp32":
        os._exit(3)
    Journal(a.out / "gpu.jsonl").write("point", task=task, precision=precision, batch=4,
                                       images_per_s=12.5)


def test_journal_appends_whole_lines_and_skips_a_torn_one(tmp_path: Path) -> None:
    import numpy as np

    j = Journal(tmp_path / "deep" / "gpu.jsonl")
    assert j.read() == []
    a = j.write("point", batch=1, images_per_s=3.0)
    with open(j.path, "a") as f:
        f.write('{"step": "point", "batch": 2, "imag')  # a writer killed mid-line
    j.write("point", batch=4, images_per_s=np.float32(5.5))  # NumPy scalars are numbers
    with open(j.path, "a") as f:
        f.write("[1, 2]\n")  # not a record
    j.write("end")
    recs = j.read()
    assert [(r["step"], r.get("batch"), r.get("images_per_s")) for r in recs] == [
        ("point", 1, 3.0), ("point", 4, 5.5), ("end", None, None)]
    assert a["pid"] == os.getpid() and recs[0] == a


def test_an_isolated_step_reports_its_exit_code_and_is_stopped_at_its_deadline() -> None:
    assert run_isolated(_exits, (0,), 60)["exitcode"] == 0
    died = run_isolated(_exits, (7,), 60)
    assert died["exitcode"] == 7 and not died["timed_out"]
    t0 = time.perf_counter()
    hung = run_isolated(_sleeps, (600,), 3)
    assert hung["timed_out"] and hung["exitcode"] is not None and hung["exitcode"] < 0
    assert time.perf_counter() - t0 < 60


def test_children_start_together_and_report() -> None:
    kids = gather(_returns, 2, (10,), barrier_timeout_s=60, timeout_s=120)
    assert kids == [{"child": 0, "ok": True, "result": {"child": 0, "value": 10}},
                    {"child": 1, "ok": True, "result": {"child": 1, "value": 20}}]


def test_a_dying_child_breaks_the_barrier_and_loses_only_its_point() -> None:
    t0 = time.perf_counter()
    kids = gather(_one_dies, 2, (9,), barrier_timeout_s=300, timeout_s=300)
    assert not kids[1]["ok"] and kids[1]["exitcode"] == 9
    assert "died with exit code 9" in kids[1]["error"]
    assert not kids[0]["ok"] and "barrier broke" in kids[0]["error"]
    assert time.perf_counter() - t0 < 120  # nobody waited out the 300 s barrier


def test_a_child_that_never_starts_times_out_the_barrier_only() -> None:
    t0 = time.perf_counter()
    kids = gather(_one_hangs, 2, (0,), barrier_timeout_s=3, timeout_s=300)
    assert "barrier broke" in kids[0]["error"]
    assert not kids[1]["ok"] and "no report in time" in kids[1]["error"]
    assert time.perf_counter() - t0 < 120  # stopped GRACE_S after its sibling failed


def test_the_sweep_goes_on_past_a_task_whose_process_dies(tmp_path: Path, capsys) -> None:
    from benchmarks.gpu_sweep import main

    summary = main(["--device", "cpu", "--tasks", "card", "--precisions", "fp32,fp16",
                    "--procs", "1", "--budget-s", "300", "--out", str(tmp_path)], task_target=_task)
    steps = [r["step"] for r in Journal(tmp_path / "gpu.jsonl").read()]
    assert steps == ["sweep_start", "task_failed", "point", "sweep_end"]
    card = summary["tasks"]["card"]
    assert card["fp32"]["failed"] == {"what": "sweep", "exitcode": 3, "timed_out": False}
    assert card["fp16"]["best_images_per_s"] == 12.5 and card["fp16"]["best_batch"] == 4
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary
