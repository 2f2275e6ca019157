"""A task is the unit of extension: a toy task, defined and registered here and nowhere else,
runs end to end through the worker against the real stack."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import Strict

from processors import registry
from processors.base import Item
from processors.runtime import RuntimeSettings
from processors.sleep import SleepProcessor
from processors.task import TaskSpec
from schemas.models import ObjectRef, OptionsModel, PayloadModel, TaskContract
from streams.produce import UploadProducer
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import Worker, build_processors

from .helpers import dead_letters, results, write_images

pytestmark = pytest.mark.integration


class ThumbOptions(OptionsModel):
    """Options of a ``thumb`` upload: ``shade`` (default ``grey``)."""

    shade: Literal["grey", "sepia"] | None = None


class ThumbPayload(PayloadModel):
    """A ``thumb`` result: the thumbnail, the shade asked for and the source size (px)."""

    thumb: ObjectRef | None
    shade: Annotated[str, Strict()]
    source_width: int
    source_height: int


class ThumbTask(TaskSpec):
    """Thumbnails: the whole spec of a task, as a processor's package would hold it."""

    contract = TaskContract("thumb", ThumbOptions, ThumbPayload)
    main_artifact = "thumb"
    option_defaults = {"shade": "grey"}

    def build(self, settings: None, runtime: RuntimeSettings,
              decode: object = None) -> SleepProcessor:
        """The fixed-latency processor, making thumbnails with payloads of this task's shape."""
        return SleepProcessor("thumb", artifact="thumb", payload=self.stand_in, call_ms=5.0,
                              bucket=4)

    def stand_in(self, item: Item) -> dict:
        """The shade asked for and the source size (px)."""
        h, w = item.image.height, item.image.width
        return {"shade": item.options["shade"], "source_width": w, "source_height": h}


THUMB = ThumbTask()


def test_a_toy_task_registered_here_runs_end_to_end(settings: Settings, tmp_path: Path) -> None:
    files = write_images(tmp_path / "imgs", 5, size=(60, 80))
    with registry.registered(THUMB):
        prod = UploadProducer(settings)
        plain = prod.produce_files(files, "thumb", count=5)
        sepia = prod.produce_files(files, "thumb", options={"shade": "sepia"}, count=3,
                                   prefix="sepia")
        prod.send_raw(b"bad", json.dumps({  # the toy's options model refuses an unknown option
            "upload_id": "bad", "task": "thumb", "options": {"size": "one_inch"},
            "image": {"inline_b64": "AAAA"}}).encode())
        assert prod.flush() == []
        w = Worker(settings, build_processors(settings, ["thumb"]), Storage(settings.s3))
        th = threading.Thread(target=w.run, daemon=True)  # until w.stop() below
        th.start()
        rs = results(settings, 8, timeout_s=90)
        ds = dead_letters(settings, 1, timeout_s=30)
        w.stop()
        th.join(30)
    assert "thumb" not in registry.names()  # unregistered on leaving the block
    assert sorted(r.upload_id for r in rs) == sorted(x.upload_id for x in plain + sepia)
    assert {(str(r.task), str(r.status)) for r in rs} == {("thumb", "accepted")}
    shades = {r.upload_id: r.payload.shade for r in rs}
    assert [shades[x.upload_id] for x in plain + sepia] == ["grey"] * 5 + ["sepia"] * 3
    st = Storage(settings.s3)
    for r in rs:
        assert (r.payload.source_width, r.payload.source_height) == (80, 60)
        ref = r.payload.thumb
        prefix, tag, name = ref.key.rsplit("/", 2)  # tag: the input_tag, 16 hex digits
        assert (prefix, len(tag), name) == (f"thumb/sleep-1/{r.upload_id}", 16, "thumb.png")
        assert (ref.width, ref.height) == (32, 32)
        assert hashlib.sha256(st.get(ref.bucket, ref.key)).hexdigest() == ref.sha256
        assert r.model.name == "sleep" and r.timings.batch_size in (1, 2, 3, 4)
    assert [(d.upload_id, str(d.error_code)) for d in ds] == [("bad", "SCHEMA_INVALID")]
    assert w.metrics.results.labels("thumb", "accepted")._value.get() == 8
