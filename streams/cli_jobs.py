"""User commands of the main job: results, fetch, replay, demo."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from streams.settings import load_settings


def results(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep waiting for new results."),
    since: str = typer.Option("", help="Start at this time (ISO-8601 or epoch ms); default: the beginning."),
    as_json: bool = typer.Option(False, "--json", help="Print each result as one JSON line (the contract)."),
    dead_letters: bool = typer.Option(False, "--dead-letters", help="Read the dead-letter topic "
                                      "instead: events refused with a code (bad JSON, schema...)."),
) -> None:
    """Print committed results (isolation.level=read_committed), one line per result, as OCR
    sees them; with --dead-letters, the dead letters (time, upload id or -, code, source
    partition:offset, error)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from schemas import codec
    from streams.kafka import consumer
    from streams.replay import TimeArgError, parse_time_ms

    try:
        since_ms = parse_time_ms(since) if since else None
    except TimeArgError as e:
        raise typer.BadParameter(str(e), param_hint="--since") from e
    s = load_settings()
    topic = s.kafka.dlq_topic if dead_letters else s.kafka.results_topic
    c = consumer(s.kafka, f"cardstream-results-cli-{time.time_ns()}")
    parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
    if since_ms is not None:
        start = c.offsets_for_times([TopicPartition(topic, p, since_ms) for p in parts], 10)
    else:
        start = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts]
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.assign(start)
    idle = 0
    try:
        while True:
            msgs = c.consume(500, 0.5)
            for m in msgs:
                if m.error() is not None:
                    continue
                if as_json:
                    typer.echo(m.value().decode())
                    continue
                if dead_letters:
                    d = codec.decode_dead_letter(m.value(), m.headers())
                    # no upload_id could be read from the value: show the record key (unverified)
                    who = d.upload_id or (f"key={m.key().decode(errors='backslashreplace')}" if m.key() else "-")
                    typer.echo(f"{d.failed_at}  {who:<40} {d.error_code:<28} "
                               f"{d.source.partition}:{d.source.offset}  {d.error}")
                    continue
                r = codec.decode_result(m.value())
                typer.echo(f"{r.processed_at}  {r.upload_id:<40} {r.task:<8} {r.status:<8} "
                           f"{','.join(map(str, r.reasons)) or '-':<24} {r.timings.total_ms:8.0f} ms")
            if not follow:
                idle = idle + 1 if not msgs else 0
                pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in parts])}
                if all(pos.get(p, -1) >= e for p, e in ends.items() if e > 0) or idle > 6:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        c.close()


def fetch(
    upload_id: str = typer.Argument(..., help="The upload whose outputs to download."),
    out: Path = typer.Option(Path("out/fetch"), help="Folder to write the objects into."),
) -> None:
    """Download every output object of UPLOAD_ID (all tasks, all model versions) into OUT."""
    import re

    from streams.storage import Storage

    if not re.fullmatch(r"(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}", upload_id):
        raise typer.BadParameter("not a valid upload id")
    s = load_settings()
    st = Storage(s.s3)
    n = 0
    for task in ("card", "id_photo"):
        for ver in st.client.list_objects(s.s3.results_bucket, prefix=f"{task}/"):
            for o in st.client.list_objects(s.s3.results_bucket, prefix=f"{ver.object_name}{upload_id}/",
                                            recursive=True):
                dst = out / o.object_name
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(st.get(s.s3.results_bucket, o.object_name))
                typer.echo(str(dst))
                n += 1
    if n == 0:
        typer.echo(f"no outputs for {upload_id}", err=True)
        raise typer.Exit(1)


def replay(
    from_: str = typer.Option(..., "--from", help="Start of the window, inclusive: ISO-8601 or epoch ms "
                              "(seconds are refused)."),
    to: str = typer.Option(..., "--to", help="End of the window, exclusive: ISO-8601 or epoch ms."),
    group: str = typer.Option("", help="Consumer group of the replay (default: cardstream-replay-<time>)."),
    results_topic: str = typer.Option("", help="Side results topic (default: cardstream.results.replay-<time>)."),
    model_version: str = typer.Option("", help="Label outputs with this model version (object keys and "
                                      "results), to compare a new model beside the originals."),
    report: Path = typer.Option(Path("out/replay_report.json"), help="Where to write the JSON diff report."),
) -> None:
    """Re-process uploads whose Kafka timestamps are in [FROM, TO) into a side results topic, then diff
    against the original results (verdicts, reasons, quad IoU)."""
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from processors.registry import build_processor
    from streams.logs import configure_logging
    from streams.replay import TimeArgError, parse_time_ms, run_replay

    try:
        f_ms, t_ms = parse_time_ms(from_), parse_time_ms(to)
    except TimeArgError as e:
        raise typer.BadParameter(str(e)) from e
    if t_ms <= f_ms:
        raise typer.BadParameter("--to must be after --from")
    s = load_settings()
    configure_logging("WARNING")
    procs = {task: build_processor(task, task, card=s.card, idphoto=s.idphoto, runtime=s.runtime,
                                   decode=s.decode)
             for task in s.worker.tasks}
    bars: list[tqdm] = []  # one bar, made once the window's size is known (no empty bar before it)
    try:
        summary = run_replay(s, f_ms, t_ms, procs, group=group or None,
                             results_topic=results_topic or None,
                             model_version=model_version or None,
                             on_total=lambda n: bars.append(tqdm(total=n, unit="upload", disable=None)),
                             on_progress=lambda k: bars and bars[0].update(k))
    finally:
        for bar in bars:
            bar.close()
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(summary, indent=1))
    side, n, got = summary["results_topic"], summary["events"], summary["replayed"]
    typer.echo(f"replay [{f_ms}, {t_ms}) of {s.kafka.uploads_topic}: {n} events -> {got} results "
               f"on {side}" + (f", {n - got} dead letters on {side}.dlq" if n > got else ""))
    if n == 0:
        typer.echo("nothing to replay in that window")
        return
    if got == 0:
        typer.echo("no results to compare: every event of the window became a dead letter")
        return
    tab = Table(title=f"replay vs original ({summary['results_topic']})")
    for col in ("replayed", "compared", "verdicts changed", "reasons changed", "quad IoU mean", "quad IoU min"):
        tab.add_column(col)
    tab.add_row(*(str(summary[k]) for k in ("replayed", "compared", "verdicts_changed", "reasons_changed",
                                             "quad_iou_mean", "quad_iou_min")))
    console = Console()
    console.print(tab)
    for ch in summary["changed"][:20]:
        console.print(f"  changed: {ch}")
    console.print(f"report: {report}")


def demo(
    out: Path = typer.Option(Path("out"), help="Folder for samples, outputs, logs and the results table."),
    workers: int = typer.Option(2, help="Worker processes to start."),
    timeout_s: float = typer.Option(600.0, help="Give up waiting for warm-up or results after this long (s)."),
) -> None:
    """The main job on the sample uploads: two workers, samples produced, results table, outputs in OUT."""
    from streams.demo import run_demo

    raise typer.Exit(run_demo(load_settings(), out, workers=workers, timeout_s=timeout_s))


def register(app: typer.Typer) -> None:
    """Add results, fetch, replay and demo to the ``cardstream`` CLI."""
    app.command("results")(results)
    app.command("fetch")(fetch)
    app.command("replay")(replay)
    app.command("demo")(demo)
