"""``cardstream produce``: claim-check uploads and UploadEvents (the platform's side, the load
generator)."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from schemas.errors import validation_message
from schemas.reasons import Task


def produce(
    dir: Path = typer.Option(..., "--dir", exists=True, file_okay=False,
                             help="Folder of images to upload."),
    task: Task = typer.Option(..., help=" | ".join(Task)),
    options: str = typer.Option("", help='Task options as JSON, e.g. \'{"size":"two_inch"}\'.'),
    rate: float = typer.Option(0.0, min=0.0, help="Ceiling in uploads per second (0: as fast as "
                                                  "possible)."),
    concurrency: int = typer.Option(4, min=1, help="Uploads in flight (PUT + produce)."),
    count: int = typer.Option(0, min=0, help="Events to send, cycling over the files (0: each file "
                                             "once)."),
    inline: bool = typer.Option(False, help="Send images up to the inline limit (512 KiB) inline."),
    ids_file: Path = typer.Option(Path("out/upload_ids.txt"),
                                  help="Where to write the upload ids."),
    max_seconds: float = typer.Option(600.0, min=0.001, help="Stop after this many seconds."),
) -> None:
    """Upload images (claim check in MinIO) and produce one UploadEvent each to the uploads
    topic."""
    from tqdm import tqdm

    from streams.cli.common import settings
    from streams.errors import DeliveryError
    from streams.produce import (
        IMAGE_SUFFIXES,
        UploadProducer,
        list_images,
        parse_options,
        validate_request,
        write_ids,
    )

    s = settings()
    files = list_images(dir)
    if not files:
        raise typer.BadParameter(f"no images in {dir}")
    chosen = set(files)
    others = sorted(p for p in dir.iterdir() if p not in chosen)
    for what, names in ((f"files without an image suffix ({', '.join(sorted(IMAGE_SUFFIXES))})",
                         [p.name for p in others if p.is_file()]),
                        ("subfolders (--dir is not recursive)",
                         [p.name for p in others if p.is_dir()]),
                        ("entries that are not regular files (FIFOs, devices, broken links)",
                         [p.name for p in others if not p.is_file() and not p.is_dir()])):
        if names:
            typer.echo(f"skipped {len(names)} {what}: {', '.join(names[:5])}"
                       + (" ..." if len(names) > 5 else ""), err=True)
    try:
        opts = parse_options(options)
    except ValueError as e:  # not JSON as the contract reads it, or not an object
        raise typer.BadParameter(str(e), param_hint="--options") from None
    try:
        validate_request("probe", task.value, opts)
    except ValidationError as e:  # pydantic's message without its links
        raise typer.BadParameter(validation_message(e), param_hint="--task/--options") from e
    n = count or len(files)
    try:
        with tqdm(total=n, unit="upload", disable=None) as bar:
            sent = UploadProducer(s, inline=inline).produce_files(
                files, task.value, options=opts, count=n, rate=rate or None,
                concurrency=concurrency, max_seconds=max_seconds, progress=bar.update)
    except DeliveryError as e:  # which went through: an earlier run's ids would mislead
        write_ids(ids_file, e.sent)
        raise DeliveryError(f"{e}; {ids_file} lists the {len(e.sent)} others") from e
    write_ids(ids_file, sent)
    typer.echo(f"sent {len(sent)} uploads to {s.kafka.uploads_topic}; ids in {ids_file}")


def register(app: typer.Typer) -> None:
    """Add ``produce`` to the ``cardstream`` app."""
    app.command("produce")(produce)
