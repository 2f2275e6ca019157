"""`scripts/stack up` restarts a service that died on its data; only `down` removes data."""

from __future__ import annotations

import os
import uuid

import pytest

from streams.settings import Settings
from streams.storage import Storage

from .helpers import kill_and_wait, own_stack_pid, stack, stack_pid_file

pytestmark = pytest.mark.integration


def test_stack_up_restarts_a_killed_minio_on_its_data(settings: Settings) -> None:
    pid = own_stack_pid("minio", "CARDSTREAM_S3__ENDPOINT", settings.s3.endpoint)
    st = Storage(settings.s3, retries=1)
    data = os.urandom(50_000)
    ref = st.put(settings.s3.results_bucket, f"stack/{uuid.uuid4().hex}.bin", data,
                 "application/octet-stream")
    try:
        kill_and_wait(pid)
        assert not st.healthy()
        up = stack("up")
        assert up.returncode == 0, up.stderr
        assert "restarting MinIO on its data" in up.stderr
        assert int(stack_pid_file("minio").read_text()) != pid
        assert st.get(ref.bucket, ref.key) == data
    finally:
        if not st.healthy():  # leave the stack up for the tests after this one
            stack("up")
