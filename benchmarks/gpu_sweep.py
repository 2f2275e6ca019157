"""Processor-level throughput on one machine, bytes in -> output bytes out, and GPU/CPU parity;
every figure appended to a journal the moment it is measured.

For each task (``card``, ``id_photo``) and precision (``fp32``, ``fp16``): phone-like JPEG
uploads made by the project's own code (:func:`benchmarks.parity.synthetic_uploads`, default
1600 x 1200, ~2 MP) are probed as the worker probes them, then ``process_batch`` runs on chunks
of each batch size with the model's bucket forced to it: decode, model input, model,
post-processing and output encoding, nothing of Kafka or MinIO. Then the processor's own
``BatchedModel.run`` alone on its model input at the best batch (``bare_model``: the GPU's
ceiling for this pipeline). Then, once per task at its best precision, ``K`` worker processes
(``--procs``; each its own session and CUDA context, as ``cardstream worker --slot k`` runs them)
at the best batch capped at ``--procs-max-batch``; images/s summed.

What survives what (:mod:`benchmarks.gpu_journal`): each record is one line of
``OUT/gpu.jsonl``, written as it is measured. A point that fails is a record with its error and
the next point runs; each task x precision runs in a process of its own (a CUDA error, a crash or
the out-of-memory killer ends that task alone: ``task_failed``) that releases its sessions and
GPU memory when it ends, before the processes step starts; in the processes step a child that
dies, or a start barrier that times out, loses that point alone. Fallbacks (the codec's work
handed to the host, a provider other than the one asked for) are in every record that could
hide them. The summary (:func:`summarize`) is printed as ONE JSON line at the end, and can be
rebuilt from a journal cut short: ``python -m benchmarks.gpu_sweep --summarize OUT/gpu.jsonl``.

    python -m benchmarks.gpu_sweep --device cuda --precisions fp32,fp16 --parity   # gpu.sh
    python -m benchmarks.gpu_sweep --device cpu --batches 1,2 --size 320x240 --unique 2 \\
        --seconds 0.5 --tasks card --parity --parity-n 2                          # here
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_journal import Journal, gather, run_isolated
from processors.base import Item
from processors.decode import DecodeSettings, probe_image
from processors.runtime import RuntimeSettings

TASKS = ("card", "id_photo")
PRECISIONS = ("fp32", "fp16")
JOURNAL = "gpu.jsonl"


def _size(text: str) -> tuple[int, int]:
    w, h = text.lower().split("x")
    return int(w), int(h)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _words(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tasks", type=_words, default=list(TASKS))
    ap.add_argument("--precisions", type=_words, default=["fp32"],
                    help="model precisions to sweep, in order (fp32, fp16)")
    ap.add_argument("--batches", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128],
                    help="batch sizes (buckets); keep <= 128 on CUDA (ORT 1.31 Concat, README)")
    ap.add_argument("--size", type=_size, default=(1600, 1200), help="upload WxH px")
    ap.add_argument("--unique", type=int, default=32, help="distinct uploads per task (cycled)")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per point")
    ap.add_argument("--tensorrt", action="store_true")
    ap.add_argument("--cuda-codec", choices=("auto", "nvimgcodec", "host"), default="auto")
    ap.add_argument("--procs", type=_ints, default=[1], help="worker processes per GPU to try")
    ap.add_argument("--procs-max-batch", type=int, default=32,
                    help="batch cap of the processes step (each process holds its own arenas)")
    ap.add_argument("--procs-mem-limit-mib", type=int, default=0,
                    help="CUDA arena cap per session in the processes step (0: none)")
    ap.add_argument("--barrier-timeout-s", type=float, default=120.0,
                    help="how long a process of the processes step waits for its siblings")
    ap.add_argument("--threads", type=int, default=0, help="postprocess_threads (0: all cores)")
    ap.add_argument("--parity", action="store_true", help="compare with the CPU path first")
    ap.add_argument("--parity-n", type=int, default=16, help="parity uploads per task")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="no step starts after this many seconds; steps running then are stopped")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", "benchmarks/results/gpu")))
    ap.add_argument("--summarize", type=Path, metavar="JOURNAL",
                    help="print the summary of an existing journal and stop")
    return ap


def runtime_for(a: argparse.Namespace, precision: str = "fp32", device: str | None = None
                ) -> RuntimeSettings:
    """The runtime settings of a run: the sweep's batches as buckets."""
    return RuntimeSettings(device=device or a.device, buckets=tuple(sorted(a.batches)),
                           max_bucket=max(a.batches), cpu_max_bucket=max(a.batches),
                           postprocess_threads=a.threads, precision=precision,
                           tensorrt=a.tensorrt, cuda_codec=a.cuda_codec)


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
    from benchmarks.parity import synthetic_uploads

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


def timed(proc: Any, items: list[Item], batch: int, seconds: float) -> tuple[float, int]:
    """images/s of ``process_batch`` on chunks of ``batch`` cycled from ``items``, and the
    images processed (the untimed call included)."""
    _model(proc).chosen_bucket = batch
    chunk = [items[k % len(items)] for k in range(batch)]
    calls = 0

    def step() -> None:
        nonlocal calls
        proc.process_batch(chunk)
        calls += 1

    return rate(step, batch, seconds), calls * batch


def graph_runs(proc: Any) -> dict[str, int]:
    """The pixel backend's graph runs so far, by graph (none for the CPU backend)."""
    return dict(getattr(proc.pixels, "graph_runs", {}))


def bare_model_ips(proc: Any, items: list[Item], batch: int, seconds: float) -> float:
    """images/s of the processor's ``BatchedModel.run`` alone on the model input of ``batch``
    uploads (prepared once, where the backend keeps it)."""
    m = _model(proc)
    m.chosen_bucket = batch
    decoded = proc.pixels.decode([items[k % len(items)].image for k in range(batch)], None)
    x = proc.pixels.model_input(decoded, 320)
    return rate(lambda: m.run(x), batch, seconds)


def gpu_memory_mib(pid: int | None = None) -> dict[str, int] | None:
    """GPU memory from ``nvidia-smi``: ``{"used", "total"}`` of GPU 0 and ``"process"`` (what
    ``pid``, default this process, holds; absent when it holds none) in MiB; None without
    ``nvidia-smi`` or a GPU."""
    def smi(*query: str) -> list[list[str]]:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]

    try:
        used, total = (int(float(x)) for x in smi("--query-gpu=memory.used,memory.total")[0])
        apps = smi("--query-compute-apps=pid,used_memory")
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    me = str(pid or os.getpid())
    mine = [int(float(m)) for p, m in apps if p == me and m.replace(".", "").isdigit()]
    return {"used": used, "total": total, **({"process": sum(mine)} if mine else {})}


def _providers(proc: Any) -> dict[str, str]:
    """The model's first active provider and the one asked for (they differ after a fallback,
    e.g. TensorRT -> CUDA)."""
    m = _model(proc)
    return {"provider": m.provider,
            "requested_provider": getattr(m, "requested_provider", m.provider)}


def _fallbacks(proc: Any) -> dict[str, Any]:
    """The processor's fallbacks: its pixel backend's counts (codec work done on the host;
    None for the CPU backend) and its model's provider fallback (``"A -> B"``, or None)."""
    p = _providers(proc)
    snap = proc.pixels.fallbacks.snapshot() if hasattr(proc.pixels, "fallbacks") else None
    moved = (None if p["provider"] == p["requested_provider"]
             else f"{p['requested_provider']} -> {p['provider']}")
    return {"pixels": snap, "provider": moved}


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:500]


def task_child(task: str, precision: str, a: argparse.Namespace, deadline: float) -> None:
    """One task at one precision, in its own process: a ``point`` record per batch size (its
    images/s and the pixel graphs' runs per image, or its error), then ``bare_model`` at the
    best batch, then ``task_end``; no point starts after ``deadline`` (unix s)."""
    journal = Journal(a.out / JOURNAL)
    key = {"task": task, "precision": precision}
    proc = build(task, runtime_for(a, precision))
    codec = getattr(getattr(proc.pixels, "codec", None), "version", None)
    journal.write("task_start", **key, pixels=proc.pixels.name, codec=codec, **_providers(proc),
                  fallbacks=_fallbacks(proc), gpu_memory_mib=gpu_memory_mib())
    items = items_for(task, a.unique, a.size)
    ips: dict[int, float] = {}
    for b in sorted(a.batches):
        if time.time() > deadline:
            journal.write("point", **key, batch=b, skipped="budget")
            continue
        before = graph_runs(proc)
        try:
            rate_b, images = timed(proc, items, b, a.seconds)
        except Exception as e:  # noqa: BLE001 - a point's failure is its record, not the run's
            journal.write("point", **key, batch=b, error=_error(e))
            continue
        ips[b] = round(rate_b, 2)
        runs = {g: round((n - before.get(g, 0)) / images, 3) for g, n in graph_runs(proc).items()
                if n > before.get(g, 0)}
        journal.write("point", **key, batch=b, images_per_s=ips[b], fallbacks=_fallbacks(proc),
                      graph_runs_per_image=runs)
    if ips and time.time() < deadline:
        best = max(ips, key=lambda b: ips[b])
        try:
            journal.write("bare_model", **key, batch=best,
                          images_per_s=round(bare_model_ips(proc, items, best, a.seconds), 2))
        except Exception as e:  # noqa: BLE001
            journal.write("bare_model", **key, batch=best, error=_error(e))
    journal.write("task_end", **key, fallbacks=_fallbacks(proc), gpu_memory_mib=gpu_memory_mib())


def procs_child(i: int, ready: Any, task: str, precision: str, batch: int,
                a: argparse.Namespace) -> dict[str, Any]:
    """One process of the processes step: its own processor at ``batch`` (arena capped at
    ``--procs-mem-limit-mib``), warmed, then ``ready()`` and ``2 x --seconds`` of batches."""
    rt = runtime_for(a, precision).model_copy(update={
        "buckets": (batch,), "max_bucket": batch, "cuda_mem_limit_mib": a.procs_mem_limit_mib})
    proc = build(task, rt)
    items = items_for(task, min(a.unique, batch), a.size, seed=29 + i)
    chunk = [items[k % len(items)] for k in range(batch)]
    proc.process_batch(chunk)  # warm: kernels, arenas
    ready()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds * 2:
        proc.process_batch(chunk)
        n += batch
    return {"images": n, "seconds": round(time.perf_counter() - t0, 3),
            "gpu_memory_mib": gpu_memory_mib(), "fallbacks": _fallbacks(proc)}


def procs_point(journal: Journal, task: str, precision: str, batch: int, k: int,
                a: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """``k`` processes at once (:func:`procs_child`); one ``procs`` record: summed images/s, or
    None with each child's error."""
    kids = gather(procs_child, k, (task, precision, batch, a), a.barrier_timeout_s, timeout_s)
    ok = all(c["ok"] for c in kids)
    total = (round(sum(c["result"]["images"] / c["result"]["seconds"] for c in kids), 2)
             if ok else None)
    return journal.write("procs", task=task, precision=precision, k=k, batch=batch,
                         images_per_s=total, children=kids)


def parity_child(task: str, a: argparse.Namespace) -> None:
    """The GPU path (or the graph backend on the CPU provider) against the CPU path, in its own
    process: one ``parity`` record."""
    from benchmarks.parity import card_parity, idphoto_parity

    journal = Journal(a.out / JOURNAL)
    ref = build(task, runtime_for(a, "fp32", "cpu"))
    test = build(task, runtime_for(a), graph_cpu=a.device == "cpu")
    n = a.parity_n if task == "card" else max(2, a.parity_n // 3)
    items = items_for(task, n, a.size, seed=101)
    for p in (ref, test):
        _model(p).chosen_bucket = min(_model(p).buckets[-1], 8)
    result = card_parity(items, ref, test) if task == "card" else idphoto_parity(items, ref, test)
    journal.write("parity", task=task, result=result, fallbacks=_fallbacks(test))


def machine() -> dict[str, Any]:
    """What ran: GPU (nvidia-smi), CPU cores, Python, ONNX Runtime and its providers."""
    import onnxruntime as ort

    gpu = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip() or None
    return {"gpu": gpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
            "load_avg": [round(x, 2) for x in os.getloadavg()]}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The journal's records folded into one summary: per task and precision ``images_per_s``
    by batch, ``best_batch``, ``best_images_per_s``, ``batching_gain`` (best over the smallest
    batch), ``bare_model_ips``, ``procs_images_per_s`` (by process count), the provider asked
    for and the one that ran, the last fallback counts, ``errors`` (point, step and child
    errors, with their batch or count) and ``failed`` (a task's process that died or was
    stopped); ``parity`` per task, ``smoke`` (each check's ok), ``machine`` and ``wall_s``."""
    out: dict[str, Any] = {"tasks": {}}

    def entry(r: dict[str, Any]) -> dict[str, Any]:
        return (out["tasks"].setdefault(r["task"], {})
                .setdefault(r.get("precision", "fp32"), {"images_per_s": {}, "errors": []}))

    for r in records:
        step = r.get("step")
        if step == "sweep_start":
            out["machine"] = r.get("machine")
        elif step == "sweep_end":
            out["wall_s"] = r.get("wall_s")
        elif step == "smoke_check":  # a smoke step stopped early leaves only these
            out.setdefault("smoke", {"ok": None, "checks": {}})["checks"][r["name"]] = r.get("ok")
        elif step == "smoke":
            out["smoke"] = {"ok": r.get("ok"),
                            "checks": {k: v.get("ok") for k, v in r.get("checks", {}).items()}}
        elif step == "parity":
            out.setdefault("parity", {})[r["task"]] = r.get("result", r.get("error"))
        elif step in ("task_start", "task_end"):
            e = entry(r)
            for k in ("pixels", "codec", "provider", "requested_provider", "fallbacks",
                      "gpu_memory_mib"):
                if k in r:
                    e[k] = r[k]
        elif step == "point":
            e = entry(r)
            if "images_per_s" in r:
                e["images_per_s"][str(r["batch"])] = r["images_per_s"]
                e["fallbacks"] = r.get("fallbacks", e.get("fallbacks"))
            elif "error" in r:
                e["errors"].append({"batch": r["batch"], "error": r["error"]})
        elif step == "bare_model":
            e = entry(r)
            if "images_per_s" in r:
                e["bare_model_ips"] = r["images_per_s"]
            else:
                e["errors"].append({"bare_model": r["batch"], "error": r.get("error")})
        elif step == "procs":
            e = entry(r)
            e.setdefault("procs_images_per_s", {})[str(r["k"])] = r.get("images_per_s")
            e["procs_batch"] = r.get("batch")
            e["errors"] += [{"procs": r["k"], "child": c["child"], "error": c["error"]}
                            for c in r.get("children", []) if not c.get("ok")]
        elif step in ("task_failed", "step_failed"):
            if "task" in r:
                entry(r)["failed"] = {k: r.get(k) for k in ("what", "exitcode", "timed_out")}
            else:
                out.setdefault("failed_steps", []).append(r)
    for per_task in out["tasks"].values():
        for e in per_task.values():
            ips = {int(b): v for b, v in e["images_per_s"].items()}
            if ips:
                best = max(ips, key=lambda b: ips[b])
                e["best_batch"], e["best_images_per_s"] = best, ips[best]
                e["batching_gain"] = round(ips[best] / ips[min(ips)], 2)
    return out


def _best(records: list[dict[str, Any]], task: str) -> tuple[str, int] | None:
    """The precision and batch of ``task``'s best point so far, or None."""
    pts = [r for r in records if r.get("step") == "point" and r.get("task") == task
           and "images_per_s" in r]
    if not pts:
        return None
    r = max(pts, key=lambda r: r["images_per_s"])
    return r["precision"], int(r["batch"])


def main(argv: list[str] | None = None, task_target: Any = task_child) -> dict[str, Any]:
    """Run the sweep (or, with ``--summarize``, only fold a journal); returns the summary,
    also printed as one JSON line. ``task_target`` runs one task x precision in its process
    (:func:`task_child`)."""
    a = parser().parse_args(argv)
    if a.summarize:
        summary = summarize(Journal(a.summarize).read())
        print(json.dumps(summary), flush=True)
        return summary
    t0 = time.time()
    deadline = t0 + a.budget_s
    bad = [t for t in a.tasks if t not in TASKS] + [p for p in a.precisions if p not in PRECISIONS]
    if bad:
        raise SystemExit(f"gpu_sweep: unknown task(s) or precision(s) {bad}; choose from "
                         f"{TASKS} and {PRECISIONS}")
    if a.device == "cuda":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise SystemExit("gpu_sweep: no CUDA device: ONNX Runtime offers "
                             f"{ort.get_available_providers()}")
    journal = Journal(a.out / JOURNAL)
    journal.write("sweep_start", machine=machine(),
                  args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()})

    def isolated(what: str, target: Any, args: tuple, **key: Any) -> None:
        left = deadline - time.time()
        if left < 5:
            journal.write("step_failed", what=what, **key, skipped="budget")
            return
        r = run_isolated(target, args, left + 30)  # +30: a point started in time may finish
        if r["exitcode"] != 0:
            journal.write("task_failed" if "task" in key else "step_failed", what=what, **key, **r)

    if a.parity:
        for t in a.tasks:
            isolated("parity", parity_child, (t, a), parity_task=t)
    for t in a.tasks:
        for p in a.precisions:
            isolated("sweep", task_target, (t, p, a, deadline), task=t, precision=p)
        best = _best(journal.read(), t)
        for k in (k for k in a.procs if k > 1):
            left = deadline - time.time()
            if best is None or left < 20:
                journal.write("procs", task=t, k=k, images_per_s=None,
                              children=[], skipped="no best point" if best is None else "budget")
                continue
            precision, batch = best
            procs_point(journal, t, precision, min(batch, a.procs_max_batch), k, a, left + 30)
    journal.write("sweep_end", wall_s=round(time.time() - t0, 1),
                  load_avg_end=[round(x, 2) for x in os.getloadavg()])
    summary = summarize(journal.read())
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
