"""Worker subprocesses: start ``cardstream worker`` with given settings, stop them cleanly.

Used by ``cardstream demo``, the integration tests and the benchmarks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, SecretStr

from streams.settings import Settings


def section_env(prefix: str, model: BaseModel) -> dict[str, str | None]:
    """``model``'s fields as pydantic-settings environment variables ``{prefix}__{FIELD}`` (nested
    models joined with ``__``): secrets revealed (the child reads them from its environment),
    tuples, lists and dicts as JSON, booleans as ``true``/``false``, ``None`` as ``None`` (the
    caller removes that variable)."""
    out: dict[str, str | None] = {}
    for name in type(model).model_fields:
        key, v = f"{prefix}__{name.upper()}", getattr(model, name)
        if isinstance(v, BaseModel):
            out.update(section_env(key, v))
        elif v is None:
            out[key] = None
        elif isinstance(v, SecretStr):
            out[key] = v.get_secret_value()
        elif isinstance(v, bool):
            out[key] = "true" if v else "false"
        elif isinstance(v, tuple | list | dict):
            out[key] = json.dumps(list(v) if isinstance(v, tuple) else v)
        else:
            out[key] = str(v)
    return out


def settings_env(s: Settings) -> dict[str, str]:
    """The current environment with the ``CARDSTREAM_KAFKA__*`` and ``CARDSTREAM_S3__*`` variables
    of ``s`` (topics, consumer group, transactional-id prefix, buckets, TLS/SASL settings,
    credentials; not the role credentials of ``s.s3.roles``, which only ``buckets create``
    needs): a ``cardstream`` subprocess started with it connects as ``s`` does."""
    s3 = s.s3.model_copy(update={"roles": type(s.s3.roles)()})  # a client needs no role secrets
    env = dict(os.environ)
    sections = {**section_env("CARDSTREAM_KAFKA", s.kafka), **section_env("CARDSTREAM_S3", s3)}
    for k, v in sections.items():
        if v is None:  # unset, and so is anything nested under it
            env = {n: x for n, x in env.items() if n != k and not n.startswith(k + "__")}
        else:
            env[k] = v
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class WorkerProc:
    """A ``cardstream worker`` subprocess: ``proc``, its HTTP ``port`` (0: none) and ``log``
    file."""

    proc: subprocess.Popen
    port: int
    log: Path


def start_worker(s: Settings, slot: int, log: Path, args: Sequence[str] = (),
                 http_port: int = 0, env: Mapping[str, str] | None = None) -> WorkerProc:
    """Start ``cardstream worker --slot SLOT --http-port PORT ARGS`` in its own session.

    Args:
        s: settings the worker must use (passed through the environment).
        slot: worker slot (its transactional.id is ``{prefix}-{slot}``).
        log: file receiving stdout and stderr (appended).
        args: extra CLI arguments, e.g. ``["--processor", "card=sleep"]``.
        http_port: port of ``/ready``, ``/live``, ``/metrics`` (0: no HTTP server).
        env: more environment variables (other settings, ``CARDSTREAM_TRACING__ENABLED``...).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("cardstream")
    with open(log, "ab") as f:
        p = subprocess.Popen([str(exe), "worker", "--slot", str(slot), "--http-port",
                              str(http_port),
                              *args], env={**settings_env(s), **(env or {})}, stdout=f,
                             stderr=subprocess.STDOUT,
                             start_new_session=True)
    return WorkerProc(p, http_port, log)


def stop_workers(workers: Sequence[WorkerProc], sig: int = signal.SIGTERM,
                 timeout_s: float = 60.0) -> list[int]:
    """Send ``sig`` to every live worker, wait (SIGKILL after ``timeout_s`` s); returns exit
    codes."""
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


@dataclass
class GatewayProc:
    """A ``cardstream gateway`` subprocess: ``proc``, its API ``port``, ``admin_port`` and
    ``log``."""

    proc: subprocess.Popen
    port: int
    admin_port: int
    log: Path

    @property
    def url(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.port}"


def start_gateway(s: Settings, log: Path, port: int, admin_port: int,
                  ready_timeout_s: float = 60.0) -> GatewayProc:
    """Start ``cardstream gateway`` with ``s`` (``s.gateway`` included, and the status app's
    token for ``gateway.status_url``) and wait for ``/ready``.

    Raises:
        RuntimeError: it exited, or was not ready within ``ready_timeout_s`` (its log's tail in
            the message).
    """
    import time
    import urllib.request

    log.parent.mkdir(parents=True, exist_ok=True)
    env = settings_env(s)
    for k, v in section_env("CARDSTREAM_GATEWAY", s.gateway).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    if s.status.api_token is not None:
        env["CARDSTREAM_STATUS__API_TOKEN"] = s.status.api_token.get_secret_value()
    exe = Path(sys.executable).with_name("cardstream")
    with open(log, "ab") as f:
        p = subprocess.Popen([str(exe), "gateway", "--port", str(port), "--admin-port",
                              str(admin_port)],
                             env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    g = GatewayProc(p, port, admin_port, log)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if p.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/ready", timeout=2) as r:
                if r.status == 200:
                    return g
        except OSError:
            pass
        time.sleep(0.2)
    stop_workers([WorkerProc(p, 0, log)], timeout_s=10)
    raise RuntimeError(f"gateway not ready: {log.read_text()[-2000:]}")
