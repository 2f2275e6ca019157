"""``benchmarks.gpu_sweep`` on the CPU at a tiny size: its arguments, its one JSON line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.gpu_sweep import main, parser


def test_arguments_parse_and_unknown_tasks_are_refused(tmp_path: Path) -> None:
    a = parser().parse_args(["--batches", "1,4,16", "--size", "800x600", "--procs", "1,2"])
    assert a.batches == [1, 4, 16] and a.size == (800, 600) and a.procs == [1, 2]
    assert a.device == "cuda" and a.precision == "fp32" and not a.tensorrt
    with pytest.raises(SystemExit, match="unknown task"):
        main(["--device", "cpu", "--tasks", "passport", "--out", str(tmp_path)])


def test_cuda_without_a_cuda_device_stops_with_a_reason(tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has ONNX Runtime's CUDA provider")
    with pytest.raises(SystemExit, match="no CUDA device"):
        main(["--device", "cuda", "--out", str(tmp_path)])


def test_cpu_sweep_prints_one_json_line(tmp_path: Path, capsys) -> None:
    main(["--device", "cpu", "--tasks", "card", "--batches", "1,2", "--size", "320x240",
          "--unique", "2", "--seconds", "0.05", "--threads", "1", "--out", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert r == json.loads((tmp_path / "gpu_sweep.json").read_text())
    card = r["card"]
    assert set(card["images_per_s"]) == {"1",
                                         "2"} and all(v > 0 for v in card["images_per_s"].values())
    assert card["best_images_per_s"] == max(card["images_per_s"].values())
    assert (card["batching_gain"]
            == pytest.approx(card["best_images_per_s"] / card["images_per_s"]["1"], abs=0.01))
    assert card["bare_model_ips"] > 0 and card["provider"] == "CPUExecutionProvider"
    assert r["machine"]["cpus"] >= 1 and "parity" not in r
