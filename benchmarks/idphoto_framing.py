"""ID-photo framing of one code version, and the difference between two versions.

Not a test. ``record`` runs the ID-photo processor on
``processors.idphoto.portraits.framing_set`` plus
the shared cases' portraits (``../shared/cases``, where present) and keeps, per image, the
verdict and the frame the processor planned (``framing.plan_frame``'s result: source position
of the output's top-left corner, scale, size). ``compare`` reads two such files and reports, per
image, how far the second version's output corners land from the first's, in px of the output
photo (0 = the same crop), and the difference of head height and crown margin in output px.

    .venv/bin/python -m benchmarks.idphoto_framing record --out /tmp/before.json
    .venv/bin/python -m benchmarks.idphoto_framing compare /tmp/before.json /tmp/after.json

``record`` runs with whatever ``processors`` is on ``sys.path``: point ``PYTHONPATH`` at an
export of another commit (``git archive``) to record that version.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from processors.idphoto.portraits import framing_set

#: The shared cases folder beside the checkout (``../shared/cases``), as the tests find it.
CASES = Path(__file__).resolve().parents[1].parent / "shared" / "cases"


def _inputs(cases: Path) -> list[tuple[str, np.ndarray]]:
    from processors.decode import DecodeSettings, decode_image

    items = framing_set()
    for name in ("portrait.jpg", "exif_orientation_6.jpg"):
        p = cases / "images" / name
        if p.is_file():
            items.append((f"cases/{name}", decode_image(p.read_bytes(), DecodeSettings())))
    return items


def record(size: str = "one_inch", cases: Path = CASES, jpeg: int = 0) -> dict[str, dict]:
    """Verdict and planned frame per input image with the ``processors`` on ``sys.path``.

    Args:
        size: the ``size`` option of every item.
        cases: the shared cases folder (its portraits are added where present).
        jpeg: upload each image as a JPEG of this quality (0: lossless, as decoded pixels).
    """
    import cv2

    import processors.idphoto.processor as proc_mod
    from processors.base import Item
    from processors.decode import DecodeSettings, decode_image
    from processors.idphoto.processor import IdPhotoProcessor
    from processors.idphoto.settings import IdPhotoSettings
    from processors.runtime import RuntimeSettings

    planned: list[object] = []
    heads: list[object] = []
    real_plan, real_head = proc_mod.plan_frame, proc_mod.head_geometry

    def spy(*args, **kwargs):  # the frame the processor computed for the current item
        fr = real_plan(*args, **kwargs)
        planned.append(fr)
        return fr

    def spy_head(*args, **kwargs):  # and the head it measured
        g = real_head(*args, **kwargs)
        heads.append(g)
        return g

    proc_mod.plan_frame, proc_mod.head_geometry = spy, spy_head
    proc = IdPhotoProcessor(IdPhotoSettings(), RuntimeSettings(device="cpu", buckets=(1,),
                                                               postprocess_threads=1))
    out: dict[str, dict] = {}
    for name, img in _inputs(cases):
        planned.clear()
        heads.clear()
        opts = {"size": size}
        if jpeg:
            data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, jpeg])[1].tobytes()
            if hasattr(Item, "from_array"):  # Items carry probed bytes
                from processors.decode import probe_image

                item = Item(name, probe_image(data, DecodeSettings()), opts)
            else:  # Items carry decoded pixels (before issue 29)
                item = Item(name, decode_image(data, DecodeSettings()), opts)
        else:  # lossless: PNG where Items are bytes
            item = getattr(Item, "from_array", Item)(name, img, opts)
        (o,) = proc.process_batch([item])
        fr = planned[-1] if planned else None
        g = heads[-1] if heads else None
        out[name] = {"status": str(o.status), "reasons": [str(r) for r in o.reasons],
                     "face_box": o.payload.get("face_box"), "shape": list(img.shape[:2]),
                     "head": None if g is None else {k: round(float(getattr(g, k)), 2) for k in
                                                      ("crown_y", "chin_y", "centre_x")},
                     "frame": None if fr is None else {k: float(getattr(fr, k)) for k in
                                                        ("x0", "y0", "scale", "width", "height")}}
    return out


def frame_difference(a: dict, b: dict) -> dict[str, float]:
    """How far frame ``b``'s output corners land from frame ``a``'s, in ``a``'s output px.

    Returns:
        ``{"corner_px": max over the 4 corners, "shift_px": at the top-left corner, "scale_pct":
        (b.scale / a.scale - 1) * 100}``.
    """
    w, h = a["width"], a["height"]
    corners = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    src = corners / b["scale"] + [b["x0"], b["y0"]]
    in_a = (src - [a["x0"], a["y0"]]) * a["scale"]
    d = np.linalg.norm(in_a - corners, axis=1)
    return {"corner_px": round(float(d.max()), 2), "shift_px": round(float(d[0]), 2),
            "scale_pct": round((b["scale"] / a["scale"] - 1.0) * 100.0, 2)}


def scale_jitter(run: dict[str, dict]) -> dict[str, float]:
    """How far each ``scaled_*`` copy's frame is from the astronaut's frame scaled by the same
    factor (output px, :func:`frame_difference`): 0 for framing that follows the picture
    exactly. It measures one version's own noise, with no reference to the other."""
    base = run.get("astronaut", {}).get("frame")
    out = {}
    for name, r in run.items():
        if not name.startswith("scaled_") or not r["frame"] or not base:
            continue
        k = r["shape"][1] / run["astronaut"]["shape"][1]
        ideal = {**base, "x0": base["x0"] * k, "y0": base["y0"] * k, "scale": base["scale"] / k}
        out[name] = frame_difference(ideal, r["frame"])["corner_px"]
    return out


def compare(before: dict[str, dict], after: dict[str, dict]) -> dict:
    """Per image: both verdicts and, where both framed it, :func:`frame_difference`; then the
    median, 90th percentile and maximum of ``corner_px`` and the images whose verdict changed."""
    rows, diffs = [], []
    for name, a in before.items():
        b = after.get(name)
        if b is None:
            continue
        row = {"image": name, "before": a["status"] + "".join(f" {r}" for r in a["reasons"]),
               "after": b["status"] + "".join(f" {r}" for r in b["reasons"])}
        if a["frame"] and b["frame"] and a["status"] == b["status"] == "accepted":
            row.update(frame_difference(a["frame"], b["frame"]))
            diffs.append(row["corner_px"])
        rows.append(row)
    arr = np.asarray(diffs) if diffs else np.zeros(1)
    return {"rows": rows, "framed_both": len(diffs),
            "corner_px_median": round(float(np.median(arr)), 2),
            "corner_px_p90": round(float(np.percentile(arr, 90)), 2),
            "corner_px_max": round(float(arr.max()), 2),
            "within_1px": int((arr <= 1.0).sum()) if diffs else 0,
            "verdict_changed": [r["image"] for r in rows if r["before"] != r["after"]],
            "scale_jitter_px": {"before": scale_jitter(before), "after": scale_jitter(after)}}


def main(argv: list[str] | None = None) -> int:
    """``record --out FILE`` or ``compare BEFORE AFTER``."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.idphoto_framing",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--size", default="one_inch")
    r.add_argument("--cases", type=Path, default=CASES, help="shared cases folder")
    r.add_argument("--jpeg", type=int, default=0, help="upload as JPEG of this quality (0: PNG)")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "record":
        from streams.logs import configure_logging

        configure_logging("WARNING")
        a.out.write_text(json.dumps(record(a.size, a.cases, a.jpeg), indent=1) + "\n")
        print(f"wrote {a.out}")
        return 0
    res = compare(json.loads(a.before.read_text()), json.loads(a.after.read_text()))
    for row in res["rows"]:
        print(json.dumps(row))
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
