"""Settings of the HTTP gateway (``cardstream gateway``), environment ``CARDSTREAM_GATEWAY__*``,
kept apart from :mod:`streams.gateway.app` so that :mod:`streams.settings` composes them without
importing aiohttp."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class GatewaySettings(BaseModel):
    """The gateway's limits, access and result cache (frozen).

    Attributes:
        bind: address the HTTP server listens on (default loopback; ``0.0.0.0`` in a container).
        port: port of the API and the page (``--port``).
        admin_port: port of ``/metrics``, ``/live``, ``/ready`` (0: none), kept off the public
            port so a load balancer publishes the API only.
        api_keys_file: file of ``client:key`` lines (one per client; ``#`` comments): every API
            request needs ``Authorization: Bearer <key>``. Required to start; mounted from a
            Secret in the chart. Read at start and again when its modification time changes
            (checked at most every ``api_keys_reload_s``); only SHA-256 digests are kept.
        api_keys_reload_s: see ``api_keys_file`` (s).
        max_body_bytes: largest request body (bytes; default 25 MiB, the decoder's ``max_bytes``,
            plus 64 KiB for a multipart envelope): a larger ``Content-Length`` is answered 413
            before a byte is read, and a chunked body is cut off at it (413).
        max_parts: most parts of a multipart body (the ``image`` part, ``task``, ``options``,
            ``upload_id``, and any other field, which is read past and otherwise ignored):
            the part after it is answered 400 ``TOO_MANY_PARTS`` at once. aiohttp parses each
            part's headers in Python on the event loop: 20 000 empty fields (1.3 MB) took 2.2 s
            of it and stalled every other request of the instance meanwhile.
        body_timeout_s: a request body not received completely within this many seconds (a
            slow sender) is answered 408 and dropped; nothing of it is stored.
        max_wait_ms: the bound on ``?wait_ms=N`` (ms; larger values are clamped to it).
        max_in_flight: uploads being received, stored or produced at once on this instance
            (each holds its body in memory: at most this x ``max_body_bytes``); above it a POST
            is answered 503 ``OVERLOADED`` at once instead of queueing.
        max_waiting: requests waiting for a verdict (``wait_ms``) at once on this instance;
            above it 503 ``OVERLOADED``.
        max_lag: uploads not yet consumed by the workers' consumer group (the sum over the
            uploads topic's partitions of high watermark - committed offset, read every
            ``lag_interval_s``, plus what this instance produced since and is receiving now); at
            or above it a POST is answered 503 ``BACKLOG``: the workers are behind, and accepting
            more would only queue it. Size it to what the workers clear in a few seconds.
        lag_interval_s: how often the lag is read (s).
        retry_after_s: the ``Retry-After`` of a 503 (s).
        rate_per_s / burst: per-client token bucket over every API request (requests/s and
            bucket size); an empty bucket is 429 ``RATE_LIMITED`` with ``Retry-After`` (the
            seconds until a token is back). Per instance: N instances allow N x this.
        results_cache: committed results kept in memory per instance (the latest per
            upload_id, least recently stored dropped first); ~1 KB each.
        results_lookback_s: at start the results topic is read from this long ago (s), so a
            restarted or new instance answers GETs and waits of recent uploads.
        io_threads: threads for the object store's blocking calls (claim-check PUTs, HEADs,
            output reads): 32, the store client's connection pool (``streams.storage.
            http_client``); Python's default executor has min(32, cores + 4), 6 on 2 cores, which
            queued PUTs behind each other at 100 concurrent uploads.
        produce_timeout_s: an UploadEvent not acknowledged by the brokers within this (s) is a
            503 ``UNAVAILABLE`` (its claim-check object is deleted).
        status_url: the status app's base URL (``http://status:6066``): a GET of an upload
            whose result is not in this instance's cache (older than ``results_lookback_s`` at
            its start) asks it where the result is and reads that record; its bearer token is
            ``CARDSTREAM_STATUS__API_TOKEN``. None: such a GET is 404.
        tasks: tasks the gateway accepts (default: those the workers serve, ``worker.tasks``).
    """

    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    bind: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    admin_port: int = Field(8001, ge=0, le=65535)
    api_keys_file: Path | None = None
    api_keys_reload_s: float = Field(10.0, gt=0)
    max_body_bytes: int = Field(25 * 1024 * 1024 + 64 * 1024, ge=1024)
    max_parts: int = Field(16, ge=4, le=1000)
    body_timeout_s: float = Field(30.0, gt=0)
    max_wait_ms: int = Field(30_000, ge=0, le=300_000)
    max_in_flight: int = Field(128, ge=1)
    max_waiting: int = Field(2048, ge=1)
    max_lag: int = Field(5000, ge=1)
    lag_interval_s: float = Field(1.0, gt=0)
    retry_after_s: int = Field(2, ge=1)
    rate_per_s: float = Field(100.0, gt=0)
    burst: int = Field(200, ge=1)
    results_cache: int = Field(50_000, ge=100)
    results_lookback_s: float = Field(900.0, ge=0)
    io_threads: int = Field(32, ge=1, le=256)
    produce_timeout_s: float = Field(10.0, gt=0)
    status_url: str | None = None
    tasks: tuple[str, ...] | None = None


__all__ = ["GatewaySettings"]
