"""``cardstream idphoto IMAGE...``: make standard ID photos from files, without Kafka."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer


def idphoto(
    images: Annotated[list[Path], typer.Argument(metavar="IMAGE",
                                                 help="Image files (JPEG, PNG, WebP, HEIC...).")],
    size: Annotated[str, typer.Option(
        help="one_inch | two_inch | cn_passport | us_passport | schengen.")] = "one_inch",
    background: Annotated[str, typer.Option(help="white | blue | red | #RRGGBB.")] = "white",
    alpha_matting: Annotated[bool | None, typer.Option(
        "--alpha-matting/--no-alpha-matting",
        help="Refine the matte edge (default: off for one_inch, on for larger sizes).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder for the photos (<stem>-<ext>.<size>.jpg, e.g. me-jpg.one_inch.jpg; "
             "<stem>-<ext>-2... when two inputs share a name); default: a new temporary folder.")
    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="One JSON object per line (default: a short text line per image).")
    ] = False,
    device: Annotated[str, typer.Option(help="cpu | cuda | auto.")] = "cpu",
    batch: Annotated[int, typer.Option(help="Images per batched matting call.")] = 8,
) -> None:
    """Cut out the person, frame the head to SIZE at 300 dpi and put it on BACKGROUND.

    Per image: ``{"file", "status", "reasons", "photo" (path of the JPEG, or null),
    "width", "height" (px), "face_box" (x, y, w, h in source px, or null)}``. Files refused by
    safe decoding are ``rejected`` with the decoding reason, and files that cannot be read are
    ``rejected`` with OBJECT_NOT_FOUND; both carry ``"error"`` (the decoder's message, or the
    ``OSError`` class and text) when refused before processing (the header probe); a file
    whose pixels do not decode after its header passed carries only the reason. Exit status 0 when every image is accepted,
    1 otherwise, 2 for bad options.
    """
    from processors.idphoto.processor import IdPhotoProcessor, parse_options
    from processors.idphoto.sizes import InvalidOptionError
    from processors.idphoto.task import SPEC
    from streams.cli.common import make_out_dir, print_rows, run_files, runtime_for, set_up
    from streams.logs import configure_logging
    from streams.settings import load_settings

    options = {"size": size, "background": background, "alpha_matting": alpha_matting}
    s = load_settings()
    configure_logging(s.log_level)  # JSON lines on stderr; stdout carries only the results
    try:
        parse_options(options, s.idphoto)
    except InvalidOptionError as e:
        raise typer.BadParameter(str(e)) from e
    rt = runtime_for(s.runtime, device, batch)
    if out is not None:
        make_out_dir(out)  # a bad --out is refused before the model loads
    proc = set_up(lambda: IdPhotoProcessor(s.idphoto, rt, s.decode))
    # the temporary folder only once the options and the processor are good
    out_dir = out if out is not None else Path(tempfile.mkdtemp(prefix="cardstream-idphoto-"))
    print_rows(SPEC, run_files(SPEC, proc, images, options, s.decode, batch, out_dir), as_json)


def register(app: typer.Typer) -> None:
    """Add the ``idphoto`` command to the ``cardstream`` app."""
    app.command("idphoto")(idphoto)
