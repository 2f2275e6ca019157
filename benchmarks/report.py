"""Writing a processor benchmark's JSON + PNG (shared by card_bench.py and idphoto_bench.py)."""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def save_processor_report(name: str, proc: Any, threads: int, load0: float,
                          rows: Sequence[dict], out: Path,
                          plot: Callable[[Sequence[dict], Path], None]) -> None:
    """Write ``out/{name}.json`` (model, provider, machine, load average before/after, rows) and
    ``out/{name}.png`` (via ``plot``), and print where they went."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "model": proc.model.version, "provider": proc.model.provider,
           "cpu_count": os.cpu_count(), "machine": platform.machine(),
           "intra_op_threads": threads,
           "load_avg_1m_before_after": [load0, os.getloadavg()[0]], "rows": list(rows)}
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(rows, out / f"{name}.png")
    print(f"wrote {out / f'{name}.json'} and {out / f'{name}.png'}")


def bench_parser(doc: str, n: int, n_help: str) -> argparse.ArgumentParser:
    """Arguments shared by the processor benchmarks: ``--n``, ``--rounds``, ``--threads``,
    ``--device``, ``--out`` (default ``benchmarks/results``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--n", type=int, default=n, help=n_help)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (median)")
    ap.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results"))
    return ap
