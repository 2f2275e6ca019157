"""Private by default, against the real servers (docs/SECURITY.md lists what each test proves).

* in transit: Kafka's SASL_SSL (SCRAM-SHA-512) listener and MinIO's TLS refuse plain connections,
  wrong passwords and unknown CAs;
* at rest: a role user's PUT without SSE is refused, every object stored reports SSE-S3, and the
  bytes on MinIO's disk are ciphertext;
* retention: lifecycle rules on uploads, results and quarantine, visible on every object;
* least privilege: one MinIO user and policy per role, each refused what it should not do;
* a full run over TLS (worker under its own user, producer, results reader, replay, status app
  with its bearer token): no log line, dead letter or metric holds image bytes, a
  ``subject_ref`` or a secret.

The stack must be the one of this repository's ``scripts/stack`` (its TLS listener, CA and
passwords come from ``scripts/stack env``); on a stack started by an older script these tests
fail and say so.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import urllib3
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from minio.error import S3Error
from minio.sse import SseS3
from pydantic import SecretStr

from schemas import codec
from streams.access import admin_client, provision_roles, remove_roles
from streams.buckets import EXPIRY_RULE_ID, BucketSpec, bucket_specs, provision_buckets
from streams.errors import StorageError
from streams.kafka import base_config
from streams.produce import UploadProducer
from streams.replay import run_replay
from streams.settings import RoleCredentials, S3RoleSettings, Settings
from streams.storage import Storage
from streams.worker import Worker
from tests.doubles import stand_ins

from .helpers import ROOT, read_committed, settings_env, write_images

pytestmark = pytest.mark.integration

ROLE_NAMES = ("worker", "producer", "ocr", "gateway")


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def stack_tls() -> dict[str, str | SecretStr]:
    """The TLS listener, its SCRAM user (password as ``SecretStr``, so a failing test does not
    print it) and the stack's CA, from ``scripts/stack env``."""
    keys = ("CARDSTREAM_STACK_KAFKA_TLS_BOOTSTRAP", "CARDSTREAM_STACK_KAFKA_SASL_USERNAME",
            "CARDSTREAM_STACK_KAFKA_SASL_PASSWORD", "CARDSTREAM_STACK_CA_FILE")
    missing = [k for k in keys if not os.environ.get(k)]
    if missing:
        pytest.fail(f"{', '.join(missing)} unset: the stack has no TLS listener (it was started by "
                    "an older scripts/stack, or `eval \"$(scripts/stack env)\"` was not run); the "
                    "stack must be started by this scripts/stack (`down` then `up` by whoever "
                    "started it)")
    out: dict[str, str | SecretStr] = {k: os.environ[k] for k in keys}
    password = os.environ["CARDSTREAM_STACK_KAFKA_SASL_PASSWORD"]
    out["CARDSTREAM_STACK_KAFKA_SASL_PASSWORD"] = SecretStr(password)
    return out


def _over_tls(s: Settings, tls: dict) -> Settings:
    """``s`` with Kafka on the SASL_SSL listener and MinIO verified against the stack's CA."""
    k = s.kafka.model_copy(update={
        "bootstrap_servers": tls["CARDSTREAM_STACK_KAFKA_TLS_BOOTSTRAP"],
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": tls["CARDSTREAM_STACK_KAFKA_SASL_USERNAME"],
        "sasl_password": tls["CARDSTREAM_STACK_KAFKA_SASL_PASSWORD"],
        "ca_file": Path(tls["CARDSTREAM_STACK_CA_FILE"])})
    s3 = s.s3.model_copy(update={"secure": True, "ca_file": Path(tls["CARDSTREAM_STACK_CA_FILE"])})
    return s.model_copy(update={"kafka": k, "s3": s3})


def _as(s: Settings, creds: RoleCredentials) -> Settings:
    """``s`` with the S3 credentials of one role."""
    return s.model_copy(update={"s3": s.s3.model_copy(update={
        "access_key": creds.access_key, "secret_key": creds.secret_key})})


@pytest.fixture
def secure(settings: Settings, stack_tls: dict, run_id: str) -> Iterator[dict]:
    """This test's topics over TLS, its uploads/results/quarantine buckets provisioned as
    ``cardstream buckets create`` does (encryption, bucket policy, expiry), and one fresh MinIO
    user per role with the policies for these buckets. Yields ``{"admin": Settings (root), role:
    Settings of that role..., "creds": {role: RoleCredentials}}``; removes users and policies
    afterwards (the ``settings`` fixture removes the buckets)."""
    creds = {r: RoleCredentials(access_key=f"t-{run_id}-{r}",
                                secret_key=SecretStr(secrets.token_hex(20)))
             for r in ROLE_NAMES}
    s3 = settings.s3.model_copy(update={"roles": S3RoleSettings(**creds)})
    admin = _over_tls(settings.model_copy(update={"s3": s3}), stack_tls)
    provision_buckets(Storage(admin.s3), bucket_specs(admin.s3))
    prefix = f"t-{run_id}"
    provision_roles(admin.s3, prefix)
    try:
        yield {"admin": admin, **{r: _as(admin, c) for r, c in creds.items()}, "creds": creds,
               "prefix": prefix}
    finally:
        remove_roles(admin.s3, prefix)


class _Lines:
    """A librdkafka ``logger`` that keeps the lines (the reason of a refused connection is only
    logged; the call itself fails with a generic transport error)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args)


def _refused(conf: dict) -> str:
    """Connect an AdminClient with ``conf``; asserts that no metadata came back and returns what
    librdkafka logged meanwhile (one string)."""
    lines = _Lines()
    a = AdminClient({**conf, "logger": lines})
    with pytest.raises(KafkaException):
        a.list_topics(timeout=4)
    a.poll(1)  # log lines are delivered by poll()
    return "\n".join(lines.lines)


# ------------------------------------------------------------------------------ in transit


def test_kafka_tls_listener_refuses_plain_bad_password_and_unknown_ca(settings: Settings,
                                                                      stack_tls: dict) -> None:
    s = _over_tls(settings, stack_tls)
    ok = base_config(s.kafka)
    md = AdminClient(ok).list_topics(timeout=15)
    assert settings.kafka.uploads_topic in md.topics
    assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [
        stack_tls["CARDSTREAM_STACK_KAFKA_TLS_BOOTSTRAP"]]  # the broker advertises the TLS listener

    plain = _refused({"bootstrap.servers": s.kafka.bootstrap_servers})
    bad_pw = _refused({**ok, "sasl.password": "not-the-password"})
    no_ca = _refused({k: v for k, v in ok.items() if k != "ssl.ca.location"})
    # a plaintext client: the TLS listener drops the connection before any answer
    assert "Disconnected" in plain and "APIVERSION_QUERY" in plain, plain[-500:]
    assert "SASL authentication error" in bad_pw and "invalid credentials" in bad_pw, bad_pw[-500:]
    assert "certificate verify failed" in no_ca, no_ca[-500:]


def test_minio_serves_tls_only_with_the_stacks_ca(settings: Settings, stack_tls: dict) -> None:
    s3 = _over_tls(settings, stack_tls).s3
    assert Storage(s3, retries=1).healthy()
    with pytest.raises(StorageError):  # plain HTTP to the TLS port
        Storage(s3.model_copy(update={"secure": False}), retries=1).put(
            s3.results_bucket, "plain.bin", b"x", "application/octet-stream")
    saved = os.environ.pop("SSL_CERT_FILE", None)
    try:  # the system's trust store does not know the stack's CA
        assert not Storage(s3.model_copy(update={"ca_file": None}), retries=1).healthy()
    finally:
        if saved is not None:
            os.environ["SSL_CERT_FILE"] = saved
    st = Storage(s3, retries=1)
    assert [o.object_name for o in st.client.list_objects(s3.results_bucket)] == []


# ---------------------------------------------------------------------------------- at rest


def _sse(st: Storage, bucket: str, key: str) -> str | None:
    return st.client.stat_object(bucket, key).metadata.get("X-Amz-Server-Side-Encryption")


def test_unencrypted_put_is_refused_and_stored_objects_are_encrypted(secure: dict) -> None:
    admin, worker = Storage(secure["admin"].s3, retries=1), Storage(secure["worker"].s3, retries=1)
    res = secure["admin"].s3.results_bucket
    # a role user's PUT without the SSE header: refused by its policy's Deny
    with pytest.raises(S3Error) as ei:
        worker.client.put_object(res, "plain/no-sse.bin", io.BytesIO(b"abc"), 3)
    assert ei.value.code == "AccessDenied"
    # a multipart upload's parts carry no SSE header: refused too (hence one PUT per object)
    big = os.urandom(6 * 1024 * 1024)
    with pytest.raises(S3Error) as ei:
        worker.client.put_object(res, "plain/multipart.bin", io.BytesIO(big), len(big), sse=SseS3(),
                                 part_size=5 * 1024 * 1024)
    assert ei.value.code == "AccessDenied"
    # what the service writes (Storage.put: SSE-S3 header, one PUT even above 5 MiB) is encrypted
    ref = worker.put(res, "enc/big.bin", big, "application/octet-stream")
    assert _sse(admin, res, ref.key) == "AES256"
    assert hashlib.sha256(admin.get(res, ref.key)).hexdigest() == ref.sha256
    # the admin bypasses policies, but the bucket's default encryption still encrypts
    admin.client.put_object(res, "enc/admin-no-header.bin", io.BytesIO(b"hello"), 5)
    assert _sse(admin, res, "enc/admin-no-header.bin") == "AES256"
    assert json.loads(admin.client.get_bucket_policy(res))["Statement"][0]["Effect"] == "Deny"
    enc = admin.client.get_bucket_encryption(res)
    assert enc.rule.sse_algorithm == "AES256"
    # an anonymous PUT (no signature) is refused
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(secure["admin"].s3.ca_file))
    r = pool.request("PUT", f"https://{secure['admin'].s3.endpoint}/{res}/anon.bin", body=b"x")
    assert r.status == 403


def _own_minio_data_dir(endpoint: str) -> Path | None:
    """MinIO's data folder, when the MinIO at ``endpoint`` was started by this checkout."""
    pid_file = ROOT / ".stack" / "minio.pid"
    if not pid_file.is_file():
        return None
    try:
        args = Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    words = [a.decode() for a in args if a]
    if f"127.0.0.1:{endpoint.rsplit(':', 1)[1]}" not in words:
        return None
    return Path(words[-1])


def test_objects_are_ciphertext_on_minio_disk(secure: dict) -> None:
    data_dir = _own_minio_data_dir(secure["admin"].s3.endpoint)
    if data_dir is None:
        pytest.skip("the MinIO the tests use was not started by this checkout's scripts/stack: "
                    "its data folder is not known here")
    marker = f"plaintext-marker-{uuid.uuid4().hex}".encode() * 40
    worker = Storage(secure["worker"].s3, retries=1)
    ref = worker.put(secure["admin"].s3.results_bucket, "disk/marker.bin", marker, "text/plain")
    files = [p for p in (data_dir / ref.bucket).rglob("*") if p.is_file()]
    assert files, f"no files for bucket {ref.bucket} under {data_dir}"
    assert not any(marker[:48] in p.read_bytes() for p in files)
    assert Storage(secure["admin"].s3).get(ref.bucket, ref.key) == marker  # readable through MinIO


# -------------------------------------------------------------------------------- retention


def test_lifecycle_rules_expire_every_object(secure: dict) -> None:
    s3 = secure["admin"].s3
    admin = Storage(s3, retries=1)
    want = {b.name: b.expiry_days for b in bucket_specs(s3)}
    assert list(want.values()) == [7, 30, 1]
    for bucket, days in want.items():
        (rule,) = admin.client.get_bucket_lifecycle(bucket).rules
        assert (rule.rule_id, rule.status,
                rule.expiration.days) == (EXPIRY_RULE_ID, "Enabled", days)
        ref = admin.put(bucket, "expiry/probe.bin", b"probe", "application/octet-stream")
        st = admin.client.stat_object(bucket, ref.key)
        header = st.metadata["x-amz-expiration"]
        # S3: creation time + days, rounded up to the next midnight UTC
        due = (st.last_modified.astimezone(UTC) + timedelta(days=days)).date() + timedelta(days=1)
        day = datetime(due.year, due.month, due.day, tzinfo=UTC)
        assert header == (f'expiry-date="{day:%a, %d %b %Y} '
                          f'00:00:00 GMT", rule-id="{EXPIRY_RULE_ID}"'), header
    # running the set-up again changes the rule, never the objects
    provision_buckets(admin, [BucketSpec(s3.results_bucket, 3)])
    assert admin.client.get_bucket_lifecycle(s3.results_bucket).rules[0].expiration.days == 3
    assert admin.get(s3.results_bucket, "expiry/probe.bin") == b"probe"


def test_the_stack_made_its_buckets_and_role_users(stack_tls: dict,
                                                   base_settings: Settings) -> None:
    """``scripts/stack up`` ran ``cardstream buckets create`` with its own role credentials: the
    default buckets are encrypted and expire, and each role's user carries its policy."""
    s3 = _over_tls(base_settings, stack_tls).s3.model_copy(update={
        "uploads_bucket": "uploads", "results_bucket": "results",
        "quarantine_bucket": "quarantine"})
    st = Storage(s3, retries=1)
    for b in bucket_specs(s3):
        assert st.client.get_bucket_encryption(b.name).rule.sse_algorithm == "AES256"
        assert st.client.get_bucket_lifecycle(b.name).rules[0].expiration.days == b.expiry_days
    admin = admin_client(s3)
    for role in ("worker", "producer", "ocr"):  # the users scripts/stack makes (no gateway)
        info = json.loads(admin.user_info(f"cardstream-{role}"))
        assert info["status"] == "enabled" and info["policyName"] == f"cardstream-{role}", info
    assert "cardstream-status" not in json.loads(admin.user_list())  # the status app has no user


def test_quarantine_keeps_the_payload_out_of_kafka(secure: dict) -> None:
    """``quarantined_dead_letter`` (the worker's hook, streams/quarantine.py) under the worker's
    own user: the value lands encrypted in the quarantine bucket with its 1-day expiry, readable by
    the admin only; the dead letter keeps its size and reference, none of its bytes; a redone
    batch rewrites the same object; a null value puts nothing."""
    from streams.quarantine import quarantined_dead_letter

    a = secure["admin"].s3
    value = json.dumps({"upload_id": "q1", "subject_ref": "subj:q-4711", "schema_version": 5,
                        "image": {"inline_b64": base64.b64encode(os.urandom(300)).decode()}}
                       ).encode()
    kw = {"key": b"q1", "headers": [("content-type", b"application/json")], "topic": "t.uploads",
          "partition": 2, "offset": 17, "code": "UNSUPPORTED_SCHEMA_VERSION",
          "error": "schema_version 5 is newer than 1", "upload_id": "q1"}
    worker = Storage(secure["worker"].s3, retries=1)
    d = quarantined_dead_letter(worker, a, value=value, **kw)
    _, record, _ = codec.encode_dead_letter(d)
    assert b"subj:q-4711" not in record and b"inline_b64" not in record
    assert (d.value_b64, d.value_truncated, d.value_size) == ("", True, len(value))
    q = d.quarantine
    assert (q.bucket, q.key, q.size_bytes) == (a.quarantine_bucket, "t.uploads/2/17", len(value))
    admin = Storage(a)
    stored = admin.get(q.bucket, q.key)
    assert stored == value and hashlib.sha256(stored).hexdigest() == q.sha256
    meta = admin.client.stat_object(q.bucket, q.key).metadata
    assert meta["X-Amz-Server-Side-Encryption"] == "AES256"
    assert f'rule-id="{EXPIRY_RULE_ID}"' in meta["x-amz-expiration"]
    for role in ("worker", "producer", "ocr"):
        assert _denied(lambda r=role: Storage(secure[r].s3, retries=1).get(q.bucket, q.key))
    again = quarantined_dead_letter(worker, a, value=value, **kw)  # a redone batch
    assert again.quarantine == q
    assert [o.object_name for o in admin.client.list_objects(q.bucket, recursive=True)] == [q.key]
    tomb = quarantined_dead_letter(worker, a, value=None, **{**kw, "offset": 18})
    assert tomb.quarantine is None and tomb.value_b64 is None
    assert len(list(admin.client.list_objects(q.bucket, recursive=True))) == 1


def test_worker_quarantines_dead_letter_payloads(secure: dict, tmp_path: Path) -> None:
    """Through the real worker, under its own MinIO user: while the store does not answer, bad
    records get no dead letter (their quarantine PUT fails, the batch waits, nothing is
    committed); once it answers, each dead letter names its quarantined value (the whole record
    value, encrypted, under ``{topic}/{partition}/{offset}``) and holds none of its bytes, and a
    null value is dead-lettered with nothing to quarantine."""
    admin, ws = secure["admin"], secure["worker"]
    image = write_images(tmp_path / "imgs", 1, seed=7)[0].read_bytes()
    inline_b64 = base64.b64encode(image).decode()
    subject = f"subj:{uuid.uuid4().hex}"
    values = {  # record key -> (value, the dead letter's code)
        b"q-raw": (image, "NOT_JSON"),  # a producer that sent the image itself
        b"q-v9": (json.dumps({"schema_version": 9, "upload_id": "q-v9", "task": "card",
                              "subject_ref": subject,
                              "image": {"inline_b64": inline_b64}}).encode(),
                  "UNSUPPORTED_SCHEMA_VERSION"),
        b"q-bad": (json.dumps({"upload_id": "q-bad", "task": "card",
                               "subject_ref": f"Jane {subject}",
                               "image": {"inline_b64": inline_b64}}).encode(), "SCHEMA_INVALID"),
        b"q-null": (None, "NOT_JSON"),
    }
    prod = UploadProducer(secure["producer"])
    for key, (value, _) in values.items():
        prod.send_raw(key, value)
    assert prod.flush() == []

    down = ws.s3.model_copy(update={"endpoint": "127.0.0.1:1"})
    w = Worker(ws, stand_ins(call_ms=2.0), Storage(down, retries=2, backoff_s=0.05, timeout_s=1.0))
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        _wait(lambda: w.intake.paused, 60, "the worker to pause on the quarantine PUT's outage")
        # no record that needs a quarantine PUT has its dead letter yet; the null value needs
        # none, so a poll that brought it alone (its partition's batch) may have committed it
        early = read_committed(admin, admin.kafka.dlq_topic, 1, timeout_s=3, settle_s=0)
        assert {codec.decode_dead_letter(m.value()).key_b64 for m in early} <= {
            base64.b64encode(b"q-null").decode()}
        w.compute.storage = Storage(ws.s3)  # the store is back: the batch is redone
        msgs = read_committed(admin, admin.kafka.dlq_topic, len(values), timeout_s=60)
    finally:
        w.stop()
        t.join(30)
    letters = {codec.decode_dead_letter(m.value()).key_b64: (m, codec.decode_dead_letter(m.value()))
               for m in msgs}
    assert len(msgs) == len(values) and len(letters) == len(values)
    st = Storage(admin.s3)
    for key, (value, code) in values.items():
        m, d = letters[base64.b64encode(key).decode()]
        assert str(d.error_code) == code
        # the dead-letter record holds none of the value: no image bytes, base64 or subject_ref
        assert subject not in m.value().decode() and inline_b64[:64] not in m.value().decode()
        if value is None:
            assert (d.value_b64, d.quarantine) == (None, None)
            continue
        assert (d.value_b64, d.value_truncated, d.value_size) == ("", True, len(value))
        q = d.quarantine
        assert (q.bucket, q.key, q.size_bytes) == (
            admin.s3.quarantine_bucket, f"{d.source.topic}/{d.source.partition}/{d.source.offset}",
            len(value))
        assert st.get(q.bucket, q.key) == value and hashlib.sha256(value).hexdigest() == q.sha256
        assert _sse(st, q.bucket, q.key) == "AES256"
    # the batch redone after the outage rewrote nothing else: one object per non-null value
    assert len(list(st.client.list_objects(admin.s3.quarantine_bucket, recursive=True))) == 3


# ------------------------------------------------------------------------ least privilege


def _denied(fn) -> bool:
    try:
        fn()
    except S3Error as e:
        return e.code == "AccessDenied"
    except StorageError as e:
        return "AccessDenied" in str(e)
    return False


def test_each_role_may_do_its_job_and_nothing_else(secure: dict) -> None:
    a = secure["admin"].s3
    up, res, qua = a.uploads_bucket, a.results_bucket, a.quarantine_bucket
    st = {r: Storage(secure[r].s3, retries=1) for r in ROLE_NAMES}
    blob = b"\xff\xd8\xff" + os.urandom(64)

    # producer: PUT uploads; nothing else
    src = st["producer"].put(up, "card/u1/photo.jpg", blob, "image/jpeg")
    assert _denied(lambda: st["producer"].get(up, src.key))
    assert _denied(lambda: st["producer"].put(res, "x.bin", blob, "image/jpeg"))
    # worker: GET uploads, PUT results and quarantine, HEAD both buckets (health); no PUT to uploads
    assert st["worker"].get(up, src.key) == blob
    assert st["worker"].healthy()
    out = st["worker"].put(res, "card/v1/u1/rectified.png", blob, "image/png")
    st["worker"].put(qua, "t/0/1", b"payload", "application/octet-stream")
    assert _denied(lambda: st["worker"].put(up, "card/u2/evil.jpg", blob, "image/jpeg"))
    assert _denied(lambda: st["worker"].get(res, out.key))
    assert _denied(lambda: st["worker"].client.remove_object(up, src.key))
    with pytest.raises(StorageError) as ei:  # a missing claim check still reads as missing
        st["worker"].get(up, "card/none/photo.jpg")
    assert type(ei.value).__name__ == "ObjectNotFound"
    # ocr: GET and list results; no uploads, no quarantine, no writes
    assert st["ocr"].get(res, out.key) == blob
    assert [o.object_name for o in st["ocr"].client.list_objects(res, recursive=True)] == [out.key]
    assert _denied(lambda: st["ocr"].get(up, src.key))
    assert _denied(lambda: st["ocr"].get(qua, "t/0/1"))
    assert _denied(lambda: st["ocr"].put(res, "card/v1/u1/forged.png", blob, "image/png"))
    # nobody but the admin creates buckets or reads the quarantine
    assert all(_denied(lambda r=r: st[r].client.make_bucket(f"x-{uuid.uuid4().hex[:8]}"))
               for r in ROLE_NAMES)
    assert Storage(a).get(qua, "t/0/1") == b"payload"



def test_gateway_works_under_its_own_role_over_tls(secure: dict, tmp_path: Path) -> None:
    """``cardstream gateway`` under the gateway role's MinIO user (and Kafka over SASL_SSL) with
    a worker under the worker role: an upload with a wait, its replay, the same key with another
    image (its stored metadata is read back), the same key under another task (a HEAD of a
    missing key must say missing, not AccessDenied), the output streamed from the results
    bucket; the role may not read the quarantine, write results or create buckets."""
    from streams import procs
    from streams.gateway.settings import GatewaySettings

    from .test_gateway import KEYS, call, free_port

    keys = tmp_path / "keys"
    keys.write_text(f"alice:{KEYS['alice']}\n")
    imgs = [p.read_bytes() for p in write_images(tmp_path / "imgs", 2, seed=11)]
    gs = secure["gateway"].model_copy(update={"gateway": GatewaySettings(api_keys_file=keys)})
    w = procs.start_worker(secure["worker"], 0, tmp_path / "worker.log",
                           ["--processor", "card=sleep,id_photo=sleep"])
    g = None
    try:
        g = procs.start_gateway(gs, tmp_path / "gateway.log", free_port(), free_port())
        key = {"Idempotency-Key": "tls-order-1"}
        r = call(g.port, "POST", "/v1/uploads?task=card&wait_ms=30000", imgs[0], headers=key)
        assert r.status == 200, r.body
        uid, ref = r.json()["upload_id"], r.json()["card"]["rectified"]
        assert call(g.port, "POST", "/v1/uploads?task=card", imgs[0], headers=key).status == 200
        other = call(g.port, "POST", "/v1/uploads?task=card", imgs[1], headers=key)
        assert (other.status, other.json()["error"]) == (409, "IDEMPOTENCY_KEY_REUSED")
        task = call(g.port, "POST", "/v1/uploads?task=id_photo", imgs[0], headers=key)
        assert (task.status, task.json()["error"]) == (409, "IDEMPOTENCY_KEY_REUSED")
        fresh = call(g.port, "POST", "/v1/uploads?task=id_photo", imgs[1],
                     headers={"Idempotency-Key": "tls-order-2"})
        assert fresh.status == 202, fresh.body  # the other task's key was missing: NoSuchKey
        out = call(g.port, "GET", f"/v1/uploads/{uid}/output")
        assert out.status == 200 and hashlib.sha256(out.body).hexdigest() == ref["sha256"]
    finally:
        procs.stop_workers([w, *([procs.WorkerProc(g.proc, 0, g.log)] if g else [])], timeout_s=30)
    a = secure["admin"].s3
    st = Storage(secure["gateway"].s3, retries=1)
    assert _sse(Storage(a), a.uploads_bucket, f"card/{uid}/upload") == "AES256"
    assert _denied(lambda: st.get(a.quarantine_bucket, "t/0/1"))
    assert _denied(lambda: st.put(a.results_bucket, "card/v1/x/forged.png", b"x", "image/png"))


# ------------------------------------------------------------------ a full run, scanned


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def _http(port: int, path: str, token: str | None = None) -> tuple[int, dict | str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
            return r.status, json.loads(body) if body.startswith("{") else body
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _wait(cond, timeout_s: float, what: str, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"{what}: not after {timeout_s} s")


def _b64_fragments(data: bytes) -> list[str]:
    """The image's base64 and 32-character pieces of it (a cut-down copy is caught too)."""
    b = base64.b64encode(data).decode()
    return [b] + [b[i:i + 32] for i in range(0, max(len(b) - 32, 1), max(len(b) // 4, 32))]


def test_full_run_over_tls_leaks_nothing(secure: dict, tmp_path: Path, run_id: str,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    """Producer, worker (own MinIO user), results reader, replay and status app, all over
    SASL_SSL and TLS; then every log line, every dead letter and the metrics are scanned for
    image bytes, subject_ref values and secrets."""
    from typer.testing import CliRunner

    from streams.cli import app as cli
    from streams.procs import start_worker, stop_workers

    admin, worker_s, producer_s = secure["admin"], secure["worker"], secure["producer"]
    files = write_images(tmp_path / "imgs", 6, seed=32)
    images = {f.name: f.read_bytes() for f in files}
    subjects = [f"subj:{uuid.uuid4().hex}" for _ in range(7)]
    token = secrets.token_urlsafe(24)
    forbidden = {"SCRAM password": admin.kafka.sasl_password.get_secret_value(),
                 "root secret key": admin.s3.secret_key.get_secret_value(),
                 "status API token": token,
                 **{f"{r} secret key": c.secret_key.get_secret_value()
                    for r, c in secure["creds"].items()},
                 **{f"subject_ref {i}": x for i, x in enumerate(subjects)},
                 **{f"base64 of {n}": frag
                    for n, data in images.items() for frag in _b64_fragments(data)}}

    # -- produce: 4 claim checks (card) and 3 inline (id_photo), each with a subject_ref, plus 3
    # bad records holding image bytes or subject_refs (a producer that sent the image itself, a
    # newer schema version, a free-text subject_ref)
    from_ms = int(time.time() * 1000)
    prod = UploadProducer(producer_s)
    inline = UploadProducer(producer_s, inline=True)
    good = []
    for i, f in enumerate(files[:4]):
        good.append(prod.event_for(f"sec-{run_id}-c{i}", "card", images[f.name], f.name, None))
        # the local file name (it could be a person's) is not part of the claim-check key
        assert good[-1].image.ref.key == f"card/sec-{run_id}-c{i}/upload{f.suffix.lower()}"
    for i, f in enumerate(files[4:] + files[:1]):
        good.append(inline.event_for(f"sec-{run_id}-p{i}", "id_photo", images[f.name], f.name,
                                     None))
    for ev, subj in zip(good, subjects, strict=False):
        prod.send(ev.model_copy(update={"subject_ref": subj}))
    inline_b64 = base64.b64encode(images[files[5].name]).decode()
    prod.send_raw(f"sec-{run_id}-raw".encode(), images[files[2].name])
    prod.send_raw(f"sec-{run_id}-v9".encode(), json.dumps({
        "schema_version": 9, "upload_id": f"sec-{run_id}-v9", "task": "card",
        "subject_ref": subjects[4], "image": {"inline_b64": inline_b64}}).encode())
    prod.send_raw(f"sec-{run_id}-bad".encode(), json.dumps({
        "upload_id": f"sec-{run_id}-bad", "task": "card", "subject_ref": f"Jane Doe {subjects[5]}",
        "image": {"inline_b64": inline_b64}}).encode())
    assert prod.flush() == [] and inline.flush() == []
    to_ms = int(time.time() * 1000) + 1

    # -- the worker, as its own MinIO user, over TLS; the status app with no S3 credentials
    logs = tmp_path / "logs"
    mport, sport = _free_port(), _free_port()
    w = start_worker(worker_s, 0, logs / "worker.log", ["--processor", "card=sleep,id_photo=sleep"],
                     http_port=mport)
    senv = {k: v for k, v in settings_env(admin).items() if not k.startswith("CARDSTREAM_S3__")}
    senv.update({"CARDSTREAM_STATUS__APP_ID": f"st-{run_id}", "CARDSTREAM_STATUS__API_TOKEN": token,
                 "CARDSTREAM_STATUS__DATA_DIR": str(tmp_path / "status"),
                 "CARDSTREAM_STATUS__SESSION_TIMEOUT_S": "6"})
    status = subprocess.Popen([str(ROOT / ".venv" / "bin" / "cardstream"), "status", "--web-port",
                               str(sport)],
                              env=senv, stdout=open(logs / "status.log",
                                                    "ab"), stderr=subprocess.STDOUT,
                              cwd=tmp_path, start_new_session=True)
    try:
        msgs = read_committed(admin, admin.kafka.results_topic, len(good), timeout_s=120)
        decoded = [codec.decode_result(m.value()) for m in msgs]
        results = {r.upload_id: r for r in decoded}
        assert sorted(results) == sorted(e.upload_id for e in good)
        assert all(r.status == "accepted" for r in results.values())
        dls = read_committed(admin, admin.kafka.dlq_topic, 3, timeout_s=60)
        dead = [codec.decode_dead_letter(m.value()) for m in dls]
        assert sorted(str(d.error_code) for d in dead) == ["NOT_JSON", "SCHEMA_INVALID",
                                                           "UNSUPPORTED_SCHEMA_VERSION"]
        assert all(d.value_b64 == "" and d.value_truncated and d.value_size > 0 for d in dead)
        # their values are in the quarantine bucket, whole (size and sha256 checked)
        quarantined = [Storage(admin.s3).get(d.quarantine.bucket, d.quarantine.key) for d in dead]
        assert [(len(v), hashlib.sha256(v).hexdigest()) for v in quarantined] == [
            (d.value_size, d.quarantine.sha256) for d in dead]

        # downstream OCR with its own user: every output, nothing from the uploads bucket
        ocr = Storage(secure["ocr"].s3, retries=1)
        for r in results.values():
            ref = r.card.rectified if r.card is not None else r.id_photo.photo
            assert hashlib.sha256(ocr.get(ref.bucket, ref.key)).hexdigest() == ref.sha256
            assert _sse(Storage(admin.s3), ref.bucket, ref.key) == "AES256"
        claim = next(e.image.ref for e in good if e.image.ref is not None)
        assert _denied(lambda: ocr.get(claim.bucket, claim.key))

        # the results reader over TLS
        out = CliRunner().invoke(cli, ["results", "--json"], env=settings_env(admin))
        assert out.exit_code == 0, out.output
        # stdout only: librdkafka may log a transient connection error on stderr (a SASL
        # handshake cut by a connection it replaced, retried); the scan below reads both
        assert (sorted(json.loads(x)["upload_id"] for x in out.stdout.splitlines())
                == sorted(results))

        # the worker's metrics: bounded labels, no upload id
        code, metrics = _http(mport, "/metrics")
        assert code == 200 and "cardstream_results_total" in metrics
        assert not [u for u in [*results, f"sec-{run_id}"] if u in metrics]

        # the status app over SASL_SSL, behind its bearer token
        _wait(lambda: _http(sport, "/healthz")[0] == 200, 90, "status app healthy")
        uid = next(iter(results))
        code, body = _wait(lambda: (c := _http(sport, f"/uploads/{uid}", token))[0] == 200 and c,
                           60, "status app verdict")
        assert body["status"] == "accepted" and body["upload_id"] == uid
        for bad in (None, "wrong-token"):
            code, body = _http(sport, f"/uploads/{uid}", bad)
            assert (code, body["error"]) == (401, "UNAUTHORIZED")
        assert _http(sport, "/stats?task=card", None)[0] == 401
        _wait(lambda: _http(sport, "/stats?task=card", token)[1]["total"]["count"] == 4, 30,
              "status app counts the 4 card results")
    finally:
        stop_workers([w])
        status.terminate()
        status.wait(30)

    # -- replay of the window over TLS, with the worker's user
    report = run_replay(worker_s, from_ms, to_ms, stand_ins(call_ms=2.0),
                        results_topic=f"{admin.kafka.results_topic}.replay",
                        group=f"g-{run_id}-replay")
    assert (report["events"], report["replayed"], report["verdicts_changed"]) == (10, 7, 0)
    side_dead = read_committed(admin, f"{admin.kafka.results_topic}.replay.dlq", 3, timeout_s=30)
    assert len(side_dead) == 3
    # the replay quarantined the same records under the same keys: the same objects
    side_refs = [codec.decode_dead_letter(m.value()).quarantine for m in side_dead]
    assert sorted((q.key,
                   q.sha256) for q in side_refs) == sorted((d.quarantine.key, d.quarantine.sha256)
                                                                  for d in dead)

    # -- the scan: every log line written, every dead letter (both topics), the metrics
    texts = {"worker.log": (logs / "worker.log").read_text(errors="replace"),
             "status.log": (logs / "status.log").read_text(errors="replace"),
             "this process (producer, replay)": "".join(capfd.readouterr()),
             "results reader": out.output,
             "metrics": metrics}
    leaks = []
    for i, m in enumerate(dls + side_dead):
        d = codec.decode_dead_letter(m.value())
        value = base64.b64decode(d.value_b64) if d.value_b64 else b""
        texts[f"dead letter {i} ({d.error_code})"] = (m.value().decode()
                                                      + value.decode(errors="replace"))
        leaks += [f"image {n} (raw bytes) in dead letter {i}" for n, data in images.items()
                  if data in value]
    assert texts["worker.log"].count("batch_committed") >= 1  # the logs are the real ones
    assert "status_start" in texts["status.log"]
    leaks += [f"{what} in {where}" for where, text in texts.items()
              for what, needle in forbidden.items() if needle in text]
    assert leaks == []
