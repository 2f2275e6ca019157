"""`cardstream produce --dir`: the folder's images go out as uploads; other files are named."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from streams.cli import app
from streams.procs import settings_env
from streams.settings import Settings
from streams.storage import Storage

from .helpers import write_images


def test_produce_sends_the_images_and_names_the_skipped_files(settings: Settings,
                                                              tmp_path: Path) -> None:
    folder = tmp_path / "in"
    files = write_images(folder, 3)
    (folder / "scan.pdf").write_bytes(b"%PDF-1.4 not an image")
    (folder / "more").mkdir()
    write_images(folder / "more", 1)
    ids = tmp_path / "ids.txt"
    r = CliRunner().invoke(app, ["produce", "--dir", str(folder), "--task", "card",
                                 "--ids-file", str(ids)], env=settings_env(settings))
    assert r.exit_code == 0, r.output
    assert "skipped 1 files without an image suffix" in r.output and "scan.pdf" in r.output
    assert "skipped 1 subfolders (--dir is not recursive): more" in r.output
    assert f"sent 3 uploads to {settings.kafka.uploads_topic}" in r.output
    rows = [line.split("\t") for line in ids.read_text().splitlines()]
    assert sorted(Path(f).name for _, f in rows) == [p.name for p in files]
    # each upload's image is in the uploads bucket (claim check)
    keys = [o.object_name for o in Storage(settings.s3).client.list_objects(
        settings.s3.uploads_bucket, recursive=True)]
    assert len(keys) == 3


def test_topics_delete_named_topics_or_else_this_settings_three(settings: Settings) -> None:
    from confluent_kafka.admin import NewTopic

    from streams.kafka import admin, create_topics

    env = settings_env(settings)
    k = settings.kafka
    a = admin(k)
    side = f"{k.results_topic}.replay-x"
    r = CliRunner().invoke(app, ["topics", "create"], env=env)
    assert r.exit_code == 0, r.output
    create_topics(a, [NewTopic(side, 1, 1)])
    r = CliRunner().invoke(app, ["topics", "delete", side], env=env, input="n\n")
    assert r.exit_code == 1 and "Aborted" in r.output  # asks first
    # named topics: only those (a name given twice is deleted once), not the settings' three
    r = CliRunner().invoke(app, ["topics", "delete", side, side, f"{side}.dlq", "--yes"], env=env)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [f"{side}: deleted", f"{side}.dlq: missing"]
    left = set(a.list_topics(timeout=10).topics)
    assert side not in left and {k.uploads_topic, k.results_topic, k.dlq_topic} <= left
    # none named: the settings' three
    r = CliRunner().invoke(app, ["topics", "delete", "--yes"], env=env)
    assert r.exit_code == 0, r.output
    assert f"{k.uploads_topic}: deleted" in r.output and f"{k.dlq_topic}: deleted" in r.output
    left = set(a.list_topics(timeout=10).topics)
    assert not {k.uploads_topic, k.results_topic, k.dlq_topic} & left


def test_topics_delete_refuses_a_topic_a_consumer_group_reads_now(settings: Settings) -> None:
    """Issue 43: a topic a running consumer reads (here a fresh group subscribed to this test's
    results topic) is refused with the group named, --yes or not; --allow-live deletes it.
    (The shared default names are refused before any broker call: the unit tier's
    test_topics_delete_refuses_the_shared_default_topics_without_allow_live.)"""
    import time

    from streams.kafka import admin, consumer

    env = settings_env(settings)
    k = settings.kafka
    group = f"{k.group_id}-reader"
    c = consumer(k, group)
    try:
        c.subscribe([k.results_topic])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment(), "the reader got no partition in 30 s"
        r = CliRunner().invoke(app, ["topics", "delete", k.results_topic, "--yes"],
                               env={**env, "COLUMNS": "400"})
        assert r.exit_code == 2, r.output
        assert f"{k.results_topic} is read now by consumer group(s) {group}" in r.output
        assert k.results_topic in admin(k).list_topics(timeout=10).topics
        r = CliRunner().invoke(app, ["topics", "delete", k.results_topic, "--yes",
                                     "--allow-live"], env=env)
        assert r.exit_code == 0 and r.output == f"{k.results_topic}: deleted\n", r.output
    finally:
        c.close()
