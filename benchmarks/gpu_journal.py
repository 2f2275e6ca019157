"""What lets a GPU run keep what it measured: a journal of one JSON line per record, appended and
flushed as each record is made, and steps run in processes of their own, so a failed point, a
task that dies (a CUDA error, a segfault, the out-of-memory killer) or a child that never reaches
the start line loses that record alone.

- :class:`Journal`: ``OUT/gpu.jsonl``; every writer (the sweep, each task's process, the smoke
  step) appends whole lines with ``O_APPEND`` and ``fsync``, and a reader skips a torn last line.
  The device machine's ``$OUT`` comes back even when the call is stopped at its limit.
- :func:`run_isolated`: one step in a spawned process, stopped at its deadline.
- :func:`gather`: ``k`` spawned processes that start their timed work together (a barrier) and
  report through a queue; a child that dies or does not report in time is named, and the
  barrier is broken so the others stop waiting for it.

Standard library only (it runs on the device machine before anything is installed).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue as queue_mod
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["GRACE_S", "Journal", "gather", "run_isolated"]

GRACE_S = 5.0
"""Once a child of :func:`gather` failed, how long the others have to report."""


def _plain(o: Any) -> Any:
    """JSON for what ``json`` does not know: NumPy scalars as numbers, the rest as text."""
    item = getattr(o, "item", None)
    return item() if callable(item) else str(o)


class Journal:
    """Records appended to ``path`` as JSON lines: ``{"step": ..., "t": unix s, "pid": ...,
    **fields}``.

    Args:
        path: the journal file (its folder is created).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: str, **fields: Any) -> dict[str, Any]:
        """Append one record (one ``write`` of one line, synced) and return it. After a line
        cut short by a killed writer, the record starts on a line of its own."""
        rec = {"step": step, "t": round(time.time(), 3), "pid": os.getpid(), **fields}
        line = (json.dumps(rec, default=_plain) + "\n").encode()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return rec

    def read(self) -> list[dict[str, Any]]:
        """Every whole record so far, in order (a line cut short by a killed writer, or any
        line that is not a JSON object, is skipped)."""
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


def _stop(p: Any) -> None:
    """Terminate ``p`` (SIGTERM), then kill it if it has not gone within 10 s."""
    if p.is_alive():
        p.terminate()
        p.join(10)
    if p.is_alive():
        p.kill()
        p.join(10)


def run_isolated(target: Callable[..., Any], args: tuple, timeout_s: float) -> dict[str, Any]:
    """Run ``target(*args)`` in a spawned process (its own CUDA context and memory, released
    when it ends) and wait at most ``timeout_s``.

    Returns:
        ``{"exitcode": int | None, "timed_out": bool, "seconds": float}``: ``exitcode`` 0 when
        the target returned, its ``SystemExit`` code, 1 for an exception, ``-N`` for a signal
        (``-9``: killed, e.g. by the out-of-memory killer); a process still running at the
        deadline is stopped and reported ``timed_out``.
    """
    t0 = time.perf_counter()
    p = mp.get_context("spawn").Process(target=target, args=args)
    p.start()
    p.join(max(0.0, timeout_s))
    timed_out = p.is_alive()
    _stop(p)
    return {"exitcode": p.exitcode, "timed_out": timed_out,
            "seconds": round(time.perf_counter() - t0, 1)}


def _child(target: Callable[..., Any], i: int, barrier: Any, queue: Any, barrier_timeout_s: float,
           args: tuple) -> None:
    """A :func:`gather` child: ``target(i, ready, *args)``, where ``ready()`` waits at the
    barrier; its return value or its error goes to the queue."""
    try:
        payload = target(i, lambda: barrier.wait(barrier_timeout_s), *args)
        queue.put(("ok", i, payload))
    except threading.BrokenBarrierError:
        queue.put(("error", i, f"the start barrier broke (a sibling failed or "
                               f"{barrier_timeout_s:.0f} s passed)"))
    except BaseException as e:  # noqa: BLE001 - report whatever ended the child
        queue.put(("error", i, f"{type(e).__name__}: {e}"))


def gather(target: Callable[..., Any], k: int, args: tuple, barrier_timeout_s: float,
           timeout_s: float) -> list[dict[str, Any]]:
    """Run ``k`` spawned children of ``target(i, ready, *args)`` (``i`` = 0..k-1): each prepares,
    calls ``ready()`` (all ``k`` pass it together, or it raises once the barrier breaks), does
    its timed work and returns a picklable payload.

    A child that reports an error or dies (an exit code without a report: a crash, the
    out-of-memory killer) breaks the barrier at once, so the others stop waiting, and the rest
    get :data:`GRACE_S` to report; children that have not reported ``timeout_s`` after the
    start are stopped.

    Returns:
        One record per child, in order: ``{"child": i, "ok": True, "result": payload}`` or
        ``{"child": i, "ok": False, "error": why}`` (plus ``exitcode`` when it died).
    """
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(target, i, barrier, queue, barrier_timeout_s, args))
             for i in range(k)]
    for p in procs:
        p.start()
    done: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s

    def fail() -> None:  # the point is lost: the others stop waiting, and get GRACE_S to say so
        nonlocal deadline
        barrier.abort()
        deadline = min(deadline, time.monotonic() + GRACE_S)

    def take(block_s: float) -> None:
        kind, i, payload = queue.get(timeout=block_s) if block_s > 0 else queue.get_nowait()
        done[i] = ({"child": i, "ok": True, "result": payload} if kind == "ok"
                   else {"child": i, "ok": False, "error": payload})
        if kind != "ok":
            fail()

    while len(done) < k and time.monotonic() < deadline:
        try:
            take(0.5)
            continue
        except queue_mod.Empty:
            pass
        for i, p in enumerate(procs):
            if i in done or p.exitcode is None:
                continue
            try:  # its report may have arrived just before it ended
                while i not in done:
                    take(0)
            except queue_mod.Empty:
                done[i] = {"child": i, "ok": False, "exitcode": p.exitcode,
                           "error": f"died with exit code {p.exitcode} before reporting"}
                fail()
    for i in range(k):
        if i not in done:
            done[i] = {"child": i, "ok": False, "error": "no report in time (stopped)"}
    barrier.abort()
    for p in procs:
        p.join(1)
        _stop(p)
    queue.close()
    return [done[i] for i in range(k)]
