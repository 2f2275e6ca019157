"""Train the MRZ line recogniser (``mrz_crnn.onnx``): a small CRNN with CTC on synthetic OCR-B lines.

Data, all made here (no real document): random valid MRZs (``documents.random_fields``, and
30 % lines of random characters with the zone's filler runs, so the model reads characters, not
a language) printed in OCR-B on the project's card templates (``documents.render_document``),
then captured as the pipeline sees them: shrunk to an effective resolution of 140-430 dpi,
blurred, lit (low light, glare spots), noised, JPEG-compressed, warped into the MRZ band
(``processors.card.mrz.locate.band_maps``) through a homography perturbed like a quad's error,
and cut by the same locator and line cropper the service uses (``find_lines``,
``line_crops``). Lines the locator does not find as the zone's lines are left out.

Model (:class:`Crnn`): 5 conv layers (16-24-32-48-48 channels, 3 x 3, batch norm, ReLU; pooling
to 1/4 of the width and 1/16 of the height), a 2 x 1 conv to 96 channels, two 1-D convs of
width 5 (dilation 1 and 2) with a residual, and a 1 x 1 conv to the 38 classes (CTC blank +
``0-9 A-Z <``); about 0.2 M parameters. Adam, one-cycle learning rate, CTC loss.

Command (seeded; the recipe that made the shipped file is in ``processors/card/MODEL.md``)::

    nice -n 15 python -m processors.card.training.mrz_train --out /tmp/mrz_crnn.onnx \\
        --docs 3000 --steps 3000 --seed 20261204
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import cv2
import numpy as np

from processors.card.mrz.icao import ALPHABET, SHAPE, Format, compose
from processors.card.mrz.locate import (
    CROP_SCALE,
    LINE_INPUT_H,
    band_maps,
    find_lines,
    line_crops,
)
from processors.card.mrz.recognise import CLASSES, line_batch
from processors.card.rectify import canonical_size
from processors.card.training.documents import (
    DOC_TYPE,
    REFERENCE_DATE,
    random_fields,
    render_document,
)

WINDOW_CHARS = (8, 16)
"""Characters per training window (:func:`window`)."""
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
    img = cv2.cvtColor(face[y0:], cv2.COLOR_BGR2GRAY).astype(np.float32)
    eff = rng.uniform(5.5, 17.0) / FACE_PX_PER_MM  # effective px per mm, relative
    sw, sh = max(8, int(fw * eff)), max(8, int((fh - y0) * eff))
    small = cv2.resize(img, (sw, sh), interpolation=cv2.INTER_AREA)
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
    ok, buf = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(50, 96))])
    small = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    doc_type = DOC_TYPE[fmt]
    cw, ch = canonical_size(doc_type, 300)  # the card as the service rectifies it
    a_map, size = band_maps(doc_type, (cw, ch))[0]
    # rectified card px -> small px (the face's bottom half), corners moved like a quad's error
    src = np.float32([[0, 0], [cw - 1, 0], [cw - 1, ch - 1], [0, ch - 1]])
    dst = np.float32([[0, -sh], [sw - 1, -sh], [sw - 1, sh - 1], [0, sh - 1]])
    dst += rng.normal(0, 0.004, (4, 2)).astype(np.float32) * [sw, 2 * sh]
    card_to_small = cv2.getPerspectiveTransform(src, dst).astype(np.float64)
    return cv2.warpPerspective(small, card_to_small @ a_map, size,
                               flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                               borderMode=cv2.BORDER_REPLICATE)


def line_samples(seed: int, n_docs: int, cache: Path | None = None
                 ) -> tuple[list[np.ndarray], list[str]]:
    """Line crops and their text from ``n_docs`` synthetic documents (seeded); with ``cache``
    (a folder), kept there as ``lines_{seed}_{n_docs}.npz`` and read back on the next run."""
    if cache is not None:
        path = Path(cache) / f"lines_{seed}_{n_docs}.npz"
        if path.is_file():
            z = np.load(path, allow_pickle=False)
            widths = z["widths"].tolist()
            flat, offs = z["pixels"], np.cumsum([0] + [32 * w for w in widths])
            return ([flat[offs[i]:offs[i + 1]].reshape(32, w) for i, w in enumerate(widths)],
                    z["texts"].tolist())
        crops, texts = line_samples(seed, n_docs)
        Path(cache).mkdir(parents=True, exist_ok=True)
        np.savez(path, pixels=np.concatenate([c.ravel() for c in crops]),
                 widths=np.array([c.shape[1] for c in crops]), texts=np.array(texts))
        return crops, texts
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


PAD_PX = 0.5 * LINE_INPUT_H / CROP_SCALE
"""Margin (crop px) :func:`processors.card.mrz.locate.line_crops` leaves before the first and
after the last character."""


def window(rng: np.random.Generator, crop: np.ndarray, text: str, chars: tuple[int, int]
           ) -> tuple[np.ndarray, str]:
    """A random run of ``chars`` (min, max) characters of a line crop and its text: cut in the
    gaps between characters, assuming the locator's ends and the fixed pitch (Doc 9303: 2.54 mm
    per character). Training on windows costs a third of training on whole lines; the model is
    a convolution along the line, so it reads whole lines the same way."""
    n = len(text)
    k = int(rng.integers(chars[0], min(chars[1], n) + 1))
    i = int(rng.integers(0, n - k + 1))
    pitch = (crop.shape[1] - 2 * PAD_PX) / n
    gap = 0.125 * pitch  # the middle of the gap before a character (OCR-B fills ~3/4 of it)
    a = 0 if i == 0 else int(round(PAD_PX + i * pitch - gap))
    b = crop.shape[1] if i + k == n else int(round(PAD_PX + (i + k) * pitch - gap))
    return crop[:, a:b], text[i:i + k]


def _augment(rng: np.random.Generator, crop: np.ndarray) -> np.ndarray:
    """Crop-level variation: ends cut or padded a little, contrast, a smudge."""
    c = crop
    cut_l, cut_r = (int(rng.integers(-4, 3)) for _ in range(2))
    if cut_l > 0:
        c = c[:, cut_l:]
    elif cut_l < 0:
        c = np.pad(c, ((0, 0), (-cut_l, 0)), mode="edge")
    if cut_r > 0:
        c = c[:, : c.shape[1] - cut_r]
    elif cut_r < 0:
        c = np.pad(c, ((0, 0), (0, -cut_r)), mode="edge")
    f = c.astype(np.float32) * rng.uniform(0.6, 1.3) + rng.uniform(-30, 30)
    if rng.random() < 0.1:  # smudge
        x0 = int(rng.integers(0, max(1, f.shape[1] - 20)))
        f[:, x0:x0 + int(rng.integers(4, 20))] = cv2.GaussianBlur(
            f[:, x0:x0 + 20], (0, 0), 2.0)[:, : int(rng.integers(4, 20))].mean()
    return np.clip(f, 0, 255).astype(np.uint8)


def build_model():  # noqa: ANN201 - torch is imported lazily
    """The :class:`Crnn` (torch)."""
    import torch
    from torch import nn

    def conv(i: int, o: int, k=(3, 3), p=(1, 1)) -> list:
        return [nn.Conv2d(i, o, k, padding=p, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

    class Crnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                *conv(1, 16), nn.MaxPool2d(2, 2),
                *conv(16, 24), nn.MaxPool2d(2, 2),
                *conv(24, 32), *conv(32, 48), nn.MaxPool2d((2, 1), (2, 1)),
                *conv(48, 48), nn.MaxPool2d((2, 1), (2, 1)),
                *conv(48, 96, (2, 1), (0, 0)))  # height 2 -> 1 (32 / 16 / 2)
            self.ctx1 = nn.Sequential(nn.Conv1d(96, 96, 5, padding=2, bias=False),
                                      nn.BatchNorm1d(96), nn.ReLU(inplace=True))
            self.ctx2 = nn.Sequential(nn.Conv1d(96, 96, 5, padding=4, dilation=2, bias=False),
                                      nn.BatchNorm1d(96), nn.ReLU(inplace=True))
            self.head = nn.Conv1d(96, len(CLASSES), 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            f = self.features(x).squeeze(2)          # (N, 96, W/4)
            f = f + self.ctx2(self.ctx1(f))
            return torch.log_softmax(self.head(f), dim=1).permute(0, 2, 1)  # (N, T, C)

    return Crnn()


def export(model, out: Path) -> None:  # noqa: ANN001
    """Write ``model`` as ONNX (opset 17) with symbolic batch and width."""
    import torch

    model.eval()
    x = torch.zeros(1, 1, 32, 640)
    torch.onnx.export(model, x, str(out), input_names=["lines"], output_names=["log_probs"],
                      dynamic_axes={"lines": {0: "batch", 3: "width"},
                                    "log_probs": {0: "batch", 1: "frames"}},
                      opset_version=17, dynamo=False)


def exact_rate(model, crops: list[np.ndarray], texts: list[str]) -> float:  # noqa: ANN001
    """Share of lines read exactly (greedy CTC), in batches of 64."""
    import torch

    from processors.card.mrz.recognise import STRIDE, best_path, _read

    model.eval()
    ok = 0
    with torch.no_grad():
        for i in range(0, len(crops), 64):
            part = crops[i:i + 64]
            out = model(torch.from_numpy(line_batch(part))).numpy()
            for k, c in enumerate(part):
                lp = out[k, : -(-c.shape[1] // STRIDE)]
                ok += _read(lp, best_path(lp)).text == texts[i + k]
    model.train()
    return ok / max(len(crops), 1)


def train(out: Path, docs: int, steps: int, seed: int, batch: int = 32, lr: float = 3e-3,
          log: Path | None = None, val_docs: int = 150, cache: Path | None = None) -> dict:
    """Make the data (or read it from ``cache``), train, export ``out``; returns the final
    figures."""
    import torch

    torch.manual_seed(seed)
    t0 = time.time()
    crops, texts = line_samples(seed, docs, cache)
    val_c, val_t = line_samples(seed + 1, val_docs, cache)
    print(f"data: {len(crops)} lines, {len(val_c)} validation lines, {time.time() - t0:.0f} s",
          flush=True)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.15)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    rng = np.random.default_rng(seed + 2)
    logf = open(log, "w") if log else None  # noqa: SIM115
    for step in range(1, steps + 1):
        idx = rng.integers(0, len(crops), batch)
        wins = [window(rng, crops[i], texts[i], WINDOW_CHARS) for i in idx]
        part = [_augment(rng, c) for c, _ in wins]
        x = torch.from_numpy(line_batch(part))
        target = [torch.tensor([CLASSES.index(ch) for ch in t]) for _, t in wins]
        lp = model(x)                                   # (N, T, C)
        in_len = torch.tensor([-(-c.shape[1] // 4) for c in part])
        tg_len = torch.tensor([len(t) for t in target])
        loss = ctc(lp.permute(1, 0, 2), torch.cat(target), in_len, tg_len)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps:
            row = {"step": step, "loss": round(float(loss), 4), "s": round(time.time() - t0)}
            if step % 250 == 0 or step == steps:
                row["val_exact"] = round(exact_rate(model, val_c, val_t), 4)
                export(model, out.with_suffix(f".step{step}.onnx"))  # a run can stop early
                model.train()
            print(json.dumps(row), flush=True)
            if logf:
                logf.write(json.dumps(row) + "\n")
                logf.flush()
    export(model, out)
    return {"lines": len(crops), "val_lines": len(val_c),
            "val_exact": exact_rate(model, val_c, val_t), "minutes": (time.time() - t0) / 60}


def main() -> None:
    """CLI entry (see the module doc)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="folder keeping the line crops made")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    print(json.dumps(train(a.out, a.docs, a.steps, a.seed, a.batch, a.lr, a.log, cache=a.cache)))


if __name__ == "__main__":
    main()
