"""``cardstream buckets create``: the project's MinIO buckets and role users (operators)."""

from __future__ import annotations

import typer

buckets_app = typer.Typer(help="Create the project's MinIO buckets.", no_args_is_help=True)


@buckets_app.command("create")
def buckets_create(
    roles: bool = typer.Option(True, "--roles/--no-roles", help="Also create the role policies and "
                               "users (MinIO's admin API; --no-roles for an object store without "
                               "it)."),
) -> None:
    """Create the uploads, results and quarantine buckets if missing, with default encryption
    (SSE-S3), a bucket policy refusing unencrypted PUTs and expiry rules; then the MinIO policy
    of each role (worker, producer, ocr) and the users whose credentials are set
    (CARDSTREAM_S3__ROLES__<ROLE>__ACCESS_KEY / __SECRET_KEY). Needs admin credentials."""
    from streams.buckets import provision
    from streams.cli.common import settings

    for line in provision(settings().s3, roles=roles):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add the ``buckets`` group to the ``cardstream`` app."""
    app.add_typer(buckets_app, name="buckets")
