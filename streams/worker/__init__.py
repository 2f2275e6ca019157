"""The worker: a consumer in the group, batched compute, one transaction per batch.

Its parts, each with one job, built by :class:`Worker` with what each uses (the batch path through
them is in :mod:`streams.worker.loop`):

- :mod:`~streams.worker.attempts`: the attempt ledger (starts counted in the committed offsets);
- :mod:`~streams.worker.intake`: the consumer, its assignment, the carry list, pause/resume;
- :mod:`~streams.worker.record`: a fetched record's parts, read once;
- :mod:`~streams.worker.compute`: parse -> load -> process -> PUT, one frozen fate per event;
- :mod:`~streams.worker.committer`: the transaction and its failure modes;
- :mod:`~streams.worker.pausing`: put back, pause, poll until (store outage, processor breaker);
- :mod:`~streams.worker.loop`: :class:`Worker`, running the parts with two batches overlapping.
"""

from streams.worker.compute import input_tag, object_key
from streams.worker.loop import Worker, build_processors, build_shadow, install_signal_handlers

__all__ = ["Worker", "build_processors", "build_shadow", "input_tag", "install_signal_handlers",
           "object_key"]
