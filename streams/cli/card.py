"""``cardstream card IMAGE...`` (the card processor without Kafka) and ``cardstream eval card``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from processors.card.settings import CardSettings
from schemas.models import DocTypeHint, ProfileName
from streams.cli.files import View

eval_app = typer.Typer(help="Evaluate a processor on a labelled image set.", no_args_is_help=True)


_DEFAULTS = CardSettings()
_MODEL_HELP = ("ONNX file to use instead of the pinned card model, e.g. the output of a new "
               "training run (not checked against a SHA-256).")


def _text(row: Mapping[str, Any]) -> str:
    """`` doc_type=id_card conf=0.97 mrz=TD1:valid -> FILE`` (``mrz=`` where a card was
    judged: its format and ``valid``, ``invalid`` or ``unreadable``, or ``none``), with the
    zone's printed fields after it where the row's mrz carries them (``--mrz-values``, where
    allowed): `` values={document_code=P, issuing_state=UTO, ..., secondary_name=ANNA MARIA}``,
    the fields of ``values`` in their order and under their JSON names, blank ones left out
    (the MRZ alphabet has no comma or brace: the list reads back unambiguously)."""
    conf = "-" if row["confidence"] is None else row["confidence"]
    done = f" -> {row['rectified']}" if row["rectified"] else ""
    m = row.get("mrz")
    zone = ""
    if m:
        verdict = ("valid" if m["valid"] else "invalid") if m["readable"] else "unreadable"
        zone = f" mrz={m['format']}:{verdict}" if m["found"] else " mrz=none"
        if m.get("values"):
            fields = (f"{k}={v}" for k, v in m["values"].items() if v)
            zone += f" values={{{', '.join(fields)}}}"
    return f" doc_type={row['doc_type']} conf={conf}{zone}{done}"


VIEW = View(columns=("quad", "confidence", "doc_type", "rectified", "quality", "mrz"),
            text=_text, blank={"doc_type": "unknown"})  # as the results topic says it
"""A ``card`` row: the card payload's fields, ``rectified`` the file written."""


_VALUES_ALLOWED = "CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED"
"""The setting that lets MRZ values into a result (``CardSettings.verify.mrz_values_allowed``)."""


def _values_withheld(given: Mapping[str, Any], section: CardSettings) -> None:
    """Say on stderr (a JSON log line, ``mrz_values_withheld``) that ``--mrz-values`` was asked
    where the setting CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED withholds the values: the
    rows carry no ``values`` then, as the results topic does, and a user should not have to
    guess why. The line names the setting (``setting``), the value it has (``value``: false)
    and what lets the values in (``allow``: ``CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED=true``
    in the environment)."""
    import structlog

    allowed = section.verify.mrz_values_allowed
    if given.get("mrz_values") and not allowed:
        structlog.get_logger("cardstream.cli").warning(
            "mrz_values_withheld", setting=_VALUES_ALLOWED, value=allowed,
            allow=f"{_VALUES_ALLOWED}=true")


def card(
    images: list[Path] = typer.Argument(..., metavar="IMAGE",
                                        help="Image files (JPEG, PNG, WebP, HEIC...)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for rectified JPEGs "
                                    "(<stem>-<ext>.rectified.jpg; <stem>-<ext>-2... when two "
                                    "inputs share a name); default: nothing is written."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line (default: a "
                                 "short text line per image)."),
    doc_type: DocTypeHint | None = typer.Option(
        None, help="id_card | passport | auto (by aspect ratio); default: the setting "
        f"CARDSTREAM_CARD__DOC_TYPE ({_DEFAULTS.doc_type})."),
    profile: ProfileName | None = typer.Option(
        None, help="strict | normal | relaxed: which capture-quality and MRZ findings reject "
        "(the upload option profile); default: the setting named above "
        f"({_DEFAULTS.verify.profile} unless set)."),
    mrz_values: bool = typer.Option(
        False, "--mrz-values", help="Put the MRZ's field values (names, numbers, dates) into "
        "the row's mrz (the upload option mrz_values), where the setting named above allows "
        f"it ({'on' if _DEFAULTS.verify.mrz_values_allowed else 'off'} unless set)."),
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
    "rectified" (path written under --out for an accepted card, else null), "quality" and
    "mrz" (the verification, as in the results topic: null for a card not found or a file
    refused)}``. The profile's
    default is the setting CARDSTREAM_CARD__VERIFY__PROFILE; MRZ values appear only where
    CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED is on (off by default). Files
    refused by safe decoding are ``rejected`` with the decoding reason, and files that cannot be
    read are ``rejected`` with OBJECT_NOT_FOUND (as a missing claim-check object in the stream);
    both carry ``"error"`` (the decoder's message, or the ``OSError`` class and text) when
    refused before processing (the header probe: format, size, pixel count); a file whose header
    passes but whose pixels do not decode carries only the reason, as in the results topic.
    Exit status 0 when every image is accepted, 1 otherwise, 2 for bad options (as the other
    processor commands).
    """
    from streams.cli.files import run_command

    run_command("card", VIEW, images, {"doc_type": doc_type and str(doc_type),
                                        "profile": profile, "mrz_values": mrz_values or None},
                out=out, as_json=as_json, device=device, batch=batch, model=model,
                check=_values_withheld)


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
    from processors import registry
    from processors.card.metrics import score_set, scored_cases
    from processors.errors import EvalSetError
    from streams.cli.common import set_up, settings
    from streams.cli.files import runtime_for

    s = settings()
    try:
        cases = scored_cases(set_dir)
        rt = runtime_for(s.runtime, device, batch)
        proc = set_up(lambda: registry.build_processor("card", s.card, rt, decode=s.decode,
                                                       model_file=model),
                      "--model" if model is not None else None)
        summary, per_case = score_set(proc, set_dir, cases, s.decode, batch)
    except EvalSetError as e:
        raise typer.BadParameter(str(e), param_hint="--set") from e
    if rows is not None:
        rows.write_text("".join(json.dumps(r) + "\n" for r in per_case))
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
