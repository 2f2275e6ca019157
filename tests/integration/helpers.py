"""Helpers of the integration tier: sample images, worker subprocesses, reading committed
results."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np

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


__all__ = ["CASES", "ROOT", "dead_letters", "read_committed", "results", "settings_env",
           "start_worker", "stop_worker", "write_images"]
