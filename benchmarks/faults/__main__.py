"""``python -m benchmarks.faults``: issue 31's fault table (or ``--soak``) on the suite's own stack.

What ``make faults`` runs (``make faults SOAK=1`` for the soak). See ``benchmarks/faults/suite.py``
for the faults and ``benchmarks/README.md`` for the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info
from benchmarks.faults import stack as st
from benchmarks.faults.soak import run_soak
from benchmarks.faults.suite import (
    DATA_LIMIT,
    FAULTS,
    Options,
    goals_met,
    print_table,
    run_fault,
    totals,
)
from streams.logs import configure_logging
from streams.settings import load_settings


def parse_args(argv: list[str] | None = None) -> tuple[Options, st.OwnStack, bool]:
    """Command-line options (see ``--help``) -> the run's options, its stack, keep-stack flag."""
    d = Options()
    ap = argparse.ArgumentParser(prog="python -m benchmarks.faults",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"subset of {','.join(FAULTS)}")
    ap.add_argument("--workers", type=int, default=d.workers, help="worker processes per fault")
    ap.add_argument("--rate", type=float, default=d.rate, help="uploads per second per fault")
    ap.add_argument("--seconds", type=float, default=d.seconds, help="production time per fault")
    ap.add_argument("--sleep-ms", type=float, default=d.sleep_ms,
                    help="sleep processor ms per call")
    ap.add_argument("--max-batch", type=int, default=d.max_batch, help="events per poll batch")
    ap.add_argument("--drain-idle-s", type=float, default=d.drain_idle_s,
                    help="stop reading after this long without a new output (after the fault)")
    ap.add_argument("--drain-max-s", type=float, default=d.drain_max_s,
                    help="stop reading this long after the fault at the latest")
    ap.add_argument("--soak", action="store_true", help="the soak instead of the fault table")
    ap.add_argument("--soak-minutes", type=float, default=30.0, help="soak length (min)")
    ap.add_argument("--soak-load", type=float, default=d.soak_load,
                    help="share of the measured capacity offered during the soak")
    ap.add_argument("--soak-sleep-ms", type=float, default=d.soak_sleep_ms,
                    help="sleep processor ms per call during the soak")
    ap.add_argument("--soak-max-batch", type=int, default=d.soak_max_batch,
                    help="events per poll batch during the soak")
    ap.add_argument("--out", type=Path, default=d.out, help="folder of summary.json and logs")
    ap.add_argument("--kafka-port", type=int, default=st.KAFKA_PORT)
    ap.add_argument("--controller-port", type=int, default=st.CONTROLLER_PORT)
    ap.add_argument("--minio-port", type=int, default=st.MINIO_PORT)
    ap.add_argument("--minio-console-port", type=int, default=st.CONSOLE_PORT)
    ap.add_argument("--kafka-tls-port", type=int, default=st.KAFKA_TLS_PORT)
    ap.add_argument("--keep-stack", action="store_true",
                    help="leave the suite's own stack up afterwards (default: scripts/stack down)")
    a = ap.parse_args(argv)
    faults = [f for f in a.faults.split(",") if f]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        ap.error(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    o = Options(workers=a.workers, rate=a.rate, seconds=a.seconds, sleep_ms=a.sleep_ms,
                max_batch=a.max_batch, drain_idle_s=a.drain_idle_s, drain_max_s=a.drain_max_s,
                faults=faults, out=a.out, soak_minutes=a.soak_minutes if a.soak else 0.0,
                soak_load=a.soak_load, soak_sleep_ms=a.soak_sleep_ms,
                soak_max_batch=a.soak_max_batch)
    stack = st.OwnStack(kafka_port=a.kafka_port, controller_port=a.controller_port,
                     minio_port=a.minio_port, console_port=a.minio_console_port,
                     kafka_tls_port=a.kafka_tls_port)
    return o, stack, a.keep_stack


def main(o: Options, stack: st.OwnStack, keep_stack: bool = False) -> dict[str, Any]:
    """Start the suite's own stack, run the faults (or the soak), write ``summary.json``.

    Returns:
        The summary written to ``o.out / "summary.json"``.
    """
    configure_logging("CRITICAL")  # the rows and the table only; the workers log to out/faults/logs
    o.out.mkdir(parents=True, exist_ok=True)
    t_up = stack.up()
    os.environ.update(stack.environment())  # this process and its workers: the own stack only
    base = load_settings()
    summary: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.faults", *sys.argv[1:]]),
        "stack": {"kafka": base.kafka.bootstrap_servers, "minio": base.s3.endpoint,
                  "instance": stack.instance, "up_s": round(t_up, 1)},
        "workers": o.workers, "rate_per_s": o.rate, "seconds_per_fault": o.seconds,
        "processor": f"sleep ({o.sleep_ms:g} ms per call + 2 ms per item), max_batch "
                     f"{o.max_batch}", "worker_data_limit_bytes": DATA_LIMIT,
        "machine": machine_info()}
    try:
        if o.soak_minutes:
            summary["soak"] = run_soak(base, o)
        else:
            rows = []
            for name in o.faults:
                row = run_fault(name, base, stack, o)
                row["goals_met"] = goals_met(row)
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("fault", "uploads", "results",
                                                       "dead_letters", "lost", "duplicates",
                                                       "max_stall_s")}), flush=True)
                (o.out / "summary.json").write_text(json.dumps({**summary, **totals(rows),
                                                                "rows": rows}, indent=2))
            summary.update(totals(rows))
            summary["rows"] = rows
            summary["goals_met"] = all(r["goals_met"] for r in rows)
            print_table(rows)
    finally:
        summary["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
        (o.out / "summary.json").write_text(json.dumps(summary, indent=2))
        if not keep_stack:
            stack.down()
    return summary


if __name__ == "__main__":
    opts, own, keep = parse_args()
    summary = main(opts, own, keep_stack=keep)
    sys.exit(0)
