"""Helpers of the integration tier: sample images, worker subprocesses, reading committed
results."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from benchmarks.common import kill_and_wait
from schemas import codec
from schemas.models import DeadLetter, VerificationResult
from streams import procs
from streams.kafka import read_topic
from streams.procs import settings_env
from streams.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT.parent / "shared" / "cases"


def write_images(folder: Path, n: int, seed: int = 0,
                 size: tuple[int, int] = (96, 128)) -> list[Path]:
    """``n`` distinct small JPEGs ``(H, W) = size`` of random blocks; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = cv2.resize(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8), size[::-1],
                         interpolation=cv2.INTER_NEAREST)
        p = folder / f"img{i:04d}.jpg"
        cv2.imwrite(str(p), img)
        out.append(p)
    return out


def start_worker(s: Settings, slot: int, log_path: Path, *args: str) -> subprocess.Popen:
    """Start ``cardstream worker --slot N ARGS`` (no HTTP) logging to ``log_path``."""
    return procs.start_worker(s, slot, log_path, args).proc


def stop_worker(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
    """Send ``sig`` and wait; SIGKILL after ``timeout_s``. Returns the exit code."""
    return procs.stop_workers([procs.WorkerProc(p, 0, Path())], sig, timeout_s)[0]


def read_committed(s: Settings, topic: str, want: int, timeout_s: float,
                   settle_s: float = 3.0) -> list:
    """Read ``topic`` from the beginning with read_committed until ``want`` records (or timeout),
    then ``settle_s`` more to catch extras. Returns the raw messages."""
    out: list = []
    deadline, settle_until = time.monotonic() + timeout_s, None
    reader = read_topic(s.kafka, topic, follow=True)
    try:
        for msgs in reader:
            out += msgs
            if len(out) >= want and settle_until is None:
                settle_until = time.monotonic() + settle_s
            if time.monotonic() >= (settle_until or deadline):
                break
    finally:
        reader.close()
    return out


def results(s: Settings, want: int, timeout_s: float = 120.0,
            settle_s: float = 3.0) -> list[VerificationResult]:
    """Committed VerificationResults of this test's results topic."""
    msgs = read_committed(s, s.kafka.results_topic, want, timeout_s, settle_s)
    return [codec.decode_result(m.value()) for m in msgs]


def dead_letters(s: Settings, want: int, timeout_s: float = 60.0) -> list[DeadLetter]:
    """Committed DeadLetters of this test's dead-letter topic."""
    return [codec.decode_dead_letter(m.value()) for m in read_committed(s, s.kafka.dlq_topic, want,
                                                                        timeout_s)]


STACK = ROOT / "scripts" / "stack"


def stack(*args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess:
    """``scripts/stack ARGS`` with the tests' environment (its ``CARDSTREAM_STACK_*`` ports
    and instance included); not checked."""
    return subprocess.run([str(STACK), *args], capture_output=True, text=True, timeout=timeout_s,
                          env=os.environ.copy(), check=False)


def stack_pid_file(service: str) -> Path:
    """Where ``scripts/stack`` keeps the pid of ``service`` (``kafka``, ``minio``) of the
    instance ``CARDSTREAM_STACK_INSTANCE`` names (``.stack`` or ``.stack-NAME``)."""
    instance = os.environ.get("CARDSTREAM_STACK_INSTANCE", "")
    return ROOT / (f".stack-{instance}" if instance else ".stack") / f"{service}.pid"


def own_stack_pid(service: str, variable: str, value: str) -> int:
    """The pid of ``service`` that this checkout's ``scripts/stack up`` started, when the tests
    talk to it (``scripts/stack env`` sets ``variable`` to ``value``, e.g.
    ``CARDSTREAM_S3__ENDPOINT`` to the tests' endpoint); skips the test otherwise (a server
    shared with another checkout or run elsewhere is never killed)."""
    pid_file = stack_pid_file(service)
    if not pid_file.is_file() or f"{variable}={value}\n" not in stack("env").stdout:
        pytest.skip(f"the tests do not run on a {service} that this checkout's scripts/stack "
                    "started")
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pytest.skip(f"{service} pid {pid} in {pid_file} is not running")
    return pid


__all__ = ["CASES", "ROOT", "dead_letters", "kill_and_wait", "own_stack_pid", "read_committed",
           "results", "settings_env", "stack", "stack_pid_file", "start_worker", "stop_worker",
           "write_images"]
