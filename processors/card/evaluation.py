"""Evaluate the MRZ read and the capture-quality measures through the whole card pipeline.

A set is a folder written by :mod:`processors.card.training.documents` (photos + a
``manifest.json`` with each document's truth). Every photo goes through the card processor as
the worker runs it (decode -> u2netp quad -> rectification -> upright -> verification), in
buckets of ``batch``; the results are compared with the truth.

MRZ (``mrz_summary``): a document is *exactly right* when its zone is found and its format,
every printed field value and every check digit's validity equal the truth (a document printed
with a wrong check digit must be read as printed and reported invalid). *Wrong but valid*: the
result claims every check digit valid while a field differs from the truth, the worst error
(a platform would trust it). Field rates: share of documents whose field equals the truth.
The exact rate is also given apart by what covers the zone in the photo (the set's truth):
``glare`` (``glare_on_mrz``: a spot saturates at least 10 % of the MRZ band), ``hand``
(``hand_on_mrz``: the holding thumb covers at least 3 % of it), both, or ``clear``. Print under
a saturated spot or a thumb is gone from the photo, so such a zone reads only where the cover
misses every character. Where the set's truth counts the characters the photo lost
(``mrz_chars_hidden``: at least half a character's ink saturated by the glare, or a third of
its cell under the thumb; sets written since 2026-12-06), the exact rate is also given for
the documents whose every character the photo kept (``visible``) and the others (``hidden``),
and the share of ``visible`` documents: what a perfect reader could read exactly. CPU:
process CPU time per document of the whole pipeline, and of the MRZ step alone.

Quality (``quality_summary``): DPI within 5 % of the DPI rendered, tilt within 2 degrees of the
tilt rendered, PHOTOCOPY recall on the grey copies and its false-positive rate on the colour
documents (and on real card photos, ``--real``: a ``shared/cases``-style folder, every card
in it a colour capture), and the CPU time of the measures per card.

Command line (the thin ``cardstream eval mrz|quality`` runs the same)::

    python -m processors.card.evaluation mrz --set DIR [--batch 8] [--json] [--given-quads]
    python -m processors.card.evaluation quality --set DIR [--real ../shared/cases] [--json]
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.base import Item, Outcome, process_in_buckets
from processors.card.mrz.icao import Format
from processors.decode import DecodeSettings, probe_image
from processors.errors import DecodeError, EvalSetError
from processors.logs import configure_logging

FIELDS = ("document_code", "issuing_state", "document_number", "nationality", "birth_date",
          "sex", "expiry_date", "primary_name", "secondary_name", "optional_data")
"""The MRZ fields compared (``MrzValues``)."""


def load_set(set_dir: Path) -> tuple[list[dict[str, Any]], dt.date]:
    """The documents of a set and the date their expiry is judged at.

    Raises:
        ValueError: no ``manifest.json`` with ``documents`` (not a documents set).
        EvalSetError: the manifest lists no document, or a document that is not an object with
            a ``file`` (a name in the set's folder, listed once) and a ``truth`` object with
            the fields scored, whose scored fields have the wrong type or value
            (:func:`_wrongly_typed`: the format, ``mrz_chars_hidden``, ...), or a file that is a
            symbolic link.
    """
    try:
        man = json.loads((Path(set_dir) / "manifest.json").read_text())
        docs, today = man["documents"], dt.date.fromisoformat(man["today"])
        if not isinstance(docs, list):
            raise TypeError("documents is not a list")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{set_dir}/manifest.json is not a documents set ({type(e).__name__}): "
                         "write one with `python -m processors.card.training.documents`") from e
    if not docs:
        raise EvalSetError(f"{set_dir}/manifest.json lists no document")
    seen: set[str] = set()
    for k, d in enumerate(docs):
        name = d.get("file") if isinstance(d, dict) else None
        if (not isinstance(name, str) or not name or Path(name).name != name
                or name in (".", "..")):
            raise EvalSetError(f"document {k} of the manifest has no file name of the set's own "
                               "folder (a name, no path)")
        if name in seen:
            raise EvalSetError(f"document {k} of the manifest lists {name} again")
        seen.add(name)
        truth = d.get("truth")
        lacking = ([f for f in TRUTH_FIELDS if f not in truth] if isinstance(truth, dict)
                   else ["truth"])
        if (lacking or not isinstance(truth["fields"], dict)
                or np.asarray(truth["quad"], dtype=object).shape != (4, 2)):
            raise EvalSetError(f"the manifest's {name} has no truth with "
                               + ", ".join(TRUTH_FIELDS) + " (a quad of 4 corners, fields an "
                               "object)" + (f": {', '.join(lacking)} missing" if lacking else ""))
        wrong = _wrongly_typed(truth)
        if wrong:
            raise EvalSetError(f"the manifest's {name} has a truth whose {wrong}")
        if (Path(set_dir) / name).is_symlink():
            raise EvalSetError(f"the manifest's {name} is a symbolic link: a set's images are "
                               "its own files")
    return docs, today


def _wrongly_typed(truth: dict[str, Any]) -> str | None:
    """What of a document's ``truth`` has the wrong type, as the end of a sentence, or None: its
    ``format`` (one of :data:`FORMAT_NAMES`), ``mrz_chars_hidden`` (a count or null, where
    present), the MRZ ``fields`` (every one of :data:`FIELDS`, a string), ``checks`` (each true,
    false or null), ``expired`` (true, false or null), ``grey_copy`` (true or false), ``doc_type``
    (``id_card`` or ``passport``), ``dpi`` (above 0), ``tilt_deg`` (0-90 degrees) and the
    ``quad``'s corners (finite numbers). A string ``"no"`` there was scored as true, a missing
    field as read wrong, a dpi of 0 divided by zero (fresh users' trials)."""
    if truth["format"] not in FORMAT_NAMES:
        return (f"format {truth['format']!r} is none of " + ", ".join(FORMAT_NAMES)
                + " (ICAO Doc 9303 parts 4-7)")
    hidden = truth.get("mrz_chars_hidden")
    if hidden is not None and (type(hidden) is not int or hidden < 0):
        return f"mrz_chars_hidden {hidden!r} is no count of characters (0 or more) or null"
    fields = truth["fields"]
    missing = [f for f in FIELDS if not isinstance(fields.get(f), str)]
    if missing:
        return "fields lack " + ", ".join(missing) + " (strings)"
    checks = truth["checks"]
    if not isinstance(checks, dict) or any(v is not None and type(v) is not bool
                                           for v in checks.values()):
        return "checks are not an object of true, false or null"
    if truth["expired"] is not None and type(truth["expired"]) is not bool:
        return "expired is not true, false or null"
    if type(truth["grey_copy"]) is not bool:
        return "grey_copy is not true or false"
    if truth["doc_type"] not in ("id_card", "passport"):
        return "doc_type is neither id_card nor passport"
    dpi, tilt = truth["dpi"], truth["tilt_deg"]
    if type(dpi) not in (int, float) or not np.isfinite(dpi) or dpi <= 0:
        return "dpi is not a finite number above 0"
    if type(tilt) not in (int, float) or not 0 <= tilt <= 90:
        return "tilt_deg is not a number of degrees in [0, 90]"
    corners = np.asarray(truth["quad"], dtype=object).ravel()  # (4, 2): checked by load_set
    if any(type(c) not in (int, float) or not np.isfinite(c) for c in corners):
        return "quad has a corner that is not two finite numbers"
    return None


PRINT_GROUPS = ("visible", "hidden", "unmeasured")
"""``by_print``'s groups: documents whose every MRZ character the photo kept, those that lost
one or more (``mrz_chars_hidden``), and those whose truth does not count them (a scan, a set
written before the count); empty where no document's truth counts them."""
FORMAT_NAMES = tuple(f.value for f in Format)
"""The MRZ formats a document's truth may name (:class:`processors.card.mrz.icao.Format`)."""
TRUTH_FIELDS = ("format", "doc_type", "fields", "checks", "expired", "quad", "dpi", "tilt_deg",
                "grey_copy")
"""What each document's truth must hold to be scored (:func:`mrz_summary`,
:func:`quality_summary`, and the true corners of ``--given-quads``)."""


def build_processor(today: dt.date, device: str = "cpu", mrz_file: Path | None = None):  # noqa: ANN201
    """The card processor as the worker builds it, with MRZ values allowed (the eval compares
    them) and the clock at ``today``."""
    from processors.card.processor import CardProcessor
    from processors.card.settings import CardSettings
    from processors.runtime import RuntimeSettings

    s = CardSettings()
    s = s.model_copy(update={"verify": s.verify.model_copy(update={"mrz_values_allowed": True})})
    when = dt.datetime.combine(today, dt.time(12), dt.UTC)
    return CardProcessor(s, RuntimeSettings(device=device), mrz_file=mrz_file,
                         clock=lambda: when)


def run(proc: Any, files: Sequence[Path], batch: int, options: dict[str, Any],
        strict: bool = False) -> tuple[list[Outcome | None], float]:
    """Outcomes of ``files`` (None for a file refused by the header probe) and the process CPU
    seconds the processing took.

    Raises:
        EvalSetError: ``strict`` and a file cannot be read or is no image (a set's manifest
            lists it: the set is broken, and scoring it as a miss would hide that).
    """
    items: list[Item] = []
    index: list[int] = []
    for k, f in enumerate(files):
        try:
            items.append(Item(upload_id=f"doc{k}", image=probe_image(f.read_bytes(),
                                                                     DecodeSettings()),
                              options=options))
            index.append(k)
        except (DecodeError, OSError) as e:
            if strict:
                raise EvalSetError(f"the manifest lists {f.name}, which cannot be read "
                                   f"({type(e).__name__})") from e
            continue
    t0 = time.process_time()
    outs = list(process_in_buckets(proc, items, batch))
    cpu = time.process_time() - t0
    res: list[Outcome | None] = [None] * len(files)
    for k, o in zip(index, outs, strict=True):
        res[k] = o
    return res, cpu


def _mrz(o: Outcome | None) -> dict[str, Any]:
    return (o.payload.get("mrz") or {}) if o is not None else {}


def mrz_summary(docs: Sequence[dict[str, Any]], outs: Sequence[Outcome | None]
                ) -> dict[str, Any]:
    """The MRZ figures (module doc)."""
    n = len(docs)
    exact = found = readable = wbv = claimed_valid = corrected = expired_ok = 0
    fields = dict.fromkeys((*FIELDS, "format", "checks"), 0)
    by_format: dict[str, list[int]] = {}
    by_cover: dict[str, list[int]] = {}
    by_print: dict[str, list[int]] = {}
    rows = []
    for d, o in zip(docs, outs, strict=True):
        t, m = d["truth"], _mrz(o)
        vals = m.get("values") or {}
        ok_fields = {f: vals.get(f) == t["fields"].get(f) for f in FIELDS}
        ok_fields["format"] = m.get("format") == t["format"]
        ok_fields["checks"] = m.get("checks") == t["checks"]
        for f, v in ok_fields.items():
            fields[f] += v
        right = bool(m.get("found")) and all(ok_fields.values())
        exact += right
        found += bool(m.get("found"))
        readable += bool(m.get("readable"))
        corrected += bool(m.get("corrected"))
        claimed_valid += bool(m.get("valid"))
        wrong_valid = bool(m.get("valid")) and not all(ok_fields[f] for f in FIELDS)
        wbv += wrong_valid
        expired_ok += m.get("expired") == t["expired"]
        cover = "+".join(k for k in ("glare", "hand") if t.get(f"{k}_on_mrz")) or "clear"
        hidden = t.get("mrz_chars_hidden")
        groups = [(by_format, t["format"]), (by_cover, cover),
                  (by_print, "unmeasured" if hidden is None else "hidden" if hidden
                   else "visible")]
        for group, key in groups:
            group.setdefault(key, [0, 0])
            group[key][0] += 1
            group[key][1] += right
        rows.append({"file": d["file"], "format": t["format"], "cover": cover,
                     "chars_hidden": hidden, "exact": right,
                     "found": bool(m.get("found")), "readable": bool(m.get("readable")),
                     "valid": bool(m.get("valid")), "wrong_but_valid": wrong_valid,
                     "corrected": bool(m.get("corrected")),
                     "status": str(o.status) if o is not None else None,
                     "reasons": [str(r) for r in o.reasons] if o is not None else None,
                     "wrong_fields": [f for f, v in ok_fields.items() if not v]})
    return {"documents": n, "exact": exact / n, "found": found / n, "readable": readable / n,
            "claimed_valid": claimed_valid / n, "wrong_but_valid": wbv / n,
            "corrected": corrected / n, "expired_right": expired_ok / n,
            "fields": {f: v / n for f, v in fields.items()},
            "by_format": {f: {"n": v[0], "exact": v[1] / v[0]}
                          for f, v in sorted(by_format.items())},
            "by_cover": {f: {"n": v[0], "exact": v[1] / v[0]}
                         for f, v in sorted(by_cover.items())},
            "by_print": ({f: {"n": v[0], "exact": v[1] / v[0]} for f in PRINT_GROUPS
                          if (v := by_print.get(f))}
                         if set(by_print) != {"unmeasured"} else {}),
            "rows": rows}


def quality_summary(docs: Sequence[dict[str, Any]], outs: Sequence[Outcome | None],
                    real: Sequence[Outcome | None] = ()) -> dict[str, Any]:
    """The quality figures (module doc)."""
    dpi_ok, tilt_ok, measured = 0, 0, 0
    grey, grey_hit, colour, colour_hit = 0, 0, 0, 0
    dpi_err, tilt_err = [], []
    for d, o in zip(docs, outs, strict=True):
        t = d["truth"]
        q = o.payload.get("quality") if o is not None else None
        if o is None or q is None:
            continue
        measured += 1
        e = abs(q["dpi"] - t["dpi"]) / t["dpi"]
        dpi_err.append(e)
        dpi_ok += e <= 0.05
        te = abs(q["tilt_deg"] - t["tilt_deg"])
        tilt_err.append(te)
        tilt_ok += te <= 2.0
        flagged = "PHOTOCOPY" in [str(r) for r in o.reasons]
        if t["grey_copy"]:
            grey += 1
            grey_hit += flagged
        else:
            colour += 1
            colour_hit += flagged
    real_q = [o for o in real if o is not None and o.payload.get("quality") is not None]
    real_fp = sum("PHOTOCOPY" in [str(r) for r in o.reasons] for o in real_q)

    def pct(xs: list[float], p: float) -> float | None:  # None (JSON null): nothing measured
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else None

    return {"documents": len(docs), "measured": measured,
            "dpi_within_5pct": dpi_ok / max(measured, 1),
            "dpi_rel_error_p50_p95": [pct(dpi_err, 0.5), pct(dpi_err, 0.95)],
            "tilt_within_2deg": tilt_ok / max(measured, 1),
            "tilt_error_deg_p50_p95": [pct(tilt_err, 0.5), pct(tilt_err, 0.95)],
            "photocopy_recall": grey_hit / grey if grey else None, "grey_copies": grey,
            "photocopy_false_positive": colour_hit / colour if colour else None,
            "colour_documents": colour,
            "real_cards": len(real_q), "real_photocopy_false_positive": real_fp,
            "real_colourfulness": [o.payload["quality"]["colourfulness"] for o in real_q]}


def mrz_given_quads(set_dir: Path, batch: int = 8, mrz_file: Path | None = None
                    ) -> dict[str, Any]:
    """The MRZ figures with the set's true corners in place of the localiser (photo -> true quad
    -> bands -> MRZ): the reader alone, at a fraction of the whole pipeline's CPU. CPU is the
    MRZ step's (bands warped, located, one recogniser call per ``batch``, judged)."""
    import cv2
    import numpy as np

    from processors.base import Outcome
    from processors.card.mrz.locate import band_maps
    from processors.card.mrz.read import MrzReader, View
    from processors.card.mrz.recognise import Recogniser
    from processors.card.rectify import canonical_size, homography
    from processors.runtime import RuntimeSettings
    from schemas.reasons import Status

    docs, today = load_set(set_dir)
    reader = MrzReader(Recogniser(RuntimeSettings(device="cpu"), mrz_file))
    reader.recogniser.warm_up()
    outs: list[Outcome | None] = []
    cpu = 0.0
    for k in range(0, len(docs), batch):
        part = docs[k:k + batch]
        t0 = time.process_time()
        bands = []
        for d in part:
            path = Path(set_dir) / d["file"]
            grey = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE) if path.is_file() else None
            if grey is None:
                raise EvalSetError(f"the manifest lists {d['file']}, which cannot be read")
            size = canonical_size(d["truth"]["doc_type"], 300)
            h = homography(np.asarray(d["truth"]["quad"]), size)
            bands.append([cv2.warpPerspective(grey, h @ a, bs, flags=cv2.INTER_LINEAR
                                              | cv2.WARP_INVERSE_MAP,
                                              borderMode=cv2.BORDER_REPLICATE)
                          for a, bs in band_maps(d["truth"]["doc_type"], size)])
        reads = reader.read([[View(d["truth"]["doc_type"], b)]
                             for d, b in zip(part, bands, strict=True)], today)
        cpu += time.process_time() - t0
        for r in reads:
            if isinstance(r, Exception):
                outs.append(None)
                continue
            outs.append(Outcome(upload_id="", status=Status.ACCEPTED, reasons=r.reasons,
                                payload={"mrz": r.payload(values=True)}))
    n = max(len(docs), 1)
    return {**mrz_summary(docs, outs), "pipeline_cpu_ms_per_document": None,
            "mrz_cpu_ms_per_document": cpu * 1000.0 / n, "quality_cpu_ms_per_document": None,
            "portrait_cpu_ms_per_document": None, "batch": batch}


def _real_files(folder: Path) -> list[Path]:
    """The card photos of a ``shared/cases``-style folder (manifest entries with a quad)."""
    man = json.loads((folder / "manifest.json").read_text())
    return [folder / c["file"] for c in man["images"] if "quad_approx" in c["expect"]]


def evaluate(what: str, set_dir: Path, batch: int = 8, real: Path | None = None,
             device: str = "cpu", mrz_file: Path | None = None) -> dict[str, Any]:
    """``mrz`` or ``quality`` figures of a set (and CPU per document)."""
    docs, today = load_set(set_dir)
    proc = build_processor(today, device, mrz_file)
    proc.warm_up()
    files = [Path(set_dir) / d["file"] for d in docs]
    v = proc.verifier
    before = dict(v.cpu_ms)
    outs, cpu = run(proc, files, batch, {"doc_type": "auto", "mrz_values": True}, strict=True)
    n = max(len(files), 1)
    step = {k: (v.cpu_ms[k] - before[k]) / n for k in v.cpu_ms}
    timing = {"pipeline_cpu_ms_per_document": cpu * 1000.0 / n,
              "mrz_cpu_ms_per_document": step["mrz"],
              "quality_cpu_ms_per_document": step["quality"],
              "portrait_cpu_ms_per_document": step["portrait"], "batch": batch}
    if what == "mrz":
        return {**mrz_summary(docs, outs), **timing}
    real_outs: list[Outcome | None] = []
    if real is not None:
        real_outs, _ = run(proc, _real_files(real), batch, {"doc_type": "auto"})
    if what == "both":  # one pass for both tables
        return {"mrz": {**mrz_summary(docs, outs), **timing},
                "quality": {**quality_summary(docs, outs, real_outs), **timing}}
    return {**quality_summary(docs, outs, real_outs), **timing}


def table(what: str, r: dict[str, Any]) -> str:
    """The figures as a few lines of text."""
    def ms(key: str, digits: int = 1, absent: str = "not run") -> str:
        v = r[key]
        return absent if v is None else f"{v:.{digits}f}"

    if what == "mrz":
        lines = [f"documents {r['documents']}: exact {r['exact']:.3f}  found {r['found']:.3f}  "
                 f"readable {r['readable']:.3f}  wrong-but-valid {r['wrong_but_valid']:.4f}  "
                 f"corrected {r['corrected']:.3f}  expired right {r['expired_right']:.3f}",
                 "by format: " + "  ".join(f"{k} {v['exact']:.3f} (n={v['n']})"
                                           for k, v in r["by_format"].items()),
                 "by what covers the zone (glare: a spot saturating >= 10 % of the MRZ band; "
                 "hand: a thumb over >= 3 % of it): "
                 + "  ".join(f"{k} {v['exact']:.3f} (n={v['n']})"
                             for k, v in r["by_cover"].items()),
                 "fields: " + "  ".join(f"{k} {v:.3f}" for k, v in r["fields"].items())]
        if r["by_print"]:
            seen = r["by_print"].get("visible", {"n": 0})["n"]
            counted = r["documents"] - r["by_print"].get("unmeasured", {"n": 0})["n"]
            lines.insert(3, "by what the photo kept of the print (hidden: a character with half "
                         "its ink saturated or a third of its cell under the thumb): "
                         + "  ".join(f"{k} {v['exact']:.3f} (n={v['n']})"
                                     for k, v in r["by_print"].items())
                         + f"; every character visible on {seen / counted:.3f} of the "
                         + ("set" if counted == r["documents"] else f"{counted} measured"))
        else:
            lines.insert(3, "by what the photo kept of the print: not counted by this set's "
                         "truth (no mrz_chars_hidden: scans, or a set written before 2026-12-06)")
    else:
        lines = [f"documents {r['documents']} (measured {r['measured']}): DPI within 5 % "
                 f"{r['dpi_within_5pct']:.3f}  tilt within 2 deg {r['tilt_within_2deg']:.3f}",
                 f"photocopy recall {ms('photocopy_recall', 3, 'none')} (grey copies "
                 f"{r['grey_copies']})  false positives "
                 f"{ms('photocopy_false_positive', 3, 'none')} "
                 f"(colour {r['colour_documents']}); real cards {r['real_cards']}: "
                 f"{r['real_photocopy_false_positive']} flagged"]

    lines.append(f"CPU ms per document: pipeline {ms('pipeline_cpu_ms_per_document')}  "
                 f"mrz {ms('mrz_cpu_ms_per_document')}  quality "
                 f"{ms('quality_cpu_ms_per_document', 2)}  portrait "
                 f"{ms('portrait_cpu_ms_per_document')} (batch {r['batch']})")
    return "\n".join(lines)


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise ValueError("must be at least 1")
    return n


def main() -> None:
    """CLI entry (module doc)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["mrz", "quality"])
    ap.add_argument("--set", type=Path, required=True, dest="set_dir")
    ap.add_argument("--batch", type=_positive, default=8)
    ap.add_argument("--real", type=Path, default=None)
    ap.add_argument("--mrz-model", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", type=Path, default=None, help="write the per-document rows here")
    ap.add_argument("--given-quads", action="store_true",
                    help="mrz only: the set's true corners instead of the localiser")
    a = ap.parse_args()
    if a.given_quads and a.what == "mrz":
        r = mrz_given_quads(a.set_dir, a.batch, a.mrz_model)
    else:
        r = evaluate(a.what, a.set_dir, a.batch, a.real, mrz_file=a.mrz_model)
    rows = r.pop("rows", None)
    if a.rows is not None and rows is not None:
        a.rows.write_text("".join(json.dumps(x) + "\n" for x in rows))
    print(json.dumps(r) if a.json else table(a.what, r))


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    main()
