"""The ``cardstream`` command line: :data:`app` (the console script ``cardstream``)."""

from streams.cli.app import app, terminal_help

__all__ = ["app", "terminal_help"]
