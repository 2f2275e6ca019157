"""``python -m benchmarks.precision_gate``: does a precision keep fp32's results? (issue 40)

The int8 model files (:mod:`processors.quantise`) become the CPU default only while this gate
holds. It runs each processor twice on the same inputs, with ``CARDSTREAM_RUNTIME__PRECISION``
``fp32`` and with the candidate (``--precision``, default ``int8``), on ONNX Runtime's CPU
provider, and compares:

**Card** (``card``): quad IoU against the labelled corners (SmartDoc-2015 protocol,
:func:`processors.card.metrics.score_set`) on the shared real photos (``../shared/cases``,
``real/`` files) and on the held-out synthetic draws (``processors.card.training.synth``, seeds
20261129 and 20261128, 500 photos each, written once under ``~/.cache/cardstream/heldout-SEED``).
Per set, the candidate's mean IoU and share above 0.9 may be at most :data:`CARD_TOLERANCE`
below fp32's (better is fine); photos whose IoU moved by more than 0.05 are listed.

**ID photo** (``id_photo``): the person matte (rembg's normalised U²-Net map, 0..255, at the
model's 320 x 320) of every matting call whose input is the same in both runs, on the shared
portraits (``../shared/cases/images/portrait.*``) and the project's own
(:func:`processors.idphoto.portraits.framing_set`: 37 placed, scaled, turned and mirrored
astronauts, JPEG q 95): the mean absolute difference over all of them may be at most
:data:`ALPHA_TOLERANCE` levels; each portrait's status, reasons and face box are compared too
(reported, not gated).

    python -m benchmarks.precision_gate                      # int8 against fp32, both tasks
    python -m benchmarks.precision_gate --tasks card --heldout-n 100   # a quicker look

Prints one JSON object (``--out FILE`` writes it too); exit status 0 when every check holds,
1 when one fails. Not part of ``make test``: about 25 min on the 2-core box when it is quiet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from benchmarks.common import ROOT, machine_info
from benchmarks.model_only import batched_model
from processors import registry
from processors.base import Item, Processor
from processors.decode import DecodeSettings, probe_image
from processors.runtime import ModelCall, RuntimeSettings, recorded_calls

#: Largest drop (fp32 minus candidate) of a set's mean IoU and of its share above 0.9.
CARD_TOLERANCE = 0.005
#: Largest mean absolute difference of the person matte, in levels of 255.
ALPHA_TOLERANCE = 2.0
#: The card model's held-out synthetic draws (``processors/card/MODEL.md``).
HELDOUT_SEEDS = (20261129, 20261128)
#: IoU change (either way) from which a card photo is listed.
FLIP_IOU = 0.05
SHARED = ROOT.parent / "shared" / "cases"


def heldout_set(seed: int, n: int, cache: Path) -> Path:
    """The held-out draw of ``seed`` (``n`` photos, ``synth.write_set``), written under
    ``cache`` once (a ``.done`` marker guards against a half-written folder)."""
    from processors.card.training.synth import write_set

    out = cache / f"heldout-{seed}-{n}"
    if not (out / ".done").exists():
        write_set(out, n, seed)
        (out / ".done").write_text("")
    return out


def processor(task: str, precision: str, decode: DecodeSettings) -> Processor:
    """``task``'s processor on the CPU provider at ``precision``, default settings, warmed up."""
    spec = registry.spec(task)
    rt = RuntimeSettings(device="cpu", precision=precision)  # type: ignore[arg-type]  # a checked choice
    section = spec.settings_model() if spec.settings_model is not None else None
    proc = registry.build_processor(task, section, rt, decode=decode)
    proc.warm_up()
    return proc


def _card_set(name: str, folder: Path, prefix: str, procs: dict[str, Processor],
              decode: DecodeSettings, batch: int) -> dict[str, Any]:
    """One labelled set scored by each processor of ``procs`` (precision -> processor)."""
    from processors.card.metrics import score_set, scored_cases

    cases = [c for c in scored_cases(folder) if c["file"].startswith(prefix)]
    runs = {p: score_set(proc, folder, cases, decode, batch) for p, proc in procs.items()}
    (ref_sum, ref_rows), (cand_sum, cand_rows) = runs.values()
    a, b = ref_sum["all"], cand_sum["all"]
    drop = {"mean_iou": round(a["mean_iou"] - b["mean_iou"], 4),
            "share_above": round(a["share_above"] - b["share_above"], 4)}
    moved = [{"file": r["file"], "iou": [round(r["iou"], 4), round(c["iou"], 4)]}
             for r, c in zip(ref_rows, cand_rows, strict=True)
             if r["iou"] is not None and abs(r["iou"] - c["iou"]) > FLIP_IOU]
    neg = [ref_sum["negatives"]["no_card_share"], cand_sum["negatives"]["no_card_share"]]
    return {"set": name, "cards": a["n"],
            "mean_iou": [round(a["mean_iou"], 4), round(b["mean_iou"], 4)],
            "share_above_0.9": [round(a["share_above"], 4), round(b["share_above"], 4)],
            "accepted_share": [round(a["accepted_share"], 4), round(b["accepted_share"], 4)],
            "negatives_no_card_share": neg, "drop": drop, "moved": moved,
            "holds": max(drop.values()) <= CARD_TOLERANCE}


def card_gate(precision: str, heldout_n: int, cache: Path, batch: int = 8) -> dict[str, Any]:
    """The card checks (module docstring); ``[fp32, candidate]`` pairs per figure."""
    decode = DecodeSettings()
    procs = {p: processor("card", p, decode) for p in ("fp32", precision)}
    sets = []
    if (SHARED / "manifest.json").exists():
        sets.append(_card_set("shared real", SHARED, "real/", procs, decode, batch))
    for seed in HELDOUT_SEEDS:
        sets.append(_card_set(f"held-out {seed}", heldout_set(seed, heldout_n, cache), "",
                              procs, decode, batch))
    return {"sets": sets, "holds": all(s["holds"] for s in sets),
            "shared_cases": SHARED.exists()}


def portraits() -> list[tuple[str, bytes]]:
    """The ID-photo gate's uploads: the shared portraits (where ``../shared/cases`` is) and
    :func:`processors.idphoto.portraits.framing_set` as JPEG q 95."""
    from processors.idphoto.portraits import framing_set

    out = [(f"shared/{p.name}", p.read_bytes())
           for p in sorted((SHARED / "images").glob("portrait.*"))]
    for name, img in framing_set():
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        out.append((name, buf.tobytes()))
    return out


def _mattes(proc: Processor, data: bytes, decode: DecodeSettings
            ) -> tuple[dict[str, Any], list[ModelCall]]:
    """One upload through ``proc``: its outcome's status, reasons and face box, and its
    matting model's calls."""
    calls: list[ModelCall] = []
    matting = batched_model(proc)
    with recorded_calls(calls):
        o = proc.process_batch([Item("gate", probe_image(data, decode))])[0]
    return ({"status": str(o.status), "reasons": [str(r) for r in o.reasons],
             "face_box": o.payload.get("face_box")}, [c for c in calls if c.model is matting])


def _box_iou(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    """IoU of two ``[x, y, w, h]`` boxes (None when either is missing)."""
    if a is None or b is None:
        return None
    ix = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = a[2] * a[3] + b[2] * b[3] - inter
    return round(inter / union, 4) if union > 0 else 0.0


def idphoto_gate(precision: str) -> dict[str, Any]:
    """The ID-photo checks (module docstring)."""
    from processors.idphoto.matting import normalise

    decode = DecodeSettings()
    procs = {p: processor("id_photo", p, decode) for p in ("fp32", precision)}
    rows, diffs = [], []
    for name, data in portraits():
        (ref, ref_calls), (cand, cand_calls) = (_mattes(p, data, decode) for p in procs.values())
        same = [(r, c) for r, c in zip(ref_calls, cand_calls, strict=False)
                if r.x.shape == c.x.shape and np.array_equal(r.x, c.x)]
        d = [float(np.abs(normalise(r.outputs[0][k, 0]).astype(np.int16)
                          - normalise(c.outputs[0][k, 0])).mean())
             for r, c in same for k in range(len(r.x))]
        diffs += d
        rows.append({"portrait": name, "alpha_mad": round(float(np.mean(d)), 3) if d else None,
                     "matting_calls": [len(ref_calls), len(cand_calls), len(same)],
                     "status": [ref["status"], cand["status"]],
                     "same_reasons": ref["reasons"] == cand["reasons"],
                     "face_box_iou": _box_iou(ref["face_box"], cand["face_box"])})
    mad = float(np.mean(diffs)) if diffs else float("nan")
    return {"portraits": len(rows), "alpha_mad_levels": round(mad, 3),
            "alpha_mad_max_levels": round(max(diffs), 3) if diffs else None,
            "status_changes": sum(r["status"][0] != r["status"][1] for r in rows),
            "reason_changes": sum(not r["same_reasons"] for r in rows),
            "rows": rows, "holds": bool(diffs) and mad <= ALPHA_TOLERANCE}


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.precision_gate",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="int8", choices=("int8", "fp16"),
                    help="the candidate, compared with fp32")
    ap.add_argument("--tasks", default="card,id_photo")
    ap.add_argument("--heldout-n", type=int, default=500, help="photos per held-out draw")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "cardstream",
                    help="where the held-out draws are written once")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    a = ap.parse_args(argv)
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    t0 = time.monotonic()
    doc: dict[str, Any] = {"command": " ".join(["python -m benchmarks.precision_gate",
                                                *(argv if argv is not None else sys.argv[1:])]),
                           "machine": machine_info(), "precision": ["fp32", a.precision],
                           "tolerance": {"card_iou": CARD_TOLERANCE,
                                         "alpha_levels": ALPHA_TOLERANCE}}
    tasks = [t for t in a.tasks.split(",") if t]
    if "card" in tasks:
        doc["card"] = card_gate(a.precision, a.heldout_n, a.cache)
    if "id_photo" in tasks:
        doc["id_photo"] = idphoto_gate(a.precision)
    doc["holds"] = all(doc[t]["holds"] for t in tasks)
    doc["seconds"] = round(time.monotonic() - t0, 1)
    doc["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    text = json.dumps(doc)
    print(text)
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if doc["holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
