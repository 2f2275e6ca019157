"""``cardstream demo``: the main job on the sample uploads (what ``make demo`` runs)."""

from __future__ import annotations

from pathlib import Path

import typer


def demo(
    out: Path = typer.Option(Path("out"), help="Folder for samples, outputs, logs and the results "
                                               "table."),
    workers: int = typer.Option(2, help="Worker processes to start."),
    timeout_s: float = typer.Option(600.0, help="Give up waiting for warm-up or results after this "
                                                "long (s)."),
    worker_port: int = typer.Option(18080, min=1, max=65535 - 64,
                                    envvar="CARDSTREAM_DEMO_WORKER_PORT",
                                    help="Worker i answers /ready and /metrics on this port + i."),
) -> None:
    """The main job on the sample uploads: two workers, samples produced, results table, outputs in
    OUT."""
    from streams.cli.common import settings
    from streams.demo import run_demo

    raise typer.Exit(run_demo(settings(), out, workers=workers, timeout_s=timeout_s,
                              base_port=worker_port))


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the ``cardstream`` app."""
    app.command("demo")(demo)
