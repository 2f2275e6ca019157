"""``cardstream replay --from --to``: re-process a time window into a side topic, then diff."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.table import Table


def replay(
    from_: str = typer.Option(..., "--from", help="Start of the window, inclusive: ISO-8601 or "
                                                  "epoch ms (seconds are refused)."),
    to: str = typer.Option(..., "--to", help="End of the window, exclusive: ISO-8601 or epoch ms."),
    group: str = typer.Option("", help="Consumer group of the replay (default: "
                                       "cardstream-replay-<time>)."),
    results_topic: str = typer.Option("", help="Side results topic (default: "
                                               "cardstream.results.replay-<time>)."),
    model_version: str = typer.Option("", help="Label outputs with this model version (object keys "
                                               "and results), to compare a new model beside the "
                                               "originals."),
    report: Path = typer.Option(Path("out/replay_report.json"),
                                help="Where to write the JSON diff report."),
    allow_live: bool = typer.Option(False, "--allow-live", help="Let --results-topic / --group be "
                                    "the live worker's (refused otherwise: downstream readers "
                                    "would get a second result per upload)."),
) -> None:
    """Re-process uploads whose Kafka timestamps are in [FROM, TO) into a side results topic,
    then diff against the original results (verdicts, reasons, and each task's measures, e.g.
    the IoU of what it found)."""
    from rich.console import Console
    from tqdm import tqdm

    from streams.cli.common import settings
    from streams.errors import KeySegmentError
    from streams.replay import (
        ReplayGroupError,
        TimeArgError,
        live_targets,
        parse_time_ms,
        run_replay,
    )
    from streams.worker import build_processors
    from streams.worker.compute import check_key_segment

    try:
        if model_version:
            check_key_segment("--model-version", model_version)
    except KeySegmentError as e:
        raise typer.BadParameter(str(e), param_hint="--model-version") from e
    try:
        f_ms, t_ms = parse_time_ms(from_), parse_time_ms(to)
    except TimeArgError as e:
        raise typer.BadParameter(str(e)) from e
    if t_ms <= f_ms:
        raise typer.BadParameter("--to must be after --from")
    s = settings()
    if not allow_live and (live := live_targets(s, results_topic, group)):
        raise typer.BadParameter(f"{' and '.join(live)} is the live worker's: downstream readers "
                                 "would get a second result per upload (--allow-live if meant)")
    if s.backfill.yield_to_live and s.backfill.nice:
        os.nice(s.backfill.nice)  # before the models' thread pools exist: they inherit it
    procs = build_processors(s)
    bars: list[tqdm] = []  # one bar, made once the window's size is known (no empty bar before it)
    stop, signals = threading.Event(), []

    def stopping(signum: int, _frame: object) -> None:
        signals.append(signum)
        stop.set()

    # a stopped replay still reports (the batch in flight is finished and committed first)
    handlers = {sig: signal.signal(sig, stopping) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        summary = run_replay(s, f_ms, t_ms, procs, group=group or None,
                             results_topic=results_topic or None,
                             model_version=model_version or None, allow_live=allow_live,
                             on_total=lambda n: bars.append(
                                 tqdm(total=n, unit="upload", disable=None)),
                             on_progress=lambda k: bars and bars[0].update(k), stop=stop)
    except ReplayGroupError as e:
        raise typer.BadParameter(str(e), param_hint="--group") from e
    finally:
        for bar in bars:
            bar.close()
        for sig, h in handlers.items():
            signal.signal(sig, h)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(summary, indent=1))
    side, n, got = summary["results_topic"], summary["events"], summary["replayed"]
    yielded = (f"; yielded to the live workers {summary['yielded_s']} s "
               f"({summary['yields']} times)" if summary["yields"] else "")
    if summary["stopped"]:
        typer.echo(f"replay [{f_ms}, {t_ms}) of {s.kafka.uploads_topic} stopped by "
                   f"{signal.Signals(signals[0]).name}: {got} results of {n} events on {side}"
                   f"{yielded}; partial report: {report}; to go on: the same command with "
                   f"--group {summary['group']} --results-topic {side}")
        raise typer.Exit(128 + signals[0])  # as a shell reports a process ended by the signal
    typer.echo(f"replay [{f_ms}, {t_ms}) of {s.kafka.uploads_topic}: {n} events -> {got} results "
               f"on {side}" + (f", {n - got} dead letters on {side}.dlq" if n > got else "")
               + yielded)
    if n == 0:
        typer.echo("nothing to replay in that window")
        return
    if got == 0:
        typer.echo("no results to compare: every event of the window became a dead letter")
        return
    console = Console()
    console.print(comparison_table(summary))
    for ch in summary["changed"][:20]:
        console.print(f"  changed: {ch}")
    console.print(f"report: {report}")


COUNTS = ("replayed", "compared", "missing_original", "stale_original", "verdicts_changed",
          "reasons_changed")
"""The report's counts the table shows, in its order (:func:`comparison_table`)."""


def comparison_table(summary: Mapping[str, Any]) -> Table:
    """The replay's figures, one row each: the :data:`COUNTS`, then every measure's mean and
    min (keys ``<measure>_mean``, ``<measure>_min`` of :meth:`streams.replay.Diff.summary`,
    4 decimals; ``-`` where no compared upload had the measure).

    Two columns, names and figures (:func:`streams.tables.name_value_table`): it reads whole in
    an 80-column terminal whatever the number of tasks' measures. The side topic is not in the
    title: the line before the table names it.

    Raises:
        KeyError: ``summary`` lacks one of :data:`COUNTS`.
    """
    from streams.tables import name_value_table

    counts = [(_label(k), str(summary[k])) for k in COUNTS]
    measures = [(_label(k), "-" if summary[k] is None else f"{summary[k]:.4f}")
                for k in summary if k.endswith(("_mean", "_min"))]
    return name_value_table("replay vs original", ("figure", "value"), [counts, measures],
                            justify="right")


def _label(key: str) -> str:
    """A report key as the table names it: ``quad_iou_mean`` -> ``quad IoU mean``."""
    return key.replace("_", " ").replace("iou", "IoU")


def register(app: typer.Typer) -> None:
    """Add ``replay`` to the ``cardstream`` app."""
    app.command("replay")(replay)
