"""The project's buckets and their protection: ``cardstream buckets create`` (the local stack, the
compose ``init`` service and the chart's init job all run it).

Each bucket (uploads, results, quarantine) gets:

* **default encryption** SSE-S3 (the server's KMS key): an object written without asking for
  encryption is encrypted anyway;
* a **bucket policy** refusing a PUT without ``x-amz-server-side-encryption`` (MinIO applies
  bucket policies to anonymous requests only; the role policies of :mod:`streams.access` carry
  the same Deny for its users);
* a **lifecycle rule** ``cardstream-expiry`` deleting objects ``*_expiry_days`` after they were
  written (:class:`~streams.settings.S3Settings`: uploads 7, results 30, quarantine 1).

Every call is idempotent: an existing bucket keeps its objects and gets the current settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial

from minio.commonconfig import ENABLED, Filter
from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule
from minio.sseconfig import Rule as SseRule
from minio.sseconfig import SSEConfig

from streams.access import POLICY_VERSION, deny_unencrypted_put, provision_roles
from streams.settings import S3Settings
from streams.storage import Storage

#: the ID of the lifecycle rule this module writes (other rules of a bucket are replaced)
EXPIRY_RULE_ID = "cardstream-expiry"


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """One bucket to set up: ``name`` and ``expiry_days`` (days after writing, 1 or more)."""

    name: str
    expiry_days: int


def bucket_specs(s3: S3Settings) -> list[BucketSpec]:
    """Uploads, results and quarantine buckets with their expiry (days), in that order."""
    return [BucketSpec(s3.uploads_bucket, s3.uploads_expiry_days),
            BucketSpec(s3.results_bucket, s3.results_expiry_days),
            BucketSpec(s3.quarantine_bucket, s3.quarantine_expiry_days)]


def bucket_policy(bucket: str) -> dict[str, object]:
    """The bucket policy of ``bucket``: refuse a PUT without SSE (any principal)."""
    return {"Version": POLICY_VERSION,
            "Statement": [deny_unencrypted_put([f"arn:aws:s3:::{bucket}/*"], principal=True)]}


def expiry_rule(days: int) -> LifecycleConfig:
    """A lifecycle configuration deleting every object ``days`` days after it was written
    (S3 rounds the moment up to the next midnight UTC)."""
    return LifecycleConfig([Rule(ENABLED, rule_filter=Filter(prefix=""), rule_id=EXPIRY_RULE_ID,
                                 expiration=Expiration(days=days))])


def provision_buckets(st: Storage, specs: list[BucketSpec]) -> dict[str, str]:
    """Create each bucket of ``specs`` if missing, then set its default encryption, bucket
    policy and lifecycle rule.

    Returns:
        bucket -> ``"created|exists, SSE-S3, expires after N d"``.

    Raises:
        StorageError: still failing after the retries (MinIO down, no KMS key configured, not an
            admin).
    """
    states = st.ensure_buckets([b.name for b in specs])
    c = st.client
    out = {}
    for b in specs:
        st.retry(f"PUT encryption {b.name}", partial(c.set_bucket_encryption, b.name,
                                                     SSEConfig(SseRule.new_sse_s3_rule())))
        st.retry(f"PUT policy {b.name}", partial(c.set_bucket_policy, b.name,
                                                 json.dumps(bucket_policy(b.name))))
        st.retry(f"PUT lifecycle {b.name}", partial(c.set_bucket_lifecycle, b.name,
                                                    expiry_rule(b.expiry_days)))
        out[b.name] = f"{states[b.name]}, SSE-S3, expires after {b.expiry_days} d"
    return out


def provision(s3: S3Settings, role_prefix: str = "cardstream", roles: bool = True) -> list[str]:
    """Everything ``cardstream buckets create`` does: :func:`provision_buckets` on
    :func:`bucket_specs`, then (``roles``) :func:`streams.access.provision_roles`, which needs
    MinIO's admin API (an object store without it manages its users itself). ``s3`` holds admin
    credentials.

    Returns:
        One line per bucket and per role, for the operator.

    Raises:
        StorageError: a call failed (see :func:`provision_buckets`, ``provision_roles``).
    """
    states = provision_buckets(Storage(s3), bucket_specs(s3))
    lines = [f"{b}: {state}" for b, state in states.items()]
    if not roles:
        return lines
    return lines + [f"role {r}: {state}" for r, state in provision_roles(s3, role_prefix).items()]
