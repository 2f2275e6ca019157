"""A task, as one spec: the unit of extension.

A task is everything the rest of the project needs to know to serve it:
its contract (its name on the wire, the models of its options and result payload), its main
artifact, how an outcome becomes a payload, the factory of its processor and how the processor
commands show one file of it. Each task is a :class:`TaskSpec` subclass in its processor's package
(``processors/<package>/task.py``, e.g. ``processors/card/task.py``) and :mod:`processors.registry` maps
names to them; the worker, the settings, the CLI, the demo and the status app derive what they
need from there. As rembg's ``sessions/`` (one file per model, one registry line), adding a task
is one file plus one registry line (and, for a task the v1 contract does not name, its contract
models: :func:`processors.registry.register` adds them, :func:`schemas.models.register_task`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from processors.base import Artifact, Item, Outcome, Processor
from processors.decode import DecodeSettings
from processors.runtime import RuntimeSettings
from schemas.models import ObjectRef, OptionsModel, PayloadModel, TaskContract


class TaskSpec:
    """One task; subclass it once per task and register an instance.

    Class attributes:
        contract: the task's contract: ``name`` (the wire value of ``UploadEvent.task`` and
            ``VerificationResult.task``, also the first segment of its object keys), the
            ``options`` model and the ``payload`` model (the result's field named after the
            task; None: the task's results carry none).
        main_artifact: name of the artifact whose stored object ref fills the payload field of
            the same name (``rectified``, ``photo``).
        settings_key: the task's section of the app settings (``card`` ->
            ``CARDSTREAM_CARD__*``); None for a task without settings.
        settings_model: that section's model (frozen pydantic).
        option_defaults: the options an item gets where the upload leaves them out.
        payload_defaults: payload fields an outcome may lack (a rejected one), and their values.
        cli_blank: the task's columns, in order, in a row of ``cardstream <command> IMAGE...``
            for a file nothing was made of (refused by safe decoding, or unreadable).
    """

    contract: ClassVar[TaskContract]
    main_artifact: ClassVar[str]
    settings_key: ClassVar[str | None] = None
    settings_model: ClassVar[type[BaseModel] | None] = None
    option_defaults: ClassVar[Mapping[str, Any]] = {}
    payload_defaults: ClassVar[Mapping[str, Any]] = {}
    cli_blank: ClassVar[Mapping[str, Any]] = {}

    @property
    def name(self) -> str:
        """The task's wire name (``contract.name``)."""
        return self.contract.name

    @property
    def options_model(self) -> type[OptionsModel]:
        """The contract model of an upload's ``options``."""
        return self.contract.options

    @property
    def payload_model(self) -> type[PayloadModel] | None:
        """The contract model of the result's payload (None: none)."""
        return self.contract.payload

    # --- what a task defines -----------------------------------------------------------------
    def build(self, settings: Any, runtime: RuntimeSettings,
              decode: DecodeSettings | None = None) -> Processor:
        """The processor serving the task (loads its model; warm-up is separate).

        Args:
            settings: the task's settings section (None for a task without one).
            runtime: ONNX Runtime settings.
            decode: the limits the uploads were probed with (``Settings.decode``; None: the
                defaults); the processor decodes the pixels with them.
        """
        raise NotImplementedError

    def stand_in(self, item: Item) -> Mapping[str, Any]:
        """A payload of the task's shape for ``item``, for the fixed-latency ``sleep`` processor
        (worker tests and benchmarks); none by default."""
        return {}

    def describe(self, payload: Any) -> str:
        """A result payload in a few words (the demo's ``kind`` column); ``""`` by default."""
        return ""

    def samples(self, folder: Path) -> list[Path]:
        """Sample uploads of the task, written into ``folder`` by the project's own code (the
        demo, the benchmarks); none by default."""
        return []

    def cli_columns(self, outcome: Outcome, artifact: Artifact | None,
                    written: str | None) -> dict[str, Any]:
        """The task's columns in a processor command's row for a processed file: ``artifact``
        is the outcome's main artifact (None when it has none), ``written`` the path it was
        written to (None without an output folder)."""
        return {}

    def cli_text(self, row: Mapping[str, Any]) -> str:
        """What a processor command's text line shows between the verdict and the error note."""
        return ""

    def cli_file_tail(self, options: Mapping[str, Any], artifact: Artifact) -> str:
        """The name of a processor command's output file after ``<stem>-<ext>.``:
        ``<artifact>.<ext>`` by default (``rectified.jpg``)."""
        return f"{artifact.name}.{artifact.ext}"

    # --- what every task derives ---------------------------------------------------------------
    def item_options(self, options: BaseModel | None) -> dict[str, Any]:
        """An upload's ``options`` (None: absent) as the processor's ``Item.options``: plain
        JSON values (strings, bools), :attr:`option_defaults` for what the upload left out."""
        given = options.model_dump(mode="json") if options is not None else {}
        return {**self.option_defaults, **{k: v for k, v in given.items() if v is not None}}

    def payload(self, fields: Mapping[str, Any],
                refs: Mapping[str, ObjectRef]) -> PayloadModel | None:
        """The result's payload from an outcome's payload ``fields`` and the stored artifacts.

        Fields the payload model does not know, and ``None`` values, are dropped;
        :attr:`payload_defaults` fill what is missing; the main artifact's ref (None when it
        was not produced) fills its field.

        Raises:
            pydantic.ValidationError (a ``ValueError``): the outcome breaks the contract (a
                processor bug, not the upload's).
        """
        model = self.payload_model
        if model is None:
            return None
        d = {**self.payload_defaults,
             **{k: v for k, v in fields.items() if k in model.model_fields and v is not None}}
        if self.main_artifact in model.model_fields:
            d[self.main_artifact] = refs.get(self.main_artifact)
        return model(**d)

    def main_ref(self, payload: BaseModel | None) -> ObjectRef | None:
        """The main artifact's object ref in a result payload (None when absent)."""
        return getattr(payload, self.main_artifact, None) if payload is not None else None
