"""Verdict counts on synthetic cards cut by the frame and on strongly blurred cards.

The held-out set keeps every card inside the frame (the SmartDoc protocol scores quads), so the
PARTIAL_CARD and BLURRY verdicts are checked here instead. With ``--seed 777`` there are 40 cut
cards (of which the ones with a corner outside the frame are kept) and 40 blurred ones, drawn by
:func:`processors.card.training.synth.sample` with ``cut=True`` / ``strong_blur=True``. It prints
one JSON line per model and set: ``{"model", "set", "n", <reason or "accepted">: count, ...}``.

    python -m processors.card.training.cut_blur_eval --seed 777 MODEL.onnx [MODEL.onnx ...]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np

from processors.base import Item, process_in_buckets
from processors.card.processor import CardProcessor
from processors.card.settings import CardSettings
from processors.card.training import synth
from processors.logs import configure_logging
from processors.runtime import RuntimeSettings


def _outside(s: synth.Sample) -> bool:
    """True when a corner of the sample's quad lies outside its frame."""
    h, w = s.image.shape[:2]
    q = s.quad
    if q is None:  # a negative sample: no card
        return False
    return bool((q < 0).any() or (q[:, 0] > w).any() or (q[:, 1] > h).any())


def main() -> None:
    """CLI entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path, help="ONNX files (same graph as u2netp)")
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--n", type=int, default=40, help="samples drawn per set")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    sets = {"cut": [s for s in (synth.sample(rng, cut=True) for _ in range(a.n)) if _outside(s)]}
    sets["blur"] = [synth.sample(rng, strong_blur=True) for _ in range(a.n)]
    for model in a.models:
        proc = CardProcessor(CardSettings(), RuntimeSettings(device="cpu", max_bucket=8),
                             model_file=model)
        for name, samples in sets.items():
            counts: collections.Counter[str] = collections.Counter()
            items = [Item.from_array(f"{name}-{i}", s.image) for i, s in enumerate(samples)]
            for o in process_in_buckets(proc, items, 8):
                counts[",".join(str(r) for r in o.reasons) or "accepted"] += 1
            print(json.dumps({"model": model.name, "set": name, "n": len(samples),
                              **dict(counts.most_common())}), flush=True)


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    main()
