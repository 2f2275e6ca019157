"""``cardstream idphoto IMAGE...``: make standard ID photos from files, without Kafka."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from processors.idphoto.settings import IdPhotoSettings
from streams.cli.files import View

_DEFAULTS = IdPhotoSettings()


def _text(row: Mapping[str, Any]) -> str:
    """`` -> FILE (WxH)`` for a photo written."""
    return f" -> {row['photo']} ({row['width']}x{row['height']})" if row["photo"] else ""


VIEW = View(columns=("photo", "width", "height", "face_box"), text=_text, name_field="size")
"""An ``idphoto`` row: the ID-photo payload's fields, ``photo`` the file written (named after
the size: ``<stem>-<ext>.one_inch.jpg``)."""


def idphoto(
    images: Annotated[list[Path], typer.Argument(metavar="IMAGE",
                                                 help="Image files (JPEG, PNG, WebP, HEIC...).")],
    size: Annotated[str | None, typer.Option(
        help="one_inch | two_inch | cn_passport | us_passport | schengen; default: the setting "
             f"CARDSTREAM_IDPHOTO__DEFAULT_SIZE ({_DEFAULTS.default_size}).")] = None,
    background: Annotated[str | None, typer.Option(
        help="white | blue | red | #RRGGBB; default: the setting "
             f"CARDSTREAM_IDPHOTO__DEFAULT_BACKGROUND ({_DEFAULTS.default_background}).")
    ] = None,
    alpha_matting: Annotated[bool | None, typer.Option(
        "--alpha-matting/--no-alpha-matting",
        help="Refine the matte edge (default: off for one_inch, on for larger sizes).")] = None,
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
    """Cut out the person, frame the head to SIZE at 300 dpi and put it on BACKGROUND.

    Per image: ``{"file", "status", "reasons", "photo" (path written under --out, or null),
    "width", "height" (px of the size, as in the results topic), "face_box" (x, y, w, h in
    source px, or null)}``. Files refused by safe decoding are ``rejected`` with the decoding
    reason, and files that cannot be read are ``rejected`` with OBJECT_NOT_FOUND; both carry
    ``"error"`` (the decoder's message, or the ``OSError`` class and text) when refused before
    processing (the header probe); a file whose pixels do not decode after its header passed
    carries only the reason. Exit status 0 when every image is accepted, 1 otherwise, 2 for
    bad options (as the other processor commands).
    """
    from processors.idphoto.processor import parse_options
    from streams.cli.files import run_command

    run_command("id_photo", VIEW, images,
                {"size": size, "background": background, "alpha_matting": alpha_matting},
                out=out, as_json=as_json, device=device, batch=batch, check=parse_options)


def register(app: typer.Typer) -> None:
    """Add the ``idphoto`` command to the ``cardstream`` app."""
    app.command("idphoto")(idphoto)
