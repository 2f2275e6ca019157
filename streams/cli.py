"""The ``cardstream`` command line (typer).

Each command group lives in its own module and registers itself here.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="cardstream",
    help="Identity uploads from Kafka, processed in batches: card rectification and ID photos.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


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
