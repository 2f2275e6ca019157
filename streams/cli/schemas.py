"""``cardstream schemas ...``: check event files against the v1 contracts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from schemas import codec
from schemas.errors import ContractError


def validate_file(path: Path, *, allowed_buckets: tuple[str, ...] = ("uploads",),
                  inline_max_bytes: int = codec.INLINE_MAX_BYTES) -> tuple[bool, str]:
    """Whether the event in ``path`` is valid, and one line about it: ``FILE: ok (Kind)`` or
    ``FILE: CODE at $.path: message``.

    The event kind is detected from its properties (:func:`schemas.codec.detect_kind`); uploads
    also get the consumer's policy checks (bucket allow-list, inline size, base64). A file that
    cannot be read is reported as ``FILE: UNREADABLE: <reason>``.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        return False, f"{path}: UNREADABLE: {e.strerror or e}"
    try:
        ev = codec.decode_any(data, allowed_buckets=allowed_buckets,
                              inline_max_bytes=inline_max_bytes)
    except ContractError as e:
        return False, f"{path}: {e.code} at {e.path}: {e}"
    return True, f"{path}: ok ({type(ev).__name__})"


def register(app: typer.Typer) -> None:
    """Add the ``schemas`` command group to the ``cardstream`` app."""
    sub = typer.Typer(help="Event contracts: validate upload, result and dead-letter JSON.",
                      no_args_is_help=True)

    @sub.command("validate")
    def validate(
        files: Annotated[list[Path], typer.Argument(help="JSON files, one event each.")],
        bucket: Annotated[list[str] | None, typer.Option(
            "--bucket", help="Bucket an upload ref may name (repeat; default: uploads).")] = None,
        inline_max_bytes: Annotated[int, typer.Option(
            help="Largest inline image, bytes after base64 decoding.")] = codec.INLINE_MAX_BYTES,
    ) -> None:
        """Print per file `ok (Kind)` or `CODE at $.path: message`; exit 1 if any is invalid."""
        buckets = tuple(bucket) if bucket else ("uploads",)
        bad = 0
        for f in files:
            ok, line = validate_file(f, allowed_buckets=buckets,
                                     inline_max_bytes=inline_max_bytes)
            bad += not ok
            typer.echo(line)
        raise typer.Exit(1 if bad else 0)

    app.add_typer(sub, name="schemas")
