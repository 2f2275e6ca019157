"""``cardstream demo``: the main job end to end on the sample uploads.

Topics and buckets -> two worker processes (every task's real processor) -> sample uploads
produced -> committed results awaited -> a table -> outputs saved under ``./out/`` -> workers
stopped with SIGTERM. The time window of the run is saved for ``cardstream replay``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from processors.registry import spec
from schemas.models import VerificationResult
from streams.errors import StreamsError
from streams.kafka import admin, create_topics, read_topic, topic_specs
from streams.procs import WorkerProc, start_worker, stop_workers
from streams.produce import UploadProducer
from streams.replay import decode_results
from streams.samples import KIND, VERIFIED, write_samples
from streams.settings import Settings
from streams.storage import Storage
from streams.tables import name_value_table


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def start_workers(s: Settings, n: int, logs: Path, base_port: int = 18080) -> list[WorkerProc]:
    """Start ``n`` ``cardstream worker`` processes (slots 0..n-1) with /ready on ``base_port +
    i``."""
    return [start_worker(s, i, logs / f"worker{i}.log", http_port=base_port + i) for i in range(n)]


def wait_ready(workers: list[WorkerProc], timeout_s: float, logs: Path) -> None:
    """Wait until every worker answers /ready (warm-up done).

    Raises:
        StreamsError: a worker exited or did not become ready in ``timeout_s``.
    """
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        for w in workers:
            if w.proc.poll() is not None:
                raise StreamsError(f"a worker exited with {w.proc.returncode} during warm-up "
                                   f"(logs: {logs})")
        if all(_ready(w.port) for w in workers):
            return
        time.sleep(0.5)
    raise StreamsError(f"workers not ready after {timeout_s} s (logs: {logs})")


def run_demo(s: Settings, out: Path, workers: int = 2, timeout_s: float = 600.0,
             base_port: int = 18080) -> int:
    """Run the demo (worker ``i``'s /ready and /metrics on ``base_port + i``); returns 0 when
    every sample got a committed result and workers stopped cleanly."""
    console = Console(width=None if Console().is_terminal else 160)
    create_topics(admin(s.kafka), topic_specs(s.kafka))
    st = Storage(s.s3)
    st.ensure_buckets([s.s3.uploads_bucket, s.s3.results_bucket, s.s3.quarantine_bucket])
    samples = write_samples(out / "samples")
    console.print(f"[bold]cardstream demo[/]: {sum(map(len, samples.values()))} sample uploads, "
                  f"{workers} workers, topic {s.kafka.uploads_topic}")
    procs = start_workers(s, workers, out / "logs", base_port)
    # the results that arrive from now on (the topic may hold older runs' results)
    reader = read_topic(s.kafka, s.kafka.results_topic, at_end=True, follow=True, poll_s=1.0)
    try:
        t_ready = time.monotonic()
        wait_ready(procs, timeout_s, out / "logs")
        console.print("workers ready (models loaded, buckets warmed) in "
                      f"{time.monotonic() - t_ready:.0f} s")
        from_ms = int(time.time() * 1000)
        next(reader)  # assigned at the topic's end before the first upload
        prod = UploadProducer(s)
        sent = []
        for task, files in samples.items():
            sent += [(task, x) for x in prod.produce_files(files, task, prefix=f"demo{from_ms}")]
        to_ms = int(time.time() * 1000) + 1
        want = {x.upload_id: (task, x.file) for task, x in sent}
        got: dict[str, VerificationResult] = {}
        t0 = time.monotonic()
        for msgs in reader:
            for res in decode_results(msgs):
                if res.upload_id in want:
                    got[res.upload_id] = res
            if len(got) == len(want) or time.monotonic() - t0 > timeout_s:
                break
            if all(w.proc.poll() is not None for w in procs):
                console.print(f"[red]every worker exited (logs: {out / 'logs'})[/]")
                break
    finally:
        codes = stop_workers(procs)
        reader.close()
    shown: list[tuple[str, ...]] = []  # the table's values per upload
    rows = []  # demo_results.json
    for uid, (task, fname) in want.items():
        r = got.get(uid)
        if r is None:
            shown.append((uid, fname, task, "[red]no result[/]", "", "", "", "", ""))
            continue
        ref = spec(task).main_ref(r.payload)
        saved = ""
        if ref is not None:
            dst = out / task / f"{Path(fname).stem}.{ref.key.rsplit('.', 1)[-1]}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(st.get(ref.bucket, ref.key))
            saved = str(dst)
        reasons = ",".join(map(str, r.reasons))
        colour = {"accepted": "green", "rejected": "yellow"}.get(str(r.status), "red")
        verified = VERIFIED[task](r.payload) if task in VERIFIED and r.payload else ""
        shown.append((uid, fname, task, f"[{colour}]{r.status}[/]", reasons, _kind(r), verified,
                      f"{r.timings.total_ms:.0f}", saved))
        rows.append({"upload_id": uid, "file": fname, "task": task, "status": str(r.status),
                     "reasons": [str(x) for x in r.reasons], "verified": verified,
                     "total_ms": r.timings.total_ms, "output": saved or None})
    console.print(results_table(shown))
    (out / "demo_results.json").write_text(json.dumps(
        {"from_ms": from_ms, "to_ms": to_ms, "results": rows}, indent=1))
    console.print(f"outputs under {', '.join(f'{out}/{t}' for t in samples)}; replay this window "
                  "with:\n"
                  f'  eval "$(scripts/stack env)" && .venv/bin/cardstream replay '
                  f"--from {from_ms} --to {to_ms}")
    ok = len(got) == len(want) and all(c == 0 for c in codes)
    if not ok:
        console.print(f"[red]{len(want) - len(got)} uploads without a result; worker exit codes "
                      f"{codes}[/]")
    return 0 if ok else 1


FIELDS = ("upload", "file", "task", "status", "reasons", "kind", "verified", "latency ms",
          "output")
"""What the demo's table shows of each upload, in its order (:func:`results_table`)."""


def results_table(uploads: Iterable[Sequence[str]]) -> Table:
    """The demo's results: a section per upload, each of its :data:`FIELDS` a row with its value
    (``-`` where it has none: no reasons, no output, no result), in the two columns of
    :func:`streams.tables.name_value_table`, so that it reads whole in an 80-column terminal (a
    column per field wrapped the headers there: "uploa/d", "laten/cy ms").

    Args:
        uploads: per upload, its values in the order of :data:`FIELDS` (rich markup: the
            status is coloured).
    """
    return name_value_table("cardstream demo results", ("field", "value"),
                            [[(f, v or "-") for f, v in zip(FIELDS, values, strict=True)]
                             for values in uploads])


def _kind(r: VerificationResult) -> str:
    """What the output is: its kind (the payload field :data:`streams.samples.KIND` names for
    the task, if any) and the main artifact's px (``<kind> <width>x<height>``); empty when there
    is no output."""
    ref = spec(r.task).main_ref(r.payload)
    if ref is None:
        return ""
    field = KIND.get(str(r.task))
    kind = f"{getattr(r.payload, field)} " if field is not None else ""
    return f"{kind}{ref.width}x{ref.height}"
