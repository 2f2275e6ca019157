"""Usage errors of the stream commands, caught before any connection (unit tier)."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_worker_port_in_use_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second worker on a host with the same --http-port exits 2 with what to do, before any
    model loads or Kafka call (it was an uncaught OSError traceback)."""
    import socket

    from typer.testing import CliRunner

    from streams.cli import app

    monkeypatch.setenv("CARDSTREAM_S3__ACCESS_KEY", "unit")  # the store client is only built
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "unit-secret")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(app, ["worker", "--tasks", "card", "--processor", "card=sleep",
                                     "--http-port", str(port)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert f"cannot serve /ready, /live, /metrics on port {port}" in r.output
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)


def test_list_images_takes_regular_files_only(tmp_path: Path) -> None:
    """A folder or a FIFO named like an image is not an upload (reading a FIFO would block)."""
    import os

    from streams.produce import list_images

    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / "a.PNG").write_bytes(b"\x89PNG")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "adir.jpg").mkdir()
    os.mkfifo(tmp_path / "fifo.jpg")
    assert [p.name for p in list_images(tmp_path)] == ["a.PNG", "b.jpg"]


@pytest.mark.parametrize("since", ["junk", "1796300186"])
def test_results_refuses_a_bad_since_as_a_usage_error(since: str) -> None:
    from typer.testing import CliRunner

    from streams.cli import app

    r = CliRunner().invoke(app, ["results", "--since", since], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "--since" in r.output and "Traceback" not in r.output
    assert ("epoch milliseconds" in r.output)


@pytest.mark.parametrize(("args", "says"), [
    (["--task", "bogus"], "'bogus' is not one of 'card', 'id_photo'"),
    (["--task", "card", "--rate", "-1"], "--rate"),
    (["--task", "card", "--concurrency", "0"], "--concurrency"),
    (["--task", "card", "--count", "-3"], "--count"),
    (["--task", "card", "--max-seconds", "0"], "--max-seconds"),
    (["--task", "id_photo", "--options", '{"size":"bogus"}'],
     "--task/--options: options.size: Input should be 'one_inch'"),
    (["--task", "card", "--options", '{"size":"two_inch"}'],
     "--task/--options: options.size: Extra inputs are not permitted"),
    (["--task", "card", "--options", '{"size":'], "--options: not JSON: Expecting value"),
    # a fresh user's trial: a traceback (RecursionError), and a repeated key taken silently
    (["--task", "card", "--options", "[" * 5000 + "]" * 5000],
     "--options: not JSON: arrays or objects nested too deeply"),
    (["--task", "id_photo", "--options", '{"size":"one_inch","size":"two_inch"}'],
     '--options: not JSON: an object repeats the key "size"'),
    (["--task", "id_photo", "--options", "[]"], "--options: not a JSON object"),
])
def test_produce_refuses_bad_options_before_connecting(tmp_path, args: list[str],
                                                       says: str) -> None:
    from typer.testing import CliRunner

    from streams.cli import app

    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    r = CliRunner().invoke(app, ["produce", "--dir", str(tmp_path), *args], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert says in r.output and "Traceback" not in r.output and "pydantic.dev" not in r.output


def _console_script(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                    *args: str) -> tuple[int | str | None, str]:
    """Run the console script (``streams.cli:main``) in this process with ``args``: its exit
    status and the plain (not JSON) lines it wrote on stderr."""
    import sys

    from streams.cli import main

    monkeypatch.setattr(sys, "argv", ["cardstream", *args])
    with pytest.raises(SystemExit) as ei:
        main()
    err = capsys.readouterr().err
    return ei.value.code, "".join(x for x in err.splitlines(keepends=True)
                                  if not x.startswith("{"))


class _NoBroker:
    """A client call that no broker answers, as librdkafka reports it."""

    def __init__(self, *_a: object, **_kw: object) -> None:
        pass

    def __call__(self, *_a: object, **_kw: object) -> None:
        from confluent_kafka import KafkaError, KafkaException

        raise KafkaException(KafkaError(KafkaError._TRANSPORT,
                                        "Failed to get metadata: Local: Broker transport failure"))

    list_topics = __call__

    def close(self) -> None:
        pass


class _GroupsNotListed:
    """``AdminClient.list_consumer_groups`` with no broker answering: librdkafka does not raise,
    it returns the error beside the (no) groups."""

    def __call__(self, *_a: object, **_kw: object) -> object:
        from concurrent.futures import Future
        from types import SimpleNamespace

        from confluent_kafka import KafkaError

        fut: Future[object] = Future()
        fut.set_result(SimpleNamespace(valid=[], errors=[KafkaError(
            KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")]))
        return fut


_ANSWER = "no answer from 127.0.0.1:1 (_TRANSPORT: Failed to get metadata: Local: Broker " \
          "transport failure)\n"


@pytest.mark.parametrize(("args", "groups", "says"), [
    (["topics", "describe"], _NoBroker, "describing me.uploads, me.results, me.dlq: "),
    (["topics", "delete", "--yes"], _NoBroker, "listing the consumer groups: "),
    (["topics", "delete", "--yes"], _GroupsNotListed, "listing the consumer groups: "),
    (["topics", "delete", "--yes", "--allow-live"], _NoBroker, "listing the topics: "),
    (["status"], _NoBroker, "describing me.results: "),
    (["replay", "--from", "2026-12-01T00:00:00Z", "--to", "2026-12-02T00:00:00Z"], _NoBroker,
     "reading the offsets of me.uploads: "),
], ids=["topics-describe", "topics-delete", "topics-delete-groups-returned",
        "topics-delete-allow-live", "status", "replay"])
def test_a_broker_that_does_not_answer_is_one_plain_line_and_exit_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
        groups: type, says: str) -> None:
    """A reviewer's finding: with no broker at the bootstrap address these commands ended in a
    ``cimpl.KafkaException`` traceback, where the README promises one plain line. The client
    helpers (:mod:`streams.kafka`, :func:`streams.replay.offset_ranges`) raise
    ``BrokerUnavailable`` naming the request and the address; ``main`` prints it. The admin
    and consumer calls fail here at once, as librdkafka's do after their timeout (the real
    wait: ``tests/unit/test_logs.py``, ``results``).

    ``topics delete`` without ``--allow-live`` asks for the consumer groups first; librdkafka
    returns the listing's errors beside the groups it got instead of raising them, and the check
    took no groups for no reader (``_GroupsNotListed``): the deletion went on unchecked."""
    from confluent_kafka.admin import AdminClient

    import streams.replay
    import streams.worker

    for name, value in (("UPLOADS", "me.uploads"), ("RESULTS", "me.results"),
                        ("DLQ", "me.dlq")):
        monkeypatch.setenv(f"CARDSTREAM_KAFKA__{name}_TOPIC", value)
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_BACKFILL__NICE", "0")  # the replay would renice this process
    monkeypatch.setattr(AdminClient, "list_topics", _NoBroker())
    monkeypatch.setattr(AdminClient, "list_consumer_groups", groups())
    monkeypatch.setattr(streams.replay, "consumer", _NoBroker)
    monkeypatch.setattr(streams.worker, "build_processors", lambda *a, **kw: {})
    code, err = _console_script(monkeypatch, capsys, *args)
    assert (code, err) == (1, f"cardstream: BrokerUnavailable: {says}{_ANSWER}")


def test_a_refusal_is_a_kafka_set_up_error_and_no_answer_is_broker_unavailable() -> None:
    """:func:`streams.kafka.setup_error`: librdkafka's codes for no answer (nothing listening,
    a name that does not resolve, a timeout) are ``BrokerUnavailable``; a broker's refusal
    (authorization) stays a ``KafkaSetupError``; either way one line naming the request and
    the address."""
    from confluent_kafka import KafkaError, KafkaException

    from streams.errors import BrokerUnavailable
    from streams.kafka import setup_error

    for code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                 KafkaError._RESOLVE):
        e = setup_error(KafkaException(KafkaError(code, "down\n  here")), "listing", "h:9")
        assert isinstance(e, BrokerUnavailable)
        assert str(e) == f"listing: no answer from h:9 ({KafkaError(code).name()}: down here)"
    e = setup_error(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied")),
                    "describing t", "h:9")
    assert not isinstance(e, BrokerUnavailable)
    assert str(e) == "describing t at h:9 failed (TOPIC_AUTHORIZATION_FAILED: denied)"


def test_uploads_the_broker_did_not_take_are_one_plain_line_and_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``cardstream produce --inline`` (no claim check: the store is not needed) with no broker
    answering waited its 30 s flush, then ended in a ``RuntimeError`` traceback; it is
    ``DeliveryError`` naming the topic and the address, and how many of the uploads were not
    delivered. The flush answers here at once what it answers after its wait, and the check of
    the broker before any upload (integration: ``test_produce_with_no_broker_uploads_nothing``)
    is passed."""
    from streams.produce import UploadProducer

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_KAFKA__UPLOADS_TOPIC", "me.uploads")
    monkeypatch.setenv("CARDSTREAM_S3__ACCESS_KEY", "unit")
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "unit-secret")
    monkeypatch.setattr(UploadProducer, "check_broker", lambda self, timeout_s=10.0: None)
    monkeypatch.setattr(UploadProducer, "flush",
                        lambda self, timeout_s=30.0: ["1 messages not delivered within 30.0 s"])
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    code, err = _console_script(monkeypatch, capsys, "produce", "--dir", str(tmp_path),
                                "--task", "card", "--inline",
                                "--ids-file", str(tmp_path / "ids.txt"))
    ids = tmp_path / "ids.txt"
    assert (code, err) == (1, "cardstream: DeliveryError: 1 of 1 uploads not delivered to "
                              "me.uploads at 127.0.0.1:1: 1 messages not delivered within 30.0 s; "
                              f"{ids} lists the 0 others\n")
    assert ids.read_text() == ""  # none went through


def test_an_object_store_that_does_not_answer_is_one_plain_line_and_exit_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``cardstream fetch`` with nothing listening at the MinIO endpoint listed the bucket with
    the minio client itself and ended in a urllib3 ``MaxRetryError`` traceback; the listing now
    goes through :meth:`streams.storage.Storage.list_names` (its retries, then
    ``StorageError`` naming the call and the endpoint, never the secret key)."""
    monkeypatch.setenv("CARDSTREAM_S3__ENDPOINT", "127.0.0.1:1")
    monkeypatch.setenv("CARDSTREAM_S3__SECURE", "false")
    monkeypatch.setenv("CARDSTREAM_S3__ACCESS_KEY", "unit")
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "s3-secret-never-printed")
    monkeypatch.setenv("CARDSTREAM_S3__RETRY__ATTEMPTS", "1")
    code, err = _console_script(monkeypatch, capsys, "fetch", "u-1")
    assert code == 1, err
    assert err.startswith("cardstream: StorageError: LIST "), err
    assert err.endswith(" at 127.0.0.1:1 failed after 1 attempts: MaxRetryError "
                        "(NewConnectionError)\n"), err
    assert err.count("\n") == 1 and "s3-secret" not in err


def test_results_json_stops_on_a_tombstone_like_the_other_modes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``results --json`` over a record without a value (a tombstone anyone may write) ends with
    the codec's NOT_JSON error, as the table and --dead-letters modes do; it was an
    AttributeError traceback (found by mypy: ``Message.value()`` may be None)."""
    from typer.testing import CliRunner

    import streams.kafka
    from schemas.errors import ContractError
    from streams.cli import app
    from tests.doubles import Msg

    monkeypatch.setenv("CARDSTREAM_S3__ACCESS_KEY", "unit")
    monkeypatch.setenv("CARDSTREAM_S3__SECRET_KEY", "unit-secret")
    records = [[Msg(0, 0, "results", b'{"upload_id":"u1"}'), Msg(0, 1, "results", None)]]
    monkeypatch.setattr(streams.kafka, "read_topic", lambda *a, **kw: iter(records))
    r = CliRunner().invoke(app, ["results", "--json"])
    assert r.output == '{"upload_id":"u1"}\n'
    assert isinstance(r.exception, ContractError), r.exception
    assert r.exception.code == "NOT_JSON" and "tombstone" in str(r.exception)


def test_replay_refuses_a_model_version_that_is_not_a_key_segment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43's fresh-user trial: ``--model-version '../../evil'`` was accepted and the replay
    then looped on the store refusing its output keys. The CLI exits 2 naming the option, and
    :func:`streams.replay.run_replay` raises, both before any connection (the broker here is
    a closed port)."""
    from typer.testing import CliRunner

    from streams.cli import app
    from streams.errors import KeySegmentError
    from streams.replay import run_replay
    from streams.settings import load_settings

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    r = CliRunner().invoke(app, ["replay", "--from", "2026-12-01T00:00:00Z", "--to",
                                 "2026-12-02T00:00:00Z", "--model-version", "../../evil"],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "--model-version" in r.output and "object-key segment" in r.output
    with pytest.raises(KeySegmentError, match="model_version '../../evil'"):
        run_replay(load_settings(), 1_764_547_200_000, 1_764_633_600_000, {},
                   model_version="../../evil")


@pytest.mark.parametrize("args", [
    ["--yes"],  # the settings' topics, here the defaults (issue 43: deleted with --yes)
    ["me.results.replay1", "cardstream.dlq.v1", "--yes"],
    ["cardstream.shadow.v1"],  # refused before the confirm prompt too
])
def test_topics_delete_refuses_the_shared_default_topics_without_allow_live(
        monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    """Issue 43's fresh-user trial: ``cardstream topics delete --yes`` in a shell without its
    own topic names deleted the shared broker's live default topics (the warning was only in
    the prompt --yes skips). Refused with exit 2 naming them, before any broker call (the
    broker here is a closed port)."""
    from typer.testing import CliRunner

    from streams.cli import app

    for name in ("UPLOADS", "RESULTS", "DLQ"):
        monkeypatch.delenv(f"CARDSTREAM_KAFKA__{name}_TOPIC", raising=False)
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    r = CliRunner().invoke(app, ["topics", "delete", *args], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "the default topics" in r.output and "--allow-live" in r.output
    assert "deleted" not in r.output
    named = [a for a in args if a.startswith("cardstream.")] or [
        "cardstream.uploads.v1", "cardstream.results.v1", "cardstream.dlq.v1"]
    assert f"{', '.join(named)}: the default topics" in r.output, r.output


def test_a_file_name_that_is_not_utf8_gets_an_upload_id_and_its_line_in_the_ids_file(
        tmp_path: Path) -> None:
    """A fresh user's trial: ``cardstream produce --dir`` raised UnicodeEncodeError on a file
    named with bytes that are not UTF-8 (Python holds them as surrogate escapes), after part of
    the folder was sent. The id hashes the name's own bytes, and the ids file gets those bytes
    back."""
    import hashlib
    import os

    from streams.produce import Sent, make_upload_id, write_ids

    raw = b"caf\xe9_\xff\xfe.jpg"
    name = os.fsdecode(raw)
    uid = make_upload_id("p", name, 3)
    assert uid == f"p-000003-{hashlib.sha1(raw).hexdigest()[:8]}"
    assert make_upload_id("p", "card.jpg", 3) == (
        f"p-000003-{hashlib.sha1(b'card.jpg').hexdigest()[:8]}")  # UTF-8 names as before
    ids = tmp_path / "out" / "ids.txt"
    write_ids(ids, [Sent(uid, name, 0.0), Sent("p-000004-x", "ok.jpg", 0.0)])
    assert ids.read_bytes() == uid.encode() + b"\t" + raw + b"\np-000004-x\tok.jpg\n"


def _count_settings_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every build of the settings object (``Settings.__init__``, what
    :func:`streams.settings.load_settings` calls), refused ones included."""
    from streams.settings import Settings

    builds: list[int] = []
    build = Settings.__init__

    def counted(self: Settings, *a: object, **kw: object) -> None:
        builds.append(1)
        build(self, *a, **kw)

    monkeypatch.setattr(Settings, "__init__", counted)
    return builds


@pytest.mark.parametrize("args", [
    ["topics", "delete", "--yes"],  # refused after reading the settings: the default topics
    ["produce", "--task", "card", "--options", "{"],  # refused after reading them: not JSON
    ["results", "--json"],  # a whole run (no record), exit 0
], ids=["topics-delete", "produce", "results"])
def test_a_command_line_builds_the_settings_once(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 args: list[str]) -> None:
    """The project's rule, one settings object built at start-up and passed down: the root
    callback built the settings for the log level and every command built its own again (two
    builds per command line); the command now reads the callback's
    (:func:`streams.cli.common.settings`)."""
    from typer.testing import CliRunner

    import streams.kafka
    from streams.cli import app

    for name in ("UPLOADS", "RESULTS", "DLQ"):
        monkeypatch.delenv(f"CARDSTREAM_KAFKA__{name}_TOPIC", raising=False)
    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setattr(streams.kafka, "read_topic", lambda *a, **kw: iter([]))
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    if args[0] == "produce":
        args = ["produce", "--dir", str(tmp_path), *args[1:]]
    builds = _count_settings_builds(monkeypatch)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == (0 if args[0] == "results" else 2), r.output
    assert len(builds) == 1


def test_refused_settings_are_built_once_and_answered_by_the_command_that_reads_them(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """With a refused setting the callback's build fails and the command answers that error
    (one line, exit 2) without building the settings a second time; ``schemas``, which reads
    none, still runs."""
    from typer.testing import CliRunner

    from streams.cli import app

    monkeypatch.setenv("CARDSTREAM_LOG_LEVEL", "verbose")
    builds = _count_settings_builds(monkeypatch)
    code, err = _console_script(monkeypatch, capsys, "topics", "describe")
    assert code == 2 and len(builds) == 1
    assert err.startswith("cardstream: SettingsError: CARDSTREAM_LOG_LEVEL: Input should be "
                          "'DEBUG'") and err.count("\n") == 1, err
    example = Path(__file__).parents[2] / "schemas" / "examples" / "upload_event.valid.minimal.json"
    r = CliRunner().invoke(app, ["schemas", "validate", str(example)])
    assert (r.exit_code, r.output) == (0, f"{example}: ok (UploadEvent)\n")


@pytest.mark.parametrize(("args", "line"), [
    (["worker", "--max-batch", "abc"],
     "Invalid value for '--max-batch': Input should be a valid integer, unable to parse string "
     "as an integer. Try 'cardstream worker --help'."),
    (["produce", "--nope"], "No such option: --nope. Try 'cardstream produce --help'."),
    (["fetch"], "Missing argument 'upload_id'. Try 'cardstream fetch --help'."),
    (["topics", "bogus"], "No such command 'bogus'. Try 'cardstream topics --help'."),
    (["--nope"], "No such option: --nope. Try 'cardstream --help'."),
    # a command's own typer.BadParameter
    (["results", "--since", "junk"], "Invalid value for --since: 'junk' is neither ISO-8601 "
                                     "nor epoch milliseconds. Try 'cardstream results --help'."),
    # a value typer's own pydantic parsing refuses, without pydantic's "Value error, "
    (["produce", "--dir", ".", "--task", "nosuch"],
     "Invalid value for '--task': 'nosuch' is not one of 'card', 'id_photo'. Try 'cardstream "
     "produce --help'."),
], ids=["bad-int", "no-such-option", "missing-argument", "no-such-command", "root-option",
        "command-refusal", "choice"])
def test_a_usage_error_is_one_plain_line_and_exit_2(args: list[str], line: str) -> None:
    """A bad option or argument printed typer's usage, hint and boxed panel over five or more
    lines, where every other error that stops a command is one plain line: it is
    ``cardstream: UsageError: <click's message>. Try '<command> --help'.``, exit status 2
    (click's), at any terminal width."""
    from typer.testing import CliRunner

    from streams.cli import app

    r = CliRunner().invoke(app, args, env={"COLUMNS": "60"})
    assert (r.exit_code, r.output) == (2, f"cardstream: UsageError: {line}\n")


def test_help_and_a_group_without_a_command_still_show_the_help(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The console script answers a usage error with the same one line; ``--help`` and a group
    called without its command (``no_args_is_help``: click's usage "error" whose message is
    the help) still print typer's help, exit 0 and 2 as before."""
    from typer.testing import CliRunner

    from streams.cli import app

    code, err = _console_script(monkeypatch, capsys, "produce", "--nope")
    assert (code, err) == (2, "cardstream: UsageError: No such option: --nope. Try 'cardstream "
                              "produce --help'.\n")
    for args, status in ((["worker", "--help"], 0), (["topics"], 2), ([], 2)):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
        assert r.exit_code == status, (args, r.output)
        assert f"Usage: cardstream {' '.join(a for a in args if a != '--help')}".rstrip() \
            in r.output, r.output
        assert "UsageError" not in r.output and "Options" in r.output


@pytest.mark.parametrize("empty", [None, "CARDSTREAM_S3__ACCESS_KEY",
                                   "CARDSTREAM_S3__SECRET_KEY"],
                         ids=["unset", "empty-access-key", "empty-secret-key"])
def test_missing_store_credentials_are_one_line(tmp_path, monkeypatch, capsys, empty) -> None:
    """``cardstream produce`` without S3 credentials: one line naming the settings, exit 1,
    no traceback (the console script is ``streams.cli:main``). An empty
    ``CARDSTREAM_S3__SECRET_KEY=`` was the minio client's ValueError, a 51-line traceback, and
    an empty access key the store's AccessDenied after four attempts (a fresh user's trial):
    both are the unset credentials' line."""
    for k in ("CARDSTREAM_S3__ACCESS_KEY", "CARDSTREAM_S3__SECRET_KEY"):
        if empty is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, "" if k == empty else "unit-secret")
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    code, err = _console_script(monkeypatch, capsys, "produce", "--dir", str(tmp_path),
                                "--task", "card")
    assert code == 1
    assert err.startswith("cardstream: StorageError: set CARDSTREAM_S3__ACCESS_KEY"), err
    assert "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("which", ["--port", "--admin-port"])
def test_gateway_port_in_use_is_a_one_line_error(tmp_path, monkeypatch, capsys, which) -> None:
    """A second gateway on a host with the same port was an OSError traceback of 59 lines (a
    fresh user's trial); now one usage line naming the option, exit 2, as the worker's."""
    import socket

    keys = tmp_path / "keys"
    keys.write_text("unit:" + "k" * 40 + "\n")
    keys.chmod(0o600)
    for k, v in {"CARDSTREAM_S3__ACCESS_KEY": "unit", "CARDSTREAM_S3__SECRET_KEY": "unit-secret",
                 "CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1",
                 "CARDSTREAM_GATEWAY__API_KEYS_FILE": str(keys)}.items():
        monkeypatch.setenv(k, v)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        other = "--admin-port" if which == "--port" else "--port"
        code, err = _console_script(monkeypatch, capsys, "gateway", which, str(port), other, "0")
    assert code == 2, err
    assert err.startswith(f"cardstream: UsageError: Invalid value for {which} / "
                          "CARDSTREAM_GATEWAY__"), err
    assert f"cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_status_port_in_use_is_a_one_line_error(monkeypatch, capsys) -> None:
    """``cardstream status`` on a port another server holds was faust's 34 log lines and exit
    1 without a ``cardstream:`` line (a fresh user's trial): one usage line, exit 2, before any
    topic is made (the broker here answers nothing)."""
    import socket

    monkeypatch.setenv("CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, err = _console_script(monkeypatch, capsys, "status", "--web-port", str(port))
    assert code == 2, err
    assert err == (f"cardstream: UsageError: Invalid value for --web-port / "
                   f"CARDSTREAM_STATUS__WEB_PORT: cannot listen on 127.0.0.1:{port}: Address "
                   "already in use; give each status instance on a host its own port. Try "
                   "'cardstream status --help'.\n"), err
