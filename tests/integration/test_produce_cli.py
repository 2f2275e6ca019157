"""`cardstream produce --dir`: the folder's images go out as uploads; other files are named; with
the broker down or not taking the events, no claim-check object is left without its event."""

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


def test_produce_with_no_broker_uploads_nothing(settings: Settings, tmp_path: Path) -> None:
    """A fresh user's trial: ``cardstream produce`` with Kafka down uploaded every image to
    the uploads bucket, waited its 30 s flush, then failed delivery, leaving an object per
    image with no event. The broker is now asked first: ``BrokerUnavailable`` naming the
    address, and nothing uploaded."""
    files = write_images(tmp_path / "in", 3)
    env = {**settings_env(settings), "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    r = CliRunner().invoke(app, ["produce", "--dir", str(files[0].parent), "--task", "card",
                                 "--ids-file", str(tmp_path / "ids.txt")], env=env)
    assert r.exit_code == 1 and type(r.exception).__name__ == "BrokerUnavailable", r.exception
    assert str(r.exception).startswith(
        f"reading the metadata for {settings.kafka.uploads_topic}: no answer from 127.0.0.1:1 (")
    assert Storage(settings.s3).list_names(settings.s3.uploads_bucket, "", recursive=True) == []


def test_produce_to_a_topic_that_does_not_exist_uploads_nothing(settings: Settings,
                                                                tmp_path: Path) -> None:
    """A fresh user's trial: an uploads topic that does not exist cost an upload per image, a
    30 s flush and "not delivered within 30.0 s", which never named the topic. The metadata
    read before any upload now says so, and nothing is uploaded."""
    files = write_images(tmp_path / "in", 2)
    missing = f"{settings.kafka.uploads_topic}.missing"
    env = {**settings_env(settings), "CARDSTREAM_KAFKA__UPLOADS_TOPIC": missing}
    r = CliRunner().invoke(app, ["produce", "--dir", str(files[0].parent), "--task", "card",
                                 "--ids-file", str(tmp_path / "ids.txt")], env=env)
    assert r.exit_code == 1 and type(r.exception).__name__ == "KafkaSetupError", r.exception
    assert str(r.exception).startswith(
        f"topic {missing} is not at {settings.kafka.bootstrap_servers} "), r.exception
    assert Storage(settings.s3).list_names(settings.s3.uploads_bucket, "", recursive=True) == []


def test_produce_deletes_the_claim_checks_of_the_uploads_it_did_not_deliver(
        settings: Settings, tmp_path: Path) -> None:
    """Delivery failing after the uploads (here a topic whose records may hold 64 bytes, the
    broker refusing each event): the claim-check objects of the undelivered events are deleted
    and the error says how many were not delivered; the objects of an earlier run's delivered
    uploads stay. Before, the three objects stayed too."""
    from confluent_kafka.admin import NewTopic

    from streams.kafka import admin, create_topics

    folder = tmp_path / "in"
    write_images(folder, 3)
    env = settings_env(settings)
    r = CliRunner().invoke(app, ["produce", "--dir", str(folder), "--task", "card", "--count",
                                 "2", "--ids-file", str(tmp_path / "ids.txt")], env=env)
    assert r.exit_code == 0, r.output
    bucket = settings.s3.uploads_bucket
    delivered = sorted(Storage(settings.s3).list_names(bucket, "", recursive=True))
    assert len(delivered) == 2
    small = f"{settings.kafka.uploads_topic}.small"
    create_topics(admin(settings.kafka),
                  [NewTopic(small, 1, 1, config={"max.message.bytes": "64"})])
    r = CliRunner().invoke(app, ["produce", "--dir", str(folder), "--task", "card", "--ids-file",
                                 str(tmp_path / "ids2.txt")],
                           env={**env, "CARDSTREAM_KAFKA__UPLOADS_TOPIC": small,
                                "CARDSTREAM_KAFKA__CONFIG": '{"message.timeout.ms": 2000}'})
    assert r.exit_code == 1 and type(r.exception).__name__ == "DeliveryError", r.exception
    said = str(r.exception)
    assert said.startswith(f"3 of 3 uploads not delivered to {small} at "
                           f"{settings.kafka.bootstrap_servers}: "), said
    ids2 = tmp_path / "ids2.txt"
    assert said.endswith(f"; their 3 claim-check objects deleted; {ids2} lists the 0 others"), said
    assert ids2.read_text() == ""  # none went through (an earlier run's ids would mislead)
    assert sorted(Storage(settings.s3).list_names(bucket, "", recursive=True)) == delivered


def test_fetch_of_an_upload_without_outputs_is_one_error(settings: Settings,
                                                          tmp_path: Path) -> None:
    """``cardstream fetch`` of an upload with no output object printed a bare line of its own
    and exited 1 (a fresh user's trial); it is now the project's error, which the console
    script prints as its one ``cardstream: ObjectNotFound: ...`` line, exit 1."""
    r = CliRunner().invoke(app, ["fetch", "no-such-upload", "--out", str(tmp_path)],
                           env=settings_env(settings))
    assert r.exit_code == 1 and type(r.exception).__name__ == "ObjectNotFound", r.output
    assert str(r.exception) == (f"no output objects for no-such-upload in "
                                f"{settings.s3.results_bucket} (not processed yet, rejected, "
                                "or expired)")
    assert list(tmp_path.iterdir()) == []
