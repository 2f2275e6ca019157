"""Live verification status and stats: a faust-streaming app over the results topic.

One process (``cardstream status``) per instance; several instances share the work as one consumer
group (the faust app id). Each instance:

* consumes ``cardstream.results.v1`` with ``isolation.level=read_committed`` (a faust transport
  whose aiokafka consumer is built read_committed, :class:`ReadCommittedTransport`), so it only
  ever sees results of committed worker transactions. Processing is faust's at-least-once; every
  table value carries the offset of the last result applied to it (``result.offset`` of a verdict,
  ``last_offset`` of a window) and a result at or below it is not applied again, so results
  re-read after a crash are never counted twice (each value is one changelog record, written
  atomically; a key is only ever written from one partition, in offset order). faust's
  ``exactly_once`` guarantee would also give read_committed, but its transactions assume that a
  record is sent to the partition it came from and it crashes on a rebalance
  (``last_stable_offset`` is -1 for a partition not yet fetched), so it is not used;
* keeps the table ``verdicts``: ``upload_id -> latest verdict summary`` (see
  :func:`streams.status_stats.verdict_summary`), changelog topic ``{app_id}-verdicts-changelog``;
* keeps the table ``stats``: ``{task}|{partition}|{window_start_ms} -> window aggregate`` over
  tumbling windows of ``window_s`` seconds (event time = the result record's Kafka timestamp),
  changelog ``{app_id}-stats-changelog``;
* serves ``GET /uploads/{upload_id}``, ``GET /stats?task=&window=&last=``, ``GET /healthz``
  (JSON shapes: ``schemas/status_*.v1.schema.json``) on faust's aiohttp web server; every path
  but ``/healthz`` (faust's own ``/`` and ``/router/*`` included) wants
  ``Authorization: Bearer <api_token>`` when a token is set (401 ``UNAUTHORIZED`` otherwise,
  :func:`auth_middleware`), and the token is required unless the server binds a loopback
  address (:class:`~streams.status_settings.StatusSettings`). ``/healthz`` reads no verdict:
  its count comes from the store's size (:meth:`StatusApp.held_verdicts`).

Kafka: faust's aiokafka clients get TLS and SASL from the same settings as the workers
(:func:`faust_credentials`: ``security_protocol``, ``sasl_*``, ``ca_file``, client certificate),
and the confluent-kafka admin calls (changelog topics) from :func:`streams.kafka.admin`.

Partitioning: both tables are written to the changelog partition of the result they came from, so
they are partitioned exactly like the results topic and a restarted or re-balanced instance
recovers the partitions it is given from the changelog. A ``/uploads/{id}`` request reaching an
instance that does not own the id's partition is proxied to the owner (faust's router: the
assignor's partition -> host map, keyed with the same CRC-32 partitioner the worker's librdkafka
producer uses, :func:`~streams.status_stats.crc32_partitioner`). ``/stats`` gathers the window
aggregates of every partition from every instance (``/stats/local``) and merges them (exact:
counts and fixed histogram buckets add).

Store: ``rocksdb://`` by default (the tables in RocksDB files under ``data_dir``, each partition's
database with :data:`ROCKSDB_OPTIONS`' few MiB of memory), so 7 days of verdicts at a rush live on
disk; ``memory://`` holds every verdict in memory (``python -m benchmarks.status_capacity``
measures both).

Expiry: a verdict older than ``retention_s`` (by its record timestamp) answers 404 at once. With
RocksDB it leaves the disk by the database's TTL (dropped at compaction once written
``retention_s`` ago); in memory it is deleted (tombstone in the changelog) by a sweep that runs
inside the stream of its partition at most every ``sweep_interval_s``. Windows older than
``window_keep_s`` are swept in both (a few thousand keys). The changelog topics are
``cleanup.policy=compact,delete`` with ``retention.ms`` = the retention, so the broker drops old
records too and a restart never resurrects an expired entry.

Topics: the changelogs are created before start by :func:`create_status_topics` with explicit
partitions (= the results topic's), replication factor and retention (the broker has
``auto.create.topics.enable=false``); faust's own declaration then finds them existing. The
assignor leader topic is disabled (``topic_disable_leader``); there is no repartition topic (both
tables are keyed within the results partitioning).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import aiohttp.web
import faust
from confluent_kafka.admin import NewTopic
from faust.auth import SASLCredentials, SSLCredentials
from faust.exceptions import SameNode
from faust.tables.manager import TableManager
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.web import Request, Response, View
from faust.web.drivers.aiohttp import Web as AiohttpWeb
from faust.web.exceptions import ServiceUnavailable
from yarl import URL

from processors import registry
from schemas import codec
from schemas import formats as F
from schemas.errors import ContractError
from streams import status_stats as S
from streams.errors import KafkaSetupError
from streams.kafka import admin, create_topics, describe_topics
from streams.logs import log
from streams.settings import KafkaSettings, Settings
from streams.status_settings import StatusSettings, load_status_settings

#: Version of the HTTP answers (``schema_version`` field of ``schemas/status_*.v1.schema.json``).
STATUS_SCHEMA_VERSION = 1


def ssl_context(k: KafkaSettings) -> ssl.SSLContext:
    """A client TLS context for ``k``: the brokers' certificates checked against ``k.ca_file``
    (else the system's trust store) with host name verification, the client certificate when
    set."""
    ctx = ssl.create_default_context(cafile=str(k.ca_file) if k.ca_file else None)
    if k.cert_file is not None and k.key_file is not None:
        ctx.load_cert_chain(str(k.cert_file), str(k.key_file),
                            k.key_password.get_secret_value() if k.key_password else None)
    return ctx


def faust_credentials(k: KafkaSettings) -> SASLCredentials | SSLCredentials | None:
    """faust's ``broker_credentials`` for ``k.security_protocol``: ``None`` for PLAINTEXT,
    :class:`SSLCredentials` for SSL, :class:`SASLCredentials` (user, password, mechanism; with a
    TLS context for SASL_SSL) for SASL_*."""
    if k.security_protocol == "PLAINTEXT":
        return None
    ctx = ssl_context(k) if k.tls else None
    if k.security_protocol == "SSL":
        return SSLCredentials(ctx)
    return SASLCredentials(username=k.sasl_username, mechanism=k.sasl_mechanism, ssl_context=ctx,
                           password=k.sasl_password.get_secret_value() if k.sasl_password else None)


def authorized(status: StatusSettings, header: str | None) -> bool:
    """True when no ``api_token`` is set, or ``header`` (the request's ``Authorization``) is
    ``Bearer <api_token>`` (compared in constant time)."""
    if status.api_token is None:
        return True
    want = f"Bearer {status.api_token.get_secret_value()}".encode()
    return hmac.compare_digest((header or "").encode(), want)


def changelog_topics(status: StatusSettings) -> dict[str, str]:
    """Table name -> its changelog topic name (faust's ``{app_id}-{table}-changelog``)."""
    return {t: f"{status.app_id}-{t}-changelog" for t in ("verdicts", "stats")}


def results_partitions(k: KafkaSettings) -> int:
    """Partition count of the results topic.

    Raises:
        KafkaSetupError: the results topic does not exist.
    """
    row = describe_topics(admin(k), [k.results_topic])[0]
    if not row["exists"]:
        raise KafkaSetupError(f"results topic {k.results_topic} does not exist")
    return int(row["partitions"])


def status_topic_specs(status: StatusSettings, partitions: int) -> list[NewTopic]:
    """The changelog topics with explicit partitions, replication and retention (ms).

    ``cleanup.policy=compact,delete``: the latest value per key is kept until it is older than
    the retention (verdicts: ``retention_s``; stats: ``window_keep_s`` + one window).
    """
    names = changelog_topics(status)
    keep = {"verdicts": status.retention_s, "stats": status.window_keep_s + status.window_s}
    return [NewTopic(names[t], partitions, status.replication_factor,
                     config={"cleanup.policy": "compact,delete",
                             "retention.ms": str(int(keep[t] * 1000))})
            for t in ("verdicts", "stats")]


def create_status_topics(k: KafkaSettings, status: StatusSettings) -> dict[str, str]:
    """Create the status app's changelog topics (existing ones are left as they are).

    Returns:
        topic -> ``created`` | ``exists``.

    Raises:
        KafkaSetupError: the results topic is missing or a creation failed.
    """
    return create_topics(admin(k), status_topic_specs(status, results_partitions(k)))


class _ReadCommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        c = super()._create_worker_consumer(transport)
        # faust sets read_committed only with processing_guarantee="exactly_once"; aiokafka reads
        # this attribute when the consumer starts (AIOKafkaConsumer.start -> Fetcher).
        if getattr(c, "_isolation_level", None) is None:
            raise KafkaSetupError("aiokafka consumer has no _isolation_level: cannot set "
                                  "read_committed")
        c._isolation_level = "read_committed"
        return c


class ReadCommittedConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer with ``isolation.level=read_committed`` (at-least-once
    processing)."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class ReadCommittedTransport(faust_aiokafka.Transport):
    """faust's ``kafka://`` transport whose consumer reads committed records only."""

    Consumer = ReadCommittedConsumer


class StatusFaustApp(faust.App):
    """``faust.App`` using :class:`ReadCommittedTransport` for its consumer."""

    def _new_transport(self) -> Any:
        return ReadCommittedTransport(self.conf.broker_consumer, self)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per stdlib log record (faust's and aiokafka's own logs), like the structlog
    events of :mod:`streams.logs`: ``timestamp`` (RFC 3339 UTC), ``level``, ``logger``,
    ``event``."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (exception text included when present)."""
        out = {"timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
               "level": record.levelname.lower(), "logger": record.name,
               "event": record.getMessage().strip()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def _logging_config(level: str) -> dict[str, Any]:
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {"()": JsonLogFormatter}},
            "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json",
                                     "stream": "ext://sys.stderr"}},
            "root": {"level": level.upper(), "handlers": ["default"]}}


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class StatusApp:
    """The faust app and its tables (built by :func:`build_app`).

    Attributes:
        app: the ``faust.App``.
        verdicts: table ``upload_id`` (UTF-8 bytes) -> verdict summary (JSON object).
        stats: table :func:`~streams.status_stats.stats_key` -> window aggregate (JSON object).
        partitions: partitions of the results topic (and of both changelogs).
    """

    app: faust.App
    verdicts: Any
    stats: Any
    settings: Settings
    status: StatusSettings
    partitions: int
    started_ms: int = field(default_factory=_now_ms)
    _last_sweep: dict[int, float] = field(default_factory=dict)

    # -- queries answered from this instance's partitions -----------------------------------

    def active_partitions(self) -> list[int]:
        """Results-topic partitions this instance owns now (sorted)."""
        topic = self.settings.kafka.results_topic
        try:
            tps = self.app.assignor.assigned_actives()
        except Exception:  # noqa: BLE001 (not assigned yet)
            return []
        return sorted(tp.partition for tp in tps if tp.topic == topic)

    def local_verdict(self, upload_id: str) -> dict[str, Any] | None:
        """The verdict summary of ``upload_id`` if this instance holds it and it is not expired."""
        v = self.verdicts.get(upload_id.encode())
        if v is None or S.expired(v, _now_ms(), self.status.retention_s):
            return None
        return v

    def held_verdicts(self) -> int:
        """Verdicts held for this instance's partitions, without reading them (``/healthz``):
        the memory store's size (faust drops other partitions' keys at recovery), or the sum
        of RocksDB's ``rocksdb.estimate-num-keys`` over the partitions' databases (an estimate:
        overwritten and expired keys count until a compaction)."""
        store = self.verdicts.data
        dbs = getattr(store, "_dbs_for_actives", None)  # faust's RocksDB store (no public API)
        if dbs is None:
            return len(store)
        return sum(int(db.property_int_value("rocksdb.estimate-num-keys") or 0) for db in dbs())

    def local_windows(self, task: str, since_ms: int) -> tuple[list[int], list[dict[str, Any]]]:
        """Raw window aggregates of ``task`` starting at or after ``since_ms`` in this instance's
        active partitions. Returns ``(partitions, aggregates)``."""
        parts = self.active_partitions()
        mine = set(parts)
        out = []
        for k, v in list(self.stats.items()):
            t, p, start = S.parse_stats_key(k)
            if t == task and p in mine and start >= since_ms:
                out.append(v)
        return parts, out

    # -- stream ---------------------------------------------------------------------------

    def on_result(self, value: bytes | None, partition: int, offset: int,
                  timestamp_ms: int) -> None:
        """Apply one result record (inside the stream of its partition): update both tables.

        A result already applied (offset at or below the stored one) changes nothing.
        """
        try:
            r = codec.decode_result(value)
        except ContractError as e:
            log.warning("status_bad_result", partition=partition, offset=offset, code=e.code,
                        path=e.path)
            return
        now = _now_ms()
        uid = r.upload_id.encode()
        old = self.verdicts.get(uid)
        if now - timestamp_ms > self.status.retention_s * 1000:
            pass  # expired already: never (re)created
        elif (old is None or old["result"]["partition"] != partition
              or old["result"]["offset"] < offset):
            self.verdicts[uid] = S.verdict_summary(r, partition, offset, timestamp_ms)
        size = self.status.window_s
        start = S.window_start_ms(timestamp_ms, size)
        key = S.stats_key(str(r.task), partition, start)
        agg = self.stats.get(key)
        kept = start + size * 1000 >= now - self.status.window_keep_s * 1000
        if kept and not S.applied(agg, offset):
            self.stats[key] = S.add_result(agg or S.new_window(start, size), str(r.status),
                                           [str(x) for x in r.reasons], r.timings.total_ms,
                                           r.timings.batch_size, offset)
        self._maybe_sweep(partition)

    def _maybe_sweep(self, partition: int) -> None:
        now = time.monotonic()
        if now - self._last_sweep.get(partition, 0.0) < self.status.sweep_interval_s:
            return
        self._last_sweep[partition] = now
        deleted = self.sweep(partition, _now_ms())
        if any(deleted):
            log.info("status_sweep", partition=partition, verdicts=deleted[0], windows=deleted[1])

    def sweep(self, partition: int, now_ms: int) -> tuple[int, int]:
        """Delete expired verdicts and windows of ``partition`` (must run inside that partition's
        stream, so the tombstones go to the right changelog partition). Returns the counts."""
        nv = nw = 0
        if not on_disk(self.status):  # RocksDB's TTL drops them without reading every verdict
            for k, v in list(self.verdicts.items()):
                if v["result"]["partition"] == partition and S.expired(v, now_ms,
                                                                       self.status.retention_s):
                    del self.verdicts[k]
                    nv += 1
        keep_from = now_ms - self.status.window_keep_s * 1000
        for k in list(self.stats.keys()):
            _, p, start = S.parse_stats_key(k)
            if p == partition and start + self.status.window_s * 1000 < keep_from:
                del self.stats[k]
                nw += 1
        return nv, nw

    # -- stats query ----------------------------------------------------------------------

    async def gather_windows(self, task: str,
                             since_ms: int) -> tuple[set[int], list[dict[str, Any]]]:
        """Window aggregates of ``task`` from every instance (this one and, through
        ``/stats/local``, the others). Returns ``(partitions answered, aggregates)``."""
        parts, aggs = self.local_windows(task, since_ms)
        answered = set(parts)
        me = (self.status.web_host, self.status.web_port)
        hosts: set[str] = set()
        with contextlib.suppress(Exception):  # no assignment yet: answer with what we hold
            hosts = {h for h in self.app.router.table_metadata(self.stats.name) if _ident(h) != me}
        timeout = aiohttp.ClientTimeout(total=self.status.query_timeout_s)
        token = self.status.api_token
        auth = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
        for h in sorted(hosts):
            url = f"{h.rstrip('/')}/stats/local?task={task}&since={since_ms}"
            try:
                async with self.app.http_client.get(url, timeout=timeout, headers=auth) as resp:
                    body = await resp.json()
                answered |= set(body["partitions"])
                aggs.extend(body["windows"])
            except Exception as e:  # noqa: BLE001 (a peer being down shows as missing partitions)
                log.warning("status_peer_failed", peer=h, error=type(e).__name__)
        return answered, aggs


ROCKSDB_OPTIONS: dict[str, int] = {"write_buffer_size": 4 * 1024 * 1024,
                                   "max_write_buffer_number": 2,
                                   "block_cache_size": 8 * 1024 * 1024,
                                   "target_file_size_base": 16 * 1024 * 1024}
"""faust's RocksDB options of each table partition's database: at most 2 memtables of 4 MiB and
an 8 MiB block cache, 16 MiB per partition and table (faust's defaults, 3 x 64 MiB memtables and
a 2 GiB cache per database, do not fit the chart's 1 GiB)."""


def on_disk(status: StatusSettings) -> bool:
    """Whether the tables live in RocksDB (``rocksdb://``) rather than in memory."""
    return status.store.startswith("rocksdb:")


def store_options(status: StatusSettings, ttl_s: float) -> dict[str, int] | None:
    """A table's faust store options: for RocksDB :data:`ROCKSDB_OPTIONS` and a TTL of
    ``ttl_s`` (RocksDB drops a key at compaction once it was written that long ago, so expired
    verdicts leave the disk without a sweep reading every one); None for the memory store."""
    return {**ROCKSDB_OPTIONS, "ttl": math.ceil(ttl_s)} if on_disk(status) else None


def _ident(url: str) -> tuple[str, int]:
    u = URL(url)
    return (u.host or "", int(u.port or 80))


def _error(view: View, status: int, code: str, message: str) -> Response:
    return view.json({"schema_version": STATUS_SCHEMA_VERSION, "error": code, "message": message},
                     status=status)


#: paths answered without the bearer token: the probes' (no upload ids, no topology)
OPEN_PATHS = frozenset({"/healthz"})


def auth_middleware(status: StatusSettings) -> Any:
    """An aiohttp middleware answering 401 ``UNAUTHORIZED`` (``WWW-Authenticate: Bearer``) to
    every request but :data:`OPEN_PATHS` that lacks ``Authorization: Bearer <api_token>``: the
    app's own views and faust's (``/``, ``/router/``, ``/router/{key}/``: they list instances,
    topics and partitions; issue 43), whatever faust adds."""

    @aiohttp.web.middleware
    async def check(request: aiohttp.web.Request, handler: Any) -> aiohttp.web.StreamResponse:
        if request.path in OPEN_PATHS or authorized(status, request.headers.get("Authorization")):
            return await handler(request)
        return aiohttp.web.json_response(
            {"schema_version": STATUS_SCHEMA_VERSION, "error": "UNAUTHORIZED",
             "message": "send Authorization: Bearer <token>"}, status=401,
            headers={"WWW-Authenticate": 'Bearer realm="cardstream-status"'})

    return check


def build_app(settings: Settings, status: StatusSettings,
              partitions: int | None = None) -> StatusApp:
    """Build the faust app (not started).

    Args:
        settings: the process settings (Kafka connection, results topic).
        status: the status app's settings.
        partitions: partitions of the results topic (default: asked from the broker).

    Raises:
        KafkaSetupError: the results topic does not exist.
    """
    k = settings.kafka
    n = partitions or results_partitions(k)
    app = StatusFaustApp(
        status.app_id,
        broker=[f"kafka://{h.strip()}" for h in k.bootstrap_servers.split(",")],
        store=status.store,
        producer_partitioner=S.crc32_partitioner,
        topic_partitions=n,
        topic_replication_factor=status.replication_factor,
        topic_disable_leader=True,
        table_standby_replicas=0,
        broker_credentials=faust_credentials(k),
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=status.commit_interval_s,
        broker_session_timeout=status.session_timeout_s,
        broker_heartbeat_interval=min(3.0, status.session_timeout_s / 3),
        web_bind=status.web_bind,
        web_host=status.web_host,
        web_port=status.web_port,
        canonical_url=f"http://{status.web_host}:{status.web_port}",
        web_stats_enabled=False, web_graph_enabled=False, web_tables_enabled=False,
        web_metrics_enabled=False,
        datadir=str(status.data_dir),
    )
    results = app.topic(k.results_topic, key_serializer="raw", value_serializer="raw",
                        partitions=n)
    verdicts = app.Table("verdicts", default=None, key_type=bytes, partitions=n,
                         help="upload_id -> latest verdict summary",
                         options=store_options(status, status.retention_s))
    stats = app.Table("stats", default=None, key_type=bytes, partitions=n,
                      help="task|partition|window_start_ms -> window aggregate",
                      options=store_options(status, status.window_keep_s + status.window_s))
    sa = StatusApp(app, verdicts, stats, settings, status, n)
    web, tables = app.web, app.tables  # faust types them as its abstract bases
    if not isinstance(web, AiohttpWeb) or not isinstance(tables, TableManager):
        raise TypeError("the status app runs on faust's aiohttp web driver and table manager")
    web.web_app.middlewares.append(auth_middleware(status))
    manager: TableManager = tables

    @app.agent(results, name="results")
    async def consume(stream: Any) -> None:
        async for event in stream.events():
            m = event.message
            sa.on_result(event.value, m.partition, m.offset, round(m.timestamp * 1000))

    @app.page("/uploads/{upload_id}")
    class Uploads(View):
        async def get(self, request: Request, upload_id: str) -> Response:
            if not F.matches(F.UPLOAD_ID_PATTERN, upload_id):
                return _error(self, 400, "INVALID_UPLOAD_ID",
                              "upload_id must match " + F.UPLOAD_ID_PATTERN)
            try:
                return await app.router.route_req(verdicts.name, upload_id.encode(), self.web,
                                                  request)
            except SameNode:
                pass
            except (TimeoutError, ServiceUnavailable, aiohttp.ClientError):
                # no assignment yet, or the owner is gone and the group has not re-balanced yet
                return _error(self, 503, "NOT_READY", "the partition of this upload_id has no "
                              "live owner right now; retry")
            v = sa.local_verdict(upload_id)
            if v is None:
                return _error(self, 404, "UNKNOWN_UPLOAD", "no verdict for this upload_id (yet)")
            return self.json({"schema_version": STATUS_SCHEMA_VERSION, **v})

    @app.page("/stats/local")
    class StatsLocal(View):
        async def get(self, request: Request) -> Response:
            task = request.query.get("task", "")
            try:
                since = int(request.query.get("since", "0"))
            except ValueError:
                return _error(self, 400, "INVALID_PARAMETER", "since is epoch ms")
            parts, aggs = sa.local_windows(task, since)
            return self.json({"partitions": parts, "windows": aggs})

    @app.page("/stats")
    class Stats(View):
        async def get(self, request: Request) -> Response:
            q = request.query
            task = q.get("task", "")
            if task not in registry.names():
                return _error(self, 400, "INVALID_TASK",
                              f"task must be one of {', '.join(registry.names())}")
            try:
                window = int(q.get("window", status.window_s))
                last = int(q.get("last", 3600))
            except ValueError:
                return _error(self, 400, "INVALID_PARAMETER", "window and last are integer seconds")
            if window < status.window_s or window % status.window_s:
                return _error(self, 400, "INVALID_WINDOW",
                              f"window must be a positive multiple of {status.window_s} s")
            if not 0 < last <= status.window_keep_s:
                return _error(self, 400, "INVALID_PARAMETER",
                              f"last must be in 1..{int(status.window_keep_s)} s")
            now = _now_ms()
            since = S.window_start_ms(now - last * 1000, window)
            answered, aggs = await sa.gather_windows(task, since)
            windows = S.regroup(aggs, window)
            total = S.summarize(S.merge_windows(windows, since, window), end_ms=now)
            return self.json({
                "schema_version": STATUS_SCHEMA_VERSION, "task": task, "window_s": window,
                "from": since, "to": now,
                "partitions": {"total": n, "answered": sorted(answered)},
                "complete": len(answered) == n,
                "windows": [S.summarize(w) for w in windows],
                "total": total,
            })

    @app.page("/healthz")
    class Health(View):
        async def get(self, request: Request) -> Response:
            recovery = manager.recovery
            recovered = recovery.completed.is_set() and not app.in_recovery
            parts = sa.active_partitions()
            ok = recovered and bool(parts)
            body = {"schema_version": STATUS_SCHEMA_VERSION, "status": "ok" if ok else "starting",
                    "app_id": status.app_id, "recovered": recovered, "partitions": parts,
                    "verdicts": sa.held_verdicts(),
                    "uptime_s": (_now_ms() - sa.started_ms) / 1000.0}
            return self.json(body, status=200 if ok else 503)

    return sa


def run(settings: Settings, status: StatusSettings, loglevel: str = "INFO") -> None:
    """Create the changelog topics, build the app and run it until SIGTERM/SIGINT (blocking).

    Raises:
        KafkaSetupError: the results topic is missing or a changelog topic could not be created.
    """
    topics = create_status_topics(settings.kafka, status)
    log.info("status_topics", **topics)
    status.data_dir.mkdir(parents=True, exist_ok=True)
    sa = build_app(settings, status)
    log.info("status_start", app_id=status.app_id, topic=settings.kafka.results_topic,
             partitions=sa.partitions, web_port=status.web_port)
    asyncio.set_event_loop(asyncio.new_event_loop())
    worker = faust.Worker(sa.app, loglevel=loglevel.lower(),
                          logging_config=_logging_config(loglevel))
    worker.execute_from_commandline()


__all__ = ["STATUS_SCHEMA_VERSION", "StatusApp", "StatusSettings", "authorized", "build_app",
           "changelog_topics", "create_status_topics", "faust_credentials", "load_status_settings",
           "results_partitions", "run", "ssl_context", "status_topic_specs"]
