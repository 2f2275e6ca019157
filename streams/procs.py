"""Worker subprocesses: start ``cardstream worker`` with given settings, stop them cleanly.

Used by ``cardstream demo``, the integration tests and the benchmarks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streams.settings import Settings


def settings_env(s: Settings) -> dict[str, str]:
    """The current environment plus ``CARDSTREAM_*`` variables making a ``cardstream`` subprocess
    use ``s``'s broker, topics, consumer group, transactional-id prefix, object store endpoint and
    buckets (credentials stay those of the environment)."""
    k, s3 = s.kafka, s.s3
    env = dict(os.environ)
    env.update({
        "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS": k.bootstrap_servers,
        "CARDSTREAM_KAFKA__UPLOADS_TOPIC": k.uploads_topic,
        "CARDSTREAM_KAFKA__RESULTS_TOPIC": k.results_topic,
        "CARDSTREAM_KAFKA__DLQ_TOPIC": k.dlq_topic,
        "CARDSTREAM_KAFKA__GROUP_ID": k.group_id,
        "CARDSTREAM_KAFKA__TRANSACTIONAL_ID_PREFIX": k.transactional_id_prefix,
        "CARDSTREAM_S3__ENDPOINT": s3.endpoint,
        "CARDSTREAM_S3__UPLOADS_BUCKET": s3.uploads_bucket,
        "CARDSTREAM_S3__RESULTS_BUCKET": s3.results_bucket,
        "CARDSTREAM_S3__ALLOWED_BUCKETS": "[" + ",".join(f'"{b}"' for b in s3.allowed_buckets) + "]",
        "PYTHONUNBUFFERED": "1",
    })
    return env


@dataclass
class WorkerProc:
    """A ``cardstream worker`` subprocess: ``proc``, its HTTP ``port`` (0: none) and ``log`` file."""

    proc: subprocess.Popen
    port: int
    log: Path


def start_worker(s: Settings, slot: int, log: Path, args: Sequence[str] = (),
                 http_port: int = 0) -> WorkerProc:
    """Start ``cardstream worker --slot SLOT --http-port PORT ARGS`` in its own session.

    Args:
        s: settings the worker must use (passed through the environment).
        slot: worker slot (its transactional.id is ``{prefix}-{slot}``).
        log: file receiving stdout and stderr (appended).
        args: extra CLI arguments, e.g. ``["--processor", "card=sleep"]``.
        http_port: port of ``/ready``, ``/live``, ``/metrics`` (0: no HTTP server).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("cardstream")
    with open(log, "ab") as f:
        p = subprocess.Popen([str(exe), "worker", "--slot", str(slot), "--http-port", str(http_port),
                              *args], env=settings_env(s), stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
    return WorkerProc(p, http_port, log)


def stop_workers(workers: Sequence[WorkerProc], sig: int = signal.SIGTERM,
                 timeout_s: float = 60.0) -> list[int]:
    """Send ``sig`` to every live worker, wait (SIGKILL after ``timeout_s`` s); returns exit codes."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.send_signal(sig)
    codes = []
    for w in workers:
        try:
            codes.append(w.proc.wait(timeout_s))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            codes.append(w.proc.wait())
    return codes
