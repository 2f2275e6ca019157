"""``cardstream results``: the committed results (or dead letters) as downstream OCR sees
them."""

from __future__ import annotations

import typer


def results(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep waiting for new results."),
    since: str = typer.Option("", help="Start at this time (ISO-8601 or epoch ms); default: the "
                              "beginning."),
    as_json: bool = typer.Option(False, "--json", help="Print each result as one JSON line (the "
                                 "contract)."),
    dead_letters: bool = typer.Option(False, "--dead-letters", help="Read the dead-letter topic "
                                      "instead: events refused with a code (bad JSON, schema...)."),
) -> None:
    """Print committed results (isolation.level=read_committed), one line per result, as OCR
    sees them; with --dead-letters, the dead letters (time, upload id or -, code, source
    partition:offset, error)."""
    from schemas import codec
    from schemas.errors import ContractError
    from schemas.reasons import DeadLetterCode
    from streams.cli.common import settings
    from streams.kafka import read_topic
    from streams.replay import TimeArgError, parse_time_ms

    try:
        since_ms = parse_time_ms(since) if since else None
    except TimeArgError as e:
        raise typer.BadParameter(str(e), param_hint="--since") from e
    s = settings()
    topic = s.kafka.dlq_topic if dead_letters else s.kafka.results_topic
    try:
        for msgs in read_topic(s.kafka, topic, since_ms=since_ms, follow=follow, idle_s=3.0):
            for m in msgs:
                value, key = m.value(), m.key()
                if as_json:
                    if value is None:  # what decoding says in the other modes
                        raise ContractError(DeadLetterCode.NOT_JSON, "value is null (tombstone)")
                    typer.echo(value.decode(errors="backslashreplace"))
                elif dead_letters:
                    d = codec.decode_dead_letter(value, m.headers())
                    # no upload_id could be read from the value: show the record key (unverified)
                    who = d.upload_id or (f"key={key.decode(errors='backslashreplace')}"
                                          if key else "-")
                    typer.echo(f"{d.failed_at}  {who:<40} {d.error_code:<28} "
                               f"{d.source.partition}:{d.source.offset}  {d.error}")
                else:
                    r = codec.decode_result(value)
                    typer.echo(f"{r.processed_at}  {r.upload_id:<40} {r.task:<8} {r.status:<8} "
                               f"{','.join(map(str, r.reasons)) or '-':<24} "
                               f"{r.timings.total_ms:8.0f} ms")
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    """Add ``results`` to the ``cardstream`` app."""
    app.command("results")(results)
