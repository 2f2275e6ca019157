"""Train the MRZ character recogniser (``mrz_char.onnx``): a small CNN over fixed-pitch cells.

Data, all made here (no real document): random valid MRZs (``documents.random_fields``, and
30 % lines of random characters with the zone's filler runs, so the model reads characters, not
a language) printed in OCR-B on the project's card templates (``documents.render_document``),
then captured as the pipeline sees them: shrunk to an effective resolution of 140-430 dpi,
blurred, lit (low light, glare spots), noised, JPEG-compressed, warped into the MRZ band
(``processors.card.mrz.locate.band_maps``) through a homography perturbed like a quad's error,
and cut by the same locator, line cropper and cell cutter the service uses (``find_lines``,
``line_crops``, ``recognise.cells``). Lines the locator does not find as the zone's lines are
left out.

Model (:func:`build_model`): three 3 x 3 conv layers (16-32-48 channels, batch norm, ReLU,
2 x 2 max pooling each) on the ``32 x 24`` cell, a 96-unit layer and 37 logits; about 0.1 M
parameters. Adam, one-cycle learning rate, cross-entropy; cells shifted by up to 2 px and
re-lit at random while training.

Why cells and not a CTC line model: Doc 9303 fixes the pitch, so the locator's line ends give
every character's place; a cell costs 1/30 of a line, so training fits this shared 2-core
machine (a CTC CRNN on line windows ran at about 8 steps a minute here under ``nice -n 15``;
this trains at about 10 times that), and each character's softmax is its list of
alternatives.

Commands (seeded; the recipes of the shipped file are in ``processors/card/MODEL.md``): the
first model from random weights, then the shipped fine-tune of it on the evaluation
generator's photos and scans::

    nice -n 15 python -m processors.card.training.mrz_train --out /tmp/mrz_first.onnx \
        --docs 1200 --steps 600 --batch 128 --lr 4e-3 --seed 20261204 --cache /tmp/mrz_cache
    python -m processors.card.training.mrz_train --out /tmp/mrz_char.onnx --photos \
        --scan-share 0.2 --init /tmp/mrz_first.onnx --docs 1000 \
        --steps 3000 --batch 128 --lr 2e-3 --seed 20261207 --cache /tmp/mrz_cache

(the first model as shipped before the fine-tune, sha256 ``be486a59…``, is in the repository's
history: ``git show 786fd0c:processors/card/weights/mrz_char.onnx > /tmp/mrz_first.onnx``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from processors.card.mrz.icao import ALPHABET, SHAPE, Format, compose
from processors.card.mrz.locate import band_maps, find_lines, line_crops
from processors.card.mrz.read import locate_zone
from processors.card.mrz.recognise import (
    CELL_H,
    CELL_W,
    CLASSES,
    INK_SPAN,
    PAD_PX,
    cell_batch,
    cells,
    measured_pitch,
)
from processors.card.rectify import canonical_size, homography
from processors.card.training.documents import (
    DOC_TYPE,
    REFERENCE_DATE,
    document,
    random_fields,
    render_document,
)
from processors.card.training.synth import jpeg_round_trip
from processors.logs import configure_logging

FACE_PX_PER_MM = 10.0
"""Resolution the training faces are rendered at (254 dpi; captures above it come out soft)."""


def _random_lines(rng: np.random.Generator, fmt: Format) -> tuple[str, ...]:
    """Lines of random MRZ characters in ``fmt``'s shape, with filler runs like a real zone's."""
    rows, width = SHAPE[fmt]
    out = []
    for _ in range(rows):
        chars = list(rng.choice(list(ALPHABET[:-1]), size=width))
        for _ in range(int(rng.integers(0, 4))):
            a = int(rng.integers(0, width))
            b = min(width, a + int(rng.integers(1, 16)))
            chars[a:b] = ["<"] * (b - a)
        out.append("".join(chars))
    return tuple(out)


def capture_band(rng: np.random.Generator, face: np.ndarray, fmt: Format) -> np.ndarray:
    """The bottom MRZ band (grey, :data:`processors.card.mrz.locate.BAND_PX_PER_MM`) of
    ``face`` as the service would warp it from a photo of the document (see the module doc).
    Only the face's bottom half is processed (the band lies within it)."""
    fh, fw = face.shape[:2]
    y0 = fh // 2
    img: np.ndarray = cv2.cvtColor(face[y0:], cv2.COLOR_BGR2GRAY).astype(np.float32)
    eff = rng.uniform(5.5, 17.0) / FACE_PX_PER_MM  # effective px per mm, relative
    sw, sh = max(8, int(fw * eff)), max(8, int((fh - y0) * eff))
    small: np.ndarray = cv2.resize(img, (sw, sh), interpolation=cv2.INTER_AREA)
    gx = np.linspace(-0.5, 0.5, sw, dtype=np.float32)[None, :]
    gy = np.linspace(0.0, 0.5, sh, dtype=np.float32)[:, None]
    a = rng.uniform(0, 2 * np.pi)
    small *= 1 + rng.uniform(-0.3, 0.2) * (np.cos(a) * gx + np.sin(a) * gy)
    small *= rng.uniform(0.3, 0.6) if rng.random() < 0.12 else rng.uniform(0.85, 1.3)
    if rng.random() < 0.15:  # a glare spot on or near the zone
        c = (rng.uniform(0, sw), rng.uniform(0.2, 1.0) * sh)
        r = rng.uniform(0.03, 0.12) * sw
        xx = np.arange(sw, dtype=np.float32)[None, :] - c[0]
        yy = np.arange(sh, dtype=np.float32)[:, None] - c[1]
        small += rng.uniform(150, 400) * np.exp(-(xx * xx + yy * yy) / (2 * r * r))
    small = np.clip(small, 0, 255).astype(np.uint8)
    if rng.random() < 0.7:
        small = cv2.GaussianBlur(small, (0, 0), rng.uniform(0.3, 1.3))
    if rng.random() < 0.7:
        small = np.clip(small + rng.normal(0, rng.uniform(1, 7), small.shape), 0, 255).astype(
            np.uint8)
    small = jpeg_round_trip(small, int(rng.integers(50, 96)), cv2.IMREAD_GRAYSCALE)
    doc_type = DOC_TYPE[fmt]
    cw, ch = canonical_size(doc_type, 300)  # the card as the service rectifies it
    a_map, size = band_maps(doc_type, (cw, ch))[0]
    # rectified card px -> small px (the face's bottom half), corners moved like a quad's error
    src = np.array([[0, 0], [cw - 1, 0], [cw - 1, ch - 1], [0, ch - 1]], np.float32)
    dst = np.array([[0, -sh], [sw - 1, -sh], [sw - 1, sh - 1], [0, sh - 1]], np.float32)
    dst += rng.normal(0, 0.004, (4, 2)).astype(np.float32) * [sw, 2 * sh]
    card_to_small = cv2.getPerspectiveTransform(src, dst).astype(np.float64)
    return cv2.warpPerspective(small, card_to_small @ a_map, size,
                               flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                               borderMode=cv2.BORDER_REPLICATE)


def _cached(path: Path, make: Callable[[], tuple[list[np.ndarray], list[str]]]
            ) -> tuple[list[np.ndarray], list[str]]:
    """Line crops and texts read from ``path`` (an ``.npz``), else made and kept there."""
    if path.is_file():
        return _load_lines(path)
    made, said = make()
    _save_lines(path, made, said)
    return made, said


def line_samples(seed: int, n_docs: int, cache: Path | None = None
                 ) -> tuple[list[np.ndarray], list[str]]:
    """Line crops and their text from ``n_docs`` synthetic documents (seeded); with ``cache``
    (a folder), kept there as ``lines_{seed}_{n_docs}.npz`` and read back on the next run."""
    if cache is not None:
        return _cached(Path(cache) / f"lines_{seed}_{n_docs}.npz",
                       lambda: line_samples(seed, n_docs))
    rng = np.random.default_rng(seed)
    crops: list[np.ndarray] = []
    texts: list[str] = []
    for _ in range(n_docs):
        u = rng.random()
        fmt = Format.TD3 if u < 0.4 else Format.TD1 if u < 0.75 else Format.TD2
        lines = (_random_lines(rng, fmt) if rng.random() < 0.3
                 else compose(fmt, **random_fields(rng, fmt, REFERENCE_DATE)))
        face, _, _, _ = render_document(rng, fmt, lines, FACE_PX_PER_MM)
        band = capture_band(rng, face, fmt)
        found = find_lines(band)
        if len(found) != len(lines):
            continue
        crops += line_crops(band, found)
        texts += list(lines)
    return crops, texts


CORNER_ERROR = 0.004
"""Standard deviation of the corner error added to a photo's true quad (share of the quad's
extent), like the localiser's."""
PITCH_AGREE = 0.03
"""A photographed line is kept for training only when its print's period
(:func:`processors.card.mrz.recognise.measured_pitch`) agrees with the pitch its ends imply
within this share: otherwise its ends are off (an end lost or a stray mark joined) and its
nominal cells would carry the wrong labels."""


SCAN_SHARE = 0.2
"""Share of :func:`photo_line_samples`' documents captured as flatbed scans
(:func:`processors.card.training.documents.scan`): crisp print at 150-300 dpi, which the first
model, trained on degraded captures only, read right but unsure (a clean scan's zone came out
MRZ_UNREADABLE on 20 of 120 scans)."""


def photo_line_samples(seed: int, n_docs: int, cache: Path | None = None,
                       scan_share: float = 0.0) -> tuple[list[np.ndarray], list[str]]:
    """Line crops and their text from ``n_docs`` documents photographed by the evaluation
    set's own generator (:func:`processors.card.training.documents.document`: pinhole tilt,
    backgrounds, hands, low light, glare, blur, noise, JPEG, grey copies), ``scan_share`` of
    them scanned instead, rectified from the true corners moved by :data:`CORNER_ERROR`, and
    located and cut as the reader does at run time
    (:func:`processors.card.mrz.read.locate_zone`). With ``cache`` (a folder), kept there as
    ``photo_lines_{seed}_{n_docs}[_scans{share}].npz``. Never give it an evaluation set's
    seed."""
    if cache is not None:
        tag = f"_scans{scan_share:g}" if scan_share else ""
        return _cached(Path(cache) / f"photo_lines_{seed}_{n_docs}{tag}.npz",
                       lambda: photo_line_samples(seed, n_docs, None, scan_share))
    rng = np.random.default_rng(seed)
    crops: list[np.ndarray] = []
    texts: list[str] = []
    for _ in range(n_docs):
        scanned = bool(scan_share) and rng.random() < scan_share
        img, truth = document(rng, capture="scan" if scanned else "photo")
        grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        quad = np.asarray(truth.quad, np.float64)
        quad = quad + rng.normal(0, CORNER_ERROR, (4, 2)) * (quad.max(0) - quad.min(0))
        size = canonical_size(truth.doc_type, 300)
        h = homography(quad, size)
        bands = [cv2.warpPerspective(grey, h @ a, bs, flags=cv2.INTER_LINEAR
                                     | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)
                 for a, bs in band_maps(truth.doc_type, size)]
        zone = locate_zone(bands)
        if zone is None or len(zone.crops) < len(truth.lines):
            continue
        for crop, text in zip(zone.crops[-len(truth.lines):], truth.lines, strict=True):
            nominal = (crop.shape[1] - 2 * PAD_PX) / (len(text) - 1 + INK_SPAN)
            if abs(measured_pitch(crop, nominal) / nominal - 1) <= PITCH_AGREE:
                crops.append(crop)
                texts.append(text)
    return crops, texts


def _load_lines(path: Path) -> tuple[list[np.ndarray], list[str]]:
    z = np.load(path, allow_pickle=False)
    widths = z["widths"].tolist()
    flat, offs = z["pixels"], np.cumsum([0] + [32 * w for w in widths])
    return ([flat[offs[i]:offs[i + 1]].reshape(32, w) for i, w in enumerate(widths)],
            z["texts"].tolist())


def _save_lines(path: Path, crops: list[np.ndarray], texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, pixels=np.concatenate([c.ravel() for c in crops]),
             widths=np.array([c.shape[1] for c in crops]), texts=np.array(texts))


def cell_samples(crops: list[np.ndarray], texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every character cell of the lines (:func:`processors.card.mrz.recognise.cells`) and its
    class: ``(N, 32, 24) uint8``, ``(N,) int64``."""
    xs = [cells(c, len(t)) for c, t in zip(crops, texts, strict=True)]
    ys = [np.array([CLASSES.index(ch) for ch in t], np.int64) for t in texts]
    return np.concatenate(xs), np.concatenate(ys)


def _augment(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Cells ``(B, 32, 24) uint8`` shifted by up to 2 px across and 1 px up or down (a cell
    cut a little off its character), re-lit, some smudged."""
    b, h, w = x.shape
    padded = np.pad(x, ((0, 0), (1, 1), (2, 2)), mode="edge")
    rows = rng.integers(0, 3, (b, 1)) + np.arange(h)[None, :]
    cols = rng.integers(0, 5, (b, 1)) + np.arange(w)[None, :]
    out = padded[np.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
    f = out.astype(np.float32) * rng.uniform(0.6, 1.3, (len(x), 1, 1)) + rng.uniform(
        -30, 30, (len(x), 1, 1))
    smudge = rng.random(len(x)) < 0.05
    f[smudge] = cv2.GaussianBlur(f[smudge].transpose(1, 2, 0), (0, 0), 1.5).reshape(
        32, 24, -1).transpose(2, 0, 1) if smudge.any() else f[smudge]
    return np.clip(f, 0, 255).astype(np.uint8)


def build_model():  # noqa: ANN201 - torch is imported lazily
    """The cell classifier (torch): ``(N, 1, 32, 24)`` -> ``(N, 37)`` logits."""
    from torch import nn

    def block(i: int, o: int) -> list:
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                nn.ReLU(inplace=True), nn.MaxPool2d(2)]

    return nn.Sequential(*block(1, 16), *block(16, 32), *block(32, 48),   # 32x24 -> 4x3
                         nn.Flatten(), nn.Linear(48 * 4 * 3, 96), nn.ReLU(inplace=True),
                         nn.Dropout(0.1), nn.Linear(96, len(CLASSES)))


def export(model, out: Path) -> None:  # noqa: ANN001
    """Write ``model`` as ONNX (opset 17) with a symbolic batch."""
    import torch

    model.eval()
    torch.onnx.export(model, (torch.zeros(1, 1, CELL_H, CELL_W),), str(out), input_names=["cells"],
                      output_names=["logits"], dynamic_axes={"cells": {0: "batch"},
                                                             "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)


def line_exact(model, crops: list[np.ndarray], texts: list[str],  # noqa: ANN001
               frozen_norms: bool = False) -> tuple[float, float]:
    """``(exact lines, character accuracy)`` of ``model`` on whole lines (the model is left in
    training mode, its batch norms frozen again when ``frozen_norms``)."""
    import torch

    x, y = cell_samples(crops, texts)
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(cell_batch(x))).argmax(1).numpy()
    model.train()
    if frozen_norms:
        freeze_norms(model)
    ok = pred == y
    ends = np.cumsum([len(t) for t in texts])
    lines = [bool(ok[a:b].all()) for a, b in zip(np.r_[0, ends[:-1]], ends, strict=True)]
    return float(np.mean(lines)), float(ok.mean())


def load_init(model, onnx_file: Path) -> None:  # noqa: ANN001
    """Start ``model`` (:func:`build_model`) from an exported recogniser: the ONNX file's
    convolutions carry their batch norm folded in (export in eval mode), so each conv takes the
    folded weights, its batch norm the folded bias with unit scale, zero mean and unit
    variance; the batch norms then keep those statistics (:func:`freeze_norms`)."""
    import onnx
    import torch
    from onnx import numpy_helper
    from torch import nn

    m = onnx.load(str(onnx_file))
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    gemms = [n for n in m.graph.node if n.op_type == "Gemm"]
    tconvs = [x for x in model if isinstance(x, nn.Conv2d)]
    norms = [x for x in model if isinstance(x, nn.BatchNorm2d)]
    lins = [x for x in model if isinstance(x, nn.Linear)]
    with torch.no_grad():
        for node, conv, bn in zip(convs, tconvs, norms, strict=True):
            conv.weight.copy_(torch.tensor(init[node.input[1]]))
            bn.weight.fill_(1.0)
            bn.bias.copy_(torch.tensor(init[node.input[2]]))
            assert bn.running_mean is not None and bn.running_var is not None  # tracked
            bn.running_mean.zero_()
            bn.running_var.fill_(1.0 - bn.eps)
        for node, lin in zip(gemms, lins, strict=True):
            lin.weight.copy_(torch.tensor(init[node.input[1]]))
            lin.bias.copy_(torch.tensor(init[node.input[2]]))


def freeze_norms(model) -> None:  # noqa: ANN001
    """Batch norms of ``model`` to eval mode (their statistics kept, their scale and bias
    still trained): a fine-tuned start keeps the function it was exported with."""
    from torch import nn

    for x in model:
        if isinstance(x, nn.BatchNorm2d):
            x.eval()


def train(out: Path, docs: int, steps: int, seed: int, batch: int = 256, lr: float = 3e-3,
          log: Path | None = None, val_docs: int = 150, cache: Path | None = None,
          photos: bool = False, init: Path | None = None, scan_share: float = 0.0) -> dict:
    """Make the data (or read it from ``cache``), train, export ``out``; returns the final
    figures. ``photos``: the lines come from the evaluation generator's photos
    (:func:`photo_line_samples`) instead of :func:`line_samples`; ``init``: start from that
    exported recogniser (:func:`load_init`) instead of random weights; ``scan_share``: with
    ``photos``, that share of the documents scanned (:data:`SCAN_SHARE` is the recipe's)."""
    import torch

    torch.manual_seed(seed)
    t0 = time.time()
    def samples(s: int, n: int) -> tuple[list[np.ndarray], list[str]]:
        if photos:
            return photo_line_samples(s, n, cache, scan_share)
        return line_samples(s, n, cache)

    crops, texts = samples(seed, docs)
    val_c, val_t = samples(seed + 1, val_docs)
    x, y = cell_samples(crops, texts)
    print(f"data: {len(crops)} lines, {len(x)} cells, {len(val_c)} validation lines, "
          f"{time.time() - t0:.0f} s", flush=True)
    model = build_model()
    if init is not None:
        load_init(model, init)
        freeze_norms(model)
        print(json.dumps({"step": 0, "val_lines_chars": line_exact(model, val_c, val_t,
                                                                   init is not None)}),
              flush=True)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.15)
    loss_fn = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(seed + 2)
    logf = open(log, "w") if log else None  # noqa: SIM115
    for step in range(1, steps + 1):
        idx = rng.integers(0, len(x), batch)
        xb = torch.from_numpy(cell_batch(_augment(rng, x[idx])))
        loss = loss_fn(model(xb), torch.from_numpy(y[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps:
            row = {"step": step, "loss": round(loss.item(), 4), "s": round(time.time() - t0)}
            if step % 250 == 0 or step == steps:
                row["val_lines"], row["val_chars"] = (round(v, 4) for v in
                                                      line_exact(model, val_c, val_t,
                                                                 init is not None))
                export(model, out.with_suffix(f".step{step}.onnx"))  # a run can stop early
                model.train()
                if init is not None:
                    freeze_norms(model)
            print(json.dumps(row), flush=True)
            if logf:
                logf.write(json.dumps(row) + "\n")
                logf.flush()
    export(model, out)
    lines, chars = line_exact(model, val_c, val_t, init is not None)
    return {"lines": len(crops), "cells": len(x), "val_lines": len(val_c),
            "val_exact_lines": lines, "val_chars": chars, "minutes": (time.time() - t0) / 60}


def main() -> None:
    """CLI entry (see the module doc)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=1200)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="folder keeping the line crops made")
    ap.add_argument("--val-docs", type=int, default=150)
    ap.add_argument("--photos", action="store_true",
                    help="lines from the evaluation generator's photos (photo_line_samples)")
    ap.add_argument("--init", type=Path, default=None, help="start from this exported model")
    ap.add_argument("--scan-share", type=float, default=0.0,
                    help=f"with --photos, this share scanned (the recipe: {SCAN_SHARE})")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    print(json.dumps(train(a.out, a.docs, a.steps, a.seed, a.batch, a.lr, a.log,
                           a.val_docs, a.cache, a.photos, a.init, a.scan_share)))


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    main()
