"""The fault suite's own Kafka + MinIO: a second instance of ``scripts/stack`` on other ports.

The faults kill servers, so the suite never touches the stack other checkouts and the tests use
(127.0.0.1:9092 / :9000 by default): it runs ``scripts/stack`` with
``CARDSTREAM_STACK_INSTANCE=faults`` (state in ``.stack-faults/``, data in a folder of its own)
and the ports of :class:`OwnStack` (29092, its TLS listener 29094, 29093, 29000, 29001 by
default), kills its Kafka or
MinIO by the pid that script wrote, restarts them with ``up`` (on their data), and removes the
instance with ``down`` at the end.

``scripts/stack up`` takes a healthy server on its port as its own, so :meth:`OwnStack.up`
first refuses ports that something other than this instance listens on (another checkout's
stack on the same ports would otherwise receive the suite's topics and its kills would miss).

The ports lie below the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``,
32768-60999 by default), and :class:`OwnStack` refuses ports inside it: while a killed server is
down its clients reconnect to ``127.0.0.1:PORT`` many times a second, and a connect from the
ephemeral port equal to PORT connects the socket to itself (TCP simultaneous open; measured here:
the 1,392nd connect to a closed even port in the range did), which then holds the port and the
restarted server cannot bind it. Seen on 49092 in the ``broker_long`` row (Kafka down 75 s): "Socket
server failed to bind to 127.0.0.1:49092: Address already in use", and ``scripts/stack up`` timed
out.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from benchmarks.common import ROOT, BenchError, kill_and_wait

STACK = ROOT / "scripts" / "stack"
#: the suite's default ports on 127.0.0.1: Kafka, its KRaft controller, MinIO, MinIO's console,
#: Kafka's TLS + SASL listener
KAFKA_PORT, CONTROLLER_PORT, MINIO_PORT, CONSOLE_PORT = 29092, 29093, 29000, 29001
KAFKA_TLS_PORT = 29094
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> range:
    """The kernel's ephemeral port range (Linux; 32768-60999 when it cannot be read)."""
    try:
        lo, hi = (int(x) for x in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return range(lo, hi + 1)


class OwnStack:
    """A ``scripts/stack`` instance of this checkout on its own ports.

    Args:
        instance: ``CARDSTREAM_STACK_INSTANCE`` (letters, digits, ``-``).
        kafka_port / controller_port / minio_port / console_port / kafka_tls_port: its ports on
            127.0.0.1, outside the kernel's ephemeral range (module doc).

    Raises:
        BenchError: a port inside the ephemeral range.
    """

    def __init__(self, instance: str = "faults", kafka_port: int = KAFKA_PORT,
                 controller_port: int = CONTROLLER_PORT, minio_port: int = MINIO_PORT,
                 console_port: int = CONSOLE_PORT, kafka_tls_port: int = KAFKA_TLS_PORT) -> None:
        self.instance = instance
        self.ports = {"kafka": (kafka_port, controller_port, kafka_tls_port),
                      "minio": (minio_port, console_port)}
        eph = ephemeral_ports()
        inside = sorted(p for ports in self.ports.values() for p in ports if p in eph)
        if inside:
            raise BenchError(f"ports {inside} lie in the kernel's ephemeral range "
                             f"{eph.start}-{eph.stop - 1}: a client reconnecting to a killed "
                             "server there can connect to itself and keep the port, so the "
                             "server cannot restart; choose ports below it")
        self.env = {**os.environ,
                    "CARDSTREAM_STACK_INSTANCE": instance,
                    "CARDSTREAM_STACK_KAFKA_PORT": str(kafka_port),
                    "CARDSTREAM_STACK_KAFKA_TLS_PORT": str(kafka_tls_port),
                    "CARDSTREAM_STACK_CONTROLLER_PORT": str(controller_port),
                    "CARDSTREAM_STACK_MINIO_PORT": str(minio_port),
                    "CARDSTREAM_STACK_MINIO_CONSOLE_PORT": str(console_port)}
        self.state = ROOT / f".stack-{instance}"

    def _run(self, *args: str, timeout_s: float = 300.0) -> str:
        r = subprocess.run([str(STACK), *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout_s, check=False)
        if r.returncode != 0:
            raise BenchError(f"scripts/stack {' '.join(args)} failed: {r.stderr.strip()[-500:]}")
        return r.stdout

    def alive(self, service: str) -> bool:
        """Whether the process ``scripts/stack`` recorded for ``service`` is running."""
        try:
            os.kill(self.pid(service), 0)
        except (OSError, ValueError):
            return False
        return True

    def up(self) -> float:
        """Start (or restart what died of) this instance; returns the seconds it took.

        Raises:
            BenchError: a port of a service that is not running here is taken by another
                process, or ``scripts/stack up`` failed.
        """
        for service, ports in self.ports.items():
            if self.alive(service):
                continue
            for port in ports:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        raise BenchError(
                            f"port {port} ({service}) is in use by a process this suite did not "
                            "start (another stack?): choose free ports with --kafka-port, "
                            "--controller-port, --minio-port, --minio-console-port")
        t0 = time.monotonic()
        self._run("up")
        dead = [s for s in self.ports if not self.alive(s)]
        if dead:
            raise BenchError(f"scripts/stack up returned but {dead} of instance {self.instance} "
                             f"is not running (logs: {self.state / 'logs'})")
        return time.monotonic() - t0

    def down(self) -> None:
        """Stop this instance and remove its data."""
        self._run("down")

    def environment(self) -> dict[str, str]:
        """``CARDSTREAM_*`` variables pointing clients at this instance (``scripts/stack env``)."""
        out = {}
        for line in self._run("env").splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            out[name] = value
        return out

    def pid(self, service: str) -> int:
        """The pid of ``kafka`` or ``minio`` as ``scripts/stack`` recorded it.

        Raises:
            OSError: no pid file (never started, or ``down``).
        """
        return int(Path(self.state / f"{service}.pid").read_text().strip())

    def kill(self, service: str, timeout_s: float = 30.0) -> None:
        """``kill -9`` the instance's ``kafka`` or ``minio`` and wait until it is gone.

        Raises:
            BenchError: still alive after ``timeout_s``.
        """
        pid = self.pid(service)
        if kill_and_wait(pid, timeout_s):
            return
        raise BenchError(f"{service} (pid {pid}) still alive {timeout_s} s after SIGKILL")
