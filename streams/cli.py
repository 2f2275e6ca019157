"""The ``cardstream`` command line (typer).

Each command group lives in its own module and registers itself here.
"""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    name="cardstream",
    help="Identity uploads from Kafka, processed in batches: card rectification and ID photos.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def make_out_dir(path: Path, option: str = "--out") -> Path:
    """Create the output folder ``path`` (parents included) for a command.

    Raises:
        typer.BadParameter: it cannot be created (a file is in the way, no permission...):
            typer prints the message and exits with status 2 instead of a traceback.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise typer.BadParameter(f"cannot create folder {path}: {e.strerror}",
                                 param_hint=option) from e
    return path


def _register() -> None:
    import importlib

    for mod in ("streams.cli_schemas", "streams.cli_card", "streams.cli_idphoto",
                "streams.cli_stream", "streams.cli_jobs", "streams.cli_status"):
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
            continue
        m.register(app)


_register()
