"""``cardstream status``: run the live verification status app (faust-streaming, HTTP on
--web-port)."""

from __future__ import annotations

import typer


def status(
    web_port: int = typer.Option(None, help="HTTP port of /uploads, /stats, /healthz (default: "
                                            "settings, 6066)."),
    web_host: str = typer.Option(None, help="Host name other instances use to reach this one "
                                 "(default: settings, 127.0.0.1)."),
    app_id: str = typer.Option(None, help="faust app id = consumer group and changelog topic "
                                          "prefix (default: settings, cardstream-status)."),
    data_dir: str = typer.Option(None,
                                 help="faust data directory (default: settings, out/status)."),
) -> None:
    """Consume the results topic (read_committed) into the verdict table and window stats and serve
    them over HTTP; several instances share the partitions; SIGTERM stops it cleanly."""
    from streams.cli.common import settings, with_options
    from streams.status_app import load_status_settings, run

    s = settings()
    st = with_options(load_status_settings(), web_port=web_port, web_host=web_host, app_id=app_id,
                      data_dir=data_dir)
    _port_free(st.web_bind, st.web_port)
    run(s, st, loglevel=s.log_level)


def _port_free(host: str, port: int) -> None:
    """Return when ``host:port`` can be listened on now; else a usage error naming the option,
    before any topic, table or faust worker starts (a port in use was faust's 34 log lines
    and exit 1 with no ``cardstream:`` line: a fresh user's trial).

    Raises:
        typer.BadParameter: the port cannot be bound (in use, or not allowed).
    """
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's server
        try:
            probe.bind((host, port))
        except OSError as e:
            raise typer.BadParameter(
                f"cannot listen on {host}:{port}: {e.strerror or e}; give each status instance "
                "on a host its own port", param_hint="--web-port / CARDSTREAM_STATUS__WEB_PORT"
            ) from e


def register(app: typer.Typer) -> None:
    """Add ``status`` to the ``cardstream`` app."""
    app.command("status")(status)

