"""A task, as one spec: its contract with the rest of the project, the unit of extension.

A task is what the worker, the settings and replay need to know to serve it: its wire contract
(its name, the models of its options and result payload), its settings section, the factory of
its processor, its main artifact, how an outcome becomes a payload and how two payloads of the
same upload compare (:meth:`TaskSpec.compare`, replay's diff). How a command shows a file
(``streams/cli``) and the demo's sample uploads (``streams/samples.py``) are not part of it.
Each task is a :class:`TaskSpec` subclass in its processor's package
(``processors/<package>/task.py``) and
:mod:`processors.registry` lists them, one line per task. As rembg's ``sessions/`` (one file per
model, one registry line), adding a task is one package plus one registry line (and, for a task
the v1 contract does not name, its contract models in ``schemas/``; the registry registers them
with :func:`schemas.models.register_task`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, get_args

from pydantic import BaseModel

from processors.base import Item, Processor
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
            the same name.
        settings_key: the task's section of the app settings (``<key>`` ->
            ``CARDSTREAM_<KEY>__*``); None for a task without settings.
        settings_model: that section's model (frozen pydantic).
        option_defaults: the options an item gets where the upload leaves them out; none for
            a task whose processor takes what is left out from its settings section (the
            built-in ones: one place for each default, and its setting takes effect).
        payload_defaults: payload fields an outcome may lack (a rejected one), and their values.
        measures: the names of what :meth:`compare` measures (replay's report has
            ``<name>_mean`` and ``<name>_min`` for each), e.g. an IoU.
    """

    contract: ClassVar[TaskContract]
    main_artifact: ClassVar[str]
    settings_key: ClassVar[str | None] = None
    settings_model: ClassVar[type[BaseModel] | None] = None
    option_defaults: ClassVar[Mapping[str, Any]] = {}
    payload_defaults: ClassVar[Mapping[str, Any]] = {}
    measures: ClassVar[tuple[str, ...]] = ()

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
              decode: DecodeSettings | None = None, model_file: Path | None = None) -> Processor:
        """The processor serving the task (loads its model; warm-up is separate).

        Args:
            settings: the task's settings section (None for a task without one).
            runtime: ONNX Runtime settings.
            decode: the limits the uploads were probed with (``Settings.decode``; None: the
                defaults); the processor decodes the pixels with them.
            model_file: an ONNX file to use instead of the task's pinned main model (a new
                training run, a processor command's ``--model``; not checked against a
                SHA-256); None: the pinned one.

        Raises:
            ProcessorError: the task takes no model file but was given one; ``ModelError``,
                ``ProviderError`` from the processor's construction.
        """
        raise NotImplementedError

    def stand_in(self, item: Item) -> Mapping[str, Any]:
        """A payload of the task's shape for ``item``, for the fixed-latency ``sleep`` processor
        (worker tests and benchmarks); none by default."""
        return {}

    def stand_in_extras(self, item: Item) -> tuple[str, ...]:
        """The artifacts besides the main one that the ``sleep`` processor stores for ``item``,
        by name, as the task's processor would for its options (the ID photo's ``sheet`` with
        ``print_sheet``); none by default."""
        return ()

    def compare(self, before: Any, after: Any) -> dict[str, float]:
        """What changed between two payloads of the same upload (replay: the original result's
        and the replayed one's, the task's payload models), as :attr:`measures` -> value, for
        the measures both payloads allow (e.g. no IoU of two regions where either payload has
        none); none by default. Verdicts and reasons are compared by replay itself, for every
        task."""
        return {}

    # --- what every task derives ---------------------------------------------------------------
    def item_options(self, options: BaseModel | None) -> dict[str, Any]:
        """An upload's ``options`` (None: absent) as the processor's ``Item.options``: plain
        JSON values (strings, bools), :attr:`option_defaults` for what the upload left out."""
        given = options.model_dump(mode="json") if options is not None else {}
        return {**self.option_defaults, **{k: v for k, v in given.items() if v is not None}}

    def effective_options(self, options: Mapping[str, Any], section: Any) -> dict[str, Any]:
        """An item's ``options`` (:meth:`item_options`) with what they leave out filled in as
        the task's processor fills it from its settings ``section``: the options an output is
        made from, e.g. for a key that must change when the output can (an operator who
        changes a default changes the outputs). By default ``options`` as they are (a task
        whose defaults are all :attr:`option_defaults`).

        Raises:
            ProcessorError: options the task's processor refuses.
        """
        return dict(options)

    def payload(self, fields: Mapping[str, Any],
                refs: Mapping[str, ObjectRef]) -> PayloadModel | None:
        """The result's payload from an outcome's payload ``fields`` and the stored artifacts.

        Fields the payload model does not know, and ``None`` values, are dropped;
        :attr:`payload_defaults` fill what is missing; each stored artifact's ref fills the
        field of its name when the payload has one (the ID photo's ``photo`` and ``sheet``),
        the main artifact's None when it was not produced.

        Raises:
            pydantic.ValidationError (a ``ValueError``): the outcome breaks the contract (a
                processor bug, not the upload's).
        """
        model = self.payload_model
        if model is None:
            return None
        d = {**self.payload_defaults,
             **{k: v for k, v in fields.items() if k in model.model_fields and v is not None}}
        d.update({k: ref for k, ref in refs.items() if k in model.model_fields})
        if self.main_artifact in model.model_fields:
            d[self.main_artifact] = refs.get(self.main_artifact)
        return model(**d)

    @property
    def artifact_fields(self) -> tuple[str, ...]:
        """The payload fields that hold a stored artifact's object ref (:class:`ObjectRef`),
        in the payload model's order: the main artifact's and any other (the ID photo's
        ``photo`` and ``sheet``); none for a task without a payload."""
        model = self.payload_model
        if model is None:
            return ()
        return tuple(n for n, f in model.model_fields.items()
                     if f.annotation is ObjectRef or ObjectRef in get_args(f.annotation))

    def artifact_ref(self, payload: BaseModel | None, name: str) -> ObjectRef | None:
        """The object ref of artifact ``name`` in a result payload: None when the payload has
        none (not asked for, not produced) or ``name`` is not one of :attr:`artifact_fields`
        (it never reads another field)."""
        if payload is None or name not in self.artifact_fields:
            return None
        return getattr(payload, name, None)

    def main_ref(self, payload: BaseModel | None) -> ObjectRef | None:
        """The main artifact's object ref in a result payload (None when absent)."""
        return self.artifact_ref(payload, self.main_artifact)
