"""Card throughput on this machine: images/s at batch 1, 8 and 32, decode and warp included.

Not a test. Inputs are JPEG bytes of synthetic card photos (``processors.card.training.synth``,
seed 99, 960 x 720 and 1280 x 960 px, cards on textures so every image is accepted). Per batch
size, one timed pass does: safe decode (``processors.decode.decode_image``) of every file, then
``CardProcessor.process_batch`` per chunk of ``batch`` (one u2netp call per chunk, quad
refinement, homography warp to 1011 x 637 px, upright decision, verdicts, JPEG encode).
``model_ips`` times the batched u2netp call alone (preprocessing included) for the same chunks.

    .venv/bin/python -m benchmarks.card_bench [--n 32] [--rounds 2] [--threads 0]

Writes ``benchmarks/results/card.json`` and ``card.png`` unless ``--out``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.report import bench_parser, save_processor_report
from processors.base import Item
from processors.card.detect import preprocess
from processors.card.processor import CardProcessor
from processors.card.settings import CardSettings
from processors.card.training import synth
from processors.decode import DecodeSettings, decode_image, probe_image
from processors.runtime import RuntimeSettings
from streams.logs import configure_logging

BATCHES = (1, 8, 32)


def jpegs(n: int) -> list[bytes]:
    """``n`` JPEG files (bytes) of synthetic cards at random known corners (deterministic)."""
    rng = np.random.default_rng(99)
    out = []
    for i in range(n):
        w, h = (960, 720) if i % 2 else (1280, 960)
        quad = synth.random_quad(rng, w, h, 85.60 / 53.98, float(rng.uniform(-20, 20)))
        img, _ = synth.card_on_texture(rng, quad, (w, h), texture=("gravel", "brick")[i % 2])
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        out.append(buf.tobytes())
    return out


def one_pass(proc: CardProcessor, files: list[bytes], batch: int,
             dec: DecodeSettings) -> tuple[float, float, int]:
    """``(end-to-end images/s, model-only images/s, accepted)`` for one pass at ``batch``."""
    proc.batched_model.chosen_bucket = batch  # force the batch (CPU warm-up may choose 1)
    t0 = time.perf_counter()
    probed = [probe_image(b, dec) for b in files]
    accepted = 0
    for k in range(0, len(probed), batch):
        outs = proc.process_batch([Item(f"b{k + i}", e) for i, e in enumerate(probed[k:k + batch])])
        accepted += sum(o.status == "accepted" for o in outs)
    e2e = len(files) / (time.perf_counter() - t0)
    imgs = [decode_image(b, dec) for b in files]
    t0 = time.perf_counter()
    for k in range(0, len(imgs), batch):
        proc.batched_model.run(np.stack([preprocess(im) for im in imgs[k:k + batch]]))
    model = len(files) / (time.perf_counter() - t0)
    return e2e, model, accepted


def plot(rows: list[dict], path: Path) -> None:
    """Line chart (PNG, OpenCV drawing): images/s against batch size, end to end and model."""
    w, h, pad = 560, 340, 50
    img = np.full((h, w, 3), 255, np.uint8)
    top = max(max(r["e2e_ips"], r["model_ips"]) for r in rows) * 1.2
    xs = [pad + i * (w - 2 * pad) / max(1, len(rows) - 1) for i in range(len(rows))]
    cv2.line(img, (pad, h - pad), (w - pad, h - pad), (0, 0, 0), 1)
    for key, colour in (("e2e_ips", (200, 120, 40)), ("model_ips", (60, 160, 60))):
        pts = [(int(x),
                int(h - pad - (h - 2 * pad) * r[key] / top)) for x, r in zip(xs, rows, strict=True)]
        cv2.polylines(img, [np.array(pts, np.int32)], False, colour, 2, cv2.LINE_AA)
        for (x, y), r in zip(pts, rows, strict=True):
            cv2.circle(img, (x, y), 4, colour, -1)
            cv2.putText(img, f"{r[key]:.2f}", (x + 6, y - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                        colour, 1)
    for x, r in zip(xs, rows, strict=True):
        cv2.putText(img, f"batch {r['batch']}", (int(x) - 24, h - pad + 20),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1)
    cv2.putText(img, "card images/s (blue: decode..JPEG end to end, green: u2netp only)",
                (10, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1)
    cv2.imwrite(str(path), img)


def main() -> None:
    a = bench_parser(__doc__, 32, "images per pass").parse_args()
    configure_logging("WARNING")
    rt = RuntimeSettings(device=a.device, buckets=BATCHES, intra_op_threads=a.threads)
    proc = CardProcessor(CardSettings(), rt)
    dec = DecodeSettings()
    files = jpegs(a.n)
    for b in BATCHES:  # untimed: ORT kernels per shape
        proc.batched_model.chosen_bucket = b
        proc.process_batch([Item("w", probe_image(f, dec)) for f in files[:b]])
    load0 = os.getloadavg()[0]
    runs: dict[int, list[tuple[float, float, int]]] = {b: [] for b in BATCHES}
    for _ in range(a.rounds):
        for b in BATCHES:
            runs[b].append(one_pass(proc, files, b, dec))
    rows = []
    for b, r in runs.items():
        e2e = float(np.median([x[0] for x in r]))
        rows.append({"batch": b, "n": len(files), "rounds": a.rounds,
                     "accepted": min(x[2] for x in r), "e2e_ips": round(e2e, 3),
                     "model_ips": round(float(np.median([x[1] for x in r])), 3),
                     "e2e_ms_per_image": round(1000.0 / e2e, 1)})
        print(json.dumps(rows[-1]))
    save_processor_report("card", proc, a.threads, load0, rows, a.out, plot)


if __name__ == "__main__":
    main()
