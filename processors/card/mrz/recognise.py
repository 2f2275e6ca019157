"""The MRZ character recogniser: a small CNN over the zone's fixed-pitch character cells, one
batched ONNX call for all the cells of a batch.

ICAO Doc 9303 part 3 prints the MRZ at a fixed pitch (10 characters per inch), so a located line
of ``n`` characters (30, 36 or 44) is cut into ``n`` cells by the standard alone
(:func:`cells`); ``mrz_char.onnx`` (trained by this project on synthetic OCR-B zones,
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
glyph's ink covers about 0.75 of its pitch). The shipped model was trained on cells cut so.
(Measured on 256 synthetic lines whose pitch was measured, ``measured_pitch``, the locator's
ends span 0.40 rather than 0.75: the cells drift by up to 0.18 of a pitch along a line; cutting
them centred at the measured pitch instead read 84 % of 300 lines exactly against 92 % for
this model, trained on the drift. A model trained on centred cells is the next step.)"""
CELL_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Batch buckets of the recogniser: a batch's cells (up to 88 or 90 per document, twice for a
two-line zone read at both TD2 and TD3 pitch) go in one call."""
PITCH_SLACK = 0.05
"""A line whose print's period is this much longer than its ends imply lost an end."""
PITCH_SLACK_SHORT = 0.02
"""A line whose print's period is this much shorter than its ends imply has a stray mark
joined at an end (the background in an ID-1 card's rounded corner, a shadow)."""
RATIO_MIN = 0.03
"""A line whose pitch changes by more than this share between its ends is also cut at that
change (:func:`cell_variants`). Two passports of the evaluation set (600 photos, seed
20261204) read exactly with true corners and missed through the pipeline measured 0.90 and
0.94, and read with it. Not tuned: a value at which a straight line (about 1.00) stays one
cut."""
RATIO_RANGE = (0.8, 1.25)
"""The pitch change a cut is made at, at most (a measured one beyond is clipped)."""
INSET_MAX = 2
"""Pitches in from an end the measured-pitch cuts also try (:func:`cell_variants`): a line
whose crop ran on over a card's edge at one end and a blank pitch at the other (an ID-1 card,
``doc_20261204_0014``) was cut one character off at either end."""
PHASE_SHIFTS = (-0.25, 0.25)
"""Pitches every cell of a line is also moved by (:func:`phase_variants`). PassportEye's
``100_pass-hrv`` (a real passport page) reads exactly with its cells moved 0.2-0.3 pitch to
the right (0.998 at 0.25) and at neither 0 nor 0.1 (0.75-0.85); the recogniser reads the
font it was trained on up to about 0.3 pitch off, so two shifts cover a printer's phase
either way."""
PHASE_MIN = 0.97
"""A phase shift stands for a zone (``read._in_phase``) only where a line of the zone reads
under this by its ends and every line reads at least this with the shift. Not tuned:
``100_pass-hrv`` reads 0.75 and 0.85 by its ends and 0.99-1.0 in phase; the one
wrong-but-valid read a per-line choice made on the 600 evaluation photos
(``doc_20261204_0196``) paired a line at 0.99 with one at 0.87, and a shift taken over sure
reads lost a tuning photo's last character under glare (``doc_20261205_0028``)."""
PHASE_CHAR_MIN = 0.9
"""The least probability every character of a zone must read at with a phase shift for the
shift to stand for the zone (``read._in_phase``; the reader's ``UNCHECKED_MIN``, at which it
trusts a character no check digit covers). A fresh user's bold print moved 0.30-0.35 pitch
(a TD2 scan, seed 8181 #1) read 0.992 and 0.971 a quarter pitch over, with two characters at
0.56 and 0.59: a document number two characters wrong whose check digit and composite both
passed. ``100_pass-hrv`` reads its least sure character at 0.97 in phase."""
ALTERNATIVES = 3
"""Alternatives kept per character (best first)."""
PAD_PX = 0.5 * LINE_INPUT_H / CROP_SCALE
"""Margin (crop px) :func:`processors.card.mrz.locate.line_crops` leaves before the first and
after the last character."""


def measured_pitch(crop: np.ndarray, nominal: float) -> float:
    """The pitch (px) of the print in a line crop, from the period of its columns' ink: the
    strongest autocorrelation of the (mean-removed) column profile between 0.9 and 1.6 times
    ``nominal`` (the pitch the crop's ends imply; a line whose end was lost under glare or a
    finger implies too short a pitch), refined by a parabola through the peak."""
    prof = 255.0 - crop.astype(np.float32).mean(axis=0)
    prof -= cv2.blur(prof[None, :], (int(2 * nominal) | 1, 1), borderType=cv2.BORDER_REFLECT)[0]
    lo, hi = int(np.floor(0.9 * nominal)), int(np.ceil(1.6 * nominal))
    hi = min(hi, len(prof) // 2)
    if hi - lo < 3:
        return nominal
    pitch = _ac_peak(prof, lo, hi)
    # refine at a lag of many pitches: the same peak-picking error, divided by the multiple
    m = int((len(prof) * LONG_LAG_SHARE) // pitch)
    if m >= 4:
        long = _ac_peak(prof, int(np.floor(m * pitch - 0.4 * pitch)),
                        int(np.ceil(m * pitch + 0.4 * pitch)))
        pitch = long / m
    return pitch


LONG_LAG_SHARE = 0.6
"""The pitch is refined at the autocorrelation peak nearest the largest multiple of it within
this share of the line's length (the overlap at that lag still spans 40 % of the line)."""


def _ac_peak(prof: np.ndarray, lo: int, hi: int) -> float:
    """The lag (px, sub-pixel by a parabola) of the strongest autocorrelation of ``prof``
    between ``lo`` and ``hi``."""
    ac = np.array([float(prof[:-k] @ prof[k:]) / (len(prof) - k) for k in range(lo - 1, hi + 2)])
    k = int(np.argmax(ac[1:-1])) + 1
    a, b, c = ac[k - 1], ac[k], ac[k + 1]
    den = a - 2 * b + c
    return float(lo - 1 + k + (0.5 * (a - c) / den if den < 0 else 0.0))


def cell_variants(crop: np.ndarray, n: int, insets: bool = True) -> list[np.ndarray]:
    """The cells of a line crop by its ends (:func:`cells`); when the pitch changes along the
    line by more than :data:`RATIO_MIN` (the line seen in perspective: its document's quad a
    few px off), also the cells by the ends at that change (``ratio``: the square of the right
    half's period over the left half's, the change between the ends of a 1-D projective map);
    when the print's own period (:func:`measured_pitch`) is more than :data:`PITCH_SLACK`
    longer than its ends imply (an end lost under glare or a finger) or more than
    :data:`PITCH_SLACK_SHORT` shorter (a stray mark joined at an end), also the cells at the
    measured pitch from its left end and from its right end, and where the ends hold a pitch
    or more to spare (and ``insets``), from one and up to :data:`INSET_MAX` pitches in from
    each end. The reader keeps the variant the recogniser reads most confidently."""
    span = crop.shape[1] - 2 * PAD_PX
    nominal = span / (n - 1 + INK_SPAN)
    out = [cells(crop, n)]
    half = crop.shape[1] // 2
    ratio = (measured_pitch(crop[:, half:], nominal) / measured_pitch(crop[:, :half], nominal)) ** 2
    if abs(ratio - 1.0) > RATIO_MIN:
        out.append(cells(crop, n, ratio=float(np.clip(ratio, *RATIO_RANGE))))
    pitch = measured_pitch(crop, nominal)
    if not (1 - PITCH_SLACK_SHORT) * nominal <= pitch <= (1 + PITCH_SLACK) * nominal:
        # ends a pitch or more too far apart: a mark, an edge or a blank pitch taken for print
        # at either end or both
        spare = (span - (n - 1 + INK_SPAN) * pitch) / pitch
        out += [cells(crop, n, pitch, anchor=end, inset=k)
                for k in range(min(INSET_MAX, max(0, round(spare))) + 1 if insets else 1)
                for end in ("left", "right")]
    return out



def phase_variants(crop: np.ndarray, n: int) -> list[np.ndarray]:
    """The cells of a line crop by its ends (:func:`cells`), every cell moved by each of
    :data:`PHASE_SHIFTS` pitches, in that order: print whose glyphs sit otherwise within their
    pitch than in the font the recogniser was trained on (a real passport's OCR-B) is cut a
    part of a character off at every cell by the ends alone. The reader takes a shift for a
    whole zone, and only where the zone reads unsurely by its ends and surely with the shift
    (:data:`PHASE_MIN`, ``read._in_phase``)."""
    return [cells(crop, n, shift=s) for s in PHASE_SHIFTS]


def cells(crop: np.ndarray, n: int, pitch: float | None = None,
          anchor: str = "left", ratio: float = 1.0, inset: int = 0,
          shift: float = 0.0) -> np.ndarray:
    """The ``n`` character cells of a line crop, by the fixed pitch.

    Args:
        crop: ``(32, w) uint8`` grey line crop (:func:`locate.line_crops`: the print from
            ``PAD_PX`` to ``w - PAD_PX``).
        n: characters in the line.
        pitch: the pitch (crop px); None: the one the crop's ends imply.
        anchor: with a ``pitch``, where the characters sit: the first at the left end
            (``left``), the last at the right end (``right``), or centred on the ends' middle
            (``centre``).
        inset: with a ``pitch`` and a ``left`` or ``right`` anchor, the first (last)
            character sits this many pitches in from that end.
        ratio: the pitch at the last character over the pitch at the first: the characters
            between the first and the last follow a 1-D projective map (a line seen in
            perspective); 1.0: a fixed pitch.
        shift: every cell moved this many pitches to the right (negative: left).

    Returns:
        ``(n, 32, 24) uint8``: cell ``i`` centred on character ``i``, resampled so one pitch is
        :data:`PITCH_PX` px wide.
    """
    span = crop.shape[1] - 2 * PAD_PX
    start = PAD_PX
    if pitch is None:
        pitch = span / (n - 1 + INK_SPAN)
    elif anchor == "right":
        start = crop.shape[1] - PAD_PX - (n - 1 + INK_SPAN + inset) * pitch
    elif anchor == "left":
        start = PAD_PX + inset * pitch
    elif anchor == "centre":
        start = PAD_PX + 0.5 * (span - (n - 1 + INK_SPAN) * pitch)
    scale = PITCH_PX / pitch
    w = max(1, int(round(crop.shape[1] * scale)))
    line = cv2.resize(crop, (w, CELL_H), interpolation=cv2.INTER_AREA if scale < 1
                      else cv2.INTER_LINEAR)
    first = (start + (0.5 * INK_SPAN + shift) * pitch) * scale  # centre of character 0
    t = np.arange(n) / max(n - 1, 1)
    if ratio != 1.0:  # a 1-D projective map between the ends: pitch at the right / left = ratio
        sq = float(np.sqrt(ratio))
        t = t / (t + sq * (1.0 - t))
    starts = np.round(first + PITCH_PX * (n - 1) * t - CELL_W / 2).astype(int)
    left = max(0, -int(starts.min()))
    right = max(0, int(starts.max()) + CELL_W - w)
    line = cv2.copyMakeBorder(line, 0, 0, left, right, cv2.BORDER_REPLICATE)
    starts += left
    idx = starts[:, None] + np.arange(CELL_W)[None, :]
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
    """A line from its cells' probabilities ``(n, 37)``, each alternative's kept to 1e-7: a
    look-alike's confidence among the characters its place allows is a ratio of small
    probabilities (``read.typed_confidence``; rounded to 1e-4, PassportEye's ``100_pass-isl``
    read a name's ``O`` at 0.0003 of 0.0004 where it was 0.92 sure)."""
    top = np.argsort(-probs, axis=1)[:, :ALTERNATIVES]
    alts = tuple(tuple((CLASSES[k], round(float(p[k]), 7)) for k in row)
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
