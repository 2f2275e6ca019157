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
) -> None:
    """Print committed results (isolation.level=read_committed), one line per result, as OCR sees them."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from schemas import codec
    from streams.kafka import consumer
    from streams.replay import parse_time_ms

    s = load_settings()
    topic = s.kafka.results_topic
    c = consumer(s.kafka, f"cardstream-results-cli-{time.time_ns()}")
    parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
    if since:
        start = c.offsets_for_times([TopicPartition(topic, p, parse_time_ms(since)) for p in parts], 10)
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
    from confluent_kafka.admin import NewTopic
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from processors.registry import build_processor
    from streams.kafka import admin, create_topics
    from streams.logs import configure_logging
    from streams.replay import (
        TimeArgError,
        decode_results,
        diff_results,
        offset_ranges,
        parse_time_ms,
        read_topic,
    )
    from streams.storage import Storage
    from streams.worker import Worker

    try:
        f_ms, t_ms = parse_time_ms(from_), parse_time_ms(to)
    except TimeArgError as e:
        raise typer.BadParameter(str(e)) from e
    if t_ms <= f_ms:
        raise typer.BadParameter("--to must be after --from")
    s = load_settings()
    configure_logging("WARNING")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    side = results_topic or f"cardstream.results.replay-{stamp}"
    k = s.kafka.model_copy(update={"results_topic": side, "dlq_topic": f"{side}.dlq",
                                   "group_id": group or f"cardstream-replay-{stamp}",
                                   "transactional_id_prefix": f"cardstream-replay-{stamp}"})
    ranges = offset_ranges(k, k.uploads_topic, f_ms, t_ms)
    total = sum(b - a for a, b in ranges.values())
    typer.echo(f"replay [{f_ms}, {t_ms}) of {k.uploads_topic}: {total} uploads -> {side}")
    report.parent.mkdir(parents=True, exist_ok=True)
    if total == 0:
        report.write_text(json.dumps({"replayed": 0, "results_topic": side}, indent=1))
        typer.echo("nothing to replay in that window")
        return
    t = s.kafka.topics
    create_topics(admin(k), [NewTopic(side, t.results_partitions, t.replication_factor),
                             NewTopic(k.dlq_topic, 1, t.replication_factor)])
    s2 = s.model_copy(update={"kafka": k})
    procs = {task: build_processor(task, task, card=s.card, idphoto=s.idphoto, runtime=s.runtime)
             for task in s.worker.tasks}
    w = Worker(s2, procs, Storage(s.s3), ranges=ranges, model_version=model_version or None)
    w.warm_up()
    with tqdm(total=total, unit="upload") as bar:
        counter = w.metrics.results
        import threading

        th = threading.Thread(target=w.run, daemon=True)
        th.start()
        done = 0
        while th.is_alive():
            th.join(0.5)
            now = int(sum(m.value for metric in counter.collect() for m in metric.samples
                          if m.name.endswith("_total")))
            now += int(sum(m.value for metric in w.metrics.dead_letters.collect() for m in metric.samples
                           if m.name.endswith("_total")))
            bar.update(now - done)
            done = now
    replayed = decode_results(read_topic(k, side))
    original = [r for r in decode_results(read_topic(s.kafka, s.kafka.results_topic))
                if r.upload_id in {x.upload_id for x in replayed}]
    d = diff_results(original, replayed)
    summary = {"window_ms": [f_ms, t_ms], "results_topic": side, "replayed": len(replayed), **d.summary()}
    report.write_text(json.dumps(summary, indent=1))
    console = Console()
    tab = Table(title=f"replay vs original ({side})")
    for col in ("replayed", "compared", "verdicts changed", "reasons changed", "quad IoU mean", "quad IoU min"):
        tab.add_column(col)
    tab.add_row(str(len(replayed)), str(d.compared), str(len(d.verdict_changed)), str(len(d.reasons_changed)),
                str(summary["quad_iou_mean"]), str(summary["quad_iou_min"]))
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
