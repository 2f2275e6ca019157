"""Status app without a broker: settings, topic specs, table updates (idempotent), expiry, and the
faust app's wiring (read_committed consumer, changelog names, routes)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from schemas import codec
from schemas.models import VerificationResult
from streams import status_stats as S
from streams.settings import Settings
from streams.status_app import (
    ReadCommittedConsumer,
    StatusApp,
    StatusSettings,
    build_app,
    changelog_topics,
    load_status_settings,
    status_topic_specs,
)

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "schemas" / "examples"


def _result(name: str, upload_id: str) -> bytes:
    r = codec.decode_result((EX / name).read_bytes())
    return codec.encode_result(r.model_copy(update={"upload_id": upload_id}))[1]


def _app(**kw) -> StatusApp:
    return StatusApp(app=None, verdicts={}, stats={}, settings=Settings(),
                     status=StatusSettings(**kw), partitions=3)


def test_settings_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    d = StatusSettings()
    assert (d.web_port, d.window_s, d.retention_s,
            d.window_keep_s) == (6066, 60, 7 * 86400.0, 86400.0)
    with pytest.raises(ValidationError):
        StatusSettings(web_port=0)
    with pytest.raises(ValidationError):
        d.web_port = 1  # frozen
    monkeypatch.setenv("CARDSTREAM_STATUS__WEB_PORT", "7001")
    monkeypatch.setenv("CARDSTREAM_STATUS__APP_ID", "st-env")
    s = load_status_settings()
    assert (s.web_port, s.app_id) == (7001, "st-env")
    s = load_status_settings(web_port=7002, app_id=None)
    assert (s.web_port, s.app_id) == (7002, "st-env")


def test_topic_specs_are_explicit() -> None:
    st = StatusSettings(app_id="st-x", retention_s=3600, window_s=60, window_keep_s=7200)
    specs = {t.topic: t for t in status_topic_specs(st, 6)}
    assert set(specs) == set(changelog_topics(st).values()) == {"st-x-verdicts-changelog",
                                                                 "st-x-stats-changelog"}
    for t in specs.values():
        assert (t.num_partitions, t.replication_factor) == (6, 1)
        assert t.config["cleanup.policy"] == "compact,delete"
    assert specs["st-x-verdicts-changelog"].config["retention.ms"] == "3600000"
    assert specs["st-x-stats-changelog"].config["retention.ms"] == str((7200 + 60) * 1000)


def test_on_result_updates_tables_once_per_offset() -> None:
    sa = _app()
    now = int(time.time() * 1000)
    recs = [("verification_result.valid.card_accepted.json", "u1", 0, 10),
            ("verification_result.valid.card_rejected_no_card.json", "u2", 0, 11),
            ("verification_result.valid.failed_object_not_found.json", "u3", 1, 4)]
    for _ in range(2):  # the second pass is a re-read after a crash: nothing changes
        for name, uid, p, off in recs:
            sa.on_result(_result(name, uid), p, off, now)
        snapshot = (dict(sa.verdicts), dict(sa.stats))
    assert snapshot == (dict(sa.verdicts), dict(sa.stats))
    assert set(sa.verdicts) == {b"u1", b"u2", b"u3"}
    assert (sa.verdicts[b"u2"]["status"] == "rejected" and sa.verdicts[b"u2"]["reasons"]
            == ["NO_CARD"])
    start = S.window_start_ms(now, 60)
    w0 = sa.stats[S.stats_key("card", 0, start)]
    assert (w0["count"], w0["by_status"],
            w0["last_offset"]) == (2, {"accepted": 1, "rejected": 1}, 11)
    assert sa.stats[S.stats_key("card", 1, start)]["by_reason"] == {"OBJECT_NOT_FOUND": 1}
    # a later result for the same upload (a replay) replaces the verdict and is counted
    sa.on_result(_result("verification_result.valid.card_accepted.json", "u2"), 0, 12, now)
    assert sa.verdicts[b"u2"]["status"] == "accepted"
    assert sa.stats[S.stats_key("card", 0, start)]["count"] == 3


def test_bad_values_and_expired_results_are_skipped() -> None:
    sa = _app(retention_s=3600, window_keep_s=600)
    now = int(time.time() * 1000)
    sa.on_result(b"{not json", 0, 1, now)
    sa.on_result(None, 0, 2, now)
    sa.on_result(_result("verification_result.valid.card_accepted.json", "old"), 0, 3,
                 now - 7200_000)
    assert sa.verdicts == {} and sa.stats == {}
    sa.on_result(_result("verification_result.valid.card_accepted.json", "mid"), 0, 4,
                 now - 1800_000)
    assert set(sa.verdicts) == {b"mid"} and sa.stats == {}  # verdict kept 1 h, window only 10 min


def test_sweep_deletes_only_expired_entries_of_its_partition() -> None:
    """The memory store's sweep (RocksDB's TTL does the verdicts' part on disk)."""
    sa = _app(retention_s=600, window_keep_s=3000, window_s=60, store="memory://")
    base = S.window_start_ms(int(time.time() * 1000), 60)
    for uid, p, ts in (("a", 0, base - 480_000), ("b", 0, base - 59_999), ("c", 1, base - 480_000)):
        sa.on_result(_result("verification_result.valid.card_accepted.json", uid), p, 1, ts)
    assert len(sa.verdicts) == 3 and len(sa.stats) == 3
    # 200 s after the window: a and c (680 s old) are past the verdict retention, no window is
    assert sa.sweep(0, base + 200_000) == (1, 0)
    assert set(sa.verdicts) == {b"b", b"c"} and len(sa.stats) == 3
    # later still: b's verdict and both windows of partition 0 are past their retention
    assert sa.sweep(0, base + 3_100_000) == (1, 2)
    assert set(sa.verdicts) == {b"c"}
    assert {S.parse_stats_key(k)[1] for k in sa.stats} == {1}
    assert sa.sweep(1, base + 3_100_000) == (1, 1)
    assert sa.verdicts == {} and sa.stats == {}


def test_faust_app_wiring() -> None:
    async def build() -> tuple:
        st = StatusSettings(app_id="st-unit", web_port=16999)
        sa = build_app(Settings(), st, partitions=3)
        app = sa.app
        assert app.transport.Consumer is ReadCommittedConsumer
        thread = app.consumer._new_consumer_thread()
        c = thread._create_worker_consumer(app.transport)
        assert c._isolation_level == "read_committed"
        names = {t.name: t.changelog_topic.get_topic_name() for t in (sa.verdicts, sa.stats)}
        assert names == changelog_topics(st)
        assert sa.verdicts.partitions == sa.stats.partitions == 3
        assert app.conf.producer_partitioner is S.crc32_partitioner
        assert app.conf.topic_replication_factor == 1 and app.conf.topic_disable_leader
        return {r.resource.canonical for r in app.web.web_app.router.routes()}

    pages = asyncio.run(build())
    assert {"/uploads/{upload_id}", "/stats", "/stats/local", "/healthz"} <= pages


def test_result_examples_decode() -> None:
    # guard: the fixtures above are real v1 results
    value = (EX / "verification_result.valid.card_accepted.json").read_bytes()
    assert isinstance(codec.decode_result(value), VerificationResult)


def _no_walk():
    raise AssertionError("the whole verdict table was read")


class _Db:
    def __init__(self, n: int) -> None:
        self.n = n

    def property_int_value(self, name: str) -> int:
        assert name == "rocksdb.estimate-num-keys"
        return self.n


def test_on_rocksdb_neither_the_sweep_nor_healthz_reads_every_verdict() -> None:
    """Issue 43: ``/healthz`` counted the verdicts by reading each one, and the sweep read them
    all every ``sweep_interval_s``; with millions held (a rush for 7 days) both stalled the event
    loop. On RocksDB the count is the partitions' key estimates and the TTL expires verdicts."""
    from types import SimpleNamespace

    from streams.status_app import ROCKSDB_OPTIONS, store_options

    sa = _app(retention_s=600, window_keep_s=3000, window_s=60)
    assert sa.status.store == "rocksdb://"
    sa.verdicts = SimpleNamespace(data=SimpleNamespace(_dbs_for_actives=lambda: [_Db(5), _Db(7)]),
                                  items=_no_walk)
    assert sa.held_verdicts() == 12
    assert sa.sweep(0, int(time.time() * 1000)) == (0, 0)
    assert store_options(sa.status, 600.5) == {**ROCKSDB_OPTIONS, "ttl": 601}
    assert store_options(StatusSettings(store="memory://"), 600) is None
    mem = _app(store="memory://")
    mem.verdicts = SimpleNamespace(data={b"a": 1, b"b": 2})
    assert mem.held_verdicts() == 2
