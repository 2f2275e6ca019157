"""``benchmarks.gpu_smoke`` on the CPU: every check on the CPU provider, the codec through the
nvImageCodec test double, node placement read from ONNX Runtime's profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks import gpu_smoke
from benchmarks.gpu_journal import Journal
from benchmarks.gpu_smoke import HEAVY_BYTES, NO_CUDA, main, placement
from processors.gpu.graphs import warp_graph
from tests.unit.test_gpu_codec import nvimgcodec  # noqa: F401 - the fixture


def test_smoke_on_the_cpu_checks_codec_graphs_and_model(tmp_path: Path, nvimgcodec, capsys) -> None:  # noqa: F811
    assert main(["--device", "cpu", "--size", "640x480", "--model-batch", "1",
                 "--out", str(tmp_path)]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recs = Journal(tmp_path / "gpu.jsonl").read()
    assert recs[-1] == rec and [r["name"] for r in recs[:-1]] == [
        "versions", "model", "codec", "graphs", "memory"]  # each journalled when it ended
    c = rec["checks"]
    assert rec["ok"] and set(c) == {"versions", "codec", "graphs", "model", "memory"}
    codec = c["codec"]
    assert codec["codec"] == "nvImageCodec 0.9.0-double" and codec["decoded_wh"] == [640, 480]
    # the double upsamples chroma as nvJPEG does: luma is the close figure
    assert 0 < codec["decode_luma_mean_levels"] < codec["decode_bgr_mean_levels"] < 2
    assert nvimgcodec.calls == {"decode": 1, "encode": 1}
    graphs = c["graphs"]["graphs"]
    assert set(graphs) == {"model_input", "working_grey", "area_resize", "grey_samples", "warp",
                           "orient", "copy"}
    for g in graphs.values():
        assert g["ok"] and g["max_levels"] == 0.0 and not g["off_device"]
        assert set(g["by_provider"]) == {"CPUExecutionProvider"} and g["nodes"] >= 1
    model = c["model"]
    assert model["ok"] and not model["cuda_active"]
    assert model["fp32"]["active"] == model["fp16"]["active"] == "CPUExecutionProvider"
    assert model["fp16"]["nodes"] > model["fp32"]["nodes"]  # the casts fp16 adds
    assert 0 < model["fp16_mask_mean_levels"] < 1.0
    assert c["memory"]["gpu_memory_mib"] is None  # no nvidia-smi here


def test_nodes_off_the_device_are_listed_with_their_output_size() -> None:
    img = np.zeros((1, 200, 300, 3), np.uint8)
    feeds = {"image": img, "homography": np.eye(3, dtype=np.float32)[None],
             "out_hw": np.array([100, 150], np.int64)}
    # the CPU provider standing in for a device that lacks every kernel
    (out,), where = placement(warp_graph(3).SerializeToString(), ["CPUExecutionProvider"], feeds,
                              "CUDAExecutionProvider")
    assert out.shape == (1, 100, 150, 3)
    ops = {n["op"] for n in where["off_device"]}
    assert "GridSample" in ops and "Cast" in ops
    assert all(n["output_bytes"] >= HEAVY_BYTES for n in where["off_device"])
    assert "Gather" not in ops  # shape arithmetic stays under the threshold
    assert where["by_provider"] == {"CPUExecutionProvider": where["nodes"]}


def test_a_model_off_cuda_is_not_timed(monkeypatch) -> None:
    from benchmarks.gpu_smoke import check_model

    # the CPU provider standing in for a CUDA session that fell back to the CPU
    monkeypatch.setattr("processors.runtime.providers_for", lambda rt, trt=None: [
        "CPUExecutionProvider"])
    r = check_model("cuda", np.zeros((48, 64, 3), np.uint8), batch=1)
    assert r["ok"] is False and r["cuda_active"] is False
    assert r["fp32"] == {"active": "CPUExecutionProvider"}
    assert "not CUDAExecutionProvider" in r["error"]


def test_cuda_asked_without_cuda_exits_no_cuda(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_smoke, "check_model", lambda device, image, batch: {
        "ok": False, "cuda_active": False})
    assert main(["--device", "cuda", "--size", "320x240", "--out", str(tmp_path)]) == NO_CUDA
    rec = Journal(tmp_path / "gpu.jsonl").read()[-1]
    assert not rec["ok"] and "device=cuda requested" in rec["checks"]["codec"]["error"]
    assert "graphs" not in rec["checks"]  # no backend, nothing to place
