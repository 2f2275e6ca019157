"""Train the card orientation classifier: is a rectified card upright, or turned by a half turn?
And is it an ID-1 card or an ID-3 passport page?

The card processor warps the card to landscape first (the quad's long side horizontal), so two
readings remain: upright and a half turn. This net decides between them from a grey thumbnail
of the rectified card (``ORIENT_W x ORIENT_H`` px), in one batched ONNX call per batch, instead
of the Haar face cascades (issue 29): it reads layout (header band, portrait, MRZ) and the
direction of printed text, so cards without a portrait (back sides, driving licences) are turned
upright too. A second head tells an ID-1 card from a passport data page by its print (a TD3
machine-readable zone), for photos whose perspective puts the measured aspect ratio between the
two formats' (1.42 and 1.586).

Data (synthetic, drawn on the fly from a seeded stream; nothing from ``../shared/cases``):

- fronts: :func:`synth.render_face` (ID-1 and ID-3 faces: header band, portrait, text, MRZ,
  6 % blank cards, which carry no cue);
- backs: text only, in OpenCV's Hershey fonts and Pillow's bundled font (Aileron, shipped with
  Pillow), left-aligned blocks at random places, with or without a band, a TD1-style MRZ
  (3 lines of 30 characters, ICAO 9303) or a barcode;
- scanned text: crops of scikit-image's ``page`` and ``text`` samples (public domain) as the
  card's print;

each shown as a rectified photo: the corners jittered by up to 3 % (a quad fit's error), a margin
of background or a crop, light, blur, noise and JPEG; then turned by a half turn with
probability 1/2 (the orientation label). The document label is the face's kind for fronts
(ID-3 pages carry a TD3 MRZ), ID-1 for backs (a TD1 MRZ has 3 lines) and none for scanned
text (nothing tells the two apart once the thumbnail is squeezed to one size).

Model: 5 stride-2 3x3 convolutions (8-16-32-32-32 channels, BatchNorm, ReLU) and one linear
layer on the flattened 8 x 5 map (position matters: a header band is at the top); the input is
standardised per image inside the graph. ONNX: input ``thumb`` ``(N, 1, 160, 256) float32``
grey levels 0..255, output ``logits`` ``(N, 4)``: (upright, turned) and (ID-1, ID-3), two
softmax pairs. About 5 M multiply-adds.

Run (torch from the ``train`` extra; about 40 min on 2 shared cores)::

    python -m processors.card.training.orient --out processors/card/weights/card_orient.onnx
    python -m processors.card.training.orient --evaluate processors/card/weights/card_orient.onnx
"""

from __future__ import annotations

import argparse
import hashlib
import json
import string
import time
from functools import cache
from pathlib import Path

import cv2
import numpy as np

from processors.card.orient import ORIENT_H, ORIENT_W
from processors.card.training import synth
from processors.logs import configure_logging

SEED = 20261204
"""Training stream seed; the held-out evaluation draws from ``SEED + 1`` (validation during
training) and ``SEED + 2`` (``--evaluate``)."""

_CV_FONTS = (cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_COMPLEX,
             cv2.FONT_HERSHEY_TRIPLEX, cv2.FONT_HERSHEY_PLAIN,
             cv2.FONT_HERSHEY_SIMPLEX | cv2.FONT_ITALIC)
_CHARS = string.ascii_letters + string.digits + "  ./-:,"


def _text(rng: np.random.Generator, n: int) -> str:
    kind = rng.random()
    letters = (string.ascii_uppercase if kind < 0.4 else
               string.digits + "./- " if kind < 0.55 else _CHARS)
    words = ["".join(rng.choice(list(letters), size=int(rng.integers(2, 10)))) for _ in range(n)]
    return " ".join(words).strip() or "ID"


@cache
def _pil_font(size: int):  # noqa: ANN202 - PIL.ImageFont.FreeTypeFont
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _put_text(face: np.ndarray, rng: np.random.Generator, text: str, x: int, y: int,
              height: int, colour: tuple[int, int, int]) -> None:
    """Write ``text`` with its baseline at ``(x, y)``, about ``height`` px tall (cap height),
    in a random Hershey font or Pillow's bundled font."""
    if rng.random() < 0.5:
        font = int(rng.choice(_CV_FONTS))
        scale = height / 22.0 if font != cv2.FONT_HERSHEY_PLAIN else height / 12.0
        cv2.putText(face, text, (x, y), font, scale, colour, 1 + int(rng.random() < 0.3),
                    cv2.LINE_AA)
        return
    from PIL import Image, ImageDraw

    im = Image.fromarray(face)
    ImageDraw.Draw(im).text((x, y), text, font=_pil_font(max(6, int(height * 1.4))), fill=colour,
                            anchor="ls")
    face[:] = np.asarray(im)


def _put_line(face: np.ndarray, rng: np.random.Generator, text: str, y: int, height: int,
              colour: tuple[int, int, int], align: str) -> None:
    """Write one line with its baseline at ``y``: ``centre``d on the face, or ``cut`` by both of
    its edges (written from left of the face, longer than it)."""
    w = face.shape[1]
    if align == "cut":
        _put_text(face, rng, (text + " ") * 4, -int(w * rng.uniform(0.05, 0.4)), y, height, colour)
        return
    strip = np.full((2 * height + 4, 3 * w, 3), 255, np.uint8)
    _put_text(strip, rng, text, 2, int(1.5 * height), height, (0, 0, 0))
    cols = np.flatnonzero((strip < 128).any(axis=(0, 2)))
    if cols.size == 0:
        return
    ink = strip[:, : cols[-1] + 1]
    ink = ink[:, : min(ink.shape[1], w - 4)]
    x = (w - ink.shape[1]) // 2
    top = y - int(1.5 * height)
    rows = slice(max(0, top), min(face.shape[0], top + ink.shape[0]))
    part = ink[rows.start - top: rows.stop - top]
    mask = part.min(axis=2, keepdims=True).astype(np.float32) / 255.0  # 1 paper, 0 ink
    region = face[rows, x:x + ink.shape[1]].astype(np.float32)
    face[rows, x:x + ink.shape[1]] = (region * mask + np.asarray(colour, np.float32) * (1 - mask)
                                      ).astype(np.uint8)


def render_back(rng: np.random.Generator, doc_type: str, width: int) -> np.ndarray:
    """A text-only card side (a back, a driving licence's data side): ``(h, width, 3) uint8``
    BGR, upright."""
    mm = synth.ID1_MM if doc_type == "id_card" else synth.ID3_MM
    h = int(round(width * mm[1] / mm[0]))
    base = rng.integers(150, 245, 3)
    face = np.empty((h, width, 3), np.uint8)
    face[:] = base
    if rng.random() < 0.5:
        synth._guilloche(face, rng)  # noqa: SLF001 - the generator's own background pattern
    top = int(h * rng.uniform(0.04, 0.12))
    if rng.random() < 0.4:  # a band with a title
        band = int(h * rng.uniform(0.1, 0.18))
        cv2.rectangle(face, (0, 0), (width, band),
                      tuple(int(c) for c in rng.integers(20, 200, 3)), -1)
        _put_text(face, rng, _text(rng, int(rng.integers(1, 4))), int(0.04 * width),
                  int(band * 0.75), int(band * 0.45), (245, 245, 245))
        top = band + int(h * 0.05)
    b, g, r = (int(c) for c in rng.integers(0, 80, 3))
    dark = (b, g, r)
    mrz = rng.random() < 0.35
    bottom = h * (0.62 if mrz else 0.95)
    # left-aligned lines (a ragged right edge), centred lines, or lines cut by both edges: in
    # the last two only the letters themselves say which way is up
    align = rng.choice(["left", "centre", "cut"], p=[0.45, 0.25, 0.3])
    if align != "left":
        top = min(top, int(h * 0.1))
        bottom = h - top if not mrz else bottom
    x0 = int(width * rng.uniform(0.03, 0.45))
    y = top + int(h * 0.06)
    th = int(h * rng.uniform(0.035, 0.07))
    while y < bottom:
        if align == "left":
            th = int(h * rng.uniform(0.035, 0.07))
            _put_text(face, rng, _text(rng, int(rng.integers(1, 5))), x0, y, th, dark)
            if rng.random() < 0.15:
                x0 = int(width * rng.uniform(0.03, 0.45))
        else:
            _put_line(face, rng, _text(rng, int(rng.integers(2, 9))), y, th, dark, align)
        y += int(th * rng.uniform(1.6, 2.6))
    if rng.random() < 0.25:  # a barcode block (no cue of its own)
        bx, by = int(width * rng.uniform(0.05, 0.5)), int(h * rng.uniform(0.3, 0.6))
        for k in range(int(rng.integers(20, 60))):
            xx = bx + k * 3
            if rng.random() < 0.6 and xx < width:
                cv2.line(face, (xx, by), (xx, by + int(h * 0.15)), (10, 10, 10),
                         1 + int(rng.random() < 0.4))
    if mrz:  # ICAO 9303 TD1: 3 lines of 30 characters
        fs = width / 1000.0
        for k in range(3):
            line = "".join(rng.choice(list(string.ascii_uppercase + "<<<<<0123456789"), 30))
            cv2.putText(face, line, (int(0.04 * width), int(h * (0.74 + 0.1 * k))),
                        cv2.FONT_HERSHEY_PLAIN, fs * 2.0, (20, 20, 20), 1 + int(rng.random() < 0.5),
                        cv2.LINE_AA)
    return face


def render_scan(rng: np.random.Generator, doc_type: str, width: int) -> np.ndarray:
    """A card printed with real typography: a crop of scikit-image's ``page`` or ``text`` sample
    (public domain), tinted: ``(h, width, 3) uint8`` BGR, upright."""
    mm = synth.ID1_MM if doc_type == "id_card" else synth.ID3_MM
    h = int(round(width * mm[1] / mm[0]))
    src = cv2.cvtColor(synth._skimage(str(rng.choice(["page", "text"]))), cv2.COLOR_BGR2GRAY)  # noqa: SLF001
    sh, sw = src.shape
    cw = int(sw * rng.uniform(0.45, 1.0))
    ch = min(sh, int(cw * h / width))
    x, y = int(rng.integers(0, sw - cw + 1)), int(rng.integers(0, sh - ch + 1))
    crop = cv2.resize(src[y:y + ch, x:x + cw], (width, h), interpolation=cv2.INTER_CUBIC)
    crop = cv2.normalize(crop, np.empty_like(crop), 0, 255, cv2.NORM_MINMAX)
    crop = crop.astype(np.float32) / 255.0
    paper = rng.integers(150, 250, 3).astype(np.float32)
    ink = rng.integers(0, 90, 3).astype(np.float32)
    face = crop[..., None] * paper + (1 - crop[..., None]) * ink
    return np.clip(face, 0, 255).astype(np.uint8)


def rectified_view(rng: np.random.Generator, face: np.ndarray) -> np.ndarray:
    """``face`` as the processor's thumbnail of a photographed card: ``(ORIENT_H, ORIENT_W)``
    uint8 grey, upright (corner jitter up to 3 %, background margin or crop, light, blur,
    noise, JPEG)."""
    h, w = face.shape[:2]
    pad = int(0.1 * w)
    bg = cv2.resize(synth._skimage(str(rng.choice(["gravel", "brick", "grass", "coffee", "text"]))),  # noqa: SLF001
                    (w + 2 * pad, h + 2 * pad))
    canvas = (bg * rng.uniform(0.3, 1.0)).astype(np.uint8)
    canvas[pad:pad + h, pad:pad + w] = face
    corners = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64) + pad
    jitter = rng.uniform(0.0, 0.03)
    corners += rng.normal(0, jitter / 2, (4, 2)) * [w, h]
    corners += rng.uniform(-0.02, 0.01) * np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    dst = np.array([[0, 0], [ORIENT_W - 1, 0], [ORIENT_W - 1, ORIENT_H - 1], [0, ORIENT_H - 1]],
                   np.float32)
    m = cv2.getPerspectiveTransform(corners.astype(np.float32), dst)
    small = cv2.warpPerspective(canvas, m, (ORIENT_W, ORIENT_H), flags=cv2.INTER_AREA,
                                borderMode=cv2.BORDER_REPLICATE)
    g: np.ndarray = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY).astype(np.float32)
    if rng.random() < 0.5:
        g = cv2.GaussianBlur(g, (0, 0), rng.uniform(0.2, 1.2))
    gy, gx = np.mgrid[0:ORIENT_H, 0:ORIENT_W].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    g *= 1 + rng.uniform(-0.35, 0.2) * (np.cos(a) * (gx / ORIENT_W - 0.5)
                                        + np.sin(a) * (gy / ORIENT_H - 0.5))
    g = rng.uniform(0.6, 1.2) * (g - 128) + 128 + rng.uniform(-30, 30)
    if rng.random() < 0.15:  # glare spot
        c = rng.uniform([0, 0], [ORIENT_W, ORIENT_H])
        r = rng.uniform(10, 40)
        g += 300 * np.exp(-((gx - c[0]) ** 2 + (gy - c[1]) ** 2) / (2 * r * r))
    if rng.random() < 0.6:
        g += rng.normal(0, rng.uniform(1, 8), g.shape)
    g8 = np.clip(g, 0, 255).astype(np.uint8)
    return synth.jpeg_round_trip(g8, int(rng.integers(40, 96)), cv2.IMREAD_GRAYSCALE)


def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples: thumbnails ``(n, 1, ORIENT_H, ORIENT_W) float32`` (grey levels) and labels
    ``(n, 2) int64``: orientation (0 upright, 1 turned by a half turn) and document (0 ID-1,
    1 ID-3, -1 unknown)."""
    xs, ys = [], []
    for _ in range(n):
        doc_type = "id_card" if rng.random() < 0.7 else "passport"
        width = int(rng.choice([400, 448, 512]))  # render_face needs >= 334 px (hologram)
        kind = rng.random()
        doc = int(doc_type == "passport")
        if kind < 0.45:
            face, _ = synth.render_face(rng, doc_type, width=width)
        elif kind < 0.8:
            face = render_back(rng, doc_type, width)
            doc = 0
        else:
            face = render_scan(rng, doc_type, width)
            doc = -1
        g = rectified_view(rng, face)
        turned = bool(rng.random() < 0.5)
        if turned:
            g = g[::-1, ::-1]
        xs.append(g.astype(np.float32)[None])
        ys.append((int(turned), doc))
    return np.stack(xs), np.asarray(ys, np.int64)


def draw_batch(args: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``k`` of the stream of ``seed``: :func:`draw` with its own generator
    (``default_rng([seed, k])``), so the stream does not depend on how many processes draw it."""
    seed, k, n = args
    return draw(np.random.default_rng([seed, k]), n)


def build_net():  # noqa: ANN201 - torch.nn.Module (torch is imported lazily)
    """The classifier (module docstring) as a ``torch.nn.Module``."""
    import torch
    from torch import nn

    class OrientNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            chans = (1, 8, 16, 32, 32, 32)
            for a, b in zip(chans[:-1], chans[1:], strict=True):
                layers += [nn.Conv2d(a, b, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(b),
                           nn.ReLU(inplace=True)]
            self.features = nn.Sequential(*layers)
            self.drop = nn.Dropout(0.3)
            self.head = nn.Linear(32 * (ORIENT_H // 32) * (ORIENT_W // 32), 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mean = x.mean(dim=(2, 3), keepdim=True)
            std = x.std(dim=(2, 3), keepdim=True) + 8.0
            f = self.features((x - mean) / std)
            return self.head(self.drop(torch.flatten(f, 1)))

    return OrientNet()


def export(net, out: Path) -> str:  # noqa: ANN001
    """Write ``net`` (eval mode) as ONNX (input ``thumb``, output ``logits``, symbolic batch);
    returns its SHA-256."""
    import torch

    net.eval()
    x = torch.zeros(1, 1, ORIENT_H, ORIENT_W)
    torch.onnx.export(net, (x,), str(out), input_names=["thumb"], output_names=["logits"],
                      dynamic_axes={"thumb": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def evaluate(model: Path, n: int, seed: int) -> dict:
    """Accuracy of an exported model on ``n`` fresh samples of ``seed`` (ONNX Runtime, CPU)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x, y = draw(np.random.default_rng(seed), n)
    logits = np.concatenate([sess.run(None, {"thumb": x[i:i + 64]})[0] for i in range(0, n, 64)])
    known = y[:, 1] >= 0
    return {"n": n, "seed": seed,
            "orientation_accuracy": float((logits[:, :2].argmax(1) == y[:, 0]).mean()),
            "doc_accuracy": float((logits[known, 2:].argmax(1) == y[known, 1]).mean())}


def train(out: Path, steps: int, batch: int, lr: float, seed: int, log: Path | None,
          workers: int = 2) -> str:
    """Train (AdamW, one-cycle schedule, one torch thread) on the seeded stream, drawn by
    ``workers`` processes (:func:`draw_batch`); export to ``out``; returns its SHA-256."""
    import multiprocessing as mp

    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    net = build_net()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    vx, vy = draw(np.random.default_rng(seed + 1), 256)
    t0 = time.time()
    logf = open(log, "w") if log else None  # noqa: SIM115
    pool = mp.get_context("spawn").Pool(workers)
    stream = pool.imap(draw_batch, ((seed, k, batch) for k in range(steps)), chunksize=4)
    for step, (x, y) in enumerate(stream, start=1):
        net.train()
        pred, yt = net(torch.from_numpy(x)), torch.from_numpy(y)
        loss = (torch.nn.functional.cross_entropy(pred[:, :2], yt[:, 0])
                + 0.5 * torch.nn.functional.cross_entropy(pred[:, 2:], yt[:, 1], ignore_index=-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps:
            net.eval()
            with torch.no_grad():
                v = net(torch.from_numpy(vx)).numpy()
            known = vy[:, 1] >= 0
            rec = {"step": step, "loss": round(float(loss.detach()), 4),
                   "val_orientation": round(float((v[:, :2].argmax(1) == vy[:, 0]).mean()), 4),
                   "val_doc": round(float((v[known, 2:].argmax(1) == vy[known, 1]).mean()), 4),
                   "min": round((time.time() - t0) / 60, 1)}
            print(json.dumps(rec), flush=True)
            if logf:
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
    pool.close()
    if logf:
        logf.close()
    return export(net, out)


def main(argv: list[str] | None = None) -> None:
    """CLI entry (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="ONNX file to write")
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--log", type=Path, help="JSON lines of the validation accuracy")
    ap.add_argument("--workers", type=int, default=2, help="processes drawing the data")
    ap.add_argument("--evaluate", type=Path, help="evaluate this ONNX file instead of training")
    ap.add_argument("--n", type=int, default=2000, help="samples for --evaluate")
    a = ap.parse_args(argv)
    if a.evaluate:
        print(json.dumps(evaluate(a.evaluate, a.n, a.seed + 2)))
        return
    if a.out is None:
        ap.error("--out is required to train")
    sha = train(a.out, a.steps, a.batch, a.lr, a.seed, a.log, a.workers)
    print(json.dumps({"out": str(a.out), "sha256": sha}))


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    main()
