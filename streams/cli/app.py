"""The ``cardstream`` command line (typer): the app, and every command registered on it.

One module per command (or command group) in this package, each with a ``register(app)``;
what they share is in :mod:`streams.cli.common`.
"""

from __future__ import annotations

import inspect
import re

import typer

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

app = typer.Typer(
    name="cardstream",
    help="Identity uploads from Kafka, processed in batches: card rectification and ID photos.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

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
