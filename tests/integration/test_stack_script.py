"""`scripts/stack up` restarts a service that died on its data; only `down` removes data."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from streams.settings import Settings
from streams.storage import Storage

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "scripts" / "stack"


def _stack(*args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess:
    return subprocess.run([str(STACK), *args], capture_output=True, text=True, timeout=timeout_s,
                          env=os.environ.copy(), check=False)


def _own_minio_pid(settings: Settings) -> int:
    """The pid of the MinIO this checkout's `scripts/stack up` started and the tests talk to."""
    pid_file = ROOT / ".stack" / "minio.pid"
    env = _stack("env").stdout
    if not pid_file.is_file() or f"CARDSTREAM_S3__ENDPOINT={settings.s3.endpoint}\n" not in env:
        pytest.skip("the tests do not run on a MinIO that this checkout's scripts/stack started")
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pytest.skip(f"MinIO pid {pid} in .stack/minio.pid is not running")
    return pid


def test_stack_up_restarts_a_killed_minio_on_its_data(settings: Settings) -> None:
    pid = _own_minio_pid(settings)
    st = Storage(settings.s3, retries=1)
    data = os.urandom(50_000)
    ref = st.put(settings.s3.results_bucket, f"stack/{uuid.uuid4().hex}.bin", data,
                 "application/octet-stream")
    try:
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        assert not st.healthy()
        up = _stack("up")
        assert up.returncode == 0, up.stderr
        assert "restarting MinIO on its data" in up.stderr
        assert int((ROOT / ".stack" / "minio.pid").read_text()) != pid
        assert st.get(ref.bucket, ref.key) == data
    finally:
        if not st.healthy():  # leave the stack up for the tests after this one
            _stack("up")
