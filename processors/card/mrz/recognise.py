"""The MRZ character recogniser: a small CNN over the zone's fixed-pitch character cells, one
batched ONNX call for all the cells of a batch.

ICAO Doc 9303 part 3 prints the MRZ at a fixed pitch (10 characters per inch), so a located line
of ``n`` characters (30, 36 or 44) is cut into ``n`` cells, one per character, centred where
the print's own period and phase put it (:func:`fit_pitch`, :func:`centres`); ``mrz_char.onnx`` (trained by this project on synthetic OCR-B zones,
``processors/card/training/mrz_train.py``; figures in ``processors/card/MODEL.md``) maps a
``(N, 1, 32, 24)`` batch of cells, each a little wider than its pitch so a cell cut a few px
off still holds its character, to ``(N, 37)`` logits over ``0-9 A-Z <`` (:data:`CLASSES`).
Every character keeps the recogniser's alternatives with their probabilities, so a later
correction can only choose among what the model saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from processors.card.mrz.icao import ALPHABET
from processors.card.mrz.locate import CROP_SCALE, LINE_INPUT_H
from processors.errors import ModelError
from processors.models import manifest, model_path
from processors.runtime import BatchedModel, RuntimeSettings

MODEL_FILE = "mrz_char"
"""Entry in ``processors/models.json``."""
CLASSES = ALPHABET
"""Output classes: ``0-9 A-Z <`` (:data:`icao.ALPHABET`)."""
CELL_H, CELL_W = LINE_INPUT_H, 24
"""A cell as the model reads it (px)."""
PITCH_PX = 20.0
"""Pitch (px) a line is resampled to before its cells are cut; a cell spans
``CELL_W / PITCH_PX`` = 1.2 pitches, centred on its character."""
INK_SPAN = 0.75
"""A located line is taken to run ``n - 1 + INK_SPAN`` pitches between its ends (an OCR-B
glyph's ink covers about 0.75 of its pitch): the nominal pitch the print's own period is
searched around (:func:`fit_pitch`)."""
EDGE = 0.2
"""Pitches from a located line's end (its first or last ink column, as the locator's closing
and opening leave it) to the centre of its end character: the grid point nearest this is
character 0 (or ``n - 1``). Measured: 0.1-0.3 on synthetic lines; a grid point is a pitch away
from the next, so an error below half a pitch picks the right one."""
PITCH_RANGE = (0.85, 1.6)
"""The print's period is searched between these multiples of the pitch a line's ends imply
(above 1: a line whose end was lost under glare or a finger implies too short a pitch)."""
LOCAL_PITCHES = 2.5
"""Half-width (pitches) of the window a character's local phase is read in."""
CELL_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Batch buckets of the recogniser: a batch's cells (up to 88 or 90 per document, twice for a
two-line zone read at both TD2 and TD3 pitch) go in one call."""
ALTERNATIVES = 3
"""Alternatives kept per character (best first)."""
PAD_PX = 0.5 * LINE_INPUT_H / CROP_SCALE
"""Margin (crop px) :func:`processors.card.mrz.locate.line_crops` leaves before the first and
after the last character."""


def _profile(crop: np.ndarray, nominal: float) -> np.ndarray:
    """The ink per column of a line crop (its middle 60 % of rows), its slow trend removed:
    ``(w,) float64``, periodic at the print's pitch (every MRZ position holds a glyph, the
    filler ``<`` included)."""
    h = crop.shape[0]
    prof = 255.0 - crop[int(0.2 * h):int(0.8 * h)].astype(np.float64).mean(axis=0)
    trend = cv2.blur(prof[None, :], (int(2 * nominal) | 1, 1), borderType=cv2.BORDER_REFLECT)
    return np.asarray(prof - trend[0], np.float64)


def fit_pitch(crop: np.ndarray, n: int) -> float:
    """The pitch (crop px) of the print in a line crop of ``n`` characters: the period whose
    Fourier component of the column ink (:func:`_profile`) is strongest, searched over
    :data:`PITCH_RANGE` times the pitch the crop's ends imply (a zero-padded FFT, refined by a
    parabola through the peak)."""
    nominal = (crop.shape[1] - 2 * PAD_PX) / (n - 1 + INK_SPAN)
    prof = _profile(crop, nominal)
    size = 1 << max(13, int(np.ceil(np.log2(len(prof) * 8))))
    mags = np.abs(np.fft.rfft(prof, size))
    lo = int(np.floor(size / (PITCH_RANGE[1] * nominal)))
    hi = min(int(np.ceil(size / (PITCH_RANGE[0] * nominal))), len(mags) - 2)
    if hi - lo < 2:
        return float(nominal)
    k = lo + int(np.argmax(mags[lo:hi + 1]))
    a, b, c = mags[k - 1:k + 2]
    den = a - 2 * b + c
    return float(size / (k + (0.5 * (a - c) / den if den < 0 else 0.0)))


def centres(crop: np.ndarray, n: int, pitch: float) -> list[np.ndarray]:
    """Where the ``n`` characters of a line crop are (crop px), from the print's own columns.

    The phase of the column ink's component at ``pitch`` places a grid of character centres;
    the grid point :data:`EDGE` pitches inside the left end is character 0, and the one inside
    the right end is character ``n - 1``; each character's centre then follows its
    neighbourhood's own phase (a window of :data:`LOCAL_PITCHES`), smoothed by a quadratic in
    the character's index (a residual perspective stretches the pitch along the line).

    Returns:
        ``(n,) float64`` centres: one array when both ends agree, two (left end first) when
        they do not (an end lost under glare or a finger, or text beyond an end).
    """
    prof = _profile(crop, pitch)
    w = len(prof)
    x = np.arange(w, dtype=np.float64)
    demod = prof * np.exp(-2j * np.pi * x / pitch)
    origin = (-np.angle(demod.sum()) / (2 * np.pi) * pitch) % pitch  # a centre of the grid
    # each column's neighbourhood phase: the demodulated ink summed over a window
    half = int(round(LOCAL_PITCHES * pitch))
    csum = np.concatenate([[0], np.cumsum(demod)])
    local = csum[np.minimum(np.arange(w) + half + 1, w)] - csum[np.maximum(np.arange(w) - half, 0)]
    first = [np.round((PAD_PX + EDGE * pitch - origin) / pitch),
             np.round((w - PAD_PX - EDGE * pitch - origin) / pitch) - (n - 1)]
    k = np.arange(n, dtype=np.float64)
    basis = np.stack([np.ones(n), k, k * k], axis=1)
    out = []
    for f in dict.fromkeys(float(v) for v in first):
        grid = origin + (f + k) * pitch
        z = local[np.clip(np.round(grid).astype(int), 0, w - 1)]
        # the window's phase is relative to x = 0: relative to its own grid point, the offset
        dev = (-np.angle(z) / (2 * np.pi) * pitch - grid + pitch / 2) % pitch - pitch / 2
        wts = np.sqrt(np.abs(z) + 1e-9)
        coef = np.linalg.lstsq(basis * wts[:, None], dev * wts, rcond=None)[0]
        out.append(grid + basis @ coef)
    return out


def cell_variants(crop: np.ndarray, n: int) -> list[np.ndarray]:
    """The cells of a line crop at its characters' centres (:func:`centres`): one variant, or
    two when the line's ends disagree (the reader keeps the variant the recogniser reads most
    confidently)."""
    pitch = fit_pitch(crop, n)
    return [cells_at(crop, c, pitch) for c in centres(crop, n, pitch)]


def cells(crop: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` character cells of a line crop (the first of :func:`cell_variants`).

    Args:
        crop: ``(32, w) uint8`` grey line crop (:func:`locate.line_crops`: the print from
            ``PAD_PX`` to ``w - PAD_PX``).
        n: characters in the line.

    Returns:
        ``(n, 32, 24) uint8``: cell ``i`` centred on character ``i``, resampled so one pitch is
        :data:`PITCH_PX` px wide.
    """
    pitch = fit_pitch(crop, n)
    return cells_at(crop, centres(crop, n, pitch)[0], pitch)


def cells_at(crop: np.ndarray, at: np.ndarray, pitch: float) -> np.ndarray:
    """Cells ``(len(at), 32, 24) uint8`` of a line crop centred at ``at`` (crop px), the crop
    resampled so ``pitch`` becomes :data:`PITCH_PX` px (edges replicated beyond the crop)."""
    scale = PITCH_PX / pitch
    w = max(1, int(round(crop.shape[1] * scale)))
    line = cv2.resize(crop, (w, CELL_H), interpolation=cv2.INTER_AREA if scale < 1
                      else cv2.INTER_LINEAR)
    starts = np.round((np.asarray(at) + 0.5) * scale - 0.5 - CELL_W / 2).astype(int)
    left = max(0, -int(starts.min()))
    right = max(0, int(starts.max()) + CELL_W - w)
    line = cv2.copyMakeBorder(line, 0, 0, left, right, cv2.BORDER_REPLICATE)
    idx = (starts + left)[:, None] + np.arange(CELL_W)[None, :]
    return np.ascontiguousarray(line[:, idx].transpose(1, 0, 2))


def cell_batch(c: np.ndarray) -> np.ndarray:
    """Model input from cells ``(N, 32, 24) uint8``: ``(N, 1, 32, 24) float32``, each cell
    standardised (zero mean, unit standard deviation with a floor of 8 grey levels)."""
    x = c.astype(np.float32)
    mean = x.mean(axis=(1, 2), keepdims=True)
    std = np.maximum(x.std(axis=(1, 2), keepdims=True), 8.0)
    return ((x - mean) / std)[:, None]


@dataclass(frozen=True, slots=True)
class Read:
    """One line as read.

    Attributes:
        text: the characters (``A-Z 0-9 <``).
        alts: per character, up to :data:`ALTERNATIVES` ``(character, probability)`` pairs,
            best first.
    """

    text: str
    alts: tuple[tuple[tuple[str, float], ...], ...]

    @property
    def confidence(self) -> float:
        """Mean probability of the characters read."""
        return float(np.mean([a[0][1] for a in self.alts])) if self.alts else 0.0


def read_line(probs: np.ndarray) -> Read:
    """A line from its cells' probabilities ``(n, 37)``."""
    top = np.argsort(-probs, axis=1)[:, :ALTERNATIVES]
    alts = tuple(tuple((CLASSES[k], round(float(p[k]), 4)) for k in row)
                 for p, row in zip(probs, top, strict=True))
    return Read("".join(a[0][0] for a in alts), alts)


class Recogniser:
    """The batched character recogniser.

    Args:
        runtime: ONNX Runtime settings (device); its own batch buckets (:data:`CELL_BUCKETS`),
            the largest always used, so a batch's cells are one call.
        model_file: another ONNX file (tests, a new training run; not checked against a
            SHA-256); None uses the pinned ``mrz_char`` shipped in the package.

    Raises:
        ModelError: the model file is missing or fails its pin.
        ProviderError: CUDA requested but not active.
    """

    def __init__(self, runtime: RuntimeSettings, model_file: Path | None = None) -> None:
        if model_file is None:
            path, sha = model_path(MODEL_FILE), manifest()[MODEL_FILE]["sha256"]
        else:
            path, sha = Path(model_file), None
        rt = runtime.model_copy(update={"buckets": CELL_BUCKETS, "max_bucket": None,
                                        "cpu_max_bucket": CELL_BUCKETS[-1]})
        self.model = BatchedModel.shared(path, sha, rt, "mrz-char",
                                         input_shape=(1, CELL_H, CELL_W))
        self.model.chosen_bucket = self.model.buckets[-1]
        self.sha256 = sha

    def warm_up(self) -> None:
        """One call on a document's worth of blank cells (no bucket sweep: the largest is
        used)."""
        self.model.run(np.zeros((128, 1, CELL_H, CELL_W), np.float32))

    def probs(self, batch: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per item of ``batch`` (cells ``(n_k, 32, 24) uint8``), ``(n_k, 37) float32``
        probabilities; all cells in one call.

        Raises:
            ModelError: ONNX Runtime failed on the batch.
        """
        sizes = [len(b) for b in batch]
        if not sum(sizes):
            return [np.zeros((0, len(CLASSES)), np.float32) for _ in batch]
        try:
            logits = self.model.run(cell_batch(np.concatenate([b for b in batch if len(b)])))[0]
        except Exception as e:  # onnxruntime raises untyped errors
            raise ModelError(f"MRZ recogniser failed: {e}") from e
        z = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        return np.split(p.astype(np.float32), np.cumsum(sizes)[:-1])
