"""``cardstream idphoto IMAGE...``: make standard ID photos from files, without Kafka."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer


def _row(file: Path, status: str, reasons: list[str], **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"file": str(file), "status": status, "reasons": reasons,
                           "photo": None, "width": None, "height": None, "face_box": None}
    row.update(extra)
    return row


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
    ``rejected`` with OBJECT_NOT_FOUND; both rows also carry ``"error"`` (the decoder's
    message, or the ``OSError`` class and text). Exit status 0 when every image is accepted,
    1 otherwise, 2 for bad options.
    """
    from processors.base import Item, process_in_chunks
    from processors.idphoto.processor import IdPhotoProcessor, parse_options
    from processors.idphoto.sizes import InvalidOptionError
    from streams.cli import (
        build_processor,
        error_note,
        make_out_dir,
        output_path,
        probe_files,
        runtime_for,
        status_text,
    )
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
    proc = build_processor(lambda: IdPhotoProcessor(s.idphoto, rt, s.decode))
    # the temporary folder only once the options and the processor are good
    out_dir = out if out is not None else Path(tempfile.mkdtemp(prefix="cardstream-idphoto-"))

    probed, refused = probe_files(images, s.decode)
    rows: dict[int, dict[str, Any]] = {
        i: _row(images[i], "rejected", [code], error=err)
        for i, (code, err) in refused.items()}
    pending = [(i, Item(upload_id=f"cli-{i}", image=img, options=options)) for i, img in probed]
    written: set[Path] = set()
    for (i, _), o in zip(pending, process_in_chunks(proc, [it for _, it in pending], batch),
                         strict=True):
        f = images[i]
        extra: dict[str, Any] = {"face_box": o.payload.get("face_box")}
        for a in o.artifacts:
            path = output_path(out_dir, f, f"{size}.{a.ext}", written)
            path.write_bytes(a.data)
            extra.update(photo=str(path), width=a.width, height=a.height)
        rows[i] = _row(f, str(o.status), [str(r) for r in o.reasons], **extra)

    for i in range(len(images)):
        r = rows[i]
        if as_json:
            typer.echo(json.dumps(r))
        else:
            tail = f" -> {r['photo']} ({r['width']}x{r['height']})" if r["photo"] else ""
            typer.echo(f"{status_text(r)}{tail}{error_note(r)}")
    if any(r["status"] != "accepted" for r in rows.values()):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``idphoto`` command to the ``cardstream`` app."""
    app.command("idphoto")(idphoto)
