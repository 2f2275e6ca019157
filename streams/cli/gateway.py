"""``cardstream gateway``: the HTTP front door and its web page."""

from __future__ import annotations

import typer


def gateway(
    port: int = typer.Option(None, help="Port of the API and the page (default: settings, 8000)."),
    admin_port: int = typer.Option(None, help="Port of /metrics, /live, /ready (0: none; "
                                   "default: settings, 8001)."),
    bind: str = typer.Option(None, help="Address to listen on (default: settings, 127.0.0.1)."),
) -> None:
    """Serve POST /v1/uploads, GET /v1/uploads/{id} (and /output) and the page at /: images are
    stored as claim checks and their UploadEvents produced; verdicts come from the results topic
    (read_committed). Stateless: run several behind a load balancer. Needs
    CARDSTREAM_GATEWAY__API_KEYS_FILE (client:key lines); SIGTERM stops it cleanly."""
    from streams.cli.common import settings, with_options
    from streams.gateway.app import run
    from streams.gateway.errors import PortUnavailable

    s = settings()
    s = s.model_copy(update={"gateway": with_options(s.gateway, port=port, admin_port=admin_port,
                                                     bind=bind)})
    try:
        run(s)
    except PortUnavailable as e:  # e.g. a second gateway on this host with the same port
        raise typer.BadParameter(f"{e}; give each gateway on a host its own ports",
                                 param_hint=e.option) from e


def register(app: typer.Typer) -> None:
    """Add ``gateway`` to the ``cardstream`` app."""
    app.command("gateway")(gateway)
