"""The first 30 seconds of a GPU run: does every part work, and where does each run?

Each check is independent (one failing does not stop the others) and reports its own ``ok``,
figures and seconds in a ``smoke_check`` record of the journal (:mod:`benchmarks.gpu_journal`,
``OUT/gpu.jsonl``) as soon as it ends, so a smoke step stopped at its limit keeps the checks it
finished; at the end all of them are one ``smoke`` record and one JSON line on stdout. In
order, the decisive one first:

- ``versions``: ONNX Runtime and its providers, NumPy, the GPU and driver (``nvidia-smi``).
- ``model``: u2netp in fp32 and fp16 on the device: whether the CUDA provider is the
  session's first (if not, nothing is timed, and the exit status is 5: nothing measured after
  it would be the GPU), the node placement (as for the graphs, below), the time of a batch
  (``--model-batch``, 4) after warming, the fp16 mask against the fp32 one (levels of 255).
- ``codec``: the pixel backend as the worker builds it (``CudaPixels``, its codec per
  ``--cuda-codec``): the codec's name and version, one 1600 x 1200 upload decoded and encoded;
  the decode against libjpeg-turbo (BGR and BT.601 luma mean and largest difference in levels:
  nvJPEG upsamples chroma otherwise, so luma is the tight figure), the encoded JPEG's size and
  its difference from what was encoded; the backend's fallback counts (not ok when the codec
  handed anything to the host).
- ``graphs``: every pixel graph the backend runs (model input, grey working copy, area resize,
  grey samples, warp, orientation, copy), each on the device's providers (TF32 off, as the
  backend builds them) and on the CPU provider with the same inputs: the largest and mean
  difference, and the node placement from ONNX Runtime's profile: nodes per provider and every
  node off the device whose output is at least :data:`HEAVY_BYTES` (a kernel the device lacks,
  so its pixels cross to the host and back). Small shape computations on the CPU are expected.
- ``memory``: ``nvidia-smi``'s memory, the GPU's and this process's, after the checks.

    python -m benchmarks.gpu_smoke --device cuda --out "$OUT"      # benchmarks/gpu.sh
    python -m benchmarks.gpu_smoke --device cpu --out /tmp/smoke   # the same code on the CPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu_journal import Journal

HEAVY_BYTES = 16 * 1024
"""A node placed off the device whose output is at least this large is reported as a fallback
(pixels crossing to the host); below it, shape arithmetic ONNX Runtime keeps on the CPU."""

NO_CUDA = 5
"""Exit status when the model's session does not run on the CUDA provider (``--device cuda``)."""


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_smoke", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--cuda-codec", choices=("auto", "nvimgcodec", "host"), default="auto")
    ap.add_argument("--size", default="1600x1200", help="the test upload's WxH px")
    ap.add_argument("--model-batch", type=int, default=4, help="images per model call")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", "benchmarks/results/gpu")))
    return ap


def placement(model_bytes: bytes, providers: list, feeds: dict[str, np.ndarray],
              device_provider: str) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Run a graph once with ONNX Runtime's profiler on and read where each node ran.

    Returns:
        ``(outputs, report)``: the graph's outputs (host arrays) and ``{"nodes": n,
        "by_provider": {provider: nodes}, "off_device": [{"node", "op", "provider",
        "output_bytes"}, ...]}``, the nodes not on ``device_provider`` whose output is at least
        :data:`HEAVY_BYTES`.
    """
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(model_bytes, so, providers=providers)
        outputs = sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    nodes = [e for e in events
             if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    by: Counter[str] = Counter(e["args"].get("provider", "?") for e in nodes)
    off = [{"node": e["name"][: -len("_kernel_time")], "op": e["args"].get("op_name"),
            "provider": e["args"].get("provider"),
            "output_bytes": int(e["args"].get("output_size", 0))}
           for e in nodes if e["args"].get("provider") != device_provider
           and int(e["args"].get("output_size", 0)) >= HEAVY_BYTES]
    return outputs, {"nodes": len(nodes), "by_provider": dict(by), "off_device": off}


def _upload(size: tuple[int, int]) -> bytes:
    from benchmarks.parity import synthetic_uploads

    return synthetic_uploads("card", 1, size, seed=7)[0]


def graph_cases(image: np.ndarray) -> list[tuple[str, Any, dict[str, np.ndarray], float]]:
    """``(name, graph, feeds, tolerance)`` for each pixel graph the backend runs, on ``image``
    (``(H, W, 3) uint8`` BGR) as the card path feeds it; the tolerance is the largest difference
    allowed between providers (levels of 255; model input in levels too)."""
    from processors.card.rectify import homography
    from processors.gpu.graphs import (
        copy_graph,
        orient_graph,
        resample_graph,
        sample_graph,
        shrink_graph,
        warp_graph,
    )
    from processors.gpu.resample import resize_weights, shrink_plan
    from processors.pixels import GREY_BGR, IMAGENET_MEAN, IMAGENET_STD, working_size

    h, w = image.shape[:2]
    x = np.ascontiguousarray(image[None])

    def shrink_feeds(dst_wh: tuple[int, int]) -> tuple[int, bool, dict[str, np.ndarray]]:
        crops, final = shrink_plan((w, h), dst_wh)
        feeds = {"image": x}
        if len(crops):
            feeds["crops"] = crops
        if final is not None:
            feeds["ry"], feeds["rxt"] = final
        return len(crops), final is not None, feeds

    k, fin, f_in = shrink_feeds((320, 320))
    kg, fing, f_grey = shrink_feeds(working_size(w, h, 1024))
    ry, rxt = resize_weights("area", (h, w), (round(h / 3), round(w / 3)), 3.0)
    quad = np.array([[0.1 * w, 0.15 * h], [0.9 * w, 0.1 * h], [0.85 * w, 0.9 * h],
                     [0.12 * w, 0.85 * h]])
    pts = np.random.default_rng(3).uniform(-2, max(w, h), (4000, 2)).astype(np.float32)
    return [
        ("model_input", shrink_graph(k, fin, mean=IMAGENET_MEAN.tolist(),
                                     std=IMAGENET_STD.tolist(), swap_rb=True), f_in, 1.0),
        ("working_grey", shrink_graph(kg, fing, grey=GREY_BGR.tolist()), f_grey, 1.0),
        ("area_resize", resample_graph(3), {"image": x, "ry": ry, "rxt": rxt}, 1.0),
        ("grey_samples", sample_graph(GREY_BGR.tolist()), {"image": x, "points": pts}, 0.05),
        ("warp", warp_graph(3, "bilinear", "border"),
         {"image": x, "homography": homography(quad, (1011, 637)).astype(np.float32)[None],
          "out_hw": np.array([637, 1011], np.int64)}, 1.0),
        ("orient", orient_graph(6), {"image": x}, 0.0),
        ("copy", copy_graph(), {"x": x}, 0.0),
    ]


def _levels(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The difference of two outputs in levels of 255 (the model input is normalised)."""
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if name == "model_input":
        from processors.pixels import IMAGENET_STD

        d = d * IMAGENET_STD.astype(np.float64)[None, :, None, None] * 255
    return d


def check_graphs(backend: Any, image: np.ndarray) -> dict[str, Any]:
    """Every pixel graph on the backend's providers against the CPU provider."""
    device_provider = backend.providers[0][0] if isinstance(backend.providers[0], tuple) \
        else backend.providers[0]
    out: dict[str, Any] = {"ok": True, "graphs": {}}
    for name, model, feeds, tol in graph_cases(image):
        data = model.SerializeToString()
        got, where = placement(data, backend.providers, feeds, device_provider)
        ref, _ = placement(data, ["CPUExecutionProvider"], feeds, "CPUExecutionProvider")
        d = _levels(name, got[0], ref[0])
        ok = d.max() <= tol and not where["off_device"]
        out["graphs"][name] = {"ok": bool(ok), "max_levels": round(float(d.max()), 4),
                               "mean_levels": round(float(d.mean()), 5), **where}
        out["ok"] &= bool(ok)
    return out


def check_codec(backend: Any, upload: bytes) -> dict[str, Any]:
    """One upload decoded and encoded by the backend's codec, against libjpeg-turbo."""
    import cv2
    import simplejpeg

    from processors.decode import DecodeSettings, probe_image
    from processors.pixels import CpuPixels, Decoded

    up = probe_image(upload, DecodeSettings())
    (d,) = backend.decode([up], None)
    (ref,) = CpuPixels(DecodeSettings(), 1).decode([up], None)
    if not isinstance(d, Decoded):
        return {"ok": False, "codec": backend.codec.version, "error": f"decode: {d}",
                "fallbacks": backend.fallbacks.snapshot()}
    host = backend.to_host([d.pixels])[0]
    bgr = np.abs(host.astype(np.int16) - ref.pixels)
    luma = np.abs(cv2.cvtColor(host, cv2.COLOR_BGR2GRAY).astype(np.int16)
                  - cv2.cvtColor(ref.pixels, cv2.COLOR_BGR2GRAY))
    (data,) = backend.encode_jpeg([d.pixels], 90)
    back = simplejpeg.decode_jpeg(data, colorspace="BGR")
    fb = backend.fallbacks.snapshot()
    out = {"codec": backend.codec.version, "decoded_wh": [d.width, d.height],
           "decode_bgr_mean_levels": round(float(bgr.mean()), 4),
           "decode_bgr_max_levels": int(bgr.max()),
           "decode_luma_mean_levels": round(float(luma.mean()), 4),
           "encoded_bytes": len(data),
           "encode_roundtrip_mean_levels":
               round(float(np.abs(back.astype(np.int16) - host).mean()), 4),
           "fallbacks": fb}
    out["ok"] = (not any(fb["counts"].values()) and out["decode_luma_mean_levels"] < 1.0
                 and back.shape == host.shape)
    return out


def check_model(device: str, image: np.ndarray, batch: int = 4) -> dict[str, Any]:
    """u2netp in fp32 and fp16 on ``device`` on ``batch`` copies of ``image``'s model input:
    placement, the time of a call (after two), the fp16 mask against the fp32 one (min-max
    normalised, as the processors read it; levels of 255)."""
    import onnxruntime as ort

    from processors.models import manifest, model_path
    from processors.pixels import normalise_rgb, shrink
    from processors.runtime import RuntimeSettings, providers_for, symbolic_batch, to_fp16

    data = symbolic_batch(model_path("u2netp").read_bytes())
    x = np.stack([normalise_rgb(shrink(image, (320, 320)))] * batch)
    out: dict[str, Any] = {"sha256_pinned": manifest()["u2netp"]["sha256"][:12]}
    masks = {}
    want = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
    for precision in ("fp32", "fp16"):
        rt = RuntimeSettings(device=device, precision=precision)
        graph = to_fp16(data) if precision == "fp16" else data
        t0 = time.perf_counter()
        sess = ort.InferenceSession(graph, providers=providers_for(rt))
        if sess.get_providers()[0] != want:  # nothing to time: it would be the CPU
            return {"ok": False, "cuda_active": False, precision: {
                "active": sess.get_providers()[0]}, "error": f"the session runs on "
                    f"{sess.get_providers()}, not {want}"}
        (mask, *_), where = placement(graph, providers_for(rt), {"input.1": x}, want)
        sess.run(None, {"input.1": x})
        t1 = time.perf_counter()
        sess.run(None, {"input.1": x})
        out[precision] = {"active": sess.get_providers()[0], "batch": batch, "call_ms":
                          round((time.perf_counter() - t1) * 1000, 2),
                          "load_and_first_runs_s": round(t1 - t0, 2), **where}
        m = mask[:, 0].astype(np.float64)
        masks[precision] = (m - m.min()) / max(float(m.max() - m.min()), 1e-6)
    out["fp16_mask_mean_levels"] = round(
        float(np.abs(masks["fp16"] - masks["fp32"]).mean()) * 255, 4)
    out["cuda_active"] = out["fp32"]["active"] == "CUDAExecutionProvider"
    out["ok"] = (out["fp32"]["active"] == want and not out["fp32"]["off_device"]
                 and out["fp16_mask_mean_levels"] < 1.0)
    return out


def _versions() -> dict[str, Any]:

    from benchmarks.gpu_sweep import machine

    return {"ok": True, "numpy": np.__version__, **machine()}


def run_check(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()`` with its seconds; an exception is the check's ``error`` (not ok)."""
    t0 = time.perf_counter()
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - a check's failure is its report
        r = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


def main(argv: list[str] | None = None) -> int:
    """Run the checks; append the ``smoke`` record, print it; exit status 0 (all ok), 1 (a
    check not ok) or :data:`NO_CUDA`."""
    a = parser().parse_args(argv)
    import cv2

    from benchmarks.gpu_sweep import gpu_memory_mib
    from processors.decode import DecodeSettings
    from processors.runtime import RuntimeSettings

    w, h = (int(v) for v in a.size.lower().split("x"))
    upload = _upload((w, h))
    rt = RuntimeSettings(device=a.device, cuda_codec=a.cuda_codec, postprocess_threads=1)
    journal = Journal(a.out / "gpu.jsonl")
    checks: dict[str, Any] = {}
    backend: Any = None

    def check(name: str, fn: Callable[[], dict[str, Any]]) -> None:  # journalled at once
        checks[name] = run_check(fn)
        journal.write("smoke_check", name=name, **checks[name])

    image = cv2.imdecode(np.frombuffer(upload, np.uint8), cv2.IMREAD_COLOR)
    check("versions", _versions)
    check("model", lambda: check_model(a.device, image, a.model_batch))

    def make_backend() -> dict[str, Any]:
        nonlocal backend
        from processors.gpu.backend import CudaPixels, GraphPixels

        if a.device == "cuda":
            backend = CudaPixels(rt, DecodeSettings())
        else:
            backend = GraphPixels(rt, DecodeSettings(), device="cpu")
            backend.start_codec(a.cuda_codec)
        return check_codec(backend, upload)

    check("codec", make_backend)
    if backend is not None:
        check("graphs", lambda: check_graphs(backend, image))
    check("memory", lambda: {"ok": True, "gpu_memory_mib": gpu_memory_mib()})
    ok = all(c.get("ok") for c in checks.values())
    rec = journal.write("smoke", device=a.device, ok=ok, checks=checks)
    print(json.dumps(rec), flush=True)
    if a.device == "cuda" and not checks["model"].get("cuda_active"):
        print("gpu_smoke: the model does not run on CUDAExecutionProvider", file=sys.stderr)
        return NO_CUDA
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
