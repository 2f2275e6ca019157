"""Least privilege in the object store: one MinIO policy and one user per role.

========  =================================================================  ======================
role      may                                                                used by
========  =================================================================  ======================
worker    GET the allowed upload buckets; PUT results and quarantine;        ``cardstream worker``
          HEAD (``s3:ListBucket``) uploads and results (its health check)
producer  PUT uploads                                                        the ticketing platform
ocr       GET and list results                                               downstream OCR
gateway   PUT, GET and DELETE uploads (a repeated POST compares what is      ``cardstream gateway``
          stored); HEAD (``s3:ListBucket``) uploads; GET results (outputs)
========  =================================================================  ======================

The status app has no role: it never touches the object store and gets no S3 credentials. Every
role that may PUT is refused a PUT without ``x-amz-server-side-encryption`` (a ``Deny`` with the
``Null`` condition; a Deny wins over any Allow). MinIO evaluates bucket policies for anonymous
requests only, so this identity-policy Deny is what refuses an unencrypted PUT of a service user
there (``streams.buckets`` also sets the same rule as bucket policy, for S3 servers that apply
bucket policies to every principal). The root (admin) user bypasses every policy: only the set-up
job should hold it.

Policies and users are written through MinIO's admin API with the ``minio`` package's
:class:`~minio.minioadmin.MinioAdmin`; both calls are upserts, so running them again (every
``cardstream buckets create``) updates a changed policy or secret.
"""

from __future__ import annotations

import contextlib
from typing import Any

from minio.credentials import StaticProvider
from minio.error import MinioAdminException
from minio.minioadmin import MinioAdmin

from streams.errors import StorageError
from streams.settings import S3Settings
from streams.storage import http_client

#: the roles, in the order they are created
ROLES = ("worker", "producer", "ocr", "gateway")
#: IAM policy language version (AWS's current one, which MinIO reads)
POLICY_VERSION = "2012-10-17"


def _objects(*buckets: str) -> list[str]:
    return [f"arn:aws:s3:::{b}/*" for b in buckets]


def _buckets(*buckets: str) -> list[str]:
    return [f"arn:aws:s3:::{b}" for b in buckets]


def deny_unencrypted_put(resources: list[str], principal: bool = False) -> dict[str, Any]:
    """The statement refusing ``s3:PutObject`` on ``resources`` (ARNs) without the
    ``x-amz-server-side-encryption`` header; ``principal``: add ``"Principal": {"AWS": ["*"]}``
    (bucket policies need one, identity policies must not have one)."""
    st: dict[str, Any] = {"Sid": "DenyUnencryptedPut", "Effect": "Deny", "Action": ["s3:PutObject"],
                          "Resource": resources,
                          "Condition": {"Null": {"s3:x-amz-server-side-encryption": ["true"]}}}
    if principal:
        st["Principal"] = {"AWS": ["*"]}
    return st


def role_policy(role: str, s3: S3Settings) -> dict[str, Any]:
    """The IAM policy document of ``role`` for the buckets of ``s3``.

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`.
    """
    up, res, qua = s3.uploads_bucket, s3.results_bucket, s3.quarantine_bucket
    readable = list(dict.fromkeys([up, *s3.allowed_buckets]))
    allow: list[dict[str, Any]]
    if role == "worker":
        allow = [{"Sid": "ReadUploads", "Effect": "Allow", "Action": ["s3:GetObject"],
                  "Resource": _objects(*readable)},
                 # HEAD bucket (health check) and NoSuchKey instead of AccessDenied for a
                 # missing claim-check object both need s3:ListBucket
                 {"Sid": "HeadBuckets", "Effect": "Allow", "Action": ["s3:ListBucket"],
                  "Resource": _buckets(*readable, res)},
                 {"Sid": "WriteOutputs", "Effect": "Allow", "Action": ["s3:PutObject"],
                  "Resource": _objects(res, qua)}]
        puts = _objects(res, qua)
    elif role == "producer":
        allow = [{"Sid": "WriteUploads", "Effect": "Allow", "Action": ["s3:PutObject"],
                  "Resource": _objects(up)}]
        puts = _objects(up)
    elif role == "ocr":
        allow = [{"Sid": "ReadResults", "Effect": "Allow", "Action": ["s3:GetObject"],
                  "Resource": _objects(res)},
                 {"Sid": "ListResults", "Effect": "Allow", "Action": ["s3:ListBucket"],
                  "Resource": _buckets(res)}]
        puts = []
    elif role == "gateway":
        allow = [{"Sid": "WriteUploads", "Effect": "Allow",
                  "Action": ["s3:PutObject", "s3:GetObject", "s3:DeleteObject"],
                  "Resource": _objects(up)},
                 # a missing claim check answers NoSuchKey (not AccessDenied) with s3:ListBucket
                 {"Sid": "HeadUploads", "Effect": "Allow", "Action": ["s3:ListBucket"],
                  "Resource": _buckets(up)},
                 {"Sid": "ReadOutputs", "Effect": "Allow", "Action": ["s3:GetObject"],
                  "Resource": _objects(res)}]
        puts = _objects(up)
    else:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    deny = [deny_unencrypted_put(puts)] if puts else []
    return {"Version": POLICY_VERSION, "Statement": [*allow, *deny]}


def admin_client(s3: S3Settings) -> MinioAdmin:
    """A :class:`MinioAdmin` for ``s3``'s endpoint and (admin) credentials, with the same TLS
    settings as :class:`~streams.storage.Storage`.

    Raises:
        StorageError: no credentials set.
    """
    if s3.access_key is None or s3.secret_key is None:
        raise StorageError("set CARDSTREAM_S3__ACCESS_KEY and CARDSTREAM_S3__SECRET_KEY (admin)")
    return MinioAdmin(endpoint=s3.endpoint,
                      credentials=StaticProvider(s3.access_key, s3.secret_key.get_secret_value()),
                      region=s3.region, secure=s3.secure, http_client=http_client(s3, 30.0, 4))


def provision_roles(s3: S3Settings, prefix: str = "cardstream") -> dict[str, str]:
    """Create or update the policy ``{prefix}-{role}`` of every role, and the user of every role
    whose credentials are in ``s3.roles`` (attached to its policy).

    Args:
        s3: admin credentials, buckets and role credentials.
        prefix: policy name prefix (tests use their own, for their own buckets).

    Returns:
        role -> ``"policy {name}, user {access key}"`` or ``"policy {name} (no user)"``.

    Raises:
        StorageError: the admin API refused a call (not an admin, MinIO down...).
    """
    admin = admin_client(s3)
    out = {}
    for role in ROLES:
        name = f"{prefix}-{role}"
        creds = getattr(s3.roles, role)
        try:
            admin.policy_add(name, policy=role_policy(role, s3))
            if creds is not None:
                admin.user_add(creds.access_key, creds.secret_key.get_secret_value())
                admin.policy_set(name, user=creds.access_key)
        except MinioAdminException as e:  # its text is the server's JSON error, no secret
            raise StorageError(f"MinIO admin API refused setting up role {role}: {e}") from e
        out[role] = (f"policy {name}, user {creds.access_key}" if creds
                     else f"policy {name} (no user)")
    return out


def remove_roles(s3: S3Settings, prefix: str) -> None:
    """Remove the users of ``s3.roles`` and the policies ``{prefix}-{role}`` (test clean-up;
    missing ones are ignored)."""
    admin = admin_client(s3)
    for role in ROLES:
        creds = getattr(s3.roles, role)
        if creds is not None:
            with contextlib.suppress(MinioAdminException):
                admin.user_remove(creds.access_key)
        with contextlib.suppress(MinioAdminException):
            admin.policy_remove(f"{prefix}-{role}")
