"""Settings of the status app (``cardstream status``), kept apart from :mod:`streams.status_app`
so that :mod:`streams.settings` can compose them without importing faust."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class StatusSettings(BaseModel):
    """Settings of the status app (frozen; env ``CARDSTREAM_STATUS__*`` via
    :func:`load_status_settings`).

    Attributes:
        app_id: faust app id = consumer group and changelog topic prefix.
        web_bind: address the HTTP server listens on.
        web_host: host name other instances use to reach this one (its canonical URL).
        web_port: HTTP port (default 6066, faust's).
        retention_s: verdict retention, seconds (default 7 days, the results topic's retention).
        window_s: tumbling window size, seconds (default 60).
        window_keep_s: how long windows are kept, seconds (default 24 h).
        sweep_interval_s: least seconds between two expiry sweeps of a partition.
        replication_factor: replicas of the changelog topics (1 on the local one-node stack).
        commit_interval_s: faust ``broker_commit_interval`` (s): how often consumed offsets are
            committed (what a restarted instance re-reads is at most this much).
        query_timeout_s: timeout of a request proxied to another instance (s).
        session_timeout_s: consumer group session timeout (s): how soon the partitions of a
            killed instance are reassigned (faust's default is 60 s).
        data_dir: faust's data directory (``datadir``).
        store: faust table store URL: ``rocksdb://`` (the default: the tables live in RocksDB
            files under ``data_dir``, with a few MiB of memory per partition, so 7 days of
            verdicts at 10 uploads/s fit on disk; ``rocksdict``) or ``memory://`` (every verdict
            in memory, rebuilt from the changelog at every start: about 1.9 KB per verdict,
            under 1 upload/s for 7 days in 1 GiB; for tests and small deployments).
        api_token: bearer token of the HTTP API (secret, environment only): ``/uploads``,
            ``/stats`` and ``/stats/local`` answer 401 without ``Authorization: Bearer <token>``;
            ``/healthz`` (no upload ids) stays open for probes. Required unless ``web_bind`` is
            a loopback address.

    Raises:
        pydantic.ValidationError: ``web_bind`` is not loopback and no ``api_token`` is set.
    """

    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    app_id: str = "cardstream-status"
    web_bind: str = "127.0.0.1"
    web_host: str = "127.0.0.1"
    web_port: int = Field(6066, ge=1, le=65535)
    retention_s: float = Field(7 * 24 * 3600.0, gt=0)
    window_s: int = Field(60, ge=1)
    window_keep_s: float = Field(24 * 3600.0, gt=0)
    sweep_interval_s: float = Field(300.0, gt=0)
    replication_factor: int = Field(1, ge=1)
    commit_interval_s: float = Field(1.0, gt=0)
    query_timeout_s: float = Field(5.0, gt=0)
    session_timeout_s: float = Field(10.0, gt=0)
    data_dir: Path = Path("out/status")
    store: str = "rocksdb://"
    api_token: SecretStr | None = None

    @model_validator(mode="after")
    def _token_unless_loopback(self) -> StatusSettings:
        if self.api_token is None and not is_loopback(self.web_bind):
            raise ValueError(f"web_bind {self.web_bind} is reachable from other hosts: set "
                             "CARDSTREAM_STATUS__API_TOKEN (the HTTP API's bearer token)")
        return self


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _StatusEnv(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CARDSTREAM_", env_nested_delimiter="__",
                                      frozen=True, extra="ignore", hide_input_in_errors=True)

    status: StatusSettings = Field(default_factory=StatusSettings)


def load_status_settings(**overrides: Any) -> StatusSettings:
    """:class:`StatusSettings` from the environment (``CARDSTREAM_STATUS__WEB_PORT`` ...) plus
    keyword overrides (fields of :class:`StatusSettings`; ``None`` values are ignored)."""
    base = _StatusEnv().status
    upd = {k: v for k, v in overrides.items() if v is not None}
    return StatusSettings.model_validate({**dict(base), **upd}) if upd else base


__all__ = ["StatusSettings", "is_loopback", "load_status_settings"]
