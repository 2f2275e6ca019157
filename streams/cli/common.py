"""What the commands share: the run's one settings object, CLI values over settings, set-up
errors as usage errors and the one-line error format (the processor commands' files and rows:
:mod:`streams.cli.files`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

# typer runs its own copy of click (typer._click), not the click package's
from typer._click.globals import get_current_context

from schemas.errors import field_errors, validation_message

if TYPE_CHECKING:
    from streams.settings import Settings

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_SETTINGS = "cardstream.settings"
"""The key of the built settings (or their :class:`~streams.errors.SettingsError`) in the
click context's ``meta``, a dict every context of one command line shares."""


def settings() -> Settings:
    """The command line's one settings object (:func:`streams.settings.load_settings`), built
    the first time a run asks for it (the root callback, which sets the log level from it,
    :func:`streams.cli.app.log_lines`) and kept in the click context, so that the command reads
    the same object.

    Raises:
        SettingsError: the environment's settings are refused; raised again to each command
            that asks (the console script prints it on one line, exit 2), while a command that
            reads no settings (``schemas``, ``--help``) still runs.
        RuntimeError: called outside a command line run (no click context).
    """
    from streams.errors import SettingsError
    from streams.settings import load_settings

    meta = get_current_context().meta
    if _SETTINGS not in meta:
        try:
            meta[_SETTINGS] = load_settings()
        except SettingsError as e:
            meta[_SETTINGS] = e
    built: Settings | SettingsError = meta[_SETTINGS]
    if isinstance(built, SettingsError):
        raise built
    return built


def error_line(kind: str, message: str) -> str:
    """The one plain line that stops a command: ``cardstream: <kind>: <message>``, the
    message's line breaks and runs of spaces made single spaces."""
    return f"cardstream: {kind}: {' '.join(message.split())}"


def with_options(section: M, hints: Mapping[str, str] | None = None, **values: Any) -> M:
    """The one way a command's options override settings: ``section`` (a frozen settings model,
    from the environment) with the options that were given (``None``: not given) in place,
    validated as the environment's values are (same bounds and types).

    Args:
        section: e.g. ``Settings.worker``, ``Settings.runtime``, ``KafkaSettings.topics``.
        hints: field -> the option to name in an error (default ``--field-name``).
        **values: field -> the option's value.

    Raises:
        typer.BadParameter: a value is out of bounds (exit 2, pydantic's message without its
            links, naming the option).
    """
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return section
    try:
        return type(section).model_validate({**section.model_dump(), **given})
    except ValidationError as e:
        errs = field_errors(e)
        field = str(errs[0].loc[0]) if errs and errs[0].loc else next(iter(given))
        hint = (hints or {}).get(field, "--" + field.replace("_", "-"))
        raise typer.BadParameter(validation_message(e, paths=False), param_hint=hint) from e


def set_up(build: Callable[[], T], param_hint: str | None = None) -> T:
    """``build()`` (a processor's constructor: model file, ONNX Runtime session) with its set-up
    errors turned into a usage error, so that every command answers a missing or bad model
    file, or ``--device cuda`` without CUDA, the same way.

    Raises:
        typer.BadParameter: ``build`` raised ``ProcessorError`` (``ModelError``,
            ``ProviderError``...) or ``ValueError`` (exit 2, the message on one line, no
            traceback); ``param_hint`` names the option to blame (e.g. ``--model``).
    """
    from processors.errors import ProcessorError

    try:
        return build()
    except (ValueError, ProcessorError) as e:
        raise typer.BadParameter(" ".join(str(e).split()), param_hint=param_hint) from e
