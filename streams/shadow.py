"""The shadow model: a second model version of one task runs on a sampled share of live uploads
beside the live one, and each comparison goes to a side topic and the metrics.

``CARDSTREAM_SHADOW__TASK``, ``__MODEL_FILE`` (the shadow version's ONNX file) and ``__SHARE``
(0: off). An upload is sampled by a hash of its ``upload_id`` (:func:`sampled`), so a redelivered
upload is sampled again and a replay of the same window samples the same uploads. For each
sampled upload answered by a model call or from the result cache, the worker runs the shadow
processor on the same image and options, in the same batch thread, right after the live model
calls: the live result waits for that extra compute only, and only in batches holding a sampled
upload. The comparison is the replay's (:func:`streams.replay.compare`: verdict, reasons, the
task's measures such as the quads' IoU), written as a ``ShadowDiff``
(``schemas/shadow_diff.v1.schema.json``) to ``CARDSTREAM_SHADOW__TOPIC`` in the batch's own
transaction, and counted (``cardstream_shadow_diffs_total{task,change}``,
``cardstream_shadow_measure``, ``cardstream_shadow_seconds``). A shadow call that raises is
logged and skipped: the live path never depends on the shadow. Promotion is a settings change:
``CARDSTREAM_WORKER__MODEL_FILES='{"card": "<the shadow file>"}'`` and the share back to 0.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from processors.base import Item, Outcome, Processor
from processors.registry import spec
from processors.runtime import bucket_slices
from schemas import formats as F
from schemas.models import ModelRef, ShadowDiff, ShadowSide, SourceRef
from streams.logs import log
from streams.metrics import WorkerMetrics
from streams.replay import compare
from streams.settings import ShadowSettings


def sampled(upload_id: str, share: float) -> bool:
    """Whether ``upload_id`` is in the sampled ``share`` (0..1): the first 8 bytes of its
    SHA-256 as a fraction of 2**64, below ``share``."""
    h = int.from_bytes(hashlib.sha256(upload_id.encode()).digest()[:8], "big")
    return h < share * 2.0**64


def change_of(d: ShadowDiff) -> str:
    """The ``change`` label of a comparison: ``verdict``, ``reasons`` or ``none``."""
    return "verdict" if d.verdict_changed else "reasons" if d.reasons_changed else "none"


class Shadow:
    """The shadow version of one task's model, and how it compares with the live one.

    Args:
        settings: the shadow section (task, share, topic).
        processor: the shadow processor (the task's processor on ``settings.model_file``).
        metrics: the worker's metrics (``shadow_seconds``).
    """

    def __init__(self, settings: ShadowSettings, processor: Processor,
                 metrics: WorkerMetrics) -> None:
        assert settings.task is not None
        self.task = settings.task
        self.share = settings.share
        self.topic = settings.topic
        self.processor = processor
        self.metrics = metrics

    def wants(self, task: str, upload_id: str) -> bool:
        """Whether an upload of ``task`` is compared."""
        return task == self.task and sampled(upload_id, self.share)

    def compare(self, live: Sequence[tuple[Any, Item, Outcome, ModelRef]]) -> list[ShadowDiff]:
        """Run the shadow processor on the ``live`` uploads' items, in its buckets, and compare.

        Args:
            live: per sampled upload: its record (confluent-kafka ``Message``), its item (image
                and options), the live outcome, the live model.

        Returns:
            One comparison per upload, except those of a bucket whose shadow call raised.
        """
        sp = spec(self.task)
        shadow_model = ModelRef(name=self.processor.model.name,
                                version=self.processor.model.version,
                                provider=self.processor.model.provider)
        out: list[ShadowDiff] = []
        for part in bucket_slices(len(live), self.processor.bucket):
            chunk = live[part]
            t0 = time.perf_counter()
            try:
                got = list(self.processor.process_batch([it for _, it, _, _ in chunk]))
            except Exception as exc:  # the live path never depends on the shadow
                log.warning("shadow_failed", task=self.task, error=type(exc).__name__)
                continue
            ms = (time.perf_counter() - t0) * 1000.0
            self.metrics.shadow_seconds.labels(self.task).observe(ms / 1000.0)
            for (m, it, lo, lm), so in zip(chunk, got, strict=True):
                try:
                    before, after = sp.payload(lo.payload, {}), sp.payload(so.payload, {})
                except ValueError as exc:  # an outcome breaking the contract: no comparison
                    log.warning("shadow_failed", task=self.task, error=type(exc).__name__)
                    continue
                c = compare(self.task, (lo.status, lo.reasons, before),
                            (so.status, so.reasons, after))
                out.append(ShadowDiff(
                    upload_id=it.upload_id, task=self.task,
                    live=ShadowSide(model=lm, status=lo.status, reasons=tuple(lo.reasons)),
                    shadow=ShadowSide(model=shadow_model, status=so.status,
                                      reasons=tuple(so.reasons)),
                    verdict_changed=c.verdict_changed, reasons_changed=c.reasons_changed,
                    measures=c.measures, shadow_ms=round(ms, 3),
                    source=SourceRef(topic=m.topic(), partition=m.partition(), offset=m.offset()),
                    processed_at=F.utc_now_rfc3339()))
        return out
