"""Processor-level throughput on one machine, bytes in -> output bytes out, and GPU/CPU parity.

For each task (``card``, ``id_photo``): phone-like JPEG uploads made by the project's own code
(:func:`benchmarks.parity.synthetic_uploads`, default 1600 x 1200, ~2 MP) are probed as the
worker probes them, then ``process_batch`` runs on chunks of each batch size with the model's
bucket forced to it: decode, model input, model, post-processing and output encoding, nothing of
Kafka or MinIO. images/s per batch; ``batching_gain`` = best / batch 1. ``bare_model_ips``: the
processor's own ``BatchedModel.run`` alone on its model input at the best batch (the GPU's
ceiling for this pipeline). With ``--procs``, K worker processes (each its own session and CUDA
context, as ``cardstream worker --slot k`` runs them) process at the best batch at once;
images/s summed. With ``--parity``, the GPU path is first compared with the CPU path on the same
uploads (:mod:`benchmarks.parity`; on ``--device cpu``: the graph backend on ONNX Runtime's
CPU provider, the same code the GPU runs).

Prints ONE JSON line (also written to ``OUT/gpu_sweep.json``)::

    python -m benchmarks.gpu_sweep --device cuda --parity                  # benchmarks/gpu.sh
    python -m benchmarks.gpu_sweep --device cpu --batches 1,2 --size 320x240 --unique 2 \\
        --seconds 0.5 --tasks card --parity --parity-n 2                   # a smoke run here
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from benchmarks.parity import card_parity, idphoto_parity, synthetic_uploads
from processors.base import Item
from processors.decode import DecodeSettings, probe_image
from processors.runtime import RuntimeSettings

TASKS = ("card", "id_photo")


def _size(text: str) -> tuple[int, int]:
    w, h = text.lower().split("x")
    return int(w), int(h)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--batches", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128],
                    help="batch sizes (buckets); keep <= 128 on CUDA (ORT 1.31 Concat, README)")
    ap.add_argument("--size", type=_size, default=(1600, 1200), help="upload WxH px")
    ap.add_argument("--unique", type=int, default=32, help="distinct uploads per task (cycled)")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per point")
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    ap.add_argument("--tensorrt", action="store_true")
    ap.add_argument("--procs", type=_ints, default=[1], help="worker processes per GPU to try")
    ap.add_argument("--threads", type=int, default=0, help="postprocess_threads (0: all cores)")
    ap.add_argument("--parity", action="store_true", help="compare with the CPU path first")
    ap.add_argument("--parity-n", type=int, default=16, help="parity uploads per task")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="stop adding sweep points once this much time has passed")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", "benchmarks/results/gpu")))
    return ap


def runtime_for(a: argparse.Namespace, device: str | None = None) -> RuntimeSettings:
    """The runtime settings of a run: the sweep's batches as buckets."""
    return RuntimeSettings(device=device or a.device, buckets=tuple(sorted(a.batches)),
                           max_bucket=max(a.batches), cpu_max_bucket=max(a.batches),
                           postprocess_threads=a.threads, precision=a.precision,
                           tensorrt=a.tensorrt)


def build(task: str, runtime: RuntimeSettings, graph_cpu: bool = False) -> Any:
    """A processor for ``task``; with ``graph_cpu`` its pixels on the graph backend on the CPU
    provider (what the GPU runs, on host memory)."""
    from processors.card.processor import CardProcessor
    from processors.card.settings import CardSettings
    from processors.idphoto.processor import IdPhotoProcessor
    from processors.idphoto.settings import IdPhotoSettings

    proc = (CardProcessor(CardSettings(), runtime) if task == "card"
            else IdPhotoProcessor(IdPhotoSettings(), runtime))
    if graph_cpu:
        from processors.gpu.backend import GraphPixels

        proc.pixels = GraphPixels(runtime, DecodeSettings(), device="cpu")
    return proc


def items_for(task: str, n: int, size: tuple[int, int], seed: int = 29) -> list[Item]:
    """``n`` probed uploads of ``task``."""
    ds = DecodeSettings()
    return [Item(f"{task[0]}{k}", probe_image(u, ds), {})
            for k, u in enumerate(synthetic_uploads(task, n, size, seed))]


def _model(proc: Any) -> Any:
    return proc.batched_model if hasattr(proc, "batched_model") else proc.matting.model


def rate(step: Any, batch: int, seconds: float) -> float:
    """images/s of ``step()`` (one batch of ``batch`` images): one untimed call, then calls until
    ``seconds`` have passed (at least two)."""
    step()
    n, t0 = 0, time.perf_counter()
    while n < 2 * batch or time.perf_counter() - t0 < seconds:
        step()
        n += batch
    return n / (time.perf_counter() - t0)


def timed(proc: Any, items: list[Item], batch: int, seconds: float) -> float:
    """images/s of ``process_batch`` on chunks of ``batch`` cycled from ``items``."""
    _model(proc).chosen_bucket = batch
    chunk = [items[k % len(items)] for k in range(batch)]
    return rate(lambda: proc.process_batch(chunk), batch, seconds)


def bare_model_ips(proc: Any, items: list[Item], batch: int, seconds: float) -> float:
    """images/s of the processor's ``BatchedModel.run`` alone on the model input of ``batch``
    uploads (prepared once, where the backend keeps it)."""
    m = _model(proc)
    m.chosen_bucket = batch
    decoded = proc.pixels.decode([items[k % len(items)].image for k in range(batch)], None)
    x = proc.pixels.model_input(decoded, 320)
    return rate(lambda: m.run(x), batch, seconds)


def _worker(task: str, a: argparse.Namespace, batch: int, barrier: Any, queue: Any) -> None:
    """One of ``--procs`` processes: its own processor at ``batch``, started with the others."""
    rt = runtime_for(a).model_copy(update={"buckets": (batch,), "max_bucket": batch})
    proc = build(task, rt)
    items = items_for(task, min(a.unique, batch), a.size)
    chunk = [items[k % len(items)] for k in range(batch)]
    proc.process_batch(chunk)  # warm: kernels, arenas
    barrier.wait(timeout=180)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds * 2:
        proc.process_batch(chunk)
        n += batch
    queue.put((n, time.perf_counter() - t0))


def multi_process_ips(task: str, a: argparse.Namespace, batch: int, k: int) -> float | None:
    """Summed images/s of ``k`` processes at ``batch`` (spawned: each has its own CUDA context);
    None when one of them failed or did not report within 4 minutes (they are then stopped)."""
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(task, a, batch, barrier, queue)) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=240) for _ in procs]
    except queue_mod.Empty:
        results = None
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.terminate()
    return None if results is None else sum(n / s for n, s in results)


def sweep_task(task: str, a: argparse.Namespace, t_start: float) -> dict[str, Any]:
    """Every batch size of one task (stops adding points past ``--budget-s``)."""
    proc = build(task, runtime_for(a))
    items = items_for(task, a.unique, a.size)
    ips: dict[int, float] = {}
    for b in sorted(a.batches):
        if time.perf_counter() - t_start > a.budget_s:
            break
        ips[b] = round(timed(proc, items, b, a.seconds), 2)
    best = max(ips, key=lambda b: ips[b])
    out: dict[str, Any] = {
        "images_per_s": ips, "best_batch": best, "best_images_per_s": ips[best],
        "batching_gain": round(ips[best] / ips[min(ips)], 2),
        "bare_model_ips": round(bare_model_ips(proc, items, best, a.seconds), 2),
        "provider": _model(proc).provider, "pixels": proc.pixels.name,
    }
    multi = {}
    for k in a.procs:
        if k > 1 and time.perf_counter() - t_start < a.budget_s:
            ips_k = multi_process_ips(task, a, best, k)
            multi[k] = None if ips_k is None else round(ips_k, 2)
    if multi:
        out["procs_images_per_s"] = {1: ips[best], **multi}
    return out


def parity(task: str, a: argparse.Namespace) -> dict[str, Any]:
    """The GPU path (or the graph backend on the CPU provider) against the CPU path."""
    ref = build(task, runtime_for(a, "cpu"))
    test = build(task, runtime_for(a), graph_cpu=a.device == "cpu")
    n = a.parity_n if task == "card" else max(2, a.parity_n // 3)
    items = items_for(task, n, a.size, seed=101)
    for p in (ref, test):
        _model(p).chosen_bucket = min(_model(p).buckets[-1], 8)
    return card_parity(items, ref, test) if task == "card" else idphoto_parity(items, ref, test)


def machine() -> dict[str, Any]:
    """What ran: GPU (nvidia-smi), CPU cores, Python, ONNX Runtime and its providers."""
    gpu = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip() or None
    return {"gpu": gpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
            "load_avg": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = parser().parse_args(argv)
    t0 = time.perf_counter()
    tasks = [t for t in a.tasks.split(",") if t]
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise SystemExit(f"gpu_sweep: unknown task(s) {bad}; choose from {TASKS}")
    if a.device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit("gpu_sweep: no CUDA device: ONNX Runtime offers "
                         f"{ort.get_available_providers()}")
    result: dict[str, Any] = {"device": a.device, "precision": a.precision,
                              "tensorrt": a.tensorrt, "size": list(a.size),
                              "machine": machine()}
    if a.parity:
        result["parity"] = {t: parity(t, a) for t in tasks}
        result["parity_ok"] = all(r["ok"] for r in result["parity"].values())
    for t in tasks:
        result[t] = sweep_task(t, a, t0)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    a.out.mkdir(parents=True, exist_ok=True)
    line = json.dumps(result, default=lambda o: o.item() if isinstance(o, np.generic) else str(o))
    (a.out / "gpu_sweep.json").write_text(line + "\n")
    print(line, flush=True)
    return result


if __name__ == "__main__":
    main()
