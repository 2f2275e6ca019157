"""The MRZ line recogniser: a small CRNN read with CTC, one batched ONNX call for a batch's lines.

``mrz_crnn.onnx`` (trained by this project on synthetic OCR-B lines,
``processors/card/training/mrz_train.py``; figures in ``processors/card/MODEL.md``) maps a
``(N, 1, 32, W)`` batch of grey line crops (standardised per crop by :func:`line_batch`) to
``(N, W / 4, 38)`` log-probabilities over the CTC blank and the 37 MRZ characters
(:data:`CLASSES`). Decoding keeps, for every character, the recogniser's own alternatives with
their probabilities, so a later correction can only choose among what the model saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from processors.card.mrz.icao import ALPHABET
from processors.card.mrz.locate import LINE_INPUT_H
from processors.errors import ModelError
from processors.models import manifest, model_path
from processors.runtime import BatchedModel, RuntimeSettings

MODEL_FILE = "mrz_crnn"
"""Entry in ``processors/models.json``."""
CLASSES = "-" + ALPHABET
"""Output classes: 0 is the CTC blank, then ``0-9 A-Z <`` (:data:`icao.ALPHABET`)."""
STRIDE = 4
"""Input px per output time step."""
WIDTH_STEP = 64
"""A batch is padded to a multiple of this width (fewer distinct shapes for ONNX Runtime)."""
LINE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Batch buckets of the recogniser: a batch's lines (up to 3 per card) go in one call."""
ALTERNATIVES = 3
"""Alternatives kept per character (best first)."""


def line_batch(crops: Sequence[np.ndarray]) -> np.ndarray:
    """Recogniser input from line crops (``(32, w) uint8`` grey, :func:`locate.line_crops`).

    Each crop is standardised (zero mean, unit standard deviation, floor 8 grey levels) and the
    batch is right-padded with zeros to the widest crop rounded up to :data:`WIDTH_STEP`.

    Returns:
        ``(N, 1, 32, W) float32``.
    """
    width = max(c.shape[1] for c in crops)
    width = -(-width // WIDTH_STEP) * WIDTH_STEP
    x = np.zeros((len(crops), 1, LINE_INPUT_H, width), np.float32)
    for i, c in enumerate(crops):
        f = c.astype(np.float32)
        x[i, 0, :, : c.shape[1]] = (f - f.mean()) / max(float(f.std()), 8.0)
    return x


@dataclass(frozen=True, slots=True)
class Read:
    """One line as read.

    Attributes:
        text: the characters (``A-Z 0-9 <``).
        alts: per character, up to :data:`ALTERNATIVES` ``(character, probability)`` pairs,
            best first (the mean probability over the frames that emitted it, blank left out
            and the rest renormalised).
    """

    text: str
    alts: tuple[tuple[tuple[str, float], ...], ...]


def _spans(path: np.ndarray) -> list[tuple[int, int, int]]:
    """``(class, first frame, last frame + 1)`` of each character a CTC frame path emits."""
    out: list[tuple[int, int, int]] = []
    prev = 0
    for t, c in enumerate(path.tolist()):
        if c != 0 and c != prev:
            out.append((c, t, t + 1))
        elif c != 0 and c == prev:
            out[-1] = (c, out[-1][1], t + 1)
        prev = c
    return out


def _read(logp: np.ndarray, path: np.ndarray) -> Read:
    p = np.exp(logp)
    chars, alts = [], []
    for c, t0, t1 in _spans(path):
        q = p[t0:t1, 1:].mean(axis=0)
        q = q / max(float(q.sum()), 1e-9)
        top = np.argsort(-q)[:ALTERNATIVES]
        chars.append(CLASSES[c])
        alts.append(tuple((CLASSES[k + 1], round(float(q[k]), 4)) for k in top))
    return Read("".join(chars), tuple(alts))


def best_path(logp: np.ndarray) -> np.ndarray:
    """The most probable frame labels: ``(T,) int`` argmax per frame (greedy CTC)."""
    return logp.argmax(axis=1)


def best_path_of_length(logp: np.ndarray, n: int) -> np.ndarray | None:
    """The most probable frame path that emits exactly ``n`` characters (CTC collapse rule:
    a character is emitted where a frame's label is not blank and differs from the frame
    before). Viterbi over (characters emitted, last label); None when ``T`` frames cannot hold
    ``n`` characters.

    Args:
        logp: ``(T, C) float`` log-probabilities, class 0 the blank.
        n: characters wanted.

    Returns:
        ``(T,) int`` frame labels.
    """
    t_max, c = logp.shape
    if n <= 0 or n > t_max:
        return None
    neg = -1e30
    score = np.full((n + 1, c), neg)
    score[0, 0] = logp[0, 0]
    score[1, 1:] = logp[0, 1:]
    back = np.zeros((t_max, n + 1, c), np.int16)   # previous label
    step = np.zeros((t_max, n + 1, c), np.bool_)   # whether k went up by one
    labels = np.arange(c)
    for t in range(1, t_max):
        best_l = score.argmax(axis=1)                          # (n+1,)
        best_v = score[np.arange(n + 1), best_l]
        masked = score.copy()
        masked[np.arange(n + 1), best_l] = neg
        second_l = masked.argmax(axis=1)
        second_v = masked[np.arange(n + 1), second_l]
        new = np.full((n + 1, c), neg)
        # blank: stay at k from any label
        new[:, 0] = best_v + logp[t, 0]
        back[t, :, 0] = best_l
        # label l > 0: continue the same label (k), or emit after another label (k - 1)
        cont = score[:, 1:]                                     # (n+1, c-1)
        prev_best = np.where(best_l[:-1, None] != labels[None, 1:], best_v[:-1, None],
                             second_v[:-1, None])               # (n, c-1)
        prev_lab = np.where(best_l[:-1, None] != labels[None, 1:], best_l[:-1, None],
                            second_l[:-1, None])
        emit = np.full((n + 1, c - 1), neg)
        emit[1:] = prev_best
        take_emit = emit > cont
        new[:, 1:] = np.where(take_emit, emit, cont) + logp[t, 1:]
        back[t, :, 1:] = np.where(take_emit, np.vstack([np.zeros((1, c - 1), np.int64),
                                                        prev_lab]), labels[None, 1:])
        step[t, :, 1:] = take_emit
        score = new
    last = int(score[n].argmax())
    if score[n, last] <= neg / 2:
        return None
    path = np.zeros(t_max, np.int64)
    k = n
    for t in range(t_max - 1, -1, -1):
        path[t] = last
        if t == 0:
            break
        up = bool(step[t, k, last])
        last = int(back[t, k, last])
        k -= int(up)
    return path


def decode(logp: np.ndarray, lengths: Sequence[int] = ()) -> Read:
    """Greedy CTC decoding of one line; when its length is none of ``lengths`` (e.g. 30, 36, 44)
    but within 3 of one, the best path of that length instead.

    Args:
        logp: ``(T, 38) float32`` log-probabilities of one line (padding frames included: the
            model reads the padding as blank).
        lengths: the line lengths the zone may have.
    """
    path = best_path(logp)
    r = _read(logp, path)
    if not lengths or len(r.text) in lengths:
        return r
    near = min(lengths, key=lambda n: abs(n - len(r.text)))
    if abs(near - len(r.text)) > 3:
        return r
    fixed = best_path_of_length(logp, near)
    return r if fixed is None else _read(logp, fixed)


class Recogniser:
    """The batched line recogniser.

    Args:
        runtime: ONNX Runtime settings (device); its own batch buckets (:data:`LINE_BUCKETS`),
            the largest always used, so a batch's lines are one call.
        model_file: another ONNX file (tests, a new training run; not checked against a
            SHA-256); None uses the pinned ``mrz_crnn`` shipped in the package.

    Raises:
        ModelError: the model file is missing or fails its pin.
        ProviderError: CUDA requested but not active.
    """

    def __init__(self, runtime: RuntimeSettings, model_file: Path | None = None) -> None:
        if model_file is None:
            path, sha = model_path(MODEL_FILE), manifest()[MODEL_FILE]["sha256"]
        else:
            path, sha = Path(model_file), None
        rt = runtime.model_copy(update={"buckets": LINE_BUCKETS, "max_bucket": None,
                                        "cpu_max_bucket": LINE_BUCKETS[-1]})
        self.model = BatchedModel.shared(path, sha, rt, "mrz-crnn",
                                         input_shape=(1, LINE_INPUT_H, 0))
        self.model.chosen_bucket = self.model.buckets[-1]
        self.sha256 = sha

    def warm_up(self) -> None:
        """One call on a blank line of a TD3 width (no bucket sweep: the largest is used)."""
        self.model.run(np.zeros((1, 1, LINE_INPUT_H, 896), np.float32))

    def log_probs(self, crops: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per crop, ``(T_k, 38) float32`` log-probabilities (its own frames, padding cut).

        Raises:
            ModelError: ONNX Runtime failed on the batch.
        """
        if not crops:
            return []
        try:
            out = self.model.run(line_batch(crops))[0]
        except Exception as e:  # onnxruntime raises untyped errors
            raise ModelError(f"MRZ recogniser failed: {e}") from e
        return [out[i, : max(1, -(-c.shape[1] // STRIDE))] for i, c in enumerate(crops)]
