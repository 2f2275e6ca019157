"""The task registry: task name -> :class:`~processors.task.TaskSpec`, one line per task.

Everything that differs between tasks is read from here: the worker (options, payloads, main
artifacts, processors), the settings (one section per task), replay's diff, the CLI (the
``--tasks`` default, the processor commands' factories), the demo and the status app. Every
task, built in or added later, comes in through :func:`register`, which adds its contract to
``schemas`` too. Unknown names fail loudly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from processors.base import Processor
from processors.card.task import SPEC as CARD
from processors.decode import DecodeSettings
from processors.errors import ProcessorError
from processors.idphoto.task import SPEC as IDPHOTO
from processors.runtime import RuntimeSettings
from processors.task import TaskSpec
from schemas.models import register_task, unregister_task

BUILT_IN: tuple[TaskSpec, ...] = (
    CARD,
    IDPHOTO,
)
"""The project's tasks, one line per task (a task's spec lives in its processor's package);
each is registered by :func:`register` below, its contract included."""

_SPECS: dict[str, TaskSpec] = {}

SLEEP = "sleep"
"""The fixed-latency stand-in processor (:mod:`processors.sleep`), which can serve any task."""


def names() -> tuple[str, ...]:
    """The registered tasks' names, in registration order (the built-in ones first)."""
    return tuple(_SPECS)


def specs() -> tuple[TaskSpec, ...]:
    """The registered specs, in registration order."""
    return tuple(_SPECS.values())


def artifact_names() -> tuple[str, ...]:
    """The names of the registered tasks' artifacts that a result payload can name
    (:attr:`TaskSpec.artifact_fields`), each once, in registration order (built in:
    ``rectified``, ``photo``, ``sheet``)."""
    return tuple(dict.fromkeys(n for s in _SPECS.values() for n in s.artifact_fields))


def spec(task: str) -> TaskSpec:
    """The spec of ``task``.

    Raises:
        ProcessorError: no such task is registered.
    """
    try:
        return _SPECS[str(task)]
    except KeyError:
        raise ProcessorError(f"unknown task {task!r}; known: {', '.join(_SPECS)}") from None


def register(new: TaskSpec) -> None:
    """Add a task (its contract too: :func:`schemas.models.register_task`).

    Raises:
        ValueError: the name is taken by another spec or cannot be a task name.
    """
    if _SPECS.get(new.name) is new:
        return
    if new.name in _SPECS:
        raise ValueError(f"task {new.name!r} is registered already")
    register_task(new.contract)
    _SPECS[new.name] = new


for _spec in BUILT_IN:
    register(_spec)


def unregister(name: str) -> None:
    """Remove a task added by :func:`register` (the built-in ones stay).

    Raises:
        ValueError: ``name`` is a task of the v1 contract.
    """
    unregister_task(name)
    _SPECS.pop(name, None)


@contextmanager
def registered(new: TaskSpec) -> Iterator[TaskSpec]:
    """:func:`register` ``new`` for the ``with`` block (tests), :func:`unregister` it after."""
    register(new)
    try:
        yield new
    finally:
        unregister(new.name)


def stand_in(task: str, call_ms: float = 20.0, item_ms: float = 2.0,
             bucket: int = 32, hang_s: float = 3600.0) -> Processor:
    """The fixed-latency ``sleep`` processor serving ``task``: outcomes carry the task's main
    artifact (and the others its options ask for: ``TaskSpec.stand_in_extras``) and a payload
    of its shape (:class:`processors.sleep.SleepProcessor`; ``call_ms``, ``item_ms`` in ms,
    ``hang_s`` in s as it says).

    Raises:
        ProcessorError: no such task is registered.
    """
    from processors.sleep import SleepProcessor

    s = spec(task)
    return SleepProcessor(s.name, artifact=s.main_artifact, payload=s.stand_in,
                          extras=s.stand_in_extras, call_ms=call_ms, item_ms=item_ms,
                          bucket=bucket, hang_s=hang_s)


def build_processor(task: str, section: Any, runtime: RuntimeSettings, *, name: str | None = None,
                    sleep_ms: float = 20.0, decode: DecodeSettings | None = None,
                    model_file: Path | None = None) -> Processor:
    """The processor serving ``task``.

    Args:
        task: a registered task.
        section: the task's settings section (``Settings.<spec.settings_key>``; None for a task
            without one).
        runtime: ONNX Runtime settings.
        name: the processor: the task's own (None or the task's name), or ``sleep`` (the
            fixed-latency stand-in, ``sleep_ms`` per call, payloads of the task's shape).
        sleep_ms: per-call latency of the ``sleep`` processor (ms).
        decode: the decode limits the uploads are probed with (None: the defaults); the
            processors decode the pixels with them.
        model_file: an unpinned ONNX file instead of the task's main model
            (:meth:`~processors.task.TaskSpec.build`; the ``cardstream card --model`` option).

    Raises:
        ProcessorError: unknown task or processor, or a task's processor asked to serve another
            task; ``ModelError``/``ProviderError`` from the processor's construction.
    """
    s = spec(task)
    if name == SLEEP:
        return stand_in(task, call_ms=sleep_ms)
    if name in (None, s.name):
        if model_file is not None:
            return s.build(section, runtime, decode, model_file)
        return s.build(section, runtime, decode)
    if name in _SPECS:
        raise ProcessorError(f"processor {name!r} cannot serve task {task!r}")
    raise ProcessorError(f"unknown processor {name!r}; known: {', '.join([*_SPECS, SLEEP])}")
