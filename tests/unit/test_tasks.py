"""Tasks as specs (unit tier): the registry, options and payloads, object keys, and a task
added from outside the v1 contract."""

from __future__ import annotations

from typing import Annotated

import numpy as np
import pytest
from pydantic import Strict, ValidationError

from processors import registry
from processors.base import Item
from processors.errors import ProcessorError
from processors.sleep import SleepProcessor
from processors.task import TaskSpec
from schemas import codec
from schemas import models as m
from schemas.errors import ContractError
from schemas.reasons import Task
from streams.worker import object_key

_MIN = {"upload_id": "u1", "task": "card", "image": {"inline_b64": "AAAA"}}


def test_object_key_layout() -> None:
    assert object_key("card", "u2netp-1", "abc.1", "0123456789abcdef", "rectified", "jpg") == (
        "card/u2netp-1/abc.1/0123456789abcdef/rectified.jpg")


def test_input_tag_differs_when_the_inputs_do_and_only_then() -> None:
    """Issue 43 item 5: the key segment of what outputs were made from (bytes and options)."""
    import hashlib

    from streams.worker import input_tag

    a = input_tag(b"png-1", {"size": "one_inch", "background": "white"})
    assert a == input_tag(b"png-1", {"background": "white", "size": "one_inch"})  # key order
    assert a != input_tag(b"png-2", {"size": "one_inch", "background": "white"})
    assert a != input_tag(b"png-1", {"size": "two_inch", "background": "white"})
    digest = hashlib.sha256(b"png-1").hexdigest()
    assert a == hashlib.sha256(f'{digest}\n{{"background":"white","size":"one_inch"}}'.encode()
                               ).hexdigest()[:16]


def test_task_payload_fills_defaults_and_refs() -> None:
    p = registry.spec("card").payload({"quad": None, "confidence": 0.2, "doc_type": None,
                                       "extra": 1}, {})
    assert (p.doc_type == "unknown" and p.quad is None and p.rectified is None and p.confidence
            == 0.2)
    p2 = registry.spec("id_photo").payload({"size": "two_inch", "background": "blue", "width": 413,
                                            "height": 579}, {})
    assert (p2.width, p2.height, p2.face_box, p2.photo) == (413, 579, None, None)


def test_options_defaults_and_values() -> None:
    def options(event: dict) -> dict:
        ev = m.UploadEvent.model_validate(event)
        return registry.spec(ev.task).item_options(ev.options)

    # what the upload leaves out, the processor takes from its settings section (issue 38:
    # the spec filled in "auto", "one_inch" and "white", so the settings naming them did nothing)
    assert options(_MIN) == {}
    assert options({**_MIN, "task": "id_photo", "options": {"size": "schengen"}}) == {
        "size": "schengen"}
    assert options({**_MIN, "task": "id_photo", "options": {
        "size": "us_passport", "background": "#00FF00", "alpha_matting": False}}) == {
        "size": "us_passport", "background": "#00FF00", "alpha_matting": False}
    with pytest.raises(ValidationError):
        m.UploadEvent(upload_id="u1", task=Task.ID_PHOTO, image=m.ImageSource(inline_b64="AAAA"),
                      options=m.CardOptions(doc_type=m.DocTypeHint.PASSPORT))


def test_effective_options_fill_in_what_the_processor_takes_from_its_settings() -> None:
    """What an output is made from: the upload's options, else the settings section's
    defaults (an operator's CARDSTREAM_IDPHOTO__DEFAULT_SIZE changes the outputs)."""
    from processors.card.settings import CardSettings
    from processors.idphoto.settings import IdPhotoSettings

    card, photo = registry.spec("card"), registry.spec("id_photo")
    assert card.effective_options({}, CardSettings()) == {"doc_type": "auto"}
    assert card.effective_options({}, CardSettings(doc_type="passport")) == {
        "doc_type": "passport"}
    assert card.effective_options({"doc_type": "id_card"}, CardSettings(doc_type="passport")) == {
        "doc_type": "id_card"}
    assert photo.effective_options({}, IdPhotoSettings()) == {
        "size": "one_inch", "background": "white", "alpha_matting": False, "mode": "retouch",
        "dpi": 300, "target_kb": None, "print_sheet": False}
    assert photo.effective_options({"background": "#00FF00", "dpi": 600}, IdPhotoSettings(
        default_size="two_inch", default_mode="validate")) == {
        "size": "two_inch", "background": "#00ff00", "alpha_matting": True, "mode": "validate",
        "dpi": 600, "target_kb": None, "print_sheet": False}
    assert TOY.effective_options({"label": "x"}, None) == {"label": "x"}


def test_every_task_of_the_contract_has_a_spec_and_back() -> None:
    assert set(registry.names()) == set(m.V1_TASKS) == {t.value for t in Task}
    for t in registry.specs():
        assert t.contract == m.V1_TASKS[t.name]
        assert t.main_artifact in t.payload_model.model_fields


def test_a_new_line_in_the_registry_registers_its_contract_too() -> None:
    """A task added the way the built-in ones are, one more line in the registry's list, has
    its contract registered (events of the task are valid): the registry's own source, run
    with the toy's line added after the ID photo's. A line in the old ``_SPECS`` dict left
    the contract out, and every event of such a task was dead-lettered."""
    from pathlib import Path

    src = Path(registry.__file__).read_text()
    assert "    IDPHOTO,\n" in src  # one line per task
    ns: dict = {"__name__": "registry_with_toy", "TOY": TOY}
    try:
        exec(compile(src.replace("    IDPHOTO,\n", "    IDPHOTO,\n    TOY,\n"),
                     registry.__file__, "exec"), ns)
        assert ns["names"]() == ("card", "id_photo", "toy")
        assert m.TASKS["toy"] is TOY.contract
        ev = codec.decode_upload(None, codec.dumps({**_MIN, "task": "toy",
                                                    "options": {"label": "x"}}))
        assert ev.task == "toy" and ev.options == ToyOptions(label="x")
    finally:
        m.unregister_task("toy")
    assert "toy" not in m.TASKS and "toy" not in registry.names()


@pytest.mark.parametrize(("task", "before", "after", "want"), [
    ("card", {"quad": [[0, 0], [100, 0], [100, 50], [0, 50]], "confidence": 0.9,
              "doc_type": "id_card", "rectified": None},
     {"quad": [[0, 0], [50, 0], [50, 50], [0, 50]], "confidence": 0.9, "doc_type": "id_card",
      "rectified": None}, {"quad_iou": 0.5}),
    ("card", {"quad": None, "confidence": 0.1, "doc_type": "unknown", "rectified": None},
     {"quad": [[0, 0], [50, 0], [50, 50], [0, 50]], "confidence": 0.9, "doc_type": "id_card",
      "rectified": None}, {}),
    ("id_photo", {"photo": None, "size": "one_inch", "background": "white",
                  "face_box": [10, 10, 40, 40], "width": 295, "height": 413},
     {"photo": None, "size": "one_inch", "background": "white", "face_box": [30, 10, 40, 40],
      "width": 295, "height": 413}, {"face_iou": 1 / 3}),
    ("id_photo", {"photo": None, "size": "one_inch", "background": "white", "face_box": None,
                  "width": 295, "height": 413},
     {"photo": None, "size": "one_inch", "background": "white", "face_box": [30, 10, 40, 40],
      "width": 295, "height": 413}, {}),
])
def test_each_task_compares_two_payloads_of_an_upload(task, before, after, want) -> None:
    t = registry.spec(task)
    got = t.compare(t.payload_model.model_validate(before), t.payload_model.model_validate(after))
    assert got == pytest.approx(want) and set(got) <= set(t.measures)


def test_unknown_task_or_processor_fails_loudly() -> None:
    with pytest.raises(ProcessorError, match="unknown task 'selfie'"):
        registry.spec("selfie")
    with pytest.raises(ProcessorError, match="cannot serve task 'card'"):
        registry.build_processor("card", None, None, name="id_photo")
    with pytest.raises(ProcessorError, match="unknown processor 'gpu'"):
        registry.build_processor("card", None, None, name="gpu")


@pytest.mark.parametrize(("task", "fields"), [
    ("card", {"quad", "confidence", "doc_type"}),
    ("id_photo", {"size", "background", "face_box", "width", "height"})])
def test_the_stand_in_answers_in_the_tasks_shape(task: str, fields: set[str]) -> None:
    p = registry.stand_in(task, call_ms=1.0, item_ms=0.0, bucket=2)
    out = p.process_batch([Item.from_array(f"u{i}", np.zeros((40, 50, 3), np.uint8))
                           for i in range(3)])
    assert p.stats.calls == 2 and [o.upload_id for o in out] == ["u0", "u1", "u2"]
    assert set(out[0].payload) == fields
    assert [a.name for a in out[0].artifacts] == [registry.spec(task).main_artifact]
    assert registry.spec(task).payload(out[0].payload, {}) is not None  # a valid payload


class ToyOptions(m.OptionsModel):
    """A toy task's options: ``label`` (default ``plain``)."""

    label: Annotated[str, Strict()] | None = None


class ToyPayload(m.PayloadModel):
    """A toy task's payload: its ``thumb`` and the ``label`` it was given."""

    thumb: m.ObjectRef | None
    label: str


class ToyTask(TaskSpec):
    """A toy task: a thumbnail and the label it was asked for."""

    contract = m.TaskContract("toy", ToyOptions, ToyPayload)
    main_artifact = "thumb"
    option_defaults = {"label": "plain"}

    def build(self, settings: None, runtime: object, decode: object = None) -> SleepProcessor:
        return SleepProcessor("toy", artifact="thumb", payload=self.stand_in, call_ms=1.0)

    def stand_in(self, item: Item) -> dict:
        return {"label": item.options["label"]}


TOY = ToyTask()


def test_a_registered_task_is_in_the_contract_until_unregistered() -> None:
    toy = {**_MIN, "task": "toy", "options": {"label": "x"}}
    with registry.registered(TOY):
        ev = codec.decode_upload(None, codec.dumps(toy))
        assert ev.task == "toy" and TOY.item_options(ev.options) == {"label": "x"}
        with pytest.raises(ContractError) as ei:  # the toy's options model refuses the unknown
            codec.decode_upload(None, codec.dumps({**toy, "options": {"size": "one_inch"}}))
        assert ei.value.code == "SCHEMA_INVALID"
        r = m.VerificationResult.model_validate({
            "upload_id": "u1", "task": "toy", "status": "accepted", "reasons": [],
            "toy": {"thumb": None, "label": "x"}, "card": None, "unknown_field": 1,
            "model": None, "timings": {"queue_ms": 1, "batch_size": 1, "inference_ms": 1,
                                       "total_ms": 2},
            "source": {"topic": "t", "partition": 0, "offset": 0},
            "processed_at": "2026-01-01T00:00:00Z"})
        _, value, _ = codec.encode_result(r)
        back = codec.decode_result(value)
        assert back.payload == ToyPayload(thumb=None, label="x") and back == r
        assert b"unknown_field" not in value and b'"toy":{' in value
        with pytest.raises(ValueError, match="registered already"):
            registry.register(type("Other", (ToyTask,), {"main_artifact": "other"})())
    with pytest.raises(ContractError) as ei:
        codec.decode_upload(None, codec.dumps(toy))
    assert ei.value.code == "SCHEMA_INVALID" and ei.value.path == "$.task"
    assert "toy" not in registry.names() and "toy" not in m.TASKS
    with pytest.raises(ValueError, match="v1 contract"):
        registry.unregister("card")
