"""A broker outage after the start, as an operator's probes see it: the stack's own Kafka
killed under a running ``cardstream worker`` and ``cardstream gateway``, and restarted with
``scripts/stack up`` (skipped, like ``test_stack_script.py``, when the tests' Kafka is not one
this checkout's ``scripts/stack`` started: a shared broker is never killed)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.common import free_port
from streams import procs
from streams.gateway.settings import GatewaySettings
from streams.settings import Settings

from .helpers import kill_and_wait, own_stack_pid, stack, write_images

pytestmark = pytest.mark.integration

KEY = "alice-key-0123456789abcdef"


def _code(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def _listens(hostport: str) -> bool:
    host, port = hostport.split(",")[0].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _until(cond: Callable[[], bool], timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.5)
    return False


def test_readiness_fails_while_the_broker_is_down_and_comes_back_by_itself(
        settings: Settings, tmp_path: Path) -> None:
    """A fresh user's trial: with the broker killed after the start, the worker's ``/ready``
    and the gateway's admin ``/ready`` stayed 200, and the worker's ``/live`` failed 10 s in
    (its session timed out), so a liveness probe would restart every worker for the broker's
    outage. Now both ``/ready`` are 503 within seconds of the kill (measured: under 3 s),
    both ``/live`` stay 200 throughout, and both ``/ready`` are 200 again by themselves
    once the broker answers (nothing restarted), and an upload goes through."""
    k = settings.kafka
    kafka_pid = own_stack_pid("kafka", "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", k.bootstrap_servers)
    keys = tmp_path / "keys"
    keys.write_text(f"alice:{KEY}\n")
    gs = settings.model_copy(update={"gateway": GatewaySettings(api_keys_file=keys)})
    wport = free_port()
    w = procs.start_worker(settings, 0, tmp_path / "worker.log",
                           ["--tasks", "card", "--processor", "card=sleep"], http_port=wport)
    started = [w]
    samples: list[tuple[float, int, int, int, int, bool]] = []
    up: list[float] = []
    try:
        g = procs.start_gateway(gs, tmp_path / "gateway.log", free_port(), free_port())
        started.append(procs.WorkerProc(g.proc, 0, g.log))
        assert _until(lambda: _code(wport, "/ready") == 200, 120), (
            (tmp_path / "worker.log").read_text()[-2000:])

        def sample() -> tuple[float, int, int, int, int, bool]:
            s = (time.monotonic() - t_kill, _code(wport, "/ready"), _code(wport, "/live"),
                 _code(g.admin_port, "/ready"), _code(g.admin_port, "/live"),
                 _listens(k.bootstrap_servers))
            samples.append(s)
            return s

        t_kill = time.monotonic()
        kill_and_wait(kafka_pid)
        while sample()[0] < 16.0:  # past the consumer's 10 s session timeout
            time.sleep(0.5)

        def restart() -> None:
            stack("up")
            up.append(time.monotonic() - t_kill)

        threading.Thread(target=restart, daemon=True).start()
        end = time.monotonic() + 150
        while time.monotonic() < end:
            s = sample()
            if up and s[1] == s[3] == 200:
                break
            time.sleep(0.5)
        table = "\n".join(f"{s[0]:6.1f} s  worker ready {s[1]} live {s[2]}  gateway ready {s[3]} "
                          f"live {s[4]}  broker {'up' if s[5] else 'down'}" for s in samples)
        print(table)  # the timings, shown with -rP
        down = [s for s in samples if not s[5]]
        assert down, table
        # readiness failed soon after the kill, and stayed failed while the broker was down
        failed = [s[0] for s in down if s[1] == s[3] == 503]
        assert failed and failed[0] < 10.0, table
        failed_at = failed[0]
        assert all(s[1] == s[3] == 503 for s in down if s[0] >= failed_at), table
        # liveness never failed
        assert all(s[2] == s[4] == 200 for s in samples), table
        # ready again by itself, soon after the broker answered
        back_at = min(s[0] for s in samples if s[5] and s[0] > failed_at)
        ready = [s[0] for s in samples if s[0] >= back_at and s[1] == s[3] == 200]
        assert ready and ready[0] - back_at < 30.0, table
        assert w.proc.poll() is None and g.proc.poll() is None, table  # nothing restarted
        img = write_images(tmp_path / "img", 1)[0].read_bytes()
        req = urllib.request.Request(
            f"{g.url}/v1/uploads?task=card&wait_ms=30000", data=img, method="POST",
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "image/jpeg"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200, r.read()[:500]
    finally:
        procs.stop_workers(started, timeout_s=30)
        if not _listens(k.bootstrap_servers):  # leave the stack up for the tests after this one
            stack("up")
