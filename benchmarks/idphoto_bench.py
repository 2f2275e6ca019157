"""ID-photo throughput on this machine: images/s at batch 1 and 8, alpha matting off and on.

Not a test. Inputs are decoded portraits made from scikit-image's public-domain astronaut
(flipped, shifted and rescaled copies, 512-768 px), so every image is accepted and goes through
matting, faces, framing, compositing and JPEG encoding. Two figures per configuration:
``processor_ips`` (``IdPhotoProcessor.process_batch`` end to end, decoded images in, JPEG bytes
out) and ``model_ips`` (the batched U2-Net call alone, pre/post-processing included).

    .venv/bin/python -m benchmarks.idphoto_bench [--n 16] [--rounds 2] [--size one_inch]

Writes ``benchmarks/results/idphoto.json`` and ``idphoto.png`` (bar chart) unless ``--out``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cv2
import numpy as np
from skimage import data

from benchmarks.report import bench_parser, save_processor_report
from processors.base import Item
from processors.idphoto.processor import IdPhotoProcessor
from processors.idphoto.settings import IdPhotoSettings
from processors.runtime import RuntimeSettings
from streams.logs import configure_logging

BATCHES = (1, 8)


def portraits(n: int) -> list[np.ndarray]:
    """``n`` BGR portraits ``(H, W, 3) uint8`` derived from the astronaut (deterministic)."""
    base = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        im = base[:, ::-1] if i % 2 else base
        scale = float(rng.uniform(1.0, 1.5))
        im = cv2.resize(im, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
        dx = int(rng.integers(0, 40))
        out.append(np.ascontiguousarray(im[:, dx:]))
    return out


def time_config(proc: IdPhotoProcessor, imgs: list[np.ndarray], batch: int, size: str,
                alpha_matting: bool) -> tuple[float, float, int]:
    """One timed pass: ``(processor images/s, model-only images/s, accepted count)``."""
    proc.matting.model.chosen_bucket = batch  # force the batch (warm-up on a CPU may pick 1)
    items = [Item.from_array(f"b{i}", im, {"size": size, "alpha_matting": alpha_matting})
             for i, im in enumerate(imgs)]
    t0 = time.perf_counter()
    accepted = 0
    for k in range(0, len(items), batch):
        accepted += sum(o.status == "accepted" for o in proc.process_batch(items[k:k + batch]))
    proc_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for k in range(0, len(imgs), batch):
        proc.matting.predict(imgs[k:k + batch])
    model_s = time.perf_counter() - t0
    return len(imgs) / proc_s, len(imgs) / model_s, accepted


def run(proc: IdPhotoProcessor, imgs: list[np.ndarray], size: str, rounds: int) -> list[dict]:
    """Every configuration (batch 1/8 x alpha matting off/on), interleaved over ``rounds``
    rounds so that load from other processes hits them alike; medians per configuration."""
    configs = [(b, am) for am in (False, True) for b in BATCHES]
    for b, am in configs:  # untimed: ORT kernels per shape, numba JIT of pymatting
        proc.matting.model.chosen_bucket = b
        proc.process_batch([Item.from_array("w", im, {"size": size, "alpha_matting": am})
                            for im in imgs[:b]])
    runs: dict[tuple[int, bool], list[tuple[float, float, int]]] = {c: [] for c in configs}
    for _ in range(rounds):
        for b, am in configs:
            runs[(b, am)].append(time_config(proc, imgs, b, size, am))
    rows = []
    for (b, am), r in runs.items():
        p_ips = float(np.median([x[0] for x in r]))
        rows.append({"batch": b, "alpha_matting": am, "size": size, "n": len(imgs),
                     "rounds": rounds, "accepted": min(x[2] for x in r),
                     "processor_ips": round(p_ips, 3),
                     "model_ips": round(float(np.median([x[1] for x in r])), 3),
                     "processor_ms_per_image": round(1000.0 / p_ips, 1)})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Bar chart (PNG, OpenCV drawing) of processor and model images/s per configuration."""
    w, h, pad = 640, 360, 40
    img = np.full((h, w, 3), 255, np.uint8)
    top = max(max(r["processor_ips"], r["model_ips"]) for r in rows) * 1.15
    slot = (w - 2 * pad) / len(rows)
    for i, r in enumerate(rows):
        for j, (key, colour) in enumerate((("processor_ips", (200, 120, 40)),
                                           ("model_ips", (60, 160, 60)))):
            x0 = int(pad + i * slot + 10 + j * (slot - 20) / 2)
            x1 = int(x0 + (slot - 20) / 2 - 4)
            y1 = int(h - pad - (h - 2 * pad) * r[key] / top)
            cv2.rectangle(img, (x0, y1), (x1, h - pad), colour, -1)
            cv2.putText(img, f"{r[key]:.2f}", (x0, y1 - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.38,
                        (0, 0, 0), 1)
        label = f"b{r['batch']} am={'on' if r['alpha_matting'] else 'off'}"
        cv2.putText(img, label, (int(pad + i * slot + 10), h - pad + 16),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1)
    cv2.putText(img, "idphoto images/s (blue: processor end to end, green: U2-Net only)",
                (pad, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1)
    cv2.imwrite(str(path), img)


def main() -> None:
    ap = bench_parser(__doc__, 16, "images per configuration")
    ap.add_argument("--size", default="one_inch")
    ap.add_argument("--model", default="u2netp")
    a = ap.parse_args()
    configure_logging("INFO")
    rt = RuntimeSettings(device=a.device, buckets=BATCHES, intra_op_threads=a.threads)
    proc = IdPhotoProcessor(IdPhotoSettings(model=a.model), rt)
    imgs = portraits(a.n)
    load0 = os.getloadavg()[0]
    rows = run(proc, imgs, a.size, a.rounds)
    for r in rows:
        print(json.dumps(r))
    save_processor_report("idphoto", proc, a.threads, load0, rows, a.out, plot)


if __name__ == "__main__":
    main()
