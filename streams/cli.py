"""The ``cardstream`` command line (typer).

Each command group lives in its own module and registers itself here.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

if TYPE_CHECKING:
    from processors.decode import DecodeSettings, EncodedImage
    from processors.runtime import RuntimeSettings

T = TypeVar("T")

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


def runtime_for(base: RuntimeSettings, device: str, batch: int) -> RuntimeSettings:
    """The processors' runtime settings for a command's ``--device`` and ``--batch``: ``base``
    (``Settings.runtime``) with ``device`` and ``max_bucket`` replaced, validated.

    Raises:
        typer.BadParameter: an unknown device or a batch below 1 (exit 2, no traceback).
    """
    from pydantic import ValidationError

    from processors.runtime import RuntimeSettings

    if batch < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--batch")
    try:
        return RuntimeSettings.model_validate({**base.model_dump(), "device": device,
                                               "max_bucket": batch})
    except ValidationError as e:  # name the option, without pydantic's links
        raise typer.BadParameter("; ".join(err["msg"] for err in e.errors()),
                                 param_hint="--device") from e


def build_processor(build: Callable[[], T], param_hint: str | None = None) -> T:
    """``build()`` (a processor's constructor: model file, ONNX Runtime session, warm-up) with
    its set-up errors turned into a usage error, so that ``card`` and ``idphoto`` answer a
    missing or bad model file, or ``--device cuda`` without CUDA, the same way.

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


def output_path(out_dir: Path, src: Path, tail: str, taken: set[Path]) -> Path:
    """Where a processor command writes the output of input file ``src``:
    ``out_dir/<stem>-<ext>.<tail>`` (``card.jpg`` → ``card-jpg.<tail>``: the source extension
    keeps ``card.jpg`` and ``card.webp`` apart), or ``<stem>-<ext>-2.<tail>``, ``-3``... when an
    earlier output of the same command took that path (two inputs of the same name from
    different folders must not overwrite each other). The path is added to ``taken``."""
    stem = f"{src.stem}{src.suffix.replace('.', '-')}"
    path, k = out_dir / f"{stem}.{tail}", 2
    while path in taken:
        path, k = out_dir / f"{stem}-{k}.{tail}", k + 1
    taken.add(path)
    return path


def probe_files(files: list[Path], dec: DecodeSettings
                ) -> tuple[list[tuple[int, EncodedImage]], dict[int, tuple[str, str | None]]]:
    """Read image files for the processor commands (``card``, ``idphoto``) and probe their
    headers as the worker does (the processor decodes the pixels).

    Args:
        files: image paths, in command-line order.
        dec: decode limits (``Settings.decode``).

    Returns:
        ``(probed, refused)``: ``(index, EncodedImage)`` per accepted file, and per refused
        index ``(reason code, error)``: the probe's reason (``UNSUPPORTED_FORMAT``,
        ``CORRUPT_IMAGE``...) with its message (e.g. ``empty input (0 bytes); ...``), or
        ``OBJECT_NOT_FOUND`` for a file that cannot be read, as the stream says for a missing
        claim-check object, with the ``OSError`` class name and its text (``FileNotFoundError:
        No such file or directory``; ``not a regular file`` for a folder, FIFO or device, which
        is not opened). Pixel data that then fails to decode is the processor's ``rejected``
        outcome (``CORRUPT_IMAGE``).
    """
    from processors.decode import probe_image
    from processors.errors import DecodeError

    probed: list[tuple[int, EncodedImage]] = []
    refused: dict[int, tuple[str, str]] = {}
    for i, f in enumerate(files):
        if f.exists() and not f.is_file():  # a folder, FIFO or device: reading may never end
            refused[i] = ("OBJECT_NOT_FOUND", "not a regular file")
            continue
        try:
            probed.append((i, probe_image(f.read_bytes(), dec)))
        except DecodeError as e:
            refused[i] = (str(e.reason), str(e))
        except OSError as e:
            refused[i] = ("OBJECT_NOT_FOUND", f"{type(e).__name__}: {e.strerror or e}")
    return probed, refused


def status_text(row: dict) -> str:
    """The text-line head ``"FILE: STATUS[ REASON,REASON]"`` of a ``card``/``idphoto`` row
    (no trailing space when there are no reasons)."""
    reasons = f" {','.join(row['reasons'])}" if row["reasons"] else ""
    return f"{row['file']}: {row['status']}{reasons}"


def error_note(row: dict) -> str:
    """The text-line suffix ``" (error)"`` of a ``card``/``idphoto`` row refused with an
    ``"error"`` (:func:`probe_files`), else ``""``."""
    return f" ({row['error']})" if row.get("error") else ""


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
    _reflow_help(app)


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
        _reflow_help(sub.typer_instance)


_register()
