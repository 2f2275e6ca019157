"""Peak memory and time of decoding each format and mode, against the decode budget's estimate.

``python -m benchmarks.decode_memory [--megapixels 12] [--cases png_RGBA,...] [--json FILE]``

For every case of :data:`benchmarks.decode_cases.CASES` (and the hostile rows: a 40 MP RGBA PNG,
a progressive JPEG with thousands of scans, a TIFF whose tile is far larger than the image) the
image is made in this process, then probed and decoded at full resolution
(:func:`processors.decode.probe_image`, :func:`processors.decode.decode_probed`) in a forked
child, which measures:

* ``peak``: the child's resident-set high-water mark during the decode minus its RSS before it
  (Linux ``/proc/self/status`` ``VmHWM`` after resetting it with ``clear_refs`` 5): what the
  decoders allocate in C (libjpeg-turbo, zlib, libtiff, libwebp, libheif, Pillow's own image)
  and what NumPy/OpenCV allocate;
* ``traced``: the peak of Python-visible allocations (``tracemalloc``: NumPy arrays, bytes);
* ``estimate``: :func:`processors.decode.decoded_bytes` of the probed header, what the worker's
  decode budget counts for the image;
* ``ms``: wall time of the decode (the probe excluded).

``ok`` is ``peak <= estimate``. A case the decoder refuses shows its reason code instead
(``IMAGE_TOO_COMPLEX`` for the hostile rows, decided at the probe). Figures are bytes per
displayed pixel so cases of other sizes compare; the MB columns are for the size run.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing as mp
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import decode_cases as dc
from processors.decode import DecodeSettings, decode_probed, decoded_bytes, probe_image
from processors.errors import DecodeError

_LIBC = ctypes.CDLL("libc.so.6")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _measure(data: bytes, settings: DecodeSettings, out: Any) -> None:
    """In the forked child: probe, then decode with the RSS high-water mark reset; send a dict."""
    try:
        img = probe_image(data, settings)
    except DecodeError as e:
        out.send({"refused": str(e.reason), "at": "probe", "error": str(e)[:160]})
        return
    est = decoded_bytes(img)
    tracemalloc.start()
    before = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS (Linux >= 4.0)
    t0 = time.perf_counter()
    try:
        px, _ = decode_probed(img, settings)
    except DecodeError as e:
        out.send({"refused": str(e.reason), "at": "decode", "error": str(e)[:160],
                  "ms": (time.perf_counter() - t0) * 1000, "estimate": est})
        return
    ms = (time.perf_counter() - t0) * 1000
    peak = _status_kb("VmHWM") - before
    traced = tracemalloc.get_traced_memory()[1]
    out.send({"peak": peak, "traced": traced, "estimate": est, "ms": ms,
              "px": img.width * img.height, "shape": list(px.shape),
              "mode": img.mode, "format": img.format})


def measure(data: bytes, settings: DecodeSettings, timeout_s: float = 300.0) -> dict[str, Any]:
    """Probe and decode ``data`` in a forked child; its figures (see the module docstring)."""
    gc.collect()
    _LIBC.malloc_trim(0)  # hand freed heap pages back, so the child's RSS starts at what is live
    ctx = mp.get_context("fork")
    rx, tx = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_measure, args=(data, settings, tx))
    p.start()
    got = rx.recv() if rx.poll(timeout_s) else {"refused": "TIMEOUT", "at": "decode"}
    p.join(5)
    if p.is_alive():
        p.kill()
    return {"file_bytes": len(data), **got}


def hostile() -> dict[str, Callable[[], bytes]]:
    """The hostile rows: name -> builder (their sizes are fixed: the issue's examples, and a
    JPEG at the scan limit at 40 MP: the longest a JPEG's scans can make a decode)."""
    return {
        "hostile_png_RGBA_40MP": lambda: dc.png_rgba(7690, 5200),
        "hostile_jpeg_6694_scans": lambda: dc.jpeg_many_scans(4000, 3000, 6694),
        "hostile_jpeg_100_scans_40MP": lambda: dc.jpeg_many_scans(7690, 5200, 99),
        "hostile_tiff_8192px_tile_in_64px": lambda: dc.tiff_big_tile(64, 64, 8192),
    }


def run(megapixels: float, names: list[str] | None, settings: DecodeSettings,
        with_hostile: bool = True) -> list[dict[str, Any]]:
    """Measure each case at ``megapixels`` (4:3) and the hostile rows; one row per case."""
    w = int(round((megapixels * 1e6 * 4 / 3) ** 0.5))
    h = int(round(megapixels * 1e6 / w))
    rows = []
    todo: list[tuple[str, Callable[[], bytes]]] = [
        (n, (lambda b=b: b(w, h))) for n, b in dc.CASES.items() if not names or n in names]
    if with_hostile:
        todo += [(n, b) for n, b in hostile().items() if not names or n in names]
    for name, build in todo:
        data = build()
        row = {"case": name, **measure(data, settings)}
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _mb(x: float) -> str:
    return f"{x / 1e6:8.1f}"


def _line(r: dict[str, Any]) -> str:
    if "refused" in r:
        t = f"{r['ms']:9.0f}" if "ms" in r else "        -"
        return (f"| {r['case']:34s} | {r['file_bytes'] / 1e6:7.2f} | refused {r['refused']} at "
                f"{r['at']} | | | | {t} | |")
    px = r["px"]
    return (f"| {r['case']:34s} | {r['file_bytes'] / 1e6:7.2f} | {r['mode']:6s} | "
            f"{r['peak'] / px:6.2f} | {r['estimate'] / px:6.2f} | {_mb(r['peak'])} / "
            f"{_mb(r['estimate'])} | {r['ms']:9.0f} | "
            f"{'ok' if r['peak'] <= r['estimate'] else 'OVER'} |")


HEADER = ("| case | file MB | mode | peak B/px | estimate B/px | peak / estimate MB | ms | ok |\n"
          "|---|---:|---|---:|---:|---:|---:|---|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.decode_memory",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--megapixels", type=float, default=12.0, help="size of the CASES images")
    ap.add_argument("--cases", default="", help="comma-separated subset of case names")
    ap.add_argument("--no-hostile", action="store_true", help="skip the hostile rows")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    a = ap.parse_args(argv)
    names = [n for n in a.cases.split(",") if n] or None
    print(HEADER, flush=True)
    rows = run(a.megapixels, names, DecodeSettings(), with_hostile=not a.no_hostile)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    over = [r["case"] for r in rows if "peak" in r and r["peak"] > r["estimate"]]
    print(f"\n{len(rows)} cases, {len(over)} above the "
          f"estimate{': ' + ', '.join(over) if over else ''}")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
