"""``cardstream worker``: one worker process of the consumer group."""

from __future__ import annotations

import threading
import time
from typing import Any

import typer

from processors.registry import names


def worker(
    tasks: str = typer.Option(",".join(names()), help="Comma-separated tasks this worker serves."),
    max_batch: int = typer.Option(None, help="Events per poll batch (default: settings, 32)."),
    max_wait_ms: int = typer.Option(None, help="ms to wait for a batch to fill (default: settings, "
                                               "10)."),
    slot: int = typer.Option(None, help="Worker slot: transactional.id is {prefix}-{slot}; stable "
                                        "per process slot (default: settings: "
                                        "CARDSTREAM_WORKER__SLOT, else the "
                             "trailing -N of HOSTNAME, else 0)."),
    processor: str = typer.Option("", help="Override processors per task, e.g. 'card=sleep' "
                                  "(the fixed-latency test processor)."),
    sleep_ms: float = typer.Option(20.0, help="Per-call latency of the sleep processor (ms)."),
    http_port: int = typer.Option(None, help="Port of /ready, /live, /metrics (0: none; default "
                                             "8080)."),
) -> None:
    """Run one worker process of the consumer group (one per GPU); SIGTERM stops it cleanly."""
    from streams.cli.common import set_up, settings, with_options
    from streams.health import serve
    from streams.logs import log
    from streams.storage import Storage
    from streams.worker import Worker, build_processors, build_shadow, install_signal_handlers

    s = settings()
    s = s.model_copy(update={"worker": with_options(
        s.worker, max_batch=max_batch, max_wait_ms=max_wait_ms, slot=slot, http_port=http_port,
        tasks=tuple(t.strip() for t in tasks.split(",") if t.strip()))})
    use = dict(p.split("=", 1) for p in processor.split(",") if "=" in p)
    procs = set_up(lambda: build_processors(s, use=use, sleep_ms=sleep_ms))
    shadow = set_up(lambda: build_shadow(s))
    wk = Worker(s, procs, Storage(s.s3), shadow=shadow)
    if s.worker.http_port:
        try:
            serve(wk.health, wk.metrics, s.worker.http_port)
        except OSError as e:  # e.g. a second worker on this host with the same port
            raise typer.BadParameter(
                f"cannot serve /ready, /live, /metrics on port {s.worker.http_port}: {e.strerror}; "
                "give each worker on a host its own port (or 0 for none)",
                param_hint="--http-port / CARDSTREAM_WORKER__HTTP_PORT") from e
    install_signal_handlers(wk)
    watch_compute(wk)
    wk.warm_up()
    log.info("worker_start", slot=s.worker.slot, transactional_id=wk.transactional_id,
             tasks=list(s.worker.tasks), group=s.kafka.group_id, topic=s.kafka.uploads_topic)
    wk.run()
    log.info("worker_stopped", batches=wk.batches)


#: exit status of a worker whose batch computed past its deadline (BSD sysexits EX_SOFTWARE)
EXIT_COMPUTE_HUNG = 70


def watch_compute(wk: Any, every_s: float = 1.0) -> threading.Thread:
    """A daemon thread ending the process (status :data:`EXIT_COMPUTE_HUNG`) once ``wk``'s
    batch has computed past its deadline (``compute_deadline_s`` plus
    ``compute_deadline_per_item_s`` per event): a hung processor or decode cannot be
    stopped from another thread, and an orchestrator without a liveness probe (compose
    restarts on exit) would otherwise leave the partition stopped for ever. The restarted worker
    counts the start; ``/live`` fails from the same moment."""
    import os
    import sys

    from streams.logs import log

    def watch() -> None:
        while True:
            time.sleep(every_s)
            late = wk.health.overdue_s()
            if late > 0.0:
                log.error("compute_deadline_exceeded", deadline_s=wk.health.deadline_s,
                          late_s=round(late, 1), exit_status=EXIT_COMPUTE_HUNG)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(EXIT_COMPUTE_HUNG)

    t = threading.Thread(target=watch, name="compute-deadline", daemon=True)
    t.start()
    return t


def register(app: typer.Typer) -> None:
    """Add ``worker`` to the ``cardstream`` app."""
    app.command("worker")(worker)
