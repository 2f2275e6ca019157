"""The ``cardstream`` command line (typer): the app, and every command registered on it.

One module per command (or command group) in this package, each with a ``register(app)``;
what they share is in :mod:`streams.cli.common`.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer._click.core import Context  # typer runs its own copy of click (typer._click)
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from streams.cli import (
    buckets,
    card,
    demo,
    fetch,
    gateway,
    idphoto,
    produce,
    replay,
    results,
    schemas,
    status,
    topics,
    verify,
    worker,
)


def usage_line(e: UsageError) -> str:
    """A usage error as the one plain line that stops a command
    (:func:`streams.cli.common.error_line`), with click's hint where it has one:
    ``cardstream: UsageError: No such option: --nope. Try 'cardstream produce --help'.``"""
    from streams.cli.common import error_line

    # typer parses values with pydantic, whose ValueError text starts "Value error, "
    message = e.format_message().rstrip().replace(": Value error, ", ": ")
    if e.ctx is not None and e.ctx.command.get_help_option(e.ctx) is not None:
        end = "" if message.endswith((".", "?", "!")) else "."
        message += f"{end} Try '{e.ctx.command_path} {e.ctx.help_option_names[0]}'."
    return error_line("UsageError", message)


@contextmanager
def _plain_usage_errors() -> Iterator[None]:
    """Print a usage error raised inside as :func:`usage_line` on stderr and exit with click's
    usage-error status, 2 (a group called without a command still shows its help)."""
    try:
        yield
    except NoArgsIsHelpError:  # a group called without a command: its help (already printed)
        raise
    except UsageError as e:
        typer.echo(usage_line(e), err=True)
        raise typer.Exit(e.exit_code) from e


class PlainUsageErrors(TyperGroup):
    """The root group: a usage error (an unknown command or option, a value of the wrong type,
    a missing argument, a command's own ``typer.BadParameter``) is one plain line on stderr,
    exit status 2, as the project's other errors are (``streams.cli.main``), instead of typer's
    usage, hint and boxed panel over several lines; ``--help`` is typer's as before."""

    def make_context(self, *args: Any, **kwargs: Any) -> Context:
        with _plain_usage_errors():  # the root's own options
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Context) -> Any:
        with _plain_usage_errors():  # the callback, every sub-command's options and body
            return super().invoke(ctx)


app = typer.Typer(
    name="cardstream",
    cls=PlainUsageErrors,
    help="Identity uploads from Kafka, processed in batches: card rectification and ID photos.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

LEVEL_AT_LEAST = {"replay": "WARNING"}
"""Command -> the lowest level it logs at, whatever ``CARDSTREAM_LOG_LEVEL`` says below it:
replay's progress bar shares stderr with the log lines, and the worker it runs logs a line per
batch at INFO (``batch_committed``)."""


@app.callback()
def log_lines(ctx: typer.Context) -> None:
    """Set up every command's logging, once, before the command runs: JSON lines on stderr at
    the settings' ``log_level`` (``CARDSTREAM_LOG_LEVEL``; :data:`LEVEL_AT_LEAST` for replay).
    Without it a command that logs (librdkafka's lines with the broker down) wrote structlog's
    default coloured lines on stdout, among its output.

    The settings are built here, once for the run, and kept for the command
    (:func:`streams.cli.common.settings`). Settings that do not build leave the set-up at INFO:
    the command that reads them still answers the error (``cardstream: SettingsError: ...``,
    exit 2), and one that reads none (``schemas``, ``--help``) still runs."""
    from streams.cli.common import settings
    from streams.errors import SettingsError
    from streams.logs import configure_logging

    try:
        level: str = settings().log_level
    except SettingsError:
        level = "INFO"
    floor = LEVEL_AT_LEAST.get(ctx.invoked_subcommand or "", level)
    configure_logging(max(level, floor, key=logging.getLevelName))


COMMANDS = (schemas, card, idphoto, verify, topics, buckets, worker, produce, results, fetch,
            replay, demo, status, gateway)
"""The command modules, in the order ``--help`` lists them."""


def terminal_help(doc: str) -> str:
    """A command's docstring as ``--help`` text: paragraphs (blank-line separated) kept, the
    source's hard line breaks inside a paragraph joined with a space, and reST inline literals
    (double backticks) shown bare, so the terminal, not the source, decides the wrapping."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(re.sub(r"``(.+?)``", r"\1", " ".join(p.split())) for p in paragraphs)


def _reflow_help(group: typer.Typer) -> None:
    """Give every command of ``group`` and of its sub-groups :func:`terminal_help` of its
    docstring as help (typer keeps single line breaks after the first paragraph)."""
    for cmd in group.registered_commands:
        doc = cmd.help or (cmd.callback.__doc__ if cmd.callback else None)
        if doc:
            cmd.help = terminal_help(doc)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _reflow_help(sub.typer_instance)


for _module in COMMANDS:
    _module.register(app)
_reflow_help(app)
