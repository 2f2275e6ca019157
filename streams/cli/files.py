"""The processor commands (``cardstream <command> IMAGE...``, one per task that has one): one way
to run a task's processor on files without Kafka, :func:`run_command`, and how a row of its
output is built from the task's payload model (:class:`View`).

Each command module gives its task, its options and its :class:`View`; everything else is the
same for both: JSON log lines on stderr (stdout carries only the rows), options checked and
``--out`` made before the model loads, the processor built through the task registry, files
probed as the worker probes uploads, one model call per batch of ``--batch`` files that pass
the probe, each batch's rows printed as soon as it is done (memory held: one batch), nothing
written without ``--out``, exit status 0 when every file is accepted, 1 otherwise, 2 for bad
options.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from streams.cli.common import set_up, settings, with_options

if TYPE_CHECKING:
    from processors.base import Artifact, Outcome, Processor
    from processors.decode import DecodeSettings, EncodedImage
    from processors.runtime import RuntimeSettings
    from processors.task import TaskSpec


@dataclass(frozen=True)
class View:
    """How a processor command shows one file: a row ``{"file", "status", "reasons",
    <columns>}`` (plus ``"error"`` for a file refused before processing).

    Attributes:
        columns: fields of the task's payload model, in order. The main artifact's field holds
            the path of the file written (None: nothing written); every other field the
            outcome's payload value of that name, as the results topic carries it.
        text: the task's part of a text line (between the verdict and the error note), from
            a row.
        blank: column -> value where the outcome's payload has none (None otherwise), also in
            the row of a file refused before processing, whose payload is empty.
        name_field: the payload field whose value names the output file
            (``<stem>-<ext>.<value>.<ext>``); None: the artifact's own name
            (``<stem>-<ext>.<artifact>.<ext>``).
    """

    columns: tuple[str, ...]
    text: Callable[[Mapping[str, Any]], str]
    blank: Mapping[str, Any] = field(default_factory=dict)
    name_field: str | None = None

    def unknown_columns(self, task: TaskSpec) -> list[str]:
        """The columns that are not fields of ``task``'s payload model (none for a good view)."""
        fields = task.payload_model.model_fields if task.payload_model is not None else {}
        return [c for c in self.columns if c not in fields]

    def row(self, task: TaskSpec, file: Path, outcome: Outcome,
            written: Path | None, others: Mapping[str, Path] | None = None) -> dict[str, Any]:
        """The row of a processed ``file``: its outcome, the main artifact's path ``written``
        (None: nothing written) and the paths of its other artifacts written (``others``, by
        artifact name: a column of that name shows it)."""
        def value(column: str) -> Any:
            if column == task.main_artifact:
                return None if written is None else str(written)
            if others and column in others:
                return str(others[column])
            v = outcome.payload.get(column)
            return self.blank.get(column) if v is None else v

        row = {"file": str(file), "status": str(outcome.status),
               "reasons": [str(r) for r in outcome.reasons],
               **{c: value(c) for c in self.columns}}
        if outcome.detail:
            row["error"] = outcome.detail  # e.g. the decoder's message for CORRUPT_IMAGE
        return row

    def refused(self, file: Path, code: str, error: str) -> dict[str, Any]:
        """The row of a ``file`` refused before processing (unreadable, or refused by the
        header probe) with its reason ``code`` and the ``error`` message."""
        return {"file": str(file), "status": "rejected", "reasons": [code],
                **{c: self.blank.get(c) for c in self.columns}, "error": error}

    def file_tail(self, outcome: Outcome, artifact: Artifact, main: bool = True) -> str:
        """The output file's name after ``<stem>-<ext>.`` (:attr:`name_field`); an artifact
        other than the main one adds its own name (``one_inch.sheet.jpg``)."""
        name = artifact.name if self.name_field is None else outcome.payload[self.name_field]
        if not main and self.name_field is not None:
            name = f"{name}.{artifact.name}"
        return f"{name}.{artifact.ext}"


def run_command(task: str, view: View, images: list[Path], options: Mapping[str, Any], *,
                out: Path | None, as_json: bool, device: str, batch: int,
                model: Path | None = None,
                check: Callable[[Mapping[str, Any], Any], object] | None = None) -> None:
    """A processor command, whole: settings, options, ``--out``, the processor
    (:func:`processors.registry.build_processor`), the rows (:func:`run_files`) printed batch
    by batch as each batch is done (:func:`print_rows`).

    Args:
        task: a registered task.
        view: how its rows look.
        images: the files, in command-line order.
        options: the task's options (None: not given; the settings section's default then).
        out: the output folder (None: nothing is written).
        as_json: one JSON object per line instead of a text line.
        device, batch: ``--device`` and ``--batch`` (:func:`runtime_for`).
        model: ``--model``: an ONNX file instead of the task's pinned model.
        check: the processor's own check of ``options`` against the task's settings section,
            raising ``ValueError`` or ``ProcessorError`` for options it refuses, or saying on
            stderr what it will not do (``card``: MRZ values the setting withholds), before the
            model loads.

    Raises:
        typer.BadParameter: bad options, device, batch, ``--out`` or model file (exit 2).
        typer.Exit: 1 when any file is not accepted.
    """
    from processors import registry
    from processors.errors import ProcessorError
    from streams.worker.loop import task_section

    s = settings()
    section = task_section(s, task)
    given = {k: v for k, v in options.items() if v is not None}
    if check is not None:
        try:
            check(given, section)
        except (ValueError, ProcessorError) as e:
            raise typer.BadParameter(str(e)) from e
    rt = runtime_for(s.runtime, device, batch)
    if out is not None:
        make_out_dir(out)  # a bad --out is refused before the model loads
    proc = set_up(lambda: registry.build_processor(task, section, rt, decode=s.decode,
                                                   model_file=model),
                  "--model" if model is not None else None)
    spec = registry.spec(task)
    print_rows(view, run_files(spec, view, proc, images, given, s.decode, batch, out), as_json)


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


def output_path(out_dir: Path, src: Path, tail: str, taken: set[Path]) -> Path:
    """Where a processor command writes the output of input file ``src``:
    ``out_dir/<stem>-<ext>.<tail>`` (``me.jpg`` → ``me-jpg.<tail>``: the source extension
    keeps ``me.jpg`` and ``me.webp`` apart), or ``<stem>-<ext>-2.<tail>``, ``-3``... when an
    earlier output of the same command took that path (two inputs of the same name from
    different folders must not overwrite each other). The path is added to ``taken``. A name
    that starts with a dot loses it (``.jpg`` → ``jpg.<tail>``), so no output is hidden; a name
    of dots only becomes ``image``."""
    stem = f"{src.stem}{src.suffix.replace('.', '-')}".lstrip(".") or "image"
    path, k = out_dir / f"{stem}.{tail}", 2
    while path in taken:
        path, k = out_dir / f"{stem}-{k}.{tail}", k + 1
    taken.add(path)
    return path


def probe_file(file: Path, dec: DecodeSettings) -> EncodedImage | tuple[str, str]:
    """Read an image file for the processor commands and probe its header as the worker probes
    an upload (the processor decodes the pixels).

    Args:
        file: an image path.
        dec: decode limits (``Settings.decode``).

    Returns:
        The :class:`EncodedImage` of an accepted file, or ``(reason code, error)`` for a refused
        one: the probe's reason (``UNSUPPORTED_FORMAT``, ``CORRUPT_IMAGE``...) with its message
        (e.g. ``empty input (0 bytes); ...``), or ``OBJECT_NOT_FOUND`` for a file that cannot be
        read, as the stream says for a missing claim-check object, with the ``OSError`` class
        name and its text (``FileNotFoundError: No such file or directory``; ``not a regular
        file`` for a folder, FIFO or device, which is not opened). Pixel data that then fails to
        decode is the processor's ``rejected`` outcome (``CORRUPT_IMAGE``).
    """
    from processors.decode import probe_image
    from processors.errors import DecodeError

    if file.exists() and not file.is_file():  # a folder, FIFO or device: reading may never end
        return "OBJECT_NOT_FOUND", "not a regular file"
    try:
        return probe_image(file.read_bytes(), dec)
    except DecodeError as e:
        return str(e.reason), str(e)
    except OSError as e:
        return "OBJECT_NOT_FOUND", f"{type(e).__name__}: {e.strerror or e}"


def run_files(task: TaskSpec, view: View, proc: Processor, files: list[Path],
              options: Mapping[str, Any], dec: DecodeSettings, batch: int,
              out_dir: Path | None) -> Iterator[dict[str, Any]]:
    """The processor commands' work, batch by batch: read and probe ``files`` in order
    (:func:`probe_file`) until ``batch`` of them pass the probe (or the files end), process
    those in one model call, write each main artifact into ``out_dir`` (None: write nothing)
    and each other artifact whose name is one of the view's columns (the print sheet), and
    yield the batch's rows before the next batch's files are read. Only one batch's bytes,
    decoded images and outcomes are held at a time; output names stay unique over the whole
    run (:func:`output_path`).

    Yields:
        One row per file, in the order of ``files`` (:meth:`View.row`, :meth:`View.refused`);
        a file refused by the probe before any file of its batch passed it comes at once.

    Raises:
        ProcessorError: as ``process_batch`` (a broken model); the earlier batches' rows have
            been yielded.
    """
    from processors.decode import EncodedImage

    taken: set[Path] = set()
    pending: list[tuple[int, EncodedImage | tuple[str, str]]] = []
    probed = 0
    for i, f in enumerate(files):
        pending.append((i, probe_file(f, dec)))
        probed += isinstance(pending[-1][1], EncodedImage)
        if probed in (0, batch) or i == len(files) - 1:
            rows = _batch_rows(task, view, proc, files, pending, options, out_dir, taken)
            pending, probed = [], 0  # this batch's bytes go before its rows are shown
            yield from rows


def _batch_rows(task: TaskSpec, view: View, proc: Processor, files: list[Path],
                pending: list[tuple[int, EncodedImage | tuple[str, str]]],
                options: Mapping[str, Any], out_dir: Path | None,
                taken: set[Path]) -> list[dict[str, Any]]:
    """The rows of one batch of :func:`run_files`: ``pending`` holds ``(index into files,
    probe result)`` in order; the probed images go to ``proc`` in one ``process_batch`` call
    (none when every file was refused), their artifacts are written (``taken``: the output
    paths of the run so far, added to)."""
    from processors.base import Item, process_in_buckets
    from processors.decode import EncodedImage

    probed = [(i, p) for i, p in pending if isinstance(p, EncodedImage)]
    items = [Item(upload_id=f"cli-{i}", image=img, options=dict(options)) for i, img in probed]
    done = dict(zip((i for i, _ in probed), process_in_buckets(proc, items, len(items)),
                    strict=True))
    rows: list[dict[str, Any]] = []
    for i, p in pending:
        if not isinstance(p, EncodedImage):
            rows.append(view.refused(files[i], *p))
            continue
        o = done[i]
        main = next((a for a in o.artifacts if a.name == task.main_artifact), None)
        written = None
        others: dict[str, Path] = {}
        if out_dir is not None and main is not None:
            written = output_path(out_dir, files[i], view.file_tail(o, main), taken)
            written.write_bytes(main.data)
        for a in o.artifacts:
            if out_dir is not None and a is not main and a.name in view.columns:
                others[a.name] = output_path(out_dir, files[i], view.file_tail(o, a, main=False),
                                             taken)
                others[a.name].write_bytes(a.data)
        rows.append(view.row(task, files[i], o, written, others))
    return rows


def print_rows(view: View, rows: Iterable[dict[str, Any]], as_json: bool) -> None:
    """Print the rows of :func:`run_files` as they come, one JSON object per line or one text
    line each (``FILE: STATUS[ REASON,REASON]``, the task's part, `` (error)``), each flushed
    (``typer.echo``) so that a long run shows its progress batch by batch; exit 1 when any file
    is not accepted (after the last row)."""
    refused = False
    for r in rows:
        if as_json:
            typer.echo(json.dumps(r))
        else:
            reasons = f" {','.join(r['reasons'])}" if r["reasons"] else ""
            error = f" ({r['error']})" if r.get("error") else ""
            typer.echo(f"{r['file']}: {r['status']}{reasons}{view.text(r)}{error}")
        refused |= r["status"] != "accepted"
    if refused:
        raise typer.Exit(1)
