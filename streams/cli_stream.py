"""Operator commands: topics, buckets (and the stream commands registered next to them)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from schemas.reasons import Task
from streams.settings import load_settings

topics_app = typer.Typer(help="Create, describe or delete the project's Kafka topics.", no_args_is_help=True)
buckets_app = typer.Typer(help="Create the project's MinIO buckets.", no_args_is_help=True)


@topics_app.command("create")
def topics_create(
    uploads_partitions: int = typer.Option(None, help="Partitions of the uploads topic "
                                           "(default: settings, 6)."),
    replication: int = typer.Option(None, help="Replication factor (default: settings, 1)."),
    retention_hours: float = typer.Option(None, help="Retention of uploads and results, in hours "
                                          "(default: settings, 168 = 7 days)."),
) -> None:
    """Create the uploads, results and dead-letter topics; existing topics are left as they are."""
    from streams.kafka import admin, create_topics, topic_specs

    s = load_settings()
    t = s.kafka.topics.model_copy(update={k: v for k, v in {
        "uploads_partitions": uploads_partitions,
        "replication_factor": replication,
        "uploads_retention_ms": int(retention_hours * 3600_000) if retention_hours else None,
        "results_retention_ms": int(retention_hours * 3600_000) if retention_hours else None,
    }.items() if v is not None})
    k = s.kafka.model_copy(update={"topics": t})
    for name, state in create_topics(admin(k), topic_specs(k)).items():
        typer.echo(f"{name}: {state}")


@topics_app.command("describe")
def topics_describe(as_json: bool = typer.Option(False, "--json", help="One JSON object per topic.")) -> None:
    """Print partitions, replication factor and retention (ms) of the project's topics."""
    from streams.kafka import admin, describe_topics

    s = load_settings()
    names = [s.kafka.uploads_topic, s.kafka.results_topic, s.kafka.dlq_topic]
    for row in describe_topics(admin(s.kafka), names):
        if as_json:
            typer.echo(json.dumps(row))
        elif not row["exists"]:
            typer.echo(f"{row['topic']}: missing")
        else:
            typer.echo(f"{row['topic']}: partitions={row['partitions']} "
                       f"replication={row['replication']} retention_ms={row['retention_ms']}")


@topics_app.command("delete")
def topics_delete(
    topics: list[str] = typer.Argument(None, metavar="[TOPIC]...",
                                       help="Topics to delete, e.g. replay side topics (default: "
                                            "the uploads, results and dead-letter topics the "
                                            "settings name)."),
    yes: bool = typer.Option(False, "--yes", help="Delete without asking."),
) -> None:
    """Delete the named topics, or, with none named, the uploads, results and dead-letter topics
    the settings name (your own topics on a shared broker, when you are done). Asks first, and
    says when a name is one of the defaults every checkout shares. Missing topics are skipped."""
    from streams.kafka import admin, delete_topics
    from streams.settings import KafkaSettings

    s = load_settings()
    own = [s.kafka.uploads_topic, s.kafka.results_topic, s.kafka.dlq_topic]
    names = list(dict.fromkeys(topics or own))  # once each, in the order given
    d = KafkaSettings.model_fields
    shared = [n for n in names if n in {d["uploads_topic"].default, d["results_topic"].default,
                                        d["dlq_topic"].default}]
    if not yes:
        warn = (f" ({', '.join(shared)}: the default topics, shared by every checkout and worker "
                "that does not set its own)") if shared else ""
        typer.confirm(f"delete {', '.join(names)} on {s.kafka.bootstrap_servers}{warn}?",
                      abort=True)
    a = admin(s.kafka)
    present = set(a.list_topics(timeout=10).topics)
    delete_topics(a, [n for n in names if n in present])
    for n in names:
        typer.echo(f"{n}: {'deleted' if n in present else 'missing'}")


@buckets_app.command("create")
def buckets_create() -> None:
    """Create the uploads and results buckets if missing."""
    from streams.storage import Storage

    s = load_settings()
    for b, state in Storage(s.s3).ensure_buckets([s.s3.uploads_bucket, s.s3.results_bucket]).items():
        typer.echo(f"{b}: {state}")


def worker(
    tasks: str = typer.Option("card,id_photo", help="Comma-separated tasks this worker serves."),
    max_batch: int = typer.Option(None, help="Events per poll batch (default: settings, 32)."),
    max_wait_ms: int = typer.Option(None, help="ms to wait for a batch to fill (default: settings, 10)."),
    slot: int = typer.Option(None, help="Worker slot: transactional.id is {prefix}-{slot}; stable per "
                             "process slot (default: settings, else the trailing -N of HOSTNAME, else 0)."),
    processor: str = typer.Option("", help="Override processors per task, e.g. 'card=sleep' "
                                  "(the fixed-latency test processor)."),
    sleep_ms: float = typer.Option(20.0, help="Per-call latency of the sleep processor (ms)."),
    http_port: int = typer.Option(None, help="Port of /ready, /live, /metrics (0: none; default 8080)."),
) -> None:
    """Run one worker process of the consumer group (one per GPU); SIGTERM stops it cleanly."""
    import os
    import re

    from processors.registry import build_processor
    from streams.health import serve
    from streams.logs import configure_logging, log
    from streams.storage import Storage
    from streams.worker import Worker, install_signal_handlers

    s = load_settings()
    w = {k: v for k, v in {"max_batch": max_batch, "max_wait_ms": max_wait_ms,
                           "tasks": tuple(t.strip() for t in tasks.split(",") if t.strip()),
                           "http_port": http_port}.items() if v is not None}
    if slot is None and "CARDSTREAM_WORKER__SLOT" not in os.environ:
        m = re.search(r"-(\d+)$", os.environ.get("HOSTNAME", ""))
        slot = int(m.group(1)) if m else None
    if slot is not None:
        w["slot"] = slot
    try:  # model_validate (not model_copy) so the CLI values meet the same bounds as the env
        s = s.model_copy(update={"worker": type(s.worker).model_validate({**s.worker.model_dump(), **w})})
    except ValueError as e:
        raise typer.BadParameter(str(e).splitlines()[-2].strip() if "\n" in str(e) else str(e)) from e
    configure_logging(s.log_level)
    override = dict(p.split("=", 1) for p in processor.split(",") if "=" in p)
    procs = {t: build_processor(override.get(t, t), t, card=s.card, idphoto=s.idphoto,
                                runtime=s.runtime, sleep_ms=sleep_ms, decode=s.decode)
             for t in s.worker.tasks}
    wk = Worker(s, procs, Storage(s.s3))
    if s.worker.http_port:
        try:
            serve(wk.health, wk.metrics, s.worker.http_port)
        except OSError as e:  # e.g. a second worker on this host with the same port
            raise typer.BadParameter(
                f"cannot serve /ready, /live, /metrics on port {s.worker.http_port}: {e.strerror}; "
                "give each worker on a host its own port (or 0 for none)",
                param_hint="--http-port / CARDSTREAM_WORKER__HTTP_PORT") from e
    install_signal_handlers(wk)
    wk.warm_up()
    log.info("worker_start", slot=s.worker.slot, transactional_id=wk.transactional_id,
             tasks=list(s.worker.tasks), group=s.kafka.group_id, topic=s.kafka.uploads_topic)
    wk.run()
    log.info("worker_stopped", batches=wk.batches)


def produce(
    dir: Path = typer.Option(..., "--dir", exists=True, file_okay=False, help="Folder of images to upload."),
    task: Task = typer.Option(..., help="card | id_photo"),
    options: str = typer.Option("", help='Task options as JSON, e.g. \'{"size":"two_inch"}\'.'),
    rate: float = typer.Option(0.0, min=0.0, help="Ceiling in uploads per second (0: as fast as possible)."),
    concurrency: int = typer.Option(4, min=1, help="Uploads in flight (PUT + produce)."),
    count: int = typer.Option(0, min=0, help="Events to send, cycling over the files (0: each file once)."),
    inline: bool = typer.Option(False, help="Send images up to the inline limit (512 KiB) inline."),
    ids_file: Path = typer.Option(Path("out/upload_ids.txt"), help="Where to write the upload ids."),
    max_seconds: float = typer.Option(600.0, min=0.001, help="Stop after this many seconds."),
) -> None:
    """Upload images (claim check in MinIO) and produce one UploadEvent each to the uploads topic."""
    from tqdm import tqdm

    from streams.produce import IMAGE_SUFFIXES, UploadProducer, list_images, validate_request

    s = load_settings()
    files = list_images(dir)
    if not files:
        raise typer.BadParameter(f"no images in {dir}")
    chosen = set(files)
    others = sorted(p for p in dir.iterdir() if p not in chosen)
    for what, names in ((f"files without an image suffix ({', '.join(sorted(IMAGE_SUFFIXES))})",
                         [p.name for p in others if p.is_file()]),
                        ("subfolders (--dir is not recursive)",
                         [p.name for p in others if p.is_dir()]),
                        ("entries that are not regular files (FIFOs, devices, broken links)",
                         [p.name for p in others if not p.is_file() and not p.is_dir()])):
        if names:
            typer.echo(f"skipped {len(names)} {what}: {', '.join(names[:5])}"
                       + (" ..." if len(names) > 5 else ""), err=True)
    try:
        opts = json.loads(options) if options else None
        validate_request("probe", task.value, opts)
    except ValueError as e:
        raise typer.BadParameter(f"--task/--options: {' '.join(str(e).split())}") from e
    n = count or len(files)
    with tqdm(total=n, unit="upload", disable=None) as bar:
        sent = UploadProducer(s, inline=inline).produce_files(
            files, task.value, options=opts, count=n, rate=rate or None, concurrency=concurrency,
            max_seconds=max_seconds, progress=bar.update)
    ids_file.parent.mkdir(parents=True, exist_ok=True)
    ids_file.write_text("".join(f"{x.upload_id}\t{x.file}\n" for x in sent))
    typer.echo(f"sent {len(sent)} uploads to {s.kafka.uploads_topic}; ids in {ids_file}")


def register(app: typer.Typer) -> None:
    """Add the operator and stream commands to the ``cardstream`` CLI."""
    app.add_typer(topics_app, name="topics")
    app.add_typer(buckets_app, name="buckets")
    app.command("worker")(worker)
    app.command("produce")(produce)
