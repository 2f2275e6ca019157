"""``cardstream card IMAGE...`` (the card processor without Kafka) and ``cardstream eval card``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

from schemas.models import DocTypeHint

eval_app = typer.Typer(help="Evaluate a processor on a labelled image set.", no_args_is_help=True)


_MODEL_HELP = ("ONNX file to use instead of the pinned card model, e.g. the output of a new "
               "training run (not checked against a SHA-256).")


def _processor(device: str, batch: int, model: Path | None = None):
    from processors.card import CardProcessor
    from streams.cli.common import runtime_for, set_up
    from streams.settings import load_settings

    s = load_settings()
    rt = runtime_for(s.runtime, device, batch)
    return set_up(lambda: CardProcessor(s.card, rt, model_file=model, decode=s.decode),
                  "--model" if model is not None else None), s


def card(
    images: list[Path] = typer.Argument(..., metavar="IMAGE",
                                        help="Image files (JPEG, PNG, WebP, HEIC...)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for rectified JPEGs "
                                    "(<stem>-<ext>.rectified.jpg; <stem>-<ext>-2... when two "
                                    "inputs share a name)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line (default: a "
                                 "short text line per image)."),
    doc_type: DocTypeHint = typer.Option("auto", help="id_card | passport | auto (by aspect ratio)."),
    device: str = typer.Option("cpu", help="cpu | cuda | auto."),
    batch: int = typer.Option(8, help="Batch size of the localisation model call."),
    model: Path | None = typer.Option(None, "--model", help=_MODEL_HELP),
) -> None:
    """Detect, rectify and judge cards in IMAGE files.

    Per image: ``{"file", "status", "reasons", "quad" (4 (x, y) corners TL, TR, BR, BL in source
    px, or null; the card's own corners: TL is the corner that became the rectified output's
    top-left, so on a sideways or upside-down card it is not the image's top-left corner),
    "confidence", "doc_type" (``id_card`` or ``passport`` for a card that was measured,
    also when it is then rejected as PARTIAL_CARD, BLURRY or GLARE; ``unknown`` for NO_CARD,
    CARD_TOO_SMALL, MULTIPLE_CARDS and files refused by decoding, as in the results topic),
    "rectified" (path written under --out, or null)}``. Files
    refused by safe decoding are ``rejected`` with the decoding reason, and files that cannot be
    read are ``rejected`` with OBJECT_NOT_FOUND (as a missing claim-check object in the stream);
    both carry ``"error"`` (the decoder's message, or the ``OSError`` class and text) when
    refused before processing (the header probe: format, size, pixel count); a file whose header
    passes but whose pixels do not decode carries only the reason, as in the results topic.
    Exit status 0 when every image is accepted, 1 otherwise, 2 for bad options (as the other
    processor commands).
    """
    from processors.card.task import SPEC
    from streams.cli.common import make_out_dir, print_rows, run_files

    if out is not None:
        make_out_dir(out)
    proc, s = _processor(device, batch, model)
    rows = run_files(SPEC, proc, images, {"doc_type": str(doc_type)}, s.decode, batch, out)
    print_rows(SPEC, rows, as_json)


@eval_app.command("card")
def eval_card(
    set_dir: Path = typer.Option(..., "--set", help="Folder with images and manifest.json "
                                 "(shared/cases format)."),
    device: str = typer.Option("cpu", help="cpu | cuda | auto."),
    batch: int = typer.Option(8, help="Batch size of the localisation model call."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
    model: Path | None = typer.Option(None, "--model", help=_MODEL_HELP),
    rows: Path | None = typer.Option(None, "--rows", help="Also write one JSON line per scored "
                                     "case to this file (file, kind, iou, status, reasons, "
                                     "confidence), to compare two models card by card."),
) -> None:
    """Mean IoU and share of IoU > 0.9 (SmartDoc-2015 protocol) per ``kind``, the number of
    cards wrongly judged NO_CARD, the share of cards accepted, and the NO_CARD share on
    negatives.

    Cases with ``quad_approx`` are scored by IoU (0 when no quad is returned); cases whose
    expected reason is ``NO_CARD`` count as correct when the result carries NO_CARD. The IoU
    does not look at the verdict: a card found but rejected (BLURRY, GLARE, PARTIAL_CARD...)
    keeps its IoU, and ``accepted`` shows how many were let through. Files that fail safe
    decoding and other cases are skipped. A manifest with no scored case, a ``quad_approx`` that
    is not 4 (x, y) points, or a listed file that cannot be read is a usage error (exit 2).
    ``--rows`` writes ``{"file", "kind", "iou", "status", "reasons", "confidence"}`` per case
    (``kind`` ``negative`` and ``iou`` null for the NO_CARD cases).
    """
    from processors.base import Item, process_in_buckets
    from processors.card.metrics import quad_iou, summarise
    from processors.decode import probe_image
    from processors.errors import DecodeError

    try:
        man = json.loads((set_dir / "manifest.json").read_text())
        images = man["images"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise typer.BadParameter(
            f"{set_dir / 'manifest.json'} is missing or not a manifest ({type(e).__name__}): "
            "expected {\"images\": [{\"file\", \"expect\": {\"quad_approx\" | \"reason\"}}]}, "
            "as written by `python -m processors.card.training.synth`", param_hint="--set") from e
    cases = [c for c in images
             if "quad_approx" in c["expect"] or c["expect"].get("reason") == "NO_CARD"]
    if not cases:
        raise typer.BadParameter(f"{set_dir / 'manifest.json'} has no case to score (an "
                                 "expected quad_approx or reason NO_CARD)", param_hint="--set")
    for c in cases:
        q = c["expect"].get("quad_approx")
        if q is not None and np.asarray(q, dtype=object).shape != (4, 2):
            raise typer.BadParameter(f"{c['file']}: quad_approx must be 4 [x, y] points "
                                     "(TL, TR, BR, BL)", param_hint="--set")
    proc, s = _processor(device, batch, model)
    ious: dict[str, list[float]] = {}
    missed: dict[str, int] = {}
    accepted: dict[str, int] = {}
    neg_ok: list[bool] = []
    per_case: list[dict] = []
    loaded = []
    for c in cases:
        try:
            img = probe_image((set_dir / c["file"]).read_bytes(), s.decode)
        except DecodeError:
            continue
        except OSError as e:
            raise typer.BadParameter(f"the manifest lists {c['file']}, which cannot be read "
                                     f"({type(e).__name__})", param_hint="--set") from e
        loaded.append((c, Item(upload_id=Path(c["file"]).stem, image=img)))
    for (c, _), o in zip(loaded, process_in_buckets(proc, [it for _, it in loaded], batch),
                         strict=True):
        e = c["expect"]
        reasons = [str(r) for r in o.reasons]
        v = None
        if "quad_approx" in e:
            q = o.payload.get("quad")
            v = quad_iou(q, e["quad_approx"]) if q else 0.0
            kind = e.get("kind", "unlabelled")
            ious.setdefault(kind, []).append(v)
            missed[kind] = missed.get(kind, 0) + ("NO_CARD" in reasons)
            accepted[kind] = accepted.get(kind, 0) + (str(o.status) == "accepted")
        else:
            kind = "negative"
            neg_ok.append("NO_CARD" in reasons)
        per_case.append({"file": c["file"], "kind": kind, "iou": v, "status": str(o.status),
                         "reasons": reasons, "confidence": o.payload.get("confidence")})
    if rows is not None:
        rows.write_text("".join(json.dumps(r) + "\n" for r in per_case))
    summary = {kind: {**summarise(v), "no_card": missed[kind],
                      "accepted_share": accepted[kind] / len(v)}
               for kind, v in sorted(ious.items())}
    n_cards = sum(len(v) for v in ious.values())
    summary["all"] = {**summarise([x for v in ious.values() for x in v]),
                      "no_card": sum(missed.values()),
                      "accepted_share": sum(accepted.values()) / n_cards if n_cards else float("nan")}
    summary["negatives"] = {"n": len(neg_ok),
                            "no_card_share": (sum(neg_ok) / len(neg_ok)) if neg_ok else float("nan")}
    if as_json:
        typer.echo(json.dumps(summary))
        return
    for kind, v in summary.items():
        if kind == "negatives":
            share = f"{v['no_card_share']:.3f}" if v["n"] else "n/a"
            typer.echo(f"{kind:>12}: n={v['n']} NO_CARD share={share}")
        else:
            typer.echo(f"{kind:>12}: n={v['n']} mean IoU={v['mean_iou']:.4f} "
                       f"IoU>0.9={v['share_above']:.3f} (NO_CARD, IoU 0: {v['no_card']}) "
                       f"accepted={v['accepted_share']:.3f}")


def register(app: typer.Typer) -> None:
    """Add ``card`` and the ``eval`` group (``eval card``) to the ``cardstream`` app."""
    app.command("card")(card)
    app.add_typer(eval_app, name="eval")
