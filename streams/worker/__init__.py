"""The worker: a consumer in the group, batched compute, one transaction per batch.

Its parts, each with one job (the batch path through them is in :mod:`streams.worker.loop`):

- :mod:`~streams.worker.intake`: the consumer, its assignment, the carry list, pause/resume;
- :mod:`~streams.worker.compute`: parse -> load -> process -> PUT, one fate per event;
- :mod:`~streams.worker.committer`: the transaction and its failure modes;
- :mod:`~streams.worker.loop`: :class:`Worker`, running the parts with two batches overlapping.
"""

from streams.worker.compute import object_key
from streams.worker.loop import Worker, build_processors, install_signal_handlers

__all__ = ["Worker", "build_processors", "install_signal_handlers", "object_key"]
