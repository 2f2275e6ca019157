"""Security settings and documents without servers: TLS/SASL mapping for both Kafka clients,
secrets kept out of the pass-through, role and bucket policies, lifecycle rules, the quarantine
dead letter, the status app's bearer token, and metric labels free of personal data.

The same promises against the real servers: ``tests/integration/test_security.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
from pathlib import Path

import certifi
import pytest
from pydantic import SecretStr, ValidationError

from schemas import codec
from schemas.models import QuarantineRef
from streams.access import ROLES, role_policy
from streams.buckets import EXPIRY_RULE_ID, bucket_policy, bucket_specs, expiry_rule
from streams.kafka import base_config, security_config
from streams.metrics import WorkerMetrics
from streams.procs import settings_env
from streams.quarantine import quarantine_key
from streams.settings import KafkaSettings, S3Settings, Settings
from streams.status_app import authorized, build_app, faust_credentials
from streams.status_settings import StatusSettings, is_loopback

CA = Path(certifi.where())  # any valid PEM bundle will do as a CA file


def _sasl_ssl(**kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers="broker:9094", security_protocol="SASL_SSL",
                         sasl_username="svc", sasl_password=SecretStr("pw-123"), ca_file=CA, **kw)


# ---------------------------------------------------------------------------------- Kafka


def test_security_config_per_protocol() -> None:
    assert security_config(KafkaSettings()) == {"security.protocol": "PLAINTEXT"}
    conf = security_config(_sasl_ssl())
    assert conf == {"security.protocol": "SASL_SSL",
                    "ssl.endpoint.identification.algorithm": "https",
                    "ssl.ca.location": str(CA), "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "svc", "sasl.password": "pw-123"}
    mtls = security_config(KafkaSettings(security_protocol="SSL", ca_file=CA,
                                         cert_file=Path("c.pem"),
                                         key_file=Path("k.pem"), key_password=SecretStr("kp")))
    assert mtls["ssl.certificate.location"] == "c.pem" and mtls["ssl.key.location"] == "k.pem"
    assert mtls["ssl.key.password"] == "kp" and "sasl.mechanism" not in mtls
    # the pass-through comes last but cannot carry secrets (below)
    config = base_config(_sasl_ssl(config={"socket.keepalive.enable": True}))
    assert config["socket.keepalive.enable"]


def test_secrets_are_refused_in_the_pass_through_and_never_echoed() -> None:
    for prop in ("sasl.password", "ssl.key.password", "SSL.KEYSTORE.PASSWORD"):
        with pytest.raises(ValidationError) as ei:
            KafkaSettings(config={prop: "hunter2-secret"})
        assert "hunter2-secret" not in str(ei.value) and "environment" in str(ei.value)
    with pytest.raises(ValidationError) as ei:  # a bad value of any field is not echoed either
        S3Settings(secret_key=SecretStr("s3cr3t-value"), uploads_expiry_days="s3cr3t-value")
    assert "s3cr3t-value" not in str(ei.value)
    assert "pw-123" not in repr(_sasl_ssl()) and "pw-123" not in str(_sasl_ssl().model_dump())


def test_tls_properties_in_the_pass_through_move_to_their_fields() -> None:
    k = KafkaSettings(config={"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.username": "svc", "ssl.ca.location": str(CA), "linger.ms": 5})
    assert (k.security_protocol, k.sasl_mechanism, k.sasl_username, k.ca_file) == (
        "SASL_SSL", "SCRAM-SHA-256", "svc", CA)
    assert k.config == {"linger.ms": 5}
    with pytest.raises(ValidationError, match="contradicts"):
        KafkaSettings(security_protocol="SSL", config={"security.protocol": "SASL_SSL"})
    with pytest.raises(ValidationError, match="sasl_username"):
        KafkaSettings(security_protocol="SASL_SSL")
    with pytest.raises(ValidationError, match="go together"):
        KafkaSettings(security_protocol="SSL", cert_file=Path("c.pem"))


def test_status_app_takes_tls_and_sasl_from_the_settings() -> None:
    """faust's aiokafka consumer and producer get SASL_SSL, SCRAM, the user, the password and a
    verifying TLS context from the same settings the workers use (before: only kafka://host)."""
    import asyncio

    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    assert faust_credentials(KafkaSettings()) is None
    k = _sasl_ssl()
    auth = credentials_to_aiokafka_auth(faust_credentials(k))
    assert (auth["security_protocol"], auth["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("svc", "pw-123")
    ctx = auth["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] > 0  # the CA file was loaded
    ssl_only = credentials_to_aiokafka_auth(faust_credentials(
        KafkaSettings(security_protocol="SSL", ca_file=CA)))
    assert ssl_only["security_protocol"] == "SSL" and "sasl_mechanism" not in ssl_only

    async def built() -> dict:
        s = Settings(kafka=k)
        sa = build_app(s, StatusSettings(app_id="st-tls", web_port=16998), partitions=3)
        c = sa.app.consumer._new_consumer_thread()._create_worker_consumer(sa.app.transport)
        return {"consumer": c._client._security_protocol, "mech": c._client._sasl_mechanism,
                "user": c._client._sasl_plain_username,
                "producer": sa.app.producer._settings_auth()["security_protocol"]}

    assert asyncio.run(built()) == {"consumer": "SASL_SSL", "mech": "SCRAM-SHA-512", "user": "svc",
                                    "producer": "SASL_SSL"}


def test_settings_env_carries_tls_and_credentials_but_no_role_secrets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.settings import RoleCredentials, S3RoleSettings

    monkeypatch.setenv("CARDSTREAM_KAFKA__SASL_PASSWORD", "stale")
    monkeypatch.setenv("CARDSTREAM_S3__ROLES__OCR__SECRET_KEY", "stale")
    s3 = S3Settings(access_key="worker-1", secret_key=SecretStr("wk-secret"), ca_file=CA,
                    roles=S3RoleSettings(worker=RoleCredentials(access_key="wkr",
                                                                secret_key=SecretStr("role-pw"))))
    s = Settings(kafka=_sasl_ssl(), s3=s3)
    env = settings_env(s)
    assert "role-pw" not in env.values() and not any("__ROLES__" in k for k in env)
    for k in [k for k in os.environ if k.startswith("CARDSTREAM_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        if k.startswith("CARDSTREAM_"):
            monkeypatch.setenv(k, v)
    back = Settings()
    assert back.kafka == s.kafka
    assert back.s3 == s3.model_copy(update={"roles": S3RoleSettings()})


# ---------------------------------------------------------------------------------- S3


def test_role_policies_are_least_privilege() -> None:
    s3 = S3Settings(uploads_bucket="up", results_bucket="res", quarantine_bucket="qua",
                    allowed_buckets=("up", "up2"))

    def grants(role: str) -> set[tuple[str, str]]:
        return {(a, r) for st in role_policy(role, s3)["Statement"] if st["Effect"] == "Allow"
                for a in st["Action"] for r in st["Resource"]}

    assert grants("worker") == {
        ("s3:GetObject", "arn:aws:s3:::up/*"), ("s3:GetObject", "arn:aws:s3:::up2/*"),
        ("s3:ListBucket", "arn:aws:s3:::up"), ("s3:ListBucket", "arn:aws:s3:::up2"),
        ("s3:ListBucket", "arn:aws:s3:::res"),
        ("s3:PutObject", "arn:aws:s3:::res/*"), ("s3:PutObject", "arn:aws:s3:::qua/*")}
    assert grants("producer") == {("s3:PutObject", "arn:aws:s3:::up/*")}
    assert grants("ocr") == {("s3:GetObject", "arn:aws:s3:::res/*"),
                             ("s3:ListBucket", "arn:aws:s3:::res")}
    assert grants("gateway") == {
        ("s3:PutObject", "arn:aws:s3:::up/*"), ("s3:GetObject", "arn:aws:s3:::up/*"),
        ("s3:DeleteObject", "arn:aws:s3:::up/*"), ("s3:ListBucket", "arn:aws:s3:::up"),
        ("s3:GetObject", "arn:aws:s3:::res/*")}
    for role in ROLES:
        denies = [st for st in role_policy(role, s3)["Statement"] if st["Effect"] == "Deny"]
        puts = {r for a, r in grants(role) if a == "s3:PutObject"}
        if puts:  # every resource a role may PUT to refuses a PUT without SSE
            (d,) = denies
            assert set(d["Resource"]) == puts and "Principal" not in d
            assert d["Condition"] == {"Null": {"s3:x-amz-server-side-encryption": ["true"]}}
        else:
            assert denies == []
    with pytest.raises(ValueError, match="unknown role"):
        role_policy("status", s3)


def test_bucket_specs_policy_and_expiry() -> None:
    s3 = S3Settings()
    assert [(b.name, b.expiry_days) for b in bucket_specs(s3)] == [
        ("uploads", 7), ("results", 30), ("quarantine", 1)]
    (st,) = bucket_policy("uploads")["Statement"]
    assert st["Principal"] == {"AWS": ["*"]} and st["Resource"] == ["arn:aws:s3:::uploads/*"]
    assert st["Effect"] == "Deny" and st["Action"] == ["s3:PutObject"]
    (rule,) = expiry_rule(7).rules
    assert (rule.rule_id, rule.expiration.days, rule.status) == (EXPIRY_RULE_ID, 7, "Enabled")
    assert s3.sse and s3.secure  # private by default
    with pytest.raises(ValidationError):
        S3Settings(results_expiry_days=0)


def test_quarantined_dead_letter_keeps_no_value_bytes() -> None:
    value = (b'{"upload_id":"u1","subject_ref":"subj:4711",'
             b'"image":{"inline_b64":"/9j/4AAQSkZJRg=="}}')
    ref = QuarantineRef(bucket="quarantine", key=quarantine_key("t.uploads", 4, 99),
                        size_bytes=len(value), sha256=hashlib.sha256(value).hexdigest())
    assert ref.key == "t.uploads/4/99"
    d = codec.make_dead_letter(key=b"u1", value=value, headers=None, topic="t.uploads",
                               partition=4, offset=99, code="UNSUPPORTED_SCHEMA_VERSION",
                               error="schema_version 9 is newer", quarantine=ref,
                               max_value_bytes=65536)
    _, out, _ = codec.encode_dead_letter(d)
    assert (d.value_b64, d.value_truncated, d.value_size) == ("", True, len(value))
    assert b"subj:4711" not in out and b"/9j/" not in out
    assert json.loads(out)["quarantine"] == ref.canonical()
    assert codec.decode_dead_letter(out).quarantine == ref
    # a v1 consumer that predates the field reads it as a valid dead letter
    assert codec.validator("DeadLetter").is_valid({k: v for k, v in json.loads(out).items()
                                                   if k != "quarantine"})
    assert Settings().worker.dlq_value_max_bytes == 0  # no payload in dead letters by default


# ------------------------------------------------------------------------------ exposure


def test_status_api_token() -> None:
    assert authorized(StatusSettings(), None)  # no token: loopback only (below)
    st = StatusSettings(api_token=SecretStr("tok-1"), web_bind="0.0.0.0")
    assert authorized(st, "Bearer tok-1")
    for bad in (None, "", "Bearer tok-2", "bearer tok-1", "tok-1", "Bearer tok-1 "):
        assert not authorized(st, bad), bad
    with pytest.raises(ValidationError, match="API_TOKEN"):
        StatusSettings(web_bind="0.0.0.0")
    assert [is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "localhost", "0.0.0.0",
                                     "10.0.0.5", "status.svc")] == [True] * 4 + [False] * 3


def test_metric_labels_carry_no_upload_ids_or_personal_fields() -> None:
    """Every label of every worker metric is one of a few bounded ones (task, status, reason or
    dead-letter code, partition, stage, outcome; a shadow comparison's change, verdict / reasons
    / none, and measure, a task spec's measure name): none can hold an upload id, a
    subject_ref, an object key or a file name. A new label fails here until it is added with a
    reason."""
    allowed = {"task", "status", "code", "reason", "partition", "stage", "outcome", "change",
               "measure"}
    m = WorkerMetrics()
    labels = {}
    for metric in m.registry.collect():
        for sample in metric.samples:
            labels.setdefault(metric.name, set()).update(sample.labels)
    declared = {c._name: set(c._labelnames) for c in vars(m).values() if hasattr(c, "_labelnames")}
    assert declared and all(names <= allowed for names in declared.values()), declared
    assert all(names <= allowed | {"le"} for names in labels.values())


def test_storage_errors_that_are_not_s3_answers_become_storage_errors() -> None:
    """A plain-HTTP request to a TLS port gets Go's 400 text, which the minio package raises as
    InvalidResponseError; a 5xx is ServerError: both are StorageError (the worker pauses), with
    the S3 error code kept when there is one."""
    from minio.error import InvalidResponseError, S3Error, ServerError

    from streams.errors import StorageError
    from streams.storage import Storage

    st = Storage(S3Settings(access_key="k", secret_key=SecretStr("s")), retries=1)
    for exc in (InvalidResponseError(400, None, "Client sent an HTTP request to an HTTPS server."),
                ServerError("503 Service Unavailable", 503)):
        with pytest.raises(StorageError, match=type(exc).__name__):
            st.retry("PUT b/k", lambda exc=exc: (_ for _ in ()).throw(exc))
    denied = S3Error(None, "AccessDenied", "Access Denied.", "b/k", "r", "h")
    with pytest.raises(StorageError, match="S3Error AccessDenied"):
        st.retry("PUT b/k", lambda: (_ for _ in ()).throw(denied))
