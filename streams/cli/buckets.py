"""``cardstream buckets create``: the project's MinIO buckets (operators)."""

from __future__ import annotations

import typer

buckets_app = typer.Typer(help="Create the project's MinIO buckets.", no_args_is_help=True)


@buckets_app.command("create")
def buckets_create() -> None:
    """Create the uploads and results buckets if missing."""
    from streams.settings import load_settings
    from streams.storage import Storage

    s = load_settings()
    for b, state in Storage(s.s3).ensure_buckets([s.s3.uploads_bucket, s.s3.results_bucket]).items():
        typer.echo(f"{b}: {state}")


def register(app: typer.Typer) -> None:
    """Add the ``buckets`` group to the ``cardstream`` app."""
    app.add_typer(buckets_app, name="buckets")
