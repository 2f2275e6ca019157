"""``cardstream topics create|describe|delete``: the project's Kafka topics (operators)."""

from __future__ import annotations

import json

import typer

from streams.cli.common import settings

topics_app = typer.Typer(help="Create, describe or delete the project's Kafka topics.",
                         no_args_is_help=True)


@topics_app.command("create")
def topics_create(
    uploads_partitions: int = typer.Option(None, help="Partitions of the uploads topic "
                                           "(default: settings, 6)."),
    replication: int = typer.Option(None, help="Replication factor (default: settings, 1)."),
    retention_hours: float = typer.Option(None, help="Retention of uploads and results, in hours "
                                          "(default: settings, 168 = 7 days)."),
) -> None:
    """Create the uploads, results and dead-letter topics; existing topics are left as they are."""
    from streams.cli.common import with_options
    from streams.kafka import admin, create_topics, topic_specs

    s = settings()
    retention_ms = int(retention_hours * 3600_000) if retention_hours else None
    t = with_options(s.kafka.topics, {"replication_factor": "--replication",
                                      "uploads_retention_ms": "--retention-hours",
                                      "results_retention_ms": "--retention-hours"},
                     uploads_partitions=uploads_partitions, replication_factor=replication,
                     uploads_retention_ms=retention_ms, results_retention_ms=retention_ms)
    k = s.kafka.model_copy(update={"topics": t})
    for name, state in create_topics(admin(k), topic_specs(k)).items():
        typer.echo(f"{name}: {state}")


@topics_app.command("describe")
def topics_describe(as_json: bool = typer.Option(False, "--json",
                                                 help="One JSON object per topic.")) -> None:
    """Print partitions, replication factor and retention (ms) of the project's topics."""
    from streams.kafka import admin, describe_topics

    s = settings()
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
    allow_live: bool = typer.Option(False, "--allow-live", help="Let a topic be a default "
                                    "(shared) topic name or one a consumer group reads now "
                                    "(refused otherwise, --yes or not)."),
) -> None:
    """Delete the named topics, or, with none named, the uploads, results and dead-letter topics
    the settings name (your own topics on a shared broker, when you are done). Refuses, before
    asking and whatever --yes says, a default topic name (cardstream.uploads.v1...: shared by
    every checkout and worker that sets none of its own) and a topic a consumer group reads now
    (a running worker), unless --allow-live. Missing topics are skipped."""
    from streams.kafka import admin, consuming_groups, delete_topics, shared_topics, topic_names

    s = settings()
    own = [s.kafka.uploads_topic, s.kafka.results_topic, s.kafka.dlq_topic]
    names = list(dict.fromkeys(topics or own))  # once each, in the order given
    if not allow_live and (shared := shared_topics(names)):
        raise typer.BadParameter(
            f"{', '.join(shared)}: the default topics, shared by every checkout and worker that "
            "does not set its own (CARDSTREAM_KAFKA__*_TOPIC); name your own topics, or pass "
            "--allow-live if you mean to delete the shared ones", param_hint="TOPIC")
    a = admin(s.kafka)
    if not allow_live and (read := consuming_groups(a, names)):
        raise typer.BadParameter("; ".join(f"{t} is read now by consumer group(s) {', '.join(g)}"
                                           for t, g in read.items())
                                 + ": stop them first, or pass --allow-live", param_hint="TOPIC")
    if not yes:
        typer.confirm(f"delete {', '.join(names)} on {s.kafka.bootstrap_servers}?", abort=True)
    present = topic_names(a)
    delete_topics(a, [n for n in names if n in present])
    for n in names:
        typer.echo(f"{n}: {'deleted' if n in present else 'missing'}")


def register(app: typer.Typer) -> None:
    """Add the ``topics`` group to the ``cardstream`` app."""
    app.add_typer(topics_app, name="topics")
