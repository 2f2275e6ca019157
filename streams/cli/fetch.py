"""``cardstream fetch UPLOAD_ID``: download an upload's output objects."""

from __future__ import annotations

from pathlib import Path

import typer


def fetch(
    upload_id: str = typer.Argument(..., help="The upload whose outputs to download."),
    out: Path = typer.Option(Path("out/fetch"), help="Folder to write the objects into."),
) -> None:
    """Download every output object of UPLOAD_ID (all tasks, all model versions) into OUT."""
    from processors.registry import names
    from schemas import formats as F
    from streams.cli.common import settings
    from streams.errors import ObjectNotFound
    from streams.storage import Storage

    if not F.matches(F.UPLOAD_ID_PATTERN, upload_id):
        raise typer.BadParameter("not a valid upload id")
    s = settings()
    st = Storage(s.s3)
    n = 0
    for task in names():  # keys are {task}/{model_version}/{upload_id}/{input_tag}/{artifact}.{ext}
        for ver in st.list_names(s.s3.results_bucket, f"{task}/"):
            for key in st.list_names(s.s3.results_bucket, f"{ver}{upload_id}/", recursive=True):
                dst = out / key
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(st.get(s.s3.results_bucket, key))
                typer.echo(str(dst))
                n += 1
    if n == 0:  # one plain line, exit 1, as every error that stops a command
        raise ObjectNotFound(f"no output objects for {upload_id} in {s.s3.results_bucket} "
                             "(not processed yet, rejected, or expired)")


def register(app: typer.Typer) -> None:
    """Add ``fetch`` to the ``cardstream`` app."""
    app.command("fetch")(fetch)
