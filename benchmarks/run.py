"""``make bench``: every benchmark in one run, ratios printed, JSON + PNG under benchmarks/results/.

Sections (``--sections``, default all):

``model``    model-only ceiling: images/s of each processor at every batch size, no Kafka/MinIO;
``compare``  end to end through the real stack, batching worker vs naive consumer, interleaved
             with model-only passes at the worker's bucket: ``e2e / model-only`` and
             ``batching / naive`` per task;
``phone``    per task at 2 MP and 12 MP phone-like uploads and per precision (``--precisions``:
             fp32 and int8 on a CPU): CPU ms per image outside the model (model calls
             replayed), the bare model's images/s on the same inputs, end to end (median of
             interleaved rounds) / bare model of the same precision and / the fp32 bare model,
             and the share of a pass its fixed start takes (``benchmarks/phone.py``; end to end
             only with the stack's env);
``load``     the seeds' load table on the sleep processor (10..300 concurrent producers) and P99
             at 50% of measured capacity;
``scaling``  1, 2, 4 sleep-processor workers on 6 partitions;
``probe``    delivery latency of a consumer that pauses its partitions during each batch (as the
             worker does) against one that does not (explains the load table);
``gateway``  the load table through HTTP: 10..300 concurrent clients posting 2 MP card photos to
             two ``cardstream gateway`` instances and waiting for the verdict, next to the Kafka
             path in the same run, with the sleep processor and the real card model
             (``benchmarks/gateway.py``);
``rush``     a backlog with 30 % of uploads past their deadline and 20 % repeats, four runs
             (baseline / deadlines / cache / both): model images and calls against the baseline
             (``benchmarks/rush.py``);
``backfill`` live P99 alone and beside a replay that yields and one that does not, one run
             (``benchmarks/backfill.py``);
``tracing``  throughput with tracing off and on (OTLP/HTTP to a local collector stand-in),
             passes off, on, on, off (``benchmarks/tracing_cost.py``).

Usage (the stack's env must be set, as ``make bench`` does)::

    eval "$(scripts/stack env)" && .venv/bin/python -m benchmarks.run [--quick]
    .venv/bin/python -m benchmarks.run --sections model --device cuda --batches 1,8,32,64

Files: ``model_only.json``, ``e2e.json``, ``phone.json``, ``load.json``, ``scaling.json``,
``summary.json``, ``probe.json``, ``gateway.json``, ``rush.json``, ``backfill.json``,
``tracing.json``, ``throughput_vs_batch.png``,
``latency_vs_load.png``, ``scaling.png``, ``gateway.png`` and worker logs in ``logs/``. Exit status
0 when the run completed (goals not met are reported, not fatal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info, run_main, small_jpegs
from processors import registry
from processors.base import Processor
from processors.models import file_precision, manifest, pinned_model
from streams.logs import configure_logging
from streams.samples import write_samples
from streams.settings import Settings, load_settings
from streams.worker import build_processors

SECTIONS = ("model", "compare", "phone", "load", "scaling", "probe", "gateway", "rush", "backfill",
            "tracing")
PRECISIONS = ("auto", "fp32", "fp16", "int8")
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see ``--help``)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="batches 1,2,4,8, one round, shorter load levels and backlog")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"subset of {','.join(SECTIONS)}")
    ap.add_argument("--tasks", default=",".join(registry.names()),
                    help="tasks for model and compare")
    ap.add_argument("--batches", default=None,
                    help="batch sizes of the sweep (default 1,2,4,8,16,32 on a GPU; 1,2,4,8,16 on "
                         "a CPU, where u2netp needs ~260 MiB of activations per image)")
    ap.add_argument("--n", type=int, default=8, help="images per sweep point")
    ap.add_argument("--phone-images", type=int, default=None,
                    help="uploads per task, size and pass in the phone section (default 64, "
                         "so that the pass's fixed start is a small share of it; --quick 6)")
    ap.add_argument("--e2e-images", type=int, default=None,
                    help="images per model-only / batching / naive pass of compare (default 64; "
                         "--quick 8)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="interleaved rounds of compare and of phone's end-to-end passes "
                         "(default 3)")
    ap.add_argument("--device", default=None, choices=("cpu", "cuda", "auto"),
                    help="ONNX Runtime device (default: settings, CARDSTREAM_RUNTIME__DEVICE)")
    ap.add_argument("--precision", default=None, choices=PRECISIONS,
                    help="precision of model and compare (default: settings, "
                         "CARDSTREAM_RUNTIME__PRECISION)")
    ap.add_argument("--precisions", default=None,
                    help="precisions of the phone section (default fp32,int8 on a CPU; fp32 on "
                         "a GPU)")
    ap.add_argument("--load-seconds", type=float, default=None,
                    help="measuring window per load level")
    ap.add_argument("--sleep-ms", type=float, default=20.0, help="sleep processor per call (load)")
    ap.add_argument("--half-rate", type=float, default=None,
                    help="load: skip the table and only run the open loop at this rate (events/s), "
                         "e.g. half of an earlier run's capacity; writes load_half.json")
    ap.add_argument("--scaling-sleep-ms", type=float, default=200.0,
                    help="sleep processor per call (scaling)")
    ap.add_argument("--scaling-events", type=int, default=None, help="backlog per scaling step")
    ap.add_argument("--out", type=Path, default=RESULTS, help="output folder")
    a = ap.parse_args(argv)
    a.sections = [x for x in a.sections.split(",") if x]
    bad = set(a.sections) - set(SECTIONS)
    if bad:
        ap.error(f"unknown sections {sorted(bad)}")
    a.tasks = [t for t in a.tasks.split(",") if t]
    a.batches = ([int(b) for b in a.batches.split(",")] if a.batches
                 else [1, 2, 4, 8] if a.quick else [1, 2, 4, 8, 16, 32] if _gpu(a.device)
                 else [1, 2, 4, 8, 16])
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.e2e_images = a.e2e_images or (8 if a.quick else 64)
    a.phone_images = a.phone_images or (6 if a.quick else 64)
    a.precisions = ([x for x in a.precisions.split(",") if x] if a.precisions
                    else ["fp32"] if _gpu(a.device) else ["fp32", "int8"])
    bad = set(a.precisions) - set(PRECISIONS)
    if bad:
        ap.error(f"unknown precisions {sorted(bad)}; known: {', '.join(PRECISIONS)}")
    a.load_seconds = a.load_seconds or (4.0 if a.quick else 6.0)
    a.scaling_events = a.scaling_events or (120 if a.quick else 240)
    return a


def _gpu(device: str | None) -> bool:
    """Whether sessions will run on CUDA (``device`` None reads ``CARDSTREAM_RUNTIME__DEVICE``)."""
    import onnxruntime as ort

    device = device or os.environ.get("CARDSTREAM_RUNTIME__DEVICE", "auto")
    return device != "cpu" and "CUDAExecutionProvider" in ort.get_available_providers()


def build(base: Settings, task: str, batches: list[int], device: str | None,
          threads: int | None = None, precision: str | None = None) -> Processor:
    """The real processor of ``task``, with the sweep's batch sizes as its buckets, warmed up
    (``threads``: its post-processing threads, None: the settings'; ``precision``: None, the
    settings')."""
    rt = base.runtime.model_copy(update={"buckets": tuple(sorted(set(batches))), "max_bucket": None,
                                         **({"device": device} if device else {}),
                                         **({"postprocess_threads": threads} if threads else {}),
                                         **({"precision": precision} if precision else {})})
    if rt.device != "cpu":
        import onnxruntime as ort

        if hasattr(ort, "preload_dlls"):  # CUDA/cuDNN from the nvidia-* wheels, if installed
            ort.preload_dlls()
    p = build_processors(base, [task], runtime=rt)[task]
    p.warm_up()
    return p


def model_precision(proc: Processor) -> str:
    """The precision ``proc``'s model runs at (``fp32``, ``fp16``, ``int8``): its file's and
    session's (:func:`processors.models.file_precision`)."""
    from benchmarks.model_only import batched_model

    bm = batched_model(proc)
    return file_precision(bm.path, bm.settings)


def _resolved(precision: str, proc: Processor) -> str:
    """The precision ``proc``'s model would run at were it built with ``precision`` (``auto``
    -> ``int8`` on a CPU where the model's int8 build passed the gate, else ``fp32``...)."""
    from benchmarks.model_only import batched_model

    bm = batched_model(proc)
    rt = bm.settings.model_copy(update={"precision": precision})
    name = next((n for n, e in manifest().items() if e["file"] == bm.path.name), None)
    if name is None:  # a --model file: float
        return file_precision(bm.path, rt)
    base = manifest()[name].get("quantised_from", name)
    return file_precision(pinned_model(base, runtime=rt)[0], rt)


def _table(rows: list[dict], cols: list[str]) -> str:
    def cell(r: dict, c: str) -> str:
        return "-" if r.get(c) is None else str(r[c])

    w = {c: max(len(c), *(len(cell(r, c)) for r in rows)) for c in cols}
    lines = ["  ".join(c.rjust(w[c]) for c in cols)]
    lines += ["  ".join(cell(r, c).rjust(w[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def _write(out: Path, name: str, doc: Any) -> None:
    (out / name).write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run the selected sections; returns the exit status."""
    from benchmarks import e2e, model_only, plots

    a = parse_args(argv)
    configure_logging("WARNING")
    needs_stack = {"compare", "load", "scaling", "probe", "gateway", "rush", "backfill",
                   "tracing"} & set(a.sections)  # phone: optional
    if needs_stack and "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS" not in os.environ:
        print("benchmarks need the real stack: run `make bench` "
              "(or `scripts/stack up && eval \"$(scripts/stack env)\"`)", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    base = load_settings()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    machine = machine_info()
    summary: dict[str, Any] = {"machine": machine, "command": " ".join(["python -m benchmarks.run",
                                                                       *(argv or sys.argv[1:])]),
                               "sections": a.sections}
    title = f"{machine['cpu']} x{machine['cpu_count']}, {machine['date_utc'][:10]}"
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        samples = write_samples(Path(tmp))
        small = small_jpegs(Path(tmp) / "small", samples["card"])
        procs: dict[str, Processor] = {}
        if {"model", "compare", "phone"} & set(a.sections):
            for task in a.tasks:
                t0 = time.monotonic()
                procs[task] = build(base, task, a.batches, a.device, precision=a.precision)
                bm = model_only.batched_model(procs[task])
                shared = [t for t, p in procs.items()
                          if t != task and model_only.batched_model(p) is bm]
                print(f"[{task}] loaded + warmed up in {time.monotonic() - t0:.1f} s"
                      f"{f' (ONNX session shared with {shared[0]})' if shared else ''}: provider "
                      f"{bm.provider}, bucket chosen at warm-up {bm.chosen_bucket} "
                      "(images/s per bucket "
                      f"{({k: round(v, 2) for k, v in bm.stats.bucket_ips.items()})})",
                      flush=True)
            models = {t: model_only.batched_model(p) for t, p in procs.items()}
            summary["provider"] = {t: m.provider for t, m in models.items()}
            summary["bucket"] = {t: m.chosen_bucket for t, m in models.items()}
            summary["precision"] = {t: model_precision(p) for t, p in procs.items()}
        sweeps: dict[str, list[dict]] = {}
        done: dict[str, list[dict]] = {}
        if "model" in a.sections:
            for task, p in procs.items():
                blobs = [f.read_bytes() for f in samples[task]]
                sweeps[task] = model_only.sweep(p, blobs, a.batches, a.n, base.decode)
                print(f"\n[{task}] model only (decode + inference + post-processing, no "
                      "Kafka/MinIO)")
                print(_table(sweeps[task],
                             ["batch", "images", "seconds", "images_per_s", "accepted",
                                            "peak_rss_mib", "skipped"]), flush=True)
            _write(out, "model_only.json", {"machine": machine, "n": a.n, "tasks": sweeps})
            done = {t: [r for r in rows if "images_per_s" in r] for t, rows in sweeps.items()}
            summary["model_only_images_per_s"] = {
                t: {r["batch"]: r["images_per_s"] for r in rows} for t, rows in done.items()}
            summary["model_batch_gain"] = {
                t: round(max(r["images_per_s"] for r in rows) / rows[0]["images_per_s"], 3)
                for t, rows in done.items() if rows and rows[0]["batch"] == 1}
        compares: dict[str, dict] = {}
        if "compare" in a.sections:
            for task, p in procs.items():
                c = compares[task] = e2e.compare(base, task, p, samples[task], a.e2e_images,
                                                 a.rounds)
                print(f"\n[{task}] end to end at bucket {c['bucket']}, {a.e2e_images} images, "
                      f"{a.rounds} round(s): e2e/model-only = {c['e2e_over_model_only']} "
                      f"(goal >= 0.90), batching/naive = {c['batching_over_naive']} (goal >= 1.0)")
                rows = [r[k] for r in c["rounds"] for k in ("model_only", "batching", "naive")]
                print(_table(rows, ["mode", "images", "seconds", "images_per_s", "first_result_s",
                                    "fixed_start_share", "cpu_ms_per_image", "mean_batch_size"]),
                      flush=True)
            _write(out, "e2e.json", {"machine": machine, "tasks": compares})
            summary["e2e_over_model_only"] = {t: c["e2e_over_model_only"]
                                              for t, c in compares.items()}
            summary["batching_over_naive"] = {t: c["batching_over_naive"]
                                              for t, c in compares.items()}
            summary["e2e_goal_met"] = all(c["e2e_over_model_only"] >= 0.9
                                          for c in compares.values())
            summary["batching_goal_met"] = all(c["batching_over_naive"] >= 1.0
                                               for c in compares.values())
        if sweeps:
            plots.throughput_vs_batch(done, compares, out / "throughput_vs_batch.png", title)
        if "phone" in a.sections:
            from benchmarks.model_only import batched_model as bm_of
            from benchmarks.phone import run_phone

            by_prec: dict[str, dict[str, Processor]] = {}
            for prec in a.precisions:
                by_prec[prec] = {t: (p if model_precision(p) == _resolved(prec, p) else
                                     build(base, t, a.batches, a.device, precision=prec))
                                 for t, p in procs.items()}

            def one_thread(task: str, prec: str) -> Processor:  # same bucket, one thread
                return build(base, task, [bm_of(by_prec[prec][task]).chosen_bucket], a.device,
                             threads=1, precision=prec)

            stack = "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS" in os.environ
            if not stack:
                print("phone: no stack in the environment, end-to-end figures skipped", flush=True)
            t0 = time.monotonic()
            ph = run_phone(base, by_prec, one_thread, a.phone_images, Path(tmp), e2e=stack,
                           rounds=a.rounds)
            _write(out, "phone.json", {"machine": machine, "tasks": ph, "rounds": a.rounds,
                                       "seconds": round(time.monotonic() - t0, 1)})
            cols = ["task", "size", "precision", "cpu_ms_per_image_outside_model",
                    "bare_model_images_per_s", "e2e_images_per_s", "e2e_over_bare_model",
                    "e2e_over_bare_fp32", "fixed_start_share"]
            print(f"\nphone: {a.phone_images} uploads per pass, {a.rounds} round(s), medians")
            print(_table([{"task": t, "size": sz, **r} for t, sizes in ph.items()
                          for sz, precs in sizes.items() for r in precs.values()], cols),
                  flush=True)
            for key in ("cpu_ms_per_image_outside_model", "bare_model_images_per_s",
                        "e2e_over_bare_model", "e2e_over_bare_fp32", "fixed_start_share"):
                summary[key] = {t: {sz: {p: r[key] for p, r in precs.items() if key in r}
                                    for sz, precs in sizes.items()} for t, sizes in ph.items()}
        if "load" in a.sections:
            from benchmarks.load import run_load

            ld = run_load(base, small, logs, duration_s=a.load_seconds, sleep_ms=a.sleep_ms,
                          half_rate=a.half_rate)
            h = ld["half_capacity"]
            half_line = (f"at {h['rate_per_s']}/s (50% of {ld['capacity_per_s']}/s): p50 "
                         f"{h['p50_ms']} ms, p99 {h['p99_ms']} ms; goal max_wait + 2 x batch "
                         f"compute = {ld['max_wait_ms']} + 2 x {ld['batch_compute_ms']} = "
                         f"{ld['p99_goal_ms']} ms: {'met' if ld['p99_goal_met'] else 'NOT met'}; "
                         f"mean poll batch {h['mean_poll_batch']}, worker total p99 "
                         f"{h['worker_total_p99_ms']} ms")
            if a.half_rate:
                print(f"\nhalf capacity only, {a.load_seconds:g} s: {half_line}\n"
                      f"mean ms per batch by stage: {h['stage_mean_ms']}", flush=True)
                _write(out, "load_half.json", {"machine": {**machine, "load_avg_1m_end":
                                                           round(os.getloadavg()[0], 2)}, **ld})
            else:
                print(f"\nload table: 1 worker, {ld['processor']}, max_wait {ld['max_wait_ms']} "
                      f"ms, max_batch {ld['max_batch']}, closed-loop producers, "
                      f"{a.load_seconds:g} s per level")
                print(_table(ld["rows"],
                             ["producers", "results_per_s", "avg_ms", "p95_ms", "p99_ms",
                                          "error_rate", "mean_batch_size"]))
                print(half_line, f"\nmean ms per batch by stage: {h['stage_mean_ms']}", flush=True)
                _write(out, "load.json", {"machine": machine, **ld})
                plots.latency_vs_load(ld, out / "latency_vs_load.png", title)
                keys = ("producers", "results_per_s", "avg_ms", "p95_ms", "p99_ms", "error_rate")
                summary.update({
                    "load_processor": ld["processor"],
                    "load_table": [{k: r[k] for k in keys} for r in ld["rows"]],
                    "capacity_per_s": ld["capacity_per_s"],
                    "p99_ms_at_half_capacity": h["p99_ms"], "max_wait_ms": ld["max_wait_ms"],
                    "batch_compute_ms": ld["batch_compute_ms"], "p99_goal_ms": ld["p99_goal_ms"],
                    "p99_goal_met": ld["p99_goal_met"]})
        if "scaling" in a.sections:
            from benchmarks.scaling import run_scaling

            sc = run_scaling(base, small, logs, sleep_ms=a.scaling_sleep_ms,
                             events=a.scaling_events)
            print(f"\nscaling: {sc['processor']}, {sc['partitions']} partitions, backlog "
                  f"{sc['events']} per step")
            print(_table(sc["rows"], ["workers", "results_per_s", "speedup", "ideal_speedup"]),
                  flush=True)
            _write(out, "scaling.json", {"machine": machine, **sc})
            plots.scaling(sc, out / "scaling.png", title)
            summary["scaling"] = [{k: r[k] for k in ("workers", "results_per_s", "speedup",
                                                     "ideal_speedup")} for r in sc["rows"]]
        if "probe" in a.sections:
            from benchmarks.probe import run_probe

            pr = run_probe(base)
            print(f"\nprobe: records at {pr['rate_per_s']:g}/s, consume 32 / 10 ms, then "
                  f"{pr['compute_ms']:g} ms of simulated compute polling every 50 ms")
            print(_table(pr["rows"], ["pause_during_compute", "received", "p50_ms", "p95_ms",
                                      "max_ms"]), flush=True)
            _write(out, "probe.json", {"machine": machine, **pr})
            summary["pause_probe_p50_ms"] = {("paused" if r["pause_during_compute"] else
                                              "not_paused"): r["p50_ms"] for r in pr["rows"]}
        if "gateway" in a.sections:
            from benchmarks import gateway

            gw = gateway.run_gateway(base, logs, real_duration_s=15.0 if a.quick else 30.0,
                                     duration_s=10.0 if a.quick else 20.0)
            _write(out, "gateway.json", gw)
            gateway.plot(gw, out / "gateway.png")
            for m in gw["modes"]:
                print(f"\ngateway, {m['processor']}:\n{gateway.table(m['rows'])}", flush=True)
            summary["gateway_goals"] = gw["goals"]
        if "rush" in a.sections:
            from benchmarks.rush import run_rush

            p = procs.get("card") or build(base, "card", a.batches, a.device)
            ru = run_rush(base, "card", p, samples["card"], n=60 if a.quick else 120)
            print(f"\nrush: {ru['n']} card uploads, {ru['stale_uploads']} past their deadline, "
                  f"{ru['repeat_uploads']} repeats")
            print(_table(ru["rows"], ["mode", "uploads", "stale", "cache_hits", "model_images",
                                      "expected_images", "model_calls", "images_vs_baseline",
                                      "calls_vs_baseline", "wall_s"]), flush=True)
            _write(out, "rush.json", {"machine": machine, **ru})
            summary["rush"] = {r["mode"]: {k: r[k] for k in ("model_images", "expected_images",
                                                             "images_vs_baseline")}
                               for r in ru["rows"]}
        if "backfill" in a.sections:
            from benchmarks.backfill import run_backfill

            bf = run_backfill(base, samples["card"], logs, phase_s=30.0 if a.quick else 60.0,
                              window=100 if a.quick else 300)
            print(f"\nbackfill: live card worker at {bf['rate_per_s']}/s (half of "
                  f"{bf['capacity_per_s']}/s), {bf['phase_s']:g} s per phase")
            print(_table(bf["rows"], ["phase", "live_uploads", "replayed_meanwhile", "p50_ms",
                                      "p99_ms"]))
            print(f"P99 with a yielding backfill / alone = {bf['p99_yielding_over_alone']} "
                  f"(goal <= 1.2); not yielding / alone = {bf['p99_not_yielding_over_alone']}",
                  flush=True)
            _write(out, "backfill.json", {"machine": machine, **bf})
            summary["backfill_p99_over_alone"] = {"yielding": bf["p99_yielding_over_alone"],
                                                  "not_yielding": bf["p99_not_yielding_over_alone"]}
        if "tracing" in a.sections:
            from benchmarks.tracing_cost import run_tracing_cost

            tc = {proc: run_tracing_cost(base, small, logs, n=n, processor=proc)
                  for proc, n in (("sleep", 300 if a.quick else 600),
                                  ("card", 30 if a.quick else 60))}
            for proc, r in tc.items():
                print(f"\ntracing, {proc} processor: on/off throughput = "
                      f"{r['throughput_on_over_off']} (cost {r['cost_percent']} %, goal <= 3 %)")
                print(_table(r["rows"], ["tracing", "uploads", "uploads_per_s", "spans_exported"]),
                      flush=True)
            _write(out, "tracing.json", {"machine": machine, **tc})
            summary["tracing_cost_percent"] = {p: r["cost_percent"] for p, r in tc.items()}
    summary["elapsed_s"] = round(time.monotonic() - t_start, 1)
    summary["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    if a.half_rate:  # a partial re-measurement: summary.json stays as it was
        print(f"\ndone in {summary['elapsed_s']} s")
        return 0
    _write(out, "summary.json", summary)
    print(f"\nwrote {out}/summary.json (+ per-section JSON and PNG) in {summary['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    run_main(main)
