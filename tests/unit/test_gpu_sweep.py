"""``benchmarks.gpu_sweep`` on the CPU execution provider: its arguments, one journal line per
point as it is measured, a point that fails, the summary (``tests/unit/test_gpu_survival.py``:
a task whose process dies, the processes step's children)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import gpu_sweep
from benchmarks.gpu_journal import Journal
from benchmarks.gpu_sweep import main, parser, summarize, task_child


def test_arguments_parse_and_unknown_tasks_are_refused(tmp_path: Path) -> None:
    a = parser().parse_args(["--batches", "1,4,16", "--size", "800x600", "--procs", "1,2",
                             "--precisions", "fp32,fp16"])
    assert a.batches == [1, 4, 16] and a.size == (800, 600) and a.procs == [1, 2]
    assert a.device == "cuda" and a.precisions == ["fp32", "fp16"] and not a.tensorrt
    assert a.procs_max_batch == 32 and a.cuda_codec == "auto"
    with pytest.raises(SystemExit, match="unknown task"):
        main(["--device", "cpu", "--tasks", "passport", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="precision"):
        main(["--device", "cpu", "--precisions", "int4", "--out", str(tmp_path)])


def test_cuda_without_a_cuda_device_stops_with_a_reason(tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has ONNX Runtime's CUDA provider")
    with pytest.raises(SystemExit, match="no CUDA device"):
        main(["--device", "cuda", "--out", str(tmp_path)])


class _Pixels:
    name = "graphs"

    class fallbacks:  # noqa: N801 - the backend's attribute
        @staticmethod
        def snapshot() -> dict:
            return {"counts": {"decode_host": 0}, "why": {}}


class _Model:
    provider = requested_provider = "CPUExecutionProvider"
    chosen_bucket = 1


class _Proc:
    """A processor stand-in whose batch of 2 fails (a CUDA out-of-memory error, say); one
    model-input graph run per batch."""

    pixels = _Pixels()
    batched_model = _Model()

    def process_batch(self, chunk: list) -> list:
        if len(chunk) == 2:
            raise RuntimeError("CUDA failure 2: out of memory")
        self.pixels.graph_runs = {"model_input": self.pixels.graph_runs["model_input"] + 1}
        return chunk


def test_a_failing_point_is_a_record_and_the_next_point_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_sweep, "build", lambda task, rt: _Proc())
    monkeypatch.setattr(gpu_sweep, "items_for", lambda task, n, size, seed=29: [object()] * n)
    monkeypatch.setattr(gpu_sweep, "bare_model_ips", lambda proc, items, b, s: 99.0)
    _Pixels.graph_runs = {"model_input": 0}
    a = parser().parse_args(["--device", "cpu", "--batches", "1,2,4", "--seconds", "0.01",
                             "--unique", "2", "--out", str(tmp_path)])
    import time

    task_child("card", "fp32", a, deadline=time.time() + 60)
    recs = Journal(tmp_path / "gpu.jsonl").read()
    assert [r["step"] for r in recs] == ["task_start", "point", "point", "point", "bare_model",
                                         "task_end"]
    assert recs[2]["batch"] == 2 and recs[2]["error"].startswith("RuntimeError: CUDA failure 2")
    assert recs[1]["images_per_s"] > 0 and recs[3]["images_per_s"] > 0
    assert recs[1]["graph_runs_per_image"] == {"model_input": 1.0}
    assert recs[3]["graph_runs_per_image"] == {"model_input": 0.25}  # one run per batch of 4
    assert recs[4]["batch"] == max((1, 4), key=lambda b: recs[1 + (b == 4) * 2]["images_per_s"])
    s = summarize(recs)["tasks"]["card"]["fp32"]
    assert set(s["images_per_s"]) == {"1", "4"} and s["bare_model_ips"] == 99.0
    assert s["errors"] == [{"batch": 2, "error": recs[2]["error"]}]
    assert s["fallbacks"]["pixels"]["counts"] == {"decode_host": 0}
    # past the deadline no point starts, and an empty sweep is a record, not a crash
    (tmp_path / "gpu.jsonl").unlink()
    task_child("card", "fp32", a, deadline=time.time() - 1)
    recs = Journal(tmp_path / "gpu.jsonl").read()
    assert [r.get("skipped") for r in recs if r["step"] == "point"] == ["budget"] * 3
    assert "best_batch" not in summarize(recs)["tasks"]["card"]["fp32"]


def test_summary_folds_procs_smoke_parity_and_failures() -> None:
    recs = [
        {"step": "sweep_start", "machine": {"gpu": "H200"}},
        {"step": "smoke", "ok": False, "checks": {"codec": {"ok": True}, "graphs": {"ok": False}}},
        {"step": "parity", "task": "card", "result": {"ok": True}},
        {"step": "point", "task": "card", "precision": "fp16", "batch": 1, "images_per_s": 10.0},
        {"step": "point", "task": "card", "precision": "fp16", "batch": 8, "images_per_s": 50.0},
        {"step": "procs", "task": "card", "precision": "fp16", "k": 2, "batch": 8,
         "images_per_s": 80.0, "children": [{"child": 0, "ok": True}, {"child": 1, "ok": True}]},
        {"step": "procs", "task": "card", "precision": "fp16", "k": 4, "batch": 8,
         "images_per_s": None, "children": [{"child": 2, "ok": False, "error": "oom"}]},
        {"step": "task_failed", "task": "id_photo", "precision": "fp32", "what": "sweep",
         "exitcode": -9, "timed_out": False},
        {"step": "sweep_end", "wall_s": 300.0},
    ]
    s = summarize(recs)
    card = s["tasks"]["card"]["fp16"]
    assert (card["best_batch"], card["best_images_per_s"], card["batching_gain"]) == (8, 50.0, 5.0)
    assert card["procs_images_per_s"] == {"2": 80.0, "4": None}
    assert card["errors"] == [{"procs": 4, "child": 2, "error": "oom"}]
    assert s["tasks"]["id_photo"]["fp32"]["failed"]["exitcode"] == -9
    assert s["smoke"] == {"ok": False, "checks": {"codec": True, "graphs": False}}
    assert s["parity"] == {"card": {"ok": True}} and s["wall_s"] == 300.0


def test_cpu_sweep_appends_a_line_per_point_and_prints_the_summary(tmp_path: Path, capsys) -> None:
    summary = main(["--device", "cpu", "--tasks", "card", "--batches", "1,2", "--size", "320x240",
                    "--unique", "2", "--seconds", "0.05", "--threads", "1", "--out",
                    str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == summary
    recs = Journal(tmp_path / "gpu.jsonl").read()
    assert [r["step"] for r in recs] == ["sweep_start", "task_start", "point", "point",
                                         "bare_model", "task_end", "sweep_end"]
    card = summary["tasks"]["card"]["fp32"]
    assert set(card["images_per_s"]) == {"1", "2"}
    assert all(v > 0 for v in card["images_per_s"].values())
    assert card["best_images_per_s"] == max(card["images_per_s"].values())
    assert (card["batching_gain"]
            == pytest.approx(card["best_images_per_s"] / card["images_per_s"]["1"], abs=0.01))
    assert card["bare_model_ips"] > 0
    assert card["provider"] == card["requested_provider"] == "CPUExecutionProvider"
    assert card["pixels"] == "cpu" and not card["errors"] and "parity" not in summary
    assert summary["machine"]["cpus"] >= 1
    assert main(["--summarize", str(tmp_path / "gpu.jsonl")]) == summary


def test_summarize_needs_no_other_argument(tmp_path: Path) -> None:
    j = Journal(tmp_path / "gpu.jsonl")
    j.write("point", task="card", precision="fp32", batch=2, images_per_s=4.0)
    assert main(["--summarize", str(j.path)])["tasks"]["card"]["fp32"]["best_batch"] == 2
    assert isinstance(parser().parse_args([]), argparse.Namespace)
