"""Operator commands: topics, buckets (and the stream commands registered next to them)."""

from __future__ import annotations

import json

import typer

from streams.settings import load_settings

topics_app = typer.Typer(help="Create or describe the project's Kafka topics.", no_args_is_help=True)
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


@buckets_app.command("create")
def buckets_create() -> None:
    """Create the uploads and results buckets if missing."""
    from streams.storage import Storage

    s = load_settings()
    for b, state in Storage(s.s3).ensure_buckets([s.s3.uploads_bucket, s.s3.results_bucket]).items():
        typer.echo(f"{b}: {state}")


def register(app: typer.Typer) -> None:
    """Add the operator commands to the ``cardstream`` CLI."""
    app.add_typer(topics_app, name="topics")
    app.add_typer(buckets_app, name="buckets")
