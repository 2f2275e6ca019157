"""The ``cardstream`` command line: :data:`app`, run by :func:`main` (the console script
``cardstream``)."""

import sys

from schemas.errors import CardstreamError
from streams.cli.app import app, terminal_help
from streams.cli.common import error_line
from streams.errors import SettingsError


def main() -> None:
    """The console script: :data:`app`, with the project's own errors (missing credentials,
    an unreachable broker at start-up, a missing topic...) printed as one line on stderr and
    exit status 1 instead of a traceback; usage errors keep typer's exit status 2, and so does
    a refused setting (:class:`~streams.errors.SettingsError`: a ``CARDSTREAM_*`` variable is
    an option too, and a script must tell a misconfiguration from an image not accepted,
    which ``card`` and ``idphoto`` answer with 1). Usage errors are one such line too
    (:class:`streams.cli.app.PlainUsageErrors`), naming the program ``cardstream`` however it
    was started."""
    try:
        app(prog_name="cardstream")
    except CardstreamError as e:
        print(error_line(type(e).__name__, str(e)), file=sys.stderr)
        sys.exit(2 if isinstance(e, SettingsError) else 1)


__all__ = ["app", "main", "terminal_help"]
