"""``cardstream idphoto IMAGE...``: make standard ID photos from files, without Kafka."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from processors.idphoto.settings import IdPhotoSettings
from schemas.models import PhotoSize
from streams.cli.card import eval_app
from streams.cli.files import View

_DEFAULTS = IdPhotoSettings()
_SIZES = " | ".join(s.value for s in PhotoSize)


def _text(row: Mapping[str, Any]) -> str:
    """`` -> FILE (WxH)`` for a photo written, `` + SHEET`` for its print sheet, and whether it
    complies with its size (the failed checks are the reasons)."""
    out = f" -> {row['photo']} ({row['width']}x{row['height']})" if row["photo"] else ""
    if row.get("sheet"):
        out += f" + {row['sheet']}"
    if row.get("target_kb_met") is False:
        out += " (larger than --target-kb even at the lowest quality)"
    c = row.get("compliance")
    if c:
        out += f" [{c['spec']} {c['mode']}: {'compliant' if c['compliant'] else 'not compliant'}]"
    return out


VIEW = View(columns=("photo", "sheet", "width", "height", "face_box", "mode", "dpi",
                     "target_kb_met", "compliance"), text=_text, name_field="size")
"""An ``idphoto`` row: the ID-photo payload's fields, ``photo`` the file written (named after
the size: ``<stem>-<ext>.one_inch.jpg``), ``sheet`` the print sheet's
(``<stem>-<ext>.one_inch.sheet.jpg``)."""


def idphoto(
    images: Annotated[list[Path], typer.Argument(metavar="IMAGE",
                                                 help="Image files (JPEG, PNG, WebP, HEIC...).")],
    size: Annotated[str | None, typer.Option(
        help=f"{_SIZES} (the sizes in processors/idphoto, specs.json); default: the setting "
             f"named above ({_DEFAULTS.default_size} unless set).")] = None,
    background: Annotated[str | None, typer.Option(
        help="white | blue | red | #RRGGBB; default: the setting named above "
             f"({_DEFAULTS.default_background} unless set).")
    ] = None,
    alpha_matting: Annotated[bool | None, typer.Option(
        "--alpha-matting/--no-alpha-matting",
        help="Refine the matte edge (default: off for one_inch, on for larger sizes).")] = None,
    mode: Annotated[str | None, typer.Option(
        help="retouch (a new background) | validate (crop and frame only, the photo's own "
             "background kept and checked); default: the setting named above "
             f"({_DEFAULTS.default_mode} unless set).")] = None,
    dpi: Annotated[int | None, typer.Option(
        help="The photo's resolution and its JPEG's density, 72..1200 (default: the size's, "
             "300).")] = None,
    target_kb: Annotated[float | None, typer.Option(
        help="Largest JPEG file size in KB (1000 bytes), 5..10000: the quality is lowered "
             "until it fits; a photo that does not fit even at the lowest quality is written "
             "at that quality with \"target_kb_met\": false in its row.")] = None,
    print_sheet: Annotated[bool | None, typer.Option(
        "--print-sheet/--no-print-sheet",
        help="Also write a 6 x 4 in print sheet with as many copies as fit and cut marks.")
    ] = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder for the photos (<stem>-<ext>.<size>.jpg, e.g. me-jpg.one_inch.jpg; "
             "<stem>-<ext>-2... when two inputs share a name); default: nothing is written.")
    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="One JSON object per line (default: a short text line per image).")
    ] = False,
    device: Annotated[str, typer.Option(help="cpu | cuda | auto.")] = "cpu",
    batch: Annotated[int, typer.Option(help="Images per batched matting call.")] = 8,
) -> None:
    """Cut out the person, frame the head to SIZE at its dpi and put it on BACKGROUND (or,
    with --mode validate, keep the photo's own background), and check the photo against the
    size's rules.

    Per image: ``{"file", "status", "reasons", "photo" (path written under --out, or null),
    "sheet" (the print sheet's path, or null), "width", "height" (px of the size, as in the
    results topic), "face_box" (x, y, w, h in source px, or null), "mode", "dpi",
    "target_kb_met" (with --target-kb: whether the JPEG fits it; null without),
    "compliance" (the report: spec, mode, compliant, one check per rule with its value,
    bound and whether it passed; as in the results topic)}``. A photo that fails a rule is
    ``rejected`` with the rule's reason code, or ``accepted`` with the code as an annotation
    (CARDSTREAM_IDPHOTO__COMPLIANCE__REJECT says which). Files refused by safe decoding are
    ``rejected`` with the decoding reason, and files that cannot be read are ``rejected`` with
    OBJECT_NOT_FOUND; both carry
    ``"error"`` (the decoder's message, or the ``OSError`` class and text) when refused before
    processing (the header probe); a file whose pixels do not decode after its header passed
    carries only the reason. Exit status 0 when every image is accepted, 1 otherwise, 2 for
    bad options (as the other processor commands). The defaults of --size, --background and
    --mode are the settings CARDSTREAM_IDPHOTO__DEFAULT_SIZE, CARDSTREAM_IDPHOTO__DEFAULT_BACKGROUND
    and CARDSTREAM_IDPHOTO__DEFAULT_MODE.
    """
    from processors.idphoto.processor import parse_options
    from streams.cli.files import run_command

    run_command("id_photo", VIEW, images,
                {"size": size, "background": background, "alpha_matting": alpha_matting,
                 "mode": mode, "dpi": dpi, "target_kb": target_kb, "print_sheet": print_sheet},
                out=out, as_json=as_json, device=device, batch=batch, check=parse_options)


def eval_idphoto(
    set_dir: Annotated[Path, typer.Option(
        "--set", help="Folder made by `python -m processors.idphoto.evaluation make --out DIR` "
                      "(PNG images and truth.json).")],
    as_json: Annotated[Path | None, typer.Option(
        "--json", help="Also write the whole result (per check, per image) to this file.")
    ] = None,
) -> None:
    """Per compliance check, how often its decision agrees with the truth of the set (cases
    within a check's tolerance band of a bound are counted apart), the verdicts of the bad
    inputs, and the errors of the head-height share (% of the photo's height), roll, yaw and
    pitch (degrees) against the truth. A folder without truth.json is a usage error (exit 2).
    """
    from processors.idphoto.evaluation import run, table

    if not (set_dir / "truth.json").is_file():
        raise typer.BadParameter(f"{set_dir} has no truth.json (make the set first)",
                                 param_hint="--set")
    res = run(set_dir)
    typer.echo(table(res))
    if as_json is not None:
        as_json.write_text(json.dumps(res, indent=1, default=float), encoding="utf-8")


def register(app: typer.Typer) -> None:
    """Add the ``idphoto`` command and ``eval idphoto`` to the ``cardstream`` app."""
    app.command("idphoto")(idphoto)
    eval_app.command("idphoto")(eval_idphoto)
