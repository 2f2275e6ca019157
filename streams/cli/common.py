"""What the commands share: CLI values over settings, usage errors, and the processor commands'
file handling (``cardstream <task command> IMAGE...``: probe files, run buckets, write and
print rows).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from schemas.errors import field_errors, validation_message

if TYPE_CHECKING:
    from processors.base import Processor
    from processors.decode import DecodeSettings, EncodedImage
    from processors.runtime import RuntimeSettings
    from processors.task import TaskSpec

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


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
    if batch < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--batch")
    return with_options(base, {"max_bucket": "--batch"}, device=device, max_bucket=batch)


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
    """Read image files for the processor commands and probe their headers as the worker does
    (the processor decodes the pixels).

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


def run_files(task: TaskSpec, proc: Processor, files: list[Path], options: Mapping[str, Any],
              dec: DecodeSettings, batch: int, out_dir: Path | None) -> list[dict[str, Any]]:
    """The processor commands' work: probe ``files``, process them in buckets of ``batch``
    (one model call each), write each main artifact into ``out_dir`` (None: write nothing).

    Returns:
        One row per file, in order: ``{"file", "status", "reasons", <the task's columns>}``
        (``task.cli_columns``), plus ``"error"`` for a file refused before processing
        (:func:`probe_files`; the task's columns are ``task.cli_blank``).
    """
    from processors.base import Item, process_in_buckets

    probed, refused = probe_files(files, dec)
    rows: dict[int, dict[str, Any]] = {
        i: {"file": str(files[i]), "status": "rejected", "reasons": [code], **task.cli_blank,
            "error": err}
        for i, (code, err) in refused.items()}
    items = [Item(upload_id=f"cli-{i}", image=img, options=dict(options)) for i, img in probed]
    taken: set[Path] = set()
    for (i, _), o in zip(probed, process_in_buckets(proc, items, batch), strict=True):
        main = next((a for a in o.artifacts if a.name == task.main_artifact), None)
        written = None
        if out_dir is not None and main is not None:
            path = output_path(out_dir, files[i], task.cli_file_tail(options, main), taken)
            path.write_bytes(main.data)
            written = str(path)
        rows[i] = {"file": str(files[i]), "status": str(o.status),
                   "reasons": [str(r) for r in o.reasons], **task.cli_columns(o, main, written)}
    return [rows[i] for i in range(len(files))]


def print_rows(task: TaskSpec, rows: list[dict[str, Any]], as_json: bool) -> None:
    """Print the rows of :func:`run_files`, one JSON object per line or one text line each
    (``FILE: STATUS[ REASON,REASON]``, the task's part, `` (error)``); exit 1 when any file
    is not accepted."""
    for r in rows:
        if as_json:
            typer.echo(json.dumps(r))
        else:
            reasons = f" {','.join(r['reasons'])}" if r["reasons"] else ""
            error = f" ({r['error']})" if r.get("error") else ""
            typer.echo(f"{r['file']}: {r['status']}{reasons}{task.cli_text(r)}{error}")
    if any(r["status"] != "accepted" for r in rows):
        raise typer.Exit(1)
