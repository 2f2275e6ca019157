"""``cardstream eval mrz`` and ``cardstream eval quality``: the card verification's evaluations
(the logic is :mod:`processors.card.evaluation`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from streams.cli.card import eval_app

SetDir = Annotated[Path, typer.Option(
    "--set", help="Folder written by the documents generator (named above): photos and "
                  "manifest.json with each document's truth.")]
Batch = Annotated[int, typer.Option(min=1, help="Uploads per batch (the worker's batch sizes).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the figures as one JSON object.")]


def _evaluate(what: str, set_dir: Path, batch: int, real: Path | None = None,
              given_quads: bool = False) -> dict:
    from processors.card.evaluation import evaluate, mrz_given_quads
    from processors.errors import EvalSetError
    from streams.cli.common import settings

    settings()  # read for its check alone: a refused setting stops the run (exit 2)
    try:
        if given_quads:
            return mrz_given_quads(set_dir, batch)
        return evaluate(what, set_dir, batch, real)
    except (ValueError, EvalSetError) as e:  # not a set, or a broken one: a usage error
        raise typer.BadParameter(str(e), param_hint="--set") from e


def eval_mrz(set_dir: SetDir, batch: Batch = 8, as_json: AsJson = False,
             given_quads: Annotated[bool, typer.Option(
                 "--given-quads", help="The set's true corners instead of the localiser (the "
                                       "reader alone).")] = False,
             rows: Annotated[Path | None, typer.Option(
                 "--rows", help="Also write one JSON line per document here.")] = None) -> None:
    """The MRZ read through the whole card pipeline (photo -> quad -> rectification -> MRZ):
    the share of documents read exactly (format, every field, every check digit's validity as
    printed), the field-level rates, the wrong-but-valid rate (a read that passes every check
    digit yet differs from the document) and CPU ms per document (whole pipeline, MRZ step).
    A folder that is not a documents set, or one whose manifest lists a file that is missing or
    no image, or that lists no document, is a usage error (exit 2), as is a `--rows` path that
    cannot be written or is a file of the set (checked before the run). The documents
    generator writes a set: `python -m processors.card.training.documents --out DIR`."""
    from processors.card.evaluation import table

    made = rows is not None and _writable_rows(rows, set_dir)
    try:
        r = _evaluate("mrz", set_dir, batch, given_quads=given_quads)
    except BaseException:
        if made and rows is not None:
            rows.unlink(missing_ok=True)  # the empty file the check opened
        raise
    per_doc = r.pop("rows", [])
    if rows is not None:
        rows.write_text("".join(json.dumps(x) + "\n" for x in per_doc))
    typer.echo(json.dumps(r) if as_json else table("mrz", r))


def _writable_rows(rows: Path, set_dir: Path) -> bool:
    """Check ``--rows`` before the run (a path found bad after it would lose the figures): not
    a file of the set, and open for writing. Returns whether the check made the file.

    Raises:
        typer.BadParameter: a file of the set, a folder, or a path that cannot be written.
    """
    if rows.resolve().parent == set_dir.resolve() and (rows.name == "manifest.json"
                                                       or rows.exists()):
        raise typer.BadParameter(f"{rows} is a file of the set; it would be overwritten",
                                 param_hint="--rows")
    existed = rows.exists()
    try:
        with rows.open("a"):
            pass
    except OSError as e:
        raise typer.BadParameter(f"{rows} cannot be written ({type(e).__name__})",
                                 param_hint="--rows") from e
    return not existed


def eval_quality(set_dir: SetDir, batch: Batch = 8, as_json: AsJson = False,
                 real: Annotated[Path | None, typer.Option(
                     "--real", help="Also count PHOTOCOPY on the real cards of a "
                                    "shared/cases-style folder (e.g. ../shared/cases).")] = None
                 ) -> None:
    """The capture-quality measures through the whole card pipeline against the set's truth:
    DPI within 5 % of the DPI rendered, tilt within 2 degrees, PHOTOCOPY recall on the grey
    copies and false positives on the colour documents (and on ``--real`` cards), CPU ms of
    the measures per card. The documents generator writes a set:
    `python -m processors.card.training.documents --out DIR`."""
    from processors.card.evaluation import table

    r = _evaluate("quality", set_dir, batch, real)
    typer.echo(json.dumps(r) if as_json else table("quality", r))


def register(app: typer.Typer) -> None:
    """Add ``eval mrz`` and ``eval quality`` to the ``eval`` group."""
    del app  # the group is registered by streams.cli.card
    eval_app.command("mrz")(eval_mrz)
    eval_app.command("quality")(eval_quality)
